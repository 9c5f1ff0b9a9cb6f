"""The sweep's scenario table at real Slurm job ends: part 45-stale-x-display,
run by slurmd's Epilog= through the runner, on the host's /tmp. The job runs
as opal, a listed operator, so the lastuserjob parts leave the residue's owner
(alice) alone and only the sweep acts."""
import glob
import os
import subprocess
from pathlib import Path

import pytest

from tests import sweep_scenarios as sc
from tests.helpers import LAYOUT, wait_for

JOB_USER = "opal"


@pytest.fixture
def host_site(slurm):
    """The host's /tmp, with /tmp/.X11-unix as systemd-tmpfiles makes it."""
    x11 = Path("/tmp/.X11-unix")
    if x11.is_symlink() or (x11.exists() and (not x11.is_dir() or x11.stat().st_uid != 0)):
        pytest.fail("/tmp/.X11-unix must be a root-owned directory on the test machine")
    x11.mkdir(mode=0o1777, exist_ok=True)
    os.chmod(x11, 0o1777)
    site = sc.Site()
    yield site
    site.cleanup()
    for path in glob.glob("/tmp/.X8?-lock") + glob.glob("/tmp/.X11-unix/X8?") + glob.glob("/tmp/clsbd.*"):
        os.unlink(path)


def job_end(slurm, script="true"):
    job, out = slurm.run_job(JOB_USER, script)
    slurm.wait_epilog_end(job)
    return job, out, "\n".join(slurm.job_log(job))


@pytest.mark.parametrize("scenario", sc.SCENARIOS, ids=[f.__name__ for f in sc.SCENARIOS])
def test_job_end_sweep_follows_the_decision_table(slurm, accounts, host_site, scenario):
    expect = scenario(host_site)
    _, _, log = job_end(slurm)
    sc.check(host_site, expect, log_text=log)
    state, reason = slurm.node_state()
    assert "DRAIN" not in state, (state, reason)


def test_job_end_removes_only_its_own_scratch(slurm, accounts, host_site):
    other = Path("/tmp/slurm9999999.out")
    other.write_text("another job's")
    try:
        job, _, log = job_end(slurm, 'touch /tmp/slurm$SLURM_JOB_ID.out /tmp/slurm${SLURM_JOB_ID}9.out; '
                                       'mkdir -p /tmp/vcs_sim_$SLURM_JOB_ID/deep/er; touch /tmp/vcs_sim_$SLURM_JOB_ID/deep/er/f')
        assert not Path(f"/tmp/slurm{job}.out").exists()
        assert not Path(f"/tmp/vcs_sim_{job}").exists()
        assert Path(f"/tmp/slurm{job}9.out").exists(), "a longer job id with the same prefix is another job's"
        assert other.exists()
        assert f"job scratch purged: /tmp/slurm{job}.out" in log
    finally:
        other.unlink(missing_ok=True)
        for path in glob.glob("/tmp/slurm*9.out"):
            os.unlink(path)


def test_stopped_minion_and_no_salt_do_not_stop_the_sweep(slurm, accounts, host_site, rsyslog):
    """The chain runs its release's node program with the system python3
    (python3 -ISB): no Salt on its path, no minion running. Its removals
    reach syslog too."""
    assert (slurm.chain.release / LAYOUT["package"] / "sweep.py").exists()
    assert (slurm.chain.release / "epilog.sh").read_text().startswith("#!/usr/bin/python3 -ISB\n")
    probe = subprocess.run(["/usr/bin/python3", "-I", "-S", "-c", "import salt"], capture_output=True)
    assert probe.returncode != 0, "precondition: the system python3 must not see Salt"
    expect = sc.orphan_socket_and_stale_lock(host_site)
    job, _, log = job_end(slurm)
    sc.check(host_site, expect, log_text=log)
    assert "45-stale-x-display" in log
    wait_for(lambda: any("slurm-epilog" in line and f"job={job} " in line and "stale X display purged: :80" in line
                         for line in rsyslog.text().splitlines()), 10, what="the purge line in syslog")
