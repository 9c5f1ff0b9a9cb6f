"""A real salt-master and three salt-minions (slurm-work-01..03) on loopback,
started by pytest-salt-factories. The master serves the repo's salt/ alone
(salt/_modules syncs); each minion gets its own slurm_config_dir through
per-minion pillar. It runs with the Salt of this run (each line in turn).

With EPILOG_FLEET_TIMINGS=<file> set, the wall times of the applies are
written there (bench/fleet_bench.py reads them)."""
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import (
    CURRENT,
    LAYOUT,
    RELEASES,
    REPO,
    as_user,
    end,
    epilog_pillar,
    killed,
    live_spool,
    mount_namespace,
    require_root,
    slurmd_env,
    stray,
)

MINIONS = ["slurm-work-01", "slurm-work-02", "slurm-work-03"]
TIMINGS = {}


class Fleet:
    def __init__(self, master, minions, base, ns):
        self.master, self.minions, self.base, self.ns = master, minions, base, ns
        self.cli = master.salt_cli(timeout=600)
        self.run_cli = master.salt_run_cli(timeout=900)

    def conf_dir(self, minion):
        return self.base / minion / "slurm"

    def write_pillar(self, minion, localusers=("root", "je.kim"), **extra):
        # The fleet's nodes share the machine's sshd and /etc/pam.d, which
        # none of them governs: ssh_access none (the rollout's verify gate
        # then asks nothing of sshd; tests/slurm/test_pam_listfile.py does).
        pillar = epilog_pillar(self.base / minion, **{"localusers": list(localusers), "ssh_access": "none", **extra})
        (self.base / "pillar" / f"{minion.replace('-', '_')}.sls").write_text(json.dumps(pillar))

    def current(self, minion):
        return os.readlink(self.conf_dir(minion) / CURRENT)

    def rollout(self, *args, **settings):
        """salt-run state.orchestrate epilog.rollout with
        pillar={"epilog_rollout": SETTINGS}: (returncode, {state id: result})."""
        ret = self.run_cli.run("state.orchestrate", "epilog.rollout",
                               "pillar=" + json.dumps({"epilog_rollout": settings}), *args)
        states = {}

        def find(data):
            if isinstance(data, dict):
                for key, value in data.items():
                    if isinstance(key, str) and "_|-" in key and isinstance(value, dict):
                        states[key.split("_|-")[1]] = value
                    else:
                        find(value)
        find(ret.data)
        assert states, ret
        return ret.returncode, states

    def run(self, *args, tgt="slurm-work-*", timed=None):
        start = time.perf_counter()
        ret = self.cli.run(*args, minion_tgt=tgt)
        if timed:
            TIMINGS[timed] = round(time.perf_counter() - start, 2)
        return ret


@pytest.fixture(scope="module")
def fleet(salt_factories, accounts):
    import salt.version  # pylint: disable=import-outside-toplevel

    require_root()
    base = Path(tempfile.mkdtemp(prefix="epilog-fleet-", dir="/var/tmp"))
    (base / "pillar").mkdir()
    top = {"base": {minion: [minion.replace("-", "_")] for minion in MINIONS}}
    (base / "pillar/top.sls").write_text(json.dumps(top))
    master = salt_factories.salt_master_daemon(
        "epilog-master",
        overrides={
            "interface": "127.0.0.1",
            "file_roots": {"base": [str(REPO / "salt")]},
            "pillar_roots": {"base": [str(base / "pillar")]},
            # The daemons' log lines stay out of the pytest process.
            "pytest-master": {"log": {"disabled": True}},
        },
    )
    # The nodes: their minions run in a pid namespace of their own, with an
    # empty /etc/slurm (a mount namespace), as on nodes whose slurmd is not
    # running: a slurmd or slurm.conf of the machine's own is none of theirs
    # (verify would judge it). Processes the minions must see start in it too.
    with mount_namespace(fresh=("/etc/slurm",), pid=True) as ns:
        python = base / "python-in-the-nodes-namespaces"
        python.write_text("#!/bin/sh\nexec " + " ".join(ns) + f' {sys.executable} "$@"\n')
        python.chmod(0o755)
        minions = [master.salt_minion_daemon(minion, overrides={"pytest-minion": {"log": {"disabled": True}}})
                   for minion in MINIONS]
        for minion in minions:
            minion.python_executable = str(python)  # the script salt-factories runs, run in the namespaces
        f = Fleet(master, minions, base, ns)
        for minion in MINIONS:
            live_spool(base / minion / "spool")
            f.write_pillar(minion)
        with master.started(start_timeout=120), contextlib.ExitStack() as stack:
            for minion in minions:
                stack.enter_context(minion.started(start_timeout=120))
            # the master, its CLIs and the minions all run the Salt of this run
            version = salt.version.__version__
            ret = f.run("test.version")
            assert ret.returncode == 0 and ret.data == {minion: version for minion in MINIONS}, ret
            ret = f.run_cli.run("salt.cmd", "test.version")
            assert ret.returncode == 0 and (ret.data or ret.stdout.strip().strip('"')) == version, ret
            yield f
    if os.environ.get("EPILOG_FLEET_TIMINGS"):
        Path(os.environ["EPILOG_FLEET_TIMINGS"]).write_text(json.dumps(TIMINGS))
    shutil.rmtree(base, ignore_errors=True)


