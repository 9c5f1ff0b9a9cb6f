"""Between jobs, as decisions: epilog.strays's judge() (the guard's verdict
and the last-job evidence to stray, job, operator, system or unknown), the
age of a process from a stat line a user names, the records and counters of
looks between jobs, and the schedule the state lays down (schedule.sls
through Salt's own Jinja). Pure: no root, no /proc of anybody's, no Salt
loader. The real processes, accounts, locks and minion scheduler are
tests/node/test_strays.py's and the slurm tier's."""
import json
import os
import types
from pathlib import Path

import pytest

from tests.unit.conftest import node
from tests.unit.test_observe import Trusting
from tests.unit.test_settings import REPO, render_text

strays = node("strays")
guard = node("guard")
evidence = node("evidence")
record = node("record")
metrics = node("metrics")
reader = node("reader")

KNOWN = guard.Identity(True, 50101, "")
ACT = guard.Verdict("act", 50101, "not listed in /x; acting for uid 50101", "info", "not listed", False)


def answer(said, why="node-local: evidence"):
    return evidence.Answer(said, why, (), False)


@pytest.mark.parametrize("ident, verdict, other, expect", [
    (KNOWN, ACT, answer("no"), "stray"),
    (KNOWN, ACT, answer("yes"), "job"),
    (KNOWN, ACT, answer("unknown"), "unknown"),
    (KNOWN, ACT, None, "unknown"),
    # an operator by name, or at an operator's uid, is never one
    (KNOWN, guard.Verdict("spare", None, "listed in /x", "info", "listed", False), answer("no"), "operator"),
    (KNOWN, guard.Verdict("spare", None, "uid 0 is root or a system account", "info", "not listed", True),
     answer("no"), "system"),
    # a lookup error of the list, an account that does not resolve: never a licence
    (KNOWN, guard.Verdict("unknown", None, "localusers lookup failed", "warning", "lookup error", False),
     answer("no"), "unknown"),
    (guard.Identity(False, None, "uid 7 has no account on this node"), ACT, answer("no"), "unknown"),
])
def test_only_a_known_unlisted_account_with_no_job_here_is_a_stray(ident, verdict, other, expect):
    said, why = strays.judge(ident, verdict, other)
    assert said == expect and why


def test_the_judge_follows_the_guard_on_real_lists(tmp_path):
    """The guard's own decide() on a list: a name on a line, or a second
    name at a listed uid, is an operator; a list that cannot be read, or a
    listed name that does not resolve, is unknown."""
    names = {"root": 0, "opal": 50105, "opal2": 50105, "alice": 50101}

    def verdict(user, listing):
        ident = guard.Identity(True, names[user], "")
        return strays.judge(ident, guard.decide(ident, user, listing, "/l", names.get, (1000, 60000)),
                            answer("no"))[0]

    assert verdict("alice", b"root\nopal\n") == "stray"
    assert verdict("opal", b"root\nopal\n") == "operator"
    assert verdict("opal2", b"root\nopal\n") == "operator"
    assert verdict("alice", b"root\nghost\n") == "unknown"
    assert verdict("alice", PermissionError(13, "Permission denied")) == "unknown"


@pytest.mark.parametrize("uid, system", [(0, True), (999, True), (1000, False), (60000, False), (60001, True),
                                         (64030, True), (65534, True), (65536, False), (50101, False)])
def test_system_accounts_are_the_guards(uid, system):
    assert strays.system_uid(uid, (1000, 60000)) is system
    ident = guard.Identity(True, uid, "") if uid else guard.Identity(True, 0, "")
    if uid:
        said = guard.decide(ident, "u", b"root\n", "/l", {"root": 0}.get, (1000, 60000))
        assert said.system is system


@pytest.mark.parametrize("title", [b"sleep", b"a) 1 2 3 4 5", b"x\n) R 1", b") ) )", b""])
def test_a_process_age_reads_past_any_name(title):
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime
    # cstime priority nice threads itrealvalue starttime ...
    line = b"123 (" + title + b") S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5000 0 0"
    assert strays.age_of(line, 1000, 100, 1100.0) == 50
    assert strays.age_of(b"garbage", 1000, 100, 1100.0) is None
    assert strays.age_of(b"1 (x) S 1", 1000, 100, 1100.0) is None


