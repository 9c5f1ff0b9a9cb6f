"""Deploys and rollbacks while real job ends run through real Slurm: a job
end always runs one complete release, never a mix, and never drains the
node. The state and epilog.rollback run through a real salt-call on a minion
whose pillar points at the test Slurm's chain."""
import json
import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.helpers import local_minion, mount_namespace, wait_for
from tests.slurm.conftest import running_slurm

JOB_ENDS = 200
SWITCHES = 10
RELEASE = re.compile(r" (\S+) job=([0-9]+) user=\S* release=([0-9a-f]{12}): ")


@pytest.fixture(scope="module")
def slurm(munge, accounts, slurm_release):
    """The slurm fixture's Slurm, its slurmd (and so each job end's chain) in
    a mount namespace of its own whose /tmp is a fresh tmpfs (1777, as a
    node's): part 42 walks the jobs' /tmp, not the machine's. Which release
    a job end ran is what is tested here, not the walk (tests/node and the
    job-end tests hold it), and 200 walks of a machine's /tmp (a CI clone
    with its venvs sits there, and the tiers' temporary directories) took
    most of this test's time."""
    with mount_namespace(fresh=("/tmp",)) as ns:
        subprocess.run([*ns, "chmod", "1777", "/tmp"], check=True)
        with running_slurm(slurm_release, place_slurmd=lambda s: (ns, str(s.conf))) as s:
            yield s


@pytest.fixture
def operator(salt_factories, slurm):
    """A minion whose pillar is the test Slurm's chain; PART_TIMEOUT picks
    one of two releases that differ only in it."""
    base = Path(tempfile.mkdtemp(prefix="epilog-fire-", dir="/var/tmp"))
    (base / "pillar").mkdir()
    (base / "pillar/top.sls").write_text("base:\n  '*':\n    - epilog\n")
    call = local_minion(salt_factories, "fire-test", base / "pillar")

    def pillar(part_timeout):
        settings = slurm.chain.pillar(localusers=["root", "opal"], part_timeout=part_timeout)
        (base / "pillar/epilog.sls").write_text(json.dumps(settings))

    call.pillar = pillar
    yield call
    pillar(20)
    ret = call("state.apply", "epilog")
    assert ret.returncode == 0, ret
    shutil.rmtree(base, ignore_errors=True)


def test_job_ends_run_one_whole_release_while_applies_and_rollbacks_switch(slurm, operator):
    chain = slurm.chain
    log_start = len(chain.log_text().splitlines())
    slurmd_log = slurm.base / "log/slurmd.log"
    slurmd_start = slurmd_log.stat().st_size
    operator.pillar(20)
    assert operator("state.apply", "epilog").returncode == 0
    first = chain.release_id
    pw = pwd.getpwnam("alice")
    switches, seen = [], {first}

    def queued():
        return slurm.cmd("squeue", "--noheader", "--user=alice", "--format=%i", check=False).stdout.split()

    def submit(tasks):
        """An array of TASKS short jobs of alice's, one at a time, so that
        every job end is her last on the node and runs 39, 40 and 42, which
        log too (a part of another release would show in its lines).
        Submitted by alice while none of her jobs is on the node: her last
        job end kills every process of hers, a running sbatch included."""
        wait_for(lambda: not queued(), 300, interval=0.5, what="alice's jobs to leave the queue")
        slurm.wait_idle(timeout=120)
        out = subprocess.run(
            ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups", "sbatch", "--parsable",
             "--output=/dev/null", f"--array=1-{tasks}%1", "--wrap", "true"],
            env={**slurm.env, "HOME": pw.pw_dir, "USER": "alice"}, cwd="/tmp", capture_output=True, text=True,
            timeout=60)
        assert out.returncode == 0, out

    def switch():
        current = chain.release_id
        if len(switches) % 3 == 0:
            # apply the release that is not current: a deploy
            operator.pillar(19 if current == first else 20)
            ret = operator("state.apply", "epilog")
            assert ret.returncode == 0, ret
            report = json.loads(ret.states["epilog-release-switch-cmd-run"]["changes"]["stdout"])
        else:
            ret = operator("epilog.rollback")
            assert ret.returncode == 0, ret
            report = ret.data
        assert report["switched"] is True and chain.release_id != current, report
        seen.add(chain.release_id)
        return report["switch_seconds"]

    # Rounds of job ends; the switches that count are those made while job
    # ends were running (the queue held jobs before and after them).
    for _ in range(8):
        if ended(chain, log_start) >= JOB_ENDS and len(switches) >= SWITCHES:
            break
        submit(100)
        while queued():
            took = switch()
            if queued():
                switches.append(took)
            state, reason = slurm.node_state()
            assert "DRAIN" not in state and "FAIL" not in state, (state, reason)
    wait_for(lambda: not queued(), 300, interval=0.5, what="alice's jobs to leave the queue")
    slurm.wait_idle(timeout=120)

    state, reason = slurm.node_state()
    assert "DRAIN" not in state, (state, reason)
    with open(slurmd_log, encoding="utf-8", errors="replace") as handle:
        handle.seek(slurmd_start)
        slurmd_text = handle.read()
    assert not re.search(r"(?i)(epilog|prolog).*(failed|error)|error.*(epilog|prolog)", slurmd_text), slurmd_text[-3000:]
    assert len(switches) >= SWITCHES and len(seen) == 2
    lines = chain.log_text().splitlines()[log_start:]
    # (job, stage) -> the releases its lines name: the prolog and the epilog
    # of one job are two chain runs, and a switch may fall between them
    runs = {}
    for line in lines:
        found = RELEASE.search(line)
        if found:
            stage = "prolog" if found.group(1) in ("prolog.sh", "50-exclusive-ssh") else "epilog"
            runs.setdefault((found.group(2), stage), set()).add(found.group(3))
    ends = {job for job, stage in runs if stage == "epilog"
            and any(f"epilog.sh job={job} " in line and line.endswith(": end") for line in lines)}
    print(f"\nunder fire: {len(ends)} job ends, {len(switches)} switches, switch (rename) median "
          f"{sorted(switches)[len(switches) // 2] * 1e6:.0f} us, max {max(switches) * 1e6:.0f} us")
    assert len(ends) >= JOB_ENDS, len(ends)
    mixed = {run: releases for run, releases in runs.items() if len(releases) != 1}
    assert not mixed, mixed
    assert set().union(*runs.values()) <= seen
    # the job ends ran both releases, each job end exactly one
    assert len({next(iter(runs[(job, "epilog")])) for job in ends}) == 2


def ended(chain, since):
    return sum(1 for line in chain.log_text().splitlines()[since:]
               if " epilog.sh job=" in line and line.endswith(": end"))