def changed(states):
    return {key.split("_|-")[1] for key, s in states.items() if s.get("changes")}


def test_1_preview_reports_pending_changes_for_each_node_and_lays_down_nothing(fleet):
    ret = fleet.run("state.apply", "epilog", "test=True")
    assert ret.returncode == 0, ret
    assert sorted(ret.data) == MINIONS, ret.data
    for minion in MINIONS:
        pending = {key for key, s in ret.data[minion].items() if s["result"] is None and s["changes"]}
        assert len(pending) >= 11, (minion, ret.data[minion])
        assert not fleet.conf_dir(minion).exists()


def test_2_batched_apply_lays_down_every_node(fleet):
    ret = fleet.run("-b", "1", "state.apply", "epilog", timed="first apply, -b 1, three minions")
    assert ret.returncode == 0, ret
    for minion in MINIONS:
        assert (fleet.conf_dir(minion) / f"{CURRENT}/epilog.d/39-lastuserjob-ssh").is_file(), minion
        for path in (REPO / "_modules" / LAYOUT["package"]).glob("*.py"):
            laid = fleet.conf_dir(minion) / CURRENT / LAYOUT["package"] / path.name
            assert laid.read_bytes() == path.read_bytes(), (minion, path)


def test_3_second_apply_changes_nothing(fleet):
    ret = fleet.run("state.apply", "epilog", timed="second apply, all three minions at once")
    assert ret.returncode == 0, ret
    for minion in MINIONS:
        assert changed(ret.data[minion]) == set(), (minion, changed(ret.data[minion]))
    one = fleet.run("state.apply", "epilog", tgt="slurm-work-01", timed="second apply, one minion")
    assert one.returncode == 0 and changed(one.data) == set(), one
    batched = fleet.run("-b", "1", "state.apply", "epilog", timed="second apply, -b 1, three minions")
    assert batched.returncode == 0, batched


def test_4_pillar_change_for_one_node_lands_there_only_as_a_new_release(fleet):
    before = {m: (fleet.conf_dir(m) / "localusers.backup").read_text() for m in MINIONS}
    releases = {m: os.readlink(fleet.conf_dir(m) / CURRENT) for m in MINIONS}
    fleet.write_pillar("slurm-work-02", localusers=("root", "je.kim", "s.shin"))
    assert fleet.run("saltutil.refresh_pillar", "wait=True").returncode == 0
    ret = fleet.run("state.apply", "epilog")
    assert ret.returncode == 0, ret
    assert "epilog-release-switch-cmd-run" in changed(ret.data["slurm-work-02"])
    assert changed(ret.data["slurm-work-01"]) == set() and changed(ret.data["slurm-work-03"]) == set()
    assert (fleet.conf_dir("slurm-work-02") / "localusers.backup").read_text() == "root\nje.kim\ns.shin\n"
    for minion in ("slurm-work-01", "slurm-work-03"):
        assert (fleet.conf_dir(minion) / "localusers.backup").read_text() == before[minion]
        assert os.readlink(fleet.conf_dir(minion) / CURRENT) == releases[minion]
    # the old release stays whole beside the new one: what a rollback returns to
    node = fleet.conf_dir("slurm-work-02") / RELEASES
    assert os.readlink(node / "previous") == releases["slurm-work-02"] != os.readlink(node / "current")
    assert (node / releases["slurm-work-02"] / "localusers.backup").read_text() == before["slurm-work-02"]