def look(source, kill, found, killed, users=1):
    rec = record.build("strays", node="n1", release="abc", start=1.8e9, ms=12, source=source, kill=kill,
                       strays={"stray_users": users, "stray_processes": found, "killed": killed, "users": []})
    return json.loads(record.line(rec))


def sweep_record(source, removed, ipc=None):
    facts = {"sweep": {"counts": {"x_socket": {"removed": removed, "kept": 1}}}}
    if ipc:
        facts["ipc"] = ipc
    rec = record.build("sweep", node="n1", release=None, start=1.8e9, ms=7,
                       parts=[record.part_ran("epilog.sweep", 0, 7, facts)], source=source)
    return json.loads(record.line(rec))


def test_looks_between_jobs_are_counted_apart_from_job_ends():
    chosen = [look("schedule", True, 3, 3), look("call", False, 2, 0), look("schedule", False, 1, 0),
              sweep_record("schedule", 2), sweep_record("call", 1, {"removed": {"sem": 3}, "bytes": 0}),
              sweep_record("forged", 1, {"removed": {"shm": "x", "msg": 2}, "bytes": True}),
              look("schedule", True, True, -5, users="9")]
    assert all(reader.record_ok(rec) for rec in chosen)
    out = reader.summary(chosen)
    assert out["job_ends"] == 0 and out["prologs"] == 0 and out["acted"] == 0
    between = out["between_jobs"]
    # a source that is neither reads as a call; counts that are not whole numbers count nothing
    assert between["strays_looks"] == {"call": 1, "schedule": 3}
    assert between["sweeps"] == {"call": 2, "schedule": 1}
    assert between["stray_processes_found"] == 6 and between["stray_processes_killed"] == 3
    assert between["stray_users_found"] == 3
    assert between["removed"]["x_socket"] == 4
    # a count that is not a whole number counts nothing; job ends' ipc stays theirs
    assert between["ipc_removed"] == {"shm": 0, "sem": 3, "msg": 2} and between["ipc_bytes_removed"] == 0
    assert out["ipc"]["removed"] == {"shm": 0, "sem": 0, "msg": 0}
    # the job ends' own residue is part 45's alone
    assert out["residue"]["removed"]["x_socket"] == 0 and out["sweeps"] == 0


def test_a_look_between_jobs_adds_to_its_own_counters(tmp_path):
    trust = Trusting()  # the counters; the real Trust of a root-only directory is tests/node/test_records.py's
    prom = tmp_path / "m" / "epilog.prom"
    prom.parent.mkdir(mode=0o755)
    objects = {"removed": {"shm": 2, "sem": 0, "msg": 1}, "bytes": 8192, "kept": {"attached": 1}, "left": 0}
    for rec in (look("schedule", True, 3, 2), look("schedule", False, 1, 0), sweep_record("call", 2, objects)):
        assert metrics.update_metrics(trust, str(prom), rec)
    counters = metrics.read_metrics(prom.read_bytes())
    assert counters['epilog_between_jobs_runs_total{what="strays",source="schedule"}'] == 2
    assert counters['epilog_between_jobs_runs_total{what="sweep",source="call"}'] == 1
    assert counters['epilog_stray_processes_total{action="found"}'] == 4
    assert counters['epilog_stray_processes_total{action="killed"}'] == 2
    assert counters['epilog_residue_removed_total{kind="x_socket"}'] == 2
    # what a sweep with remove_ipc removed, in the counters part 42's go to
    assert counters['epilog_ipc_removed_total{kind="shm"}'] == 2 and counters['epilog_ipc_removed_total{kind="msg"}'] == 1
    assert counters["epilog_ipc_bytes_removed_total"] == 8192
    assert counters['epilog_ipc_kept_total{reason="attached"}'] == 1
    assert not any(value for key, value in counters.items() if key.startswith("epilog_job_ends_total"))


