"""Between jobs, for real: a masterless salt-minion daemon (its own
scheduler, no call by hand) beside a real Slurm 22.05 whose Epilog= and
Prolog= are the chain. `state.apply epilog.schedule` lays down the two
entries; while alice's job runs, the scheduler's epilog.strays kill=True
kills the stray of alicex (no job here) and keeps alice's job and the
listed operator's process; its sweep and strays runs are records that
epilog.report counts as scheduled; verify reports the entries; interval 0
takes them out again."""
import json
from pathlib import Path

import pytest

from tests.helpers import REPO, end, kill_all_of, still_running, stray, uid_of, wait_for
from tests.slurm.conftest import OPERATOR
from tests.slurm.test_pam_adopt import running
from tests.slurm.test_slurm_job_end import assert_not_drained

INTERVAL = 10


class Scheduled:
    """A real salt-master and one salt-minion on loopback (the minion's
    scheduler and its pillar, which a minion compiles only from a master
    and refreshes when told), the master serving this repo's salt/ and the
    pillar PILLAR_DIR/epilog.sls."""

    def __init__(self, master, minion, pillar_dir):
        self.master, self.minion, self.pillar_dir = master, minion, pillar_dir
        self.cli = master.salt_cli(timeout=300)

    def set_pillar(self, pillar):
        (self.pillar_dir / "epilog.sls").write_text(json.dumps(pillar))
        ret = self("saltutil.refresh_pillar", "wait=True")
        assert ret.returncode == 0, ret

    def __call__(self, *args):
        return self.cli.run(*args, minion_tgt=self.minion.id)


@pytest.fixture
def scheduler(salt_factories, tmp_path):
    pillar = tmp_path / "pillar"
    pillar.mkdir()
    (pillar / "top.sls").write_text("base:\n  '*':\n    - epilog\n")
    (pillar / "epilog.sls").write_text("{}\n")
    master = salt_factories.salt_master_daemon(
        "epilog-schedule-master",
        overrides={"interface": "127.0.0.1", "file_roots": {"base": [str(REPO / "salt")]},
                   "pillar_roots": {"base": [str(pillar)]}, "pytest-master": {"log": {"disabled": True}}},
    )
    minion = master.salt_minion_daemon("epilog-scheduler", overrides={"pytest-minion": {"log": {"disabled": True}}})
    with master.started(start_timeout=120), minion.started(start_timeout=120):
        scheduled = Scheduled(master, minion, pillar)
        ret = scheduled("saltutil.sync_modules")
        assert ret.returncode == 0, ret
        yield scheduled


def states(ret):
    """{state id: result} of a state run's return."""
    return {key.split("_|-")[1]: value for key, value in (ret.data or {}).items() if "_|-" in key}


def minion_errors(daemon):
    """The ERROR lines (and what follows each) of the minion's own log."""
    try:
        text = Path(daemon.config["log_file"]).read_text(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return [chunk[:1500] for chunk in text.split("\n[") if "[ERROR" in chunk][-3:]


def test_the_minions_scheduler_kills_a_stray_and_keeps_a_running_job(slurm, scheduler, accounts):
    call = scheduler
    alice, stranger = "alice", "alicex"
    job = slurm.submit(alice, "sleep 300")
    procs = []
    try:
        wait_for(lambda: running(slurm, job), 60, what=f"job {job} to run")
        procs = [stray(stranger), stray(OPERATOR), stray(alice)]
        schedule = {"interval": INTERVAL, "splay": 0, "kill_strays": True}
        # the scheduler runs with the minion's own pillar: refreshed, as after any pillar change
        call.set_pillar(slurm.chain.pillar(localusers=["root", OPERATOR], schedule=schedule))
        ret = call("state.apply", "epilog.schedule")
        assert ret.returncode == 0 and all(s["result"] for s in states(ret).values()), ret
        assert sorted(states(ret)) == ["epilog-schedule-epilog-strays-present", "epilog-schedule-epilog-sweep-present",
                                      "epilog-schedule-where-test-nop"], ret
        # the state runs in the minion, which takes the entries over its event bus
        assert "the running salt-minion's scheduler" in states(ret)["epilog-schedule-where-test-nop"]["name"], ret

        def scheduled(stage):
            return [r for r in slurm.chain.records() if r["stage"] == stage and r.get("source") == "schedule"]

        try:
            wait_for(lambda: scheduled("strays") and scheduled("sweep"), INTERVAL * 4,
                     what="the scheduler's strays and sweep runs")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the minion's errors: {minion_errors(call.minion)}") from None
        look = scheduled("strays")[0]
        assert look["kill"] is True, look
        users = {u["user"]: u for u in look["strays"]["users"]}
        assert users[stranger]["answer"] == "stray" and users[stranger]["kill"] == "done", look
        # alice runs a job here: she and all of hers are kept, her stray outside the job too
        assert users[alice]["answer"] == "job", look
        assert OPERATOR not in users, look
        assert procs[0].wait(timeout=10) < 0
        assert still_running(procs[1], grace=0) and still_running(procs[2], grace=0)
        assert running(slurm, job)
        assert f"killed the processes of uid {uid_of(stranger)}" in slurm.chain.log_text()

        report = call("epilog.report", "since=1h")
        between = report.data["between_jobs"]
        assert between["strays_looks"]["schedule"] >= 1 and between["sweeps"]["schedule"] >= 1, report
        assert between["stray_processes_killed"] >= 1, report

        verified = call("epilog.verify", "verbose=True")
        entries = verified.data["schedule"]["entries"]
        assert entries["epilog-strays"]["function"] == "epilog.strays" and entries["epilog-strays"]["seconds"] == \
            INTERVAL and entries["epilog-strays"]["kwargs"] == {"kill": True}, verified.data["schedule"]
        assert not [w for w in verified.data["warnings"] if "[schedule-" in w], verified.data["warnings"]

        call.set_pillar(slurm.chain.pillar(localusers=["root", OPERATOR]))
        ret = call("state.apply", "epilog.schedule")
        assert ret.returncode == 0 and sorted(states(ret)) == [
            "epilog-schedule-epilog-strays-absent", "epilog-schedule-epilog-sweep-absent",
            "epilog-schedule-where-test-nop"], ret
        assert "the running salt-minion's scheduler" in states(ret)["epilog-schedule-where-test-nop"]["name"], ret
        held = call("schedule.list", "show_all=True", "return_yaml=False")
        assert not {"epilog-sweep", "epilog-strays"} & set(held.data or {}), held
    finally:
        slurm.cmd("scancel", job, check=False)
        slurm.wait_epilog_end(job)
        for proc in procs:
            end(proc)
        for user in (alice, stranger, OPERATOR):
            kill_all_of(user)
    assert_not_drained(slurm)