def test_5_sweep_and_verify_answer_from_every_node(fleet):
    assert fleet.run("saltutil.sync_modules").returncode == 0
    ret = fleet.run("epilog.sweep", "test=True")
    assert ret.returncode == 0, ret
    assert sorted(ret.data) == MINIONS
    for minion in MINIONS:
        assert ret.data[minion]["test"] is True and ret.data[minion]["removed"] == []
    for minion in MINIONS:
        node = fleet.base / minion
        (node / "slurm/slurm.conf").write_text(
            f"Epilog={node}/slurm/epilog.sh\nProlog={node}/slurm/prolog.sh\nPrologFlags=Alloc,Contain\n"
            f"SlurmdSpoolDir={node}/spool\n")
    ret = fleet.run("epilog.verify")
    assert sorted(ret.data) == MINIONS, ret
    for minion in MINIONS:
        assert ret.data[minion]["result"] is True, (minion, ret.data[minion]["problems"])
        assert ret.data[minion]["release"] == os.readlink(fleet.conf_dir(minion) / CURRENT)


def wire(fleet, minion, extra=""):
    node = fleet.base / minion
    (node / "slurm/slurm.conf").write_text(
        f"Epilog={node}/slurm/epilog.sh\nProlog={node}/slurm/prolog.sh\nPrologFlags=Alloc,Contain\n"
        f"SlurmdSpoolDir={node}/spool\n{extra}")


def test_6_rollout_preview_plans_the_batches_and_changes_nothing(fleet):
    for minion in MINIONS:
        fleet.write_pillar(minion, part_timeout=19)
    before = {m: fleet.current(m) for m in MINIONS}
    rc, states = fleet.rollout("test=True", target="slurm-work-*", canary="slurm-work-02", name="preview-1")
    assert rc == 0, states
    plan = states["epilog-rollout-plan"]["comment"]
    assert "canary slurm-work-02, then 2 batch(es) of up to 1: slurm-work-01 | slurm-work-03" in plan, plan
    for i, minion in enumerate(["slurm-work-02", "slurm-work-01", "slurm-work-03"]):
        assert states[f"epilog-rollout-{i}-apply"]["result"] is None, states
        assert minion in json.dumps(states[f"epilog-rollout-{i}-apply"]), states[f"epilog-rollout-{i}-apply"]
    assert not any(sid.endswith("-rollback") for sid in states), sorted(states)
    assert {m: fleet.current(m) for m in MINIONS} == before
    for minion in MINIONS:
        assert not (fleet.conf_dir(minion) / f"{RELEASES}/checkpoints").exists()
    for bad, entry in (({"batch": 0}, "epilog_rollout:batch"), ({"batch": "150%"}, "epilog_rollout:batch"),
                       ({"canary": "slurm-work-99"}, "epilog_rollout:canary"), ({"name": "-v"}, "epilog_rollout:name"),
                       ({"target": "nobody-*"}, "epilog_rollout:target"), ({"tgt_type": "x"}, "epilog_rollout:tgt_type"),
                       ({"bacth": 2}, "epilog_rollout:bacth")):
        ret = fleet.run_cli.run("state.orchestrate", "epilog.rollout", "test=True",
                                "pillar=" + json.dumps({"epilog_rollout": {"target": "slurm-work-*", **bad}}))
        assert ret.returncode != 0 and entry in json.dumps(ret.data) + ret.stdout + ret.stderr, (bad, ret)
    assert {m: fleet.current(m) for m in MINIONS} == before