def schedule_states(tmp_path, pillar, held=None):
    """schedule.sls rendered where no minion runs (its pidfile is absent):
    HELD is what its _schedule.conf holds, as schedule.list offline reads it."""
    import os  # pylint: disable=import-outside-toplevel

    import yaml  # pylint: disable=import-outside-toplevel

    template = (REPO / "salt/epilog/schedule.sls").read_text()

    def listed(show_all=False, return_yaml=True, offline=False):
        assert show_all and not return_yaml and offline, "the removal reads the saved schedule"
        return held or {}

    functions = {
        "file.file_exists": os.path.isfile, "file.read": lambda path: Path(path).read_text(),
        "file.dirname": os.path.dirname, "schedule.list": listed,
    }
    opts = {"pidfile": str(tmp_path / "minion.pid"), "conf_file": str(tmp_path / "conf/minion")}
    return yaml.safe_load(render_text(tmp_path, template, pillar, opts_more=opts, salt_more=functions))


def test_the_schedule_is_two_entries_of_the_minions_or_none(tmp_path):
    on = schedule_states(tmp_path, {"epilog": {"schedule": {"interval": 600, "kill_strays": True}}})
    assert sorted(on) == ["epilog-schedule-epilog-strays-present", "epilog-schedule-epilog-sweep-present",
                          "epilog-schedule-where-test-nop"]
    where = on["epilog-schedule-where-test-nop"]["test.nop"][0]["name"]
    assert where.startswith(f"where the formula's schedule entries go: {tmp_path}/conf/minion.d/_schedule.conf"), where
    strays_entry = dict(item for row in on["epilog-schedule-epilog-strays-present"]["schedule.present"]
                        for item in row.items())
    assert strays_entry["function"] == "epilog.strays" and strays_entry["job_kwargs"] == {"kill": True}
    assert strays_entry["seconds"] == 600 and strays_entry["splay"] == 300 and strays_entry["maxrunning"] == 1
    sweep_entry = dict(item for row in on["epilog-schedule-epilog-sweep-present"]["schedule.present"]
                       for item in row.items())
    assert sweep_entry["function"] == "epilog.sweep" and sweep_entry["job_kwargs"] == {}
    # no minion runs here: Salt's offline mode writes them to its _schedule.conf
    assert strays_entry["offline"] is True and sweep_entry["offline"] is True
    # off: the formula's entries go, and only those; none held, nothing to do
    off = schedule_states(tmp_path, {}, held={"epilog-sweep": {"function": "epilog.sweep"},
                                              "backup": {"function": "cmd.run"}})
    assert list(off) == ["epilog-schedule-epilog-sweep-absent", "epilog-schedule-where-test-nop"]
    assert list(schedule_states(tmp_path, {})) == ["epilog-schedule-test-nop"]


@pytest.mark.parametrize("schedule, message", [
    ("hourly", "epilog:schedule must be a mapping"),
    ({"interval": 5}, "epilog:schedule:interval (5) must be 0 (no schedule) or a whole number of seconds from 10"),
    ({"interval": "600"}, "epilog:schedule:interval ('600')"),
    ({"interval": True}, "epilog:schedule:interval (True)"),
    ({"interval": 600, "splay": 601}, "epilog:schedule:splay (601) must be a whole number of seconds from 0 to"),
    ({"interval": 600, "splay": -1}, "epilog:schedule:splay (-1)"),
    ({"interval": 600, "kill_strays": "yes"}, "epilog:schedule:kill_strays ('yes') must be true or false"),
    ({"interval": 600, "kil_strays": True}, "epilog:schedule:kil_strays is not a setting of the epilog formula; "
                                            "did you mean epilog:schedule:kill_strays?"),
])
def test_a_bad_schedule_names_its_entry(tmp_path, schedule, message):
    import salt.exceptions  # pylint: disable=import-outside-toplevel

    from tests.unit.test_settings import render  # pylint: disable=import-outside-toplevel

    with pytest.raises(salt.exceptions.SaltRenderError, match=None) as caught:
        render(tmp_path, {"epilog": {"schedule": schedule}})
    assert message in str(caught.value)


def test_a_good_schedule_merges_over_the_defaults_and_stays_out_of_the_release(tmp_path):
    from tests.unit.test_settings import merged, render  # pylint: disable=import-outside-toplevel

    assert merged(tmp_path, {"epilog": {"schedule": {"interval": 3600}}})["schedule"] == \
        {"interval": 3600, "splay": 300, "kill_strays": False}
    # a change of the schedule is no new release: no release holds it
    assert "schedule" not in render(tmp_path, {"epilog": {"schedule": {"interval": 3600}}})["settings"]


def test_a_process_in_a_jobs_cgroup_makes_a_job_and_one_in_an_unread_layout_unknown():
    procs = [strays.Process(5, "sleep", 3, None), strays.Process(6, "sh", 3, ("unknown", "/a/slurmstepd.scope/x"))]
    live = {("id", "7"), ("sluid", "sEKNKTV3WPV500")}
    assert strays.by_cgroup(procs[:1], live) is None
    assert strays.by_cgroup(procs, live) == ("unknown", "process 6 is in a cgroup the chain cannot tell: "
                                             "/a/slurmstepd.scope/x")
    for job in (("id", "7"), ("sluid", "sEKNKTV3WPV500")):
        assert strays.by_cgroup([*procs, strays.Process(8, "a", 1, job)], live) == (
            "job", f"process 8 is in the cgroup of Slurm job {job[1]}")


@pytest.mark.parametrize("job", [("id", "7"), ("sluid", "sEKNKTV3WPV500")])
def test_a_job_directory_slurm_left_behind_is_no_job(job):
    """A job's cgroup directory where no process of root's (the step's
    slurmstepd) runs any more is one Slurm left behind (it could not
    empty it: proctrack/linuxproc, a process it could not kill). One
    process of hers kept there made her whole account a job, for every
    look between jobs, all her strays anywhere with it; now the last-job
    evidence decides, as for a process outside any job."""
    procs = [strays.Process(5, "sleep", 3, None), strays.Process(8, "a", 1, job)]
    assert strays.by_cgroup(procs, set()) is None
    assert strays.by_cgroup(procs, {("id", "9"), ("sluid", "s0000000000000")}) is None
    assert strays.by_cgroup(procs, {job})[0] == "job"
    # a layout that cannot be told stays unknown, whatever runs in it
    unread = strays.Process(6, "sh", 3, ("unknown", "/a/slurmstepd.scope/x"))
    assert strays.by_cgroup([*procs, unread], set())[0] == "unknown"


def test_a_strays_kill_counts_the_prologs_wait_from_when_it_took_the_users_lock(tmp_path, monkeypatch):
    """A new job's prolog waits for the user's lock from the moment the
    look took it, and gives up lock_wait seconds later: the look's parts
    must end before that, so the time _decide returns with the lock is
    when it was taken, not when the evidence answered. The controller is
    made to take 30 s (a stub of the evidence: a slow squeue, which the
    real one cannot give on demand); the guard's answer is given (act)."""
    clock = [1000.0]
    monkeypatch.setattr(strays, "time", types.SimpleNamespace(monotonic=lambda: clock[0], time=lambda: 1.8e9))

    def slow(job, uid, facts, chain_timeout):
        clock[0] += 30
        return answer("no")
    monkeypatch.setattr(strays, "evidence", types.SimpleNamespace(decide=slow))
    monkeypatch.setattr(strays.guard, "identity", lambda *args: KNOWN)
    monkeypatch.setattr(strays.guard, "check", lambda *args: ACT)
    run_ = types.SimpleNamespace(account_chars="a-z", names={"localusers": "/x"}, marks_trusted=True,
                                 run_dir=str(tmp_path), settings={"chain_timeout": 110},
                                 lock_user=lambda uid, wait: os.open(tmp_path / f"lock.{uid}", os.O_RDWR | os.O_CREAT))
    said, why, held = strays._decide(run_, types.SimpleNamespace(), 50101, "alice", [], False, set())
    try:
        assert (said, held[1]) == ("stray", 1000.0), (said, why, held)
    finally:
        os.close(held[0])


def test_a_slurmstepd_counts_for_its_job_by_its_binary_and_when_it_cannot_be_read():
    """processes()' test of a process of root's named slurmstepd: what
    Slurm.real_stepd says of it (its binary is the running slurmd's
    slurmstepd); one that cannot be read (not gone) counts, a job being the
    answer that acts on nobody; with no test given, its name alone."""
    def unreadable(pid, proc):
        raise OSError(24, "Too many open files")
    assert strays._real_stepd(lambda pid, proc: pid == 7, "7", 3) is True
    assert strays._real_stepd(lambda pid, proc: pid == 7, "8", 3) is False
    assert strays._real_stepd(unreadable, "8", 3) is True
    assert strays._real_stepd(None, "8", 3) is True