def test_7_a_broken_pillar_stops_the_rollout_and_later_nodes_keep_their_release(fleet):
    before = {m: fleet.current(m) for m in MINIONS}
    fleet.write_pillar("slurm-work-02", localusers=("root", "bad user"), part_timeout=19)
    rc, states = fleet.rollout(target="slurm-work-*", canary="slurm-work-01", batch=1, name="stops-at-02")
    assert rc != 0, states
    # the canary went through, gated by verify
    assert states["epilog-rollout-0-verify"]["result"] is True, states["epilog-rollout-0-verify"]
    assert fleet.current("slurm-work-01") != before["slurm-work-01"]
    # 02 failed to render: nothing switched there, and its rollback says so
    assert states["epilog-rollout-1-apply"]["result"] is False
    assert "epilog:localusers[1]" in json.dumps(states["epilog-rollout-1-apply"]), states["epilog-rollout-1-apply"]
    assert states["epilog-rollout-1-rollback"]["result"] is True, states["epilog-rollout-1-rollback"]
    assert fleet.current("slurm-work-02") == before["slurm-work-02"]
    # 03 never started: no checkpoint, no apply, its old release
    for step in ("saltutil.sync_modules", "checkpoint", "apply", "verify"):
        assert states[f"epilog-rollout-2-{step}"]["result"] is False, states[f"epilog-rollout-2-{step}"]
        assert not states[f"epilog-rollout-2-{step}"].get("changes"), states[f"epilog-rollout-2-{step}"]
    assert fleet.current("slurm-work-03") == before["slurm-work-03"]
    checkpoints = fleet.conf_dir("slurm-work-03") / f"{RELEASES}/checkpoints"
    assert not checkpoints.exists() or "stops-at-02" not in checkpoints.read_text()


def test_8_a_canary_that_fails_verify_is_switched_back_and_nothing_else_changes(fleet):
    fleet.write_pillar("slurm-work-02", part_timeout=19)
    fleet.write_pillar("slurm-work-01", part_timeout=18, chain_timeout=250)
    wire(fleet, "slurm-work-01", "PrologEpilogTimeout=200\n")
    before = {m: fleet.current(m) for m in MINIONS}
    rc, states = fleet.rollout(target="slurm-work-*", canary="slurm-work-01", batch=2, name="canary-fails")
    assert rc != 0, states
    assert states["epilog-rollout-0-apply"]["result"] is True, states["epilog-rollout-0-apply"]
    verify = json.dumps(states["epilog-rollout-0-verify"])
    assert states["epilog-rollout-0-verify"]["result"] is False and "prologepilogtimeout" in verify.lower(), verify
    rollback = states["epilog-rollout-0-rollback"]
    assert rollback["result"] is True and before["slurm-work-01"] in json.dumps(rollback), rollback
    assert {m: fleet.current(m) for m in MINIONS} == before
    # the release the canary ran for a moment stays on the node, not current
    history = (fleet.conf_dir("slurm-work-01") / f"{RELEASES}/history").read_text().splitlines()
    assert history[-1].split()[1:] == ["rollback", before["slurm-work-01"]], history
    for step in ("checkpoint", "apply"):
        assert states[f"epilog-rollout-1-{step}"]["result"] is False


def test_9_a_healthy_rollout_lands_on_every_node_in_batches(fleet):
    fleet.write_pillar("slurm-work-01", part_timeout=18)
    wire(fleet, "slurm-work-01")
    rc, states = fleet.rollout(target="slurm-work-*", canary="slurm-work-03", batch="50%")
    assert rc == 0, {sid: (s["result"], s["comment"]) for sid, s in states.items() if s["result"] is not True}
    assert "canary slurm-work-03, then 2 batch(es) of up to 1" in states["epilog-rollout-plan"]["comment"]
    assert all(s["result"] is True for s in states.values()), states
    assert not any(sid.endswith("-rollback") and s.get("changes") for sid, s in states.items())
    ret = fleet.run("epilog.verify")
    for minion in MINIONS:
        assert ret.data[minion]["result"] is True, (minion, ret.data[minion]["problems"])
        assert ret.data[minion]["release"] == fleet.current(minion)
    # each node's checkpoint names the rollout and the release it ran before
    names = {(fleet.conf_dir(m) / f"{RELEASES}/checkpoints").read_text().split()[-2] for m in MINIONS}
    assert len(names) == 1 and names.pop().startswith("rollout-"), names


def test_10_one_report_from_the_master_answers_for_every_node(fleet, tmp_path):
    """Each node's chain ends real jobs (its runner, as slurmd runs it: a
    stray of alice killed, je.kim spared), a different number per node; one
    epilog.report from the master returns each node's own counts."""
    for number, minion in enumerate(MINIONS, 1):
        for job in range(number):
            proc = stray("alice")
            try:
                ret = subprocess.run([str(fleet.conf_dir(minion) / "epilog.sh")], capture_output=True,
                                     env=slurmd_env("alice", job=7000 + job, SLURMD_NODENAME=minion))
                assert ret.returncode == 0 and killed(proc), ret
            finally:
                end(proc)
        ret = subprocess.run([str(fleet.conf_dir(minion) / "epilog.sh")], capture_output=True,
                             env=slurmd_env("je.kim", job=7100, SLURMD_NODENAME=minion))
        assert ret.returncode == 0, ret
    ret = fleet.run("epilog.report", "since=1d")
    assert ret.returncode == 0 and sorted(ret.data) == MINIONS, ret
    for number, minion in enumerate(MINIONS, 1):
        summary = ret.data[minion]
        assert summary["nodes"] == [minion], summary
        assert summary["job_ends"] == number + 1 and summary["acted"] == number, summary
        assert summary["users_acted_on"] == ["alice"] and summary["spared"] == {"listed in localusers": 1}, summary
        assert summary["processes_signalled"] >= number and summary["problems"] == [], summary
    one = fleet.run("epilog.report", "job=7100", tgt="slurm-work-02")
    assert one.returncode == 0 and [r["user"] for r in one.data["records"]] == ["je.kim"], one


def stray_on_the_nodes(fleet, user):
    """A stray of USER in the nodes' namespaces: (its process here, its pid
    there, which the minions see)."""
    # (--pdeathsig: it dies with nsenter, which end() kills)
    proc = subprocess.Popen([*fleet.ns, *as_user(user)[:1], "--pdeathsig=KILL", *as_user(user)[1:], "sh", "-c",
                             "echo $$; exec sleep 600"], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    return proc, int(proc.stdout.readline())


def test_11_strays_answer_from_every_node_and_the_report_counts_them(fleet):
    """The fleet view: epilog.strays on every node at once names alice's
    stray (no job on any node) and leaves out je.kim (listed); test=True
    kills nothing; kill=True on one node kills it there with the chain's
    own kill, and epilog.report counts the looks per node."""
    (proc, pid), (operator, _) = stray_on_the_nodes(fleet, "alice"), stray_on_the_nodes(fleet, "je.kim")
    try:
        ret = fleet.run("epilog.strays", "kill=True", "test=True")
        assert ret.returncode == 0 and sorted(ret.data) == MINIONS, ret
        for minion in MINIONS:
            users = {entry["user"]: entry for entry in ret.data[minion]["users"]}
            assert users["alice"]["answer"] == "stray" and users["alice"]["kill"] == "would kill", ret.data[minion]
            assert any(p["pid"] == pid for p in users["alice"]["strays"]), users["alice"]
            assert "je.kim" not in users, ret.data[minion]
        assert proc.poll() is None
        assert fleet.run("epilog.strays").returncode == 0
        ret = fleet.run("epilog.strays", "kill=True", tgt="slurm-work-02")
        assert ret.returncode == 0 and killed(proc), ret
        assert operator.poll() is None
        report = fleet.run("epilog.report", "since=1h")
        for minion in MINIONS:
            between = report.data[minion]["between_jobs"]
            assert between["strays_looks"] == {"call": 2 if minion == "slurm-work-02" else 1, "schedule": 0}, between
            assert between["stray_processes_killed"] == (1 if minion == "slurm-work-02" else 0), between
        ret = fleet.run("epilog.strays", "kill=often")
        assert ret.returncode != 0 or all("must be True or False" in str(v) for v in ret.data.values()), ret
    finally:
        end(proc)
        end(operator)


def test_12_the_default_rollout_reports_each_batch_as_it_ends_and_stops_at_a_node_that_stops_answering(
        fleet, event_listener):
    """The default batch is 10% of the nodes after the canary, at least one:
    here one node per batch. As each batch ends, before the next starts, an
    event on the master's bus says so (salt-run state.orchestrate prints
    nothing until the end), each node's short verify answer just before it.
    slurm-work-03 answers when the plan is made, and stops answering (its
    processes stopped) once the canary's batch has ended: its batch fails at
    its first step, naming it, and the rollout stops there, 03 on its old
    release."""
    import psutil  # pylint: disable=import-outside-toplevel

    for minion in MINIONS:
        fleet.write_pillar(minion, part_timeout=17)
        wire(fleet, minion)
    before = {m: fleet.current(m) for m in MINIONS}
    name = "batches-as-they-end"
    start = time.time()
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(
        ret=fleet.rollout(target="slurm-work-*", canary="slurm-work-01", name=name)))
    thread.start()
    master = fleet.master.id
    stopped = []
    try:
        first = event_listener.wait_for_events([(master, f"epilog/rollout/{name}/batch-0")], timeout=300,
                                               after_time=start)
        assert first.found_all_events, "no event at the end of the canary's batch"
        node03 = psutil.Process(fleet.minions[2].pid)
        stopped = [node03, *node03.children(recursive=True)]
        for proc in stopped:
            proc.send_signal(signal.SIGSTOP)
        thread.join(timeout=600)
        assert not thread.is_alive()
        # (the listener keeps an event 120 s: read them at once; the last
        # reaches it through the master's engine a moment after the run ends)
        ended = event_listener.wait_for_events([(master, f"epilog/rollout/{name}/batch-{i}") for i in range(3)],
                                               timeout=60, after_time=start)
        events = {event.tag.rsplit("/", 1)[1]: event for event in ended.matches}
        starts = {tuple(event.data["tgt"]): event.stamp for event in event_listener.get_events(
            [(master, "salt/run/*/args")], after_time=start) if event.data.get("name") == "saltutil.sync_modules"}
        answers = {event.data["id"]: event for event in event_listener.get_events(
            [(master, "salt/job/*/ret/*")], after_time=start) if event.data.get("fun") == "epilog.verify"}
    finally:
        for proc in stopped:
            proc.send_signal(signal.SIGCONT)
        thread.join(timeout=600)
    rc, states = outcome["ret"]
    assert rc != 0, states
    plan = states["epilog-rollout-plan"]["comment"]
    assert "canary slurm-work-01, then 2 batch(es) of up to 1: slurm-work-02 | slurm-work-03 (batch: 10%)" in plan, plan
    stop = states["epilog-rollout-2-saltutil.sync_modules"]
    assert stop["result"] is False and "slurm-work-03" in stop["comment"], stop
    assert not any(states[f"epilog-rollout-2-{step}"].get("changes") for step in ("checkpoint", "apply")), states
    assert fleet.current("slurm-work-03") == before["slurm-work-03"]
    assert all(fleet.current(m) != before[m] for m in ("slurm-work-01", "slurm-work-02"))

    assert sorted(events) == ["batch-0", "batch-1", "batch-2"], sorted(events)
    for i, minion in enumerate(MINIONS):
        data = events[f"batch-{i}"].data
        assert (data["rollout"], data["batch"], data["batches"], data["nodes"]) == (name, i, 3, [minion]), data
        assert data["result"] == ("failed" if minion == "slurm-work-03" else "verified"), data
    for minion in ("slurm-work-01", "slurm-work-02"):
        answer = answers[minion].data["return"]
        assert sorted(answer) == ["problems", "release", "result", "warnings"] and answer["result"] is True, answer
    assert "slurm-work-03" not in answers
    # in the order they happened: a batch's verify answers, its event, then the next batch's start
    assert answers["slurm-work-01"].stamp <= events["batch-0"].stamp < starts[("slurm-work-02",)] \
        < answers["slurm-work-02"].stamp <= events["batch-1"].stamp < starts[("slurm-work-03",)] \
        < events["batch-2"].stamp, (events, starts, answers)
