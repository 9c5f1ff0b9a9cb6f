"""Observe mode, the brake and the parts turned off, where they are decided
and counted: which parts a setting leaves out (registry.not_run), what the
brake makes of the file at epilog:stop_file (parts.brake), and how the
record, the metrics and epilog.report tell what would have been done, and
what the brake stopped, from what was done. No root: a stop file of
root's is the node tier's (tests/node/test_observe.py)."""
import os

import pytest

from tests.unit.conftest import node

parts, registry = node("parts"), node("registry")
record = node("record")
metrics = node("metrics")
reader = node("reader")
guard = node("guard")
evidence = node("evidence")

NAMES = ("39-lastuserjob-ssh", "40-lastuserjob-processes", "42-lastuserjob-cleanup", "45-stale-x-display",
         "50-exclusive-ssh")
ON = dict.fromkeys(NAMES, True)
ACT = guard.Verdict("act", 50101, "not listed in x; acting for uid 50101", "info", "not listed", False)
NO = evidence.Answer("no", "node-local: no step of another job in /var/spool/slurmd", (), False)
STOP = "/etc/slurm/epilog.stop"


class Trusting:
    """A Trust that calls every directory root's own (the test runs without root)."""

    @staticmethod
    def root_only(directory):
        return True


# -- which parts run -----------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_a_part_turned_off_does_not_run_and_says_so(name):
    off = registry.not_run(name, {"parts": {**ON, name: False}, "ssh_access": "listfile"})
    assert off == registry.Off(f"off: epilog:parts:{name} is false", f"off: epilog:parts:{name} is false")
    assert all(registry.not_run(other, {"parts": {**ON, name: False}}) is None for other in NAMES if other != name)


def test_every_part_on_runs_and_the_ssh_access_rule_still_holds():
    assert all(registry.not_run(name, {"parts": ON, "ssh_access": "listfile"}) is None for name in NAMES)
    off = registry.not_run("39-lastuserjob-ssh", {"parts": ON, "ssh_access": "adopt"})
    assert off.recorded == "epilog:ssh_access" and off.why.startswith("epilog:ssh_access is adopt")
    # a release made before epilog:parts holds none: every part on
    assert registry.not_run("40-lastuserjob-processes", {}) is None


def test_observe_and_the_brake_hold_back_the_acting_parts_and_never_the_grant():
    assert registry.ACTING == NAMES[:4] and "50-exclusive-ssh" not in registry.ACTING
    assert registry.observing({"mode": "observe"}) and not registry.observing({"mode": "enforce"})
    assert not registry.observing({})


def test_part_42s_observed_walk_counts_what_its_walk_then_removes(tmp_path):
    """The same walk, nothing unlinked: as many entries would go as then go,
    and a directory of the user's that another account's entry keeps is an
    error in both (rmdir finds it not empty)."""
    import time  # pylint: disable=import-outside-toplevel

    top = tmp_path / "tmp"
    (top / "a/b").mkdir(parents=True)
    (top / "mixed").mkdir()
    for path in ("a/b/c", "a/d", "top", "mixed/theirs"):
        (top / path).write_text("x")
    if os.geteuid() == 0:
        os.chown(top / "mixed/theirs", 54321, 54321)  # another account's (without root: all the test's own)
    before = sorted(top.rglob("*"))
    would = parts._clear(str(top), os.geteuid(), time.monotonic() + 30, test=True)
    assert sorted(top.rglob("*")) == before, "the observed walk removed something"
    assert parts._clear(str(top), os.geteuid(), time.monotonic() + 30) == would
    assert would == ((5, 1) if os.geteuid() == 0 else (7, 0)), would


# -- the brake ---------------------------------------------------------------------
def test_no_stop_file_is_no_brake(tmp_path):
    assert parts.brake(str(tmp_path / "epilog.stop"), Trusting()) is None
    assert parts.brake("", Trusting()) is None
    (tmp_path / "file").write_text("")
    assert parts.brake(str(tmp_path / "file" / "epilog.stop"), Trusting()) is None


@pytest.mark.parametrize("kind", ["directory", "symlink", "fifo"])
def test_a_stop_file_that_is_no_regular_file_is_ignored(tmp_path, kind):
    path = tmp_path / "epilog.stop"
    if kind == "directory":
        path.mkdir()
    elif kind == "symlink":
        (tmp_path / "target").write_text("")
        path.symlink_to(tmp_path / "target")
    else:
        os.mkfifo(path)
    found = parts.brake(str(path), Trusting())
    assert found.state == "ignored" and found.why.startswith(f"{path} is not a regular file"), found
    assert found.why.endswith("ignored, the brake is not on")


def test_a_stop_file_of_another_account_is_ignored(tmp_path):
    path = tmp_path / "epilog.stop"
    path.write_text("")
    if os.geteuid() == 0:
        os.chown(path, 54321, 54321)  # (without root, the file is the test's own account's)
    found = parts.brake(str(path), Trusting())
    assert found.state == "ignored" and f"is owned by uid {path.stat().st_uid}, not root" in found.why, found


def test_nothing_in_a_directory_another_account_can_write_is_looked_at(tmp_path, monkeypatch):
    """The directory is judged first: a mount a user made there could hold
    the lstat past the chain's deadline, so a brake there is ignored, file
    or none, and the file is never looked at."""
    looked = []
    real_lstat = os.lstat
    monkeypatch.setattr(parts.os, "lstat", lambda path, *a, **k: looked.append(path) or real_lstat(path, *a, **k))

    class Open:
        @staticmethod
        def root_only(directory):
            return False

    for there in (True, False):
        path = tmp_path / "epilog.stop"
        if there:
            path.write_text("")
        found = parts.brake(str(path), Open())
        assert found.state == "ignored" and found.why.startswith(f"{path} is in {tmp_path}, which another account "
                                                                 "can write"), found
        assert found.why.endswith("not looked at; ignored, the brake cannot be put on there")
        path.unlink(missing_ok=True)
    assert looked == [], "nothing in the directory was looked at"


# -- the record --------------------------------------------------------------------
def job_end(facts=(), mode="enforce", stopped=None, stop_ignored=None, skipped=(), other=NO, verdict=ACT,
            release="0123456789ab"):
    entries = [record.part_ran(name, 0, 1, fact) for name, fact in facts]
    entries += [record.part_skipped(name, why) for name, why in skipped]
    return record.build("epilog", node="n1", job="7", user="alice", uid="50101", release=release, start=1800000000.25,
                        ms=1500, other=other, guard=verdict, parts=entries, mode=mode, stopped=stopped, stop_ignored=stop_ignored)


OBSERVED = [
    ("39-lastuserjob-ssh", {"allow": {"op": "remove", "change": "would remove", "would": True}}),
    ("40-lastuserjob-processes", {"kill": {"outcome": "would", "rounds": 0, "signalled": 3, "strays": 2,
                                           "in_job_cgroup": 1, "in_other_job_cgroup": 0, "unclassified": 0,
                                           "resumed": 0, "would": True}}),
    ("42-lastuserjob-cleanup", {"cleanup": {"removed": 4, "rc": 0, "would": True},
                                "ipc": {"removed": {"shm": 1, "sem": 1, "msg": 0}, "bytes": 4096,
                                        "kept": {"attached": 1}, "left": 0, "would": True}}),
    ("45-stale-x-display", {"sweep": {"counts": {"x_socket": {"removed": 1, "kept": 0}, "clsbd": {"removed": 2,
                                                                                                  "kept": 1}},
                                      "removed": [], "kept": [], "would": True}}),
]
DONE = [(name, {key: {k: v for k, v in fact.items() if k != "would"} for key, fact in facts.items()})
        for name, facts in OBSERVED]
DONE[0][1]["allow"]["change"] = "removed"
DONE[1][1]["kill"]["outcome"] = "done"
STOPPED = [(name, f"stopped by {STOP}") for name, _ in OBSERVED]


def test_an_observed_job_end_records_its_mode_and_its_facts_say_would():
    rec = job_end(OBSERVED, mode="observe")
    assert rec["mode"] == "observe" and "stopped" not in rec and reader.record_ok(rec)
    assert metrics.outcome(rec) == "acts"
    assert metrics.removed(rec) == {} and metrics.signalled(rec) == {} and metrics.ssh_lines(rec) == 0
    assert metrics.removed(rec, True) == {"x_socket": 1, "clsbd": 2, "user_files": 4}
    assert metrics.signalled(rec, True) == {"stray": 2, "job_cgroup": 1, "other_job_cgroup": 0, "unclassified": 0}
    assert metrics.ssh_lines(rec, True) == 1 and metrics.ipc(rec, True)["removed"] == {"shm": 1, "sem": 1, "msg": 0}
    assert metrics.acts(rec) == {}
    assert metrics.acts(rec, True)["epilog_acts_total"] == 1


def test_a_stopped_job_end_records_the_stop_file_and_acted_on_nothing():
    rec = job_end(skipped=STOPPED, stopped=STOP)
    assert rec["stopped"] == STOP and rec["mode"] == "enforce"
    assert metrics.stopped_parts(rec) == [name for name, _ in STOPPED[:3]]
    assert metrics.outcome(rec) == "stopped" and metrics.acts(rec) == {} and metrics.acts(rec, True) == {}
    assert reader.decision(rec) == ("stopped", f"the brake: {STOP}")
    # the brake set after 42 ran stops 45 alone: the job end acted
    late = job_end(DONE[:3], skipped=STOPPED[3:], stopped=STOP)
    assert metrics.outcome(late) == "acts" and metrics.acts(late)["epilog_acts_total"] == 1


def test_a_stop_file_that_was_ignored_is_in_the_record():
    rec = job_end(DONE, stop_ignored=f"{STOP} is owned by uid 50101, not root: ignored, the brake is not on")
    assert rec["stop_ignored"].startswith(STOP) and "stopped" not in rec and metrics.outcome(rec) == "acts"


# -- the metrics ----------------------------------------------------------------------
def metrics_after(tmp_path, *records):
    path = tmp_path / "epilog.prom"
    for rec in records:
        assert metrics.update_metrics(Trusting(), str(path), rec)
    return metrics.read_metrics(path.read_bytes()), path.read_text()


def test_the_metrics_count_what_observe_mode_would_have_done_under_would_names(tmp_path):
    metric, text = metrics_after(tmp_path, job_end(OBSERVED, mode="observe"), job_end(DONE))
    for key in metrics.ACT_COUNTERS:
        # what was done and what would have been: the same counts, under
        # each name (the one rule: epilog_would_<x>)
        assert metric[key] == metric[metrics.would_metric(key)], key
    assert metric["epilog_acts_total"] == 1 and metric["epilog_would_acts_total"] == 1
    assert metric['epilog_would_residue_removed_total{kind="user_files"}'] == 4
    assert metric['epilog_would_processes_signalled_total{where="stray"}'] == 2
    assert metric['epilog_would_ipc_removed_total{kind="shm"}'] == 1 and metric["epilog_would_ipc_bytes_removed_total"] == 4096
    # kept is a decision: counted in either mode
    assert metric['epilog_ipc_kept_total{reason="attached"}'] == 2
    assert "# TYPE epilog_would_residue_removed_total counter" in text
    assert text.count("# HELP epilog_would_residue_removed_total") == 1


def test_the_metrics_carry_the_mode_the_release_and_when_the_last_job_end_ended(tmp_path):
    metric, text = metrics_after(tmp_path, job_end(OBSERVED, mode="observe", release="aaaaaaaaaaaa"))
    assert metric['epilog_mode{mode="observe"}'] == 1 and metric['epilog_mode{mode="enforce"}'] == 0
    assert metric['epilog_release_info{release="aaaaaaaaaaaa"}'] == 1
    assert metric["epilog_last_job_end_timestamp_seconds"] == "1800000001.750"
    assert "# TYPE epilog_last_job_end_timestamp_seconds gauge" in text
    metric, text = metrics_after(tmp_path, job_end(DONE, release="bbbbbbbbbbbb"))
    assert metric['epilog_mode{mode="enforce"}'] == 1 and metric['epilog_mode{mode="observe"}'] == 0
    assert [key for key in metric if key.startswith("epilog_release_info")] == [
        'epilog_release_info{release="bbbbbbbbbbbb"}'], "one release: the last one run"
    # a prolog carries the release and the mode, not a job end's time
    prolog = record.build("prolog", node="n1", job="8", user="alice", uid="50101", release="cccccccccccc",
                          start=1900000000.0, ms=10)
    metric, _ = metrics_after(tmp_path, prolog)
    assert metric["epilog_last_job_end_timestamp_seconds"] == "1800000001.750", "the last job end's"
    assert 'epilog_release_info{release="cccccccccccc"}' in metric


def test_the_metrics_count_the_job_ends_the_brake_stopped_and_no_act(tmp_path):
    metric, _ = metrics_after(tmp_path, job_end(skipped=STOPPED, stopped=STOP))
    assert metric["epilog_stopped_total"] == 1 and metric['epilog_job_ends_total{stage="epilog"}'] == 1
    assert metric["epilog_acts_total"] == 0 and metric["epilog_would_acts_total"] == 0
    assert all(metric[key] == 0 for key in metrics.ACT_COUNTERS)


def test_a_look_between_jobs_counts_its_would_kills_apart(tmp_path):
    look = record.build("strays", node="n1", release="0123456789ab", start=1.8e9, ms=5, mode="observe",
                        strays={"stray_users": 1, "stray_processes": 3, "killed": 0, "would_kill": 3})
    metric, _ = metrics_after(tmp_path, look)
    assert metric['epilog_stray_processes_total{action="found"}'] == 3
    assert metric['epilog_stray_processes_total{action="killed"}'] == 0
    assert metric['epilog_would_stray_processes_total{action="killed"}'] == 3
    assert 'epilog_mode{mode="observe"}' not in metric, "a look between jobs is no chain: the gauges stay"


# -- epilog.report ---------------------------------------------------------------------
def test_the_report_counts_what_would_have_been_done_apart_from_what_was():
    off = job_end(DONE[:2], skipped=[("42-lastuserjob-cleanup", "off: epilog:parts:42-lastuserjob-cleanup is false")])
    sweep = record.build("sweep", node="n1", release=None, start=1.8e9, ms=5,
                         parts=[record.part_ran("epilog.sweep", 0, 1, {"sweep": {"counts": {"x_lock": {"removed": 2,
                                                                                                  "kept": 0}},
                                                                            "would": True}})],
                         stopped=STOP, off=["45-stale-x-display"])
    out = reader.summary([job_end(OBSERVED, mode="observe"), job_end(DONE), job_end(skipped=STOPPED, stopped=STOP),
                          off, sweep])
    assert out["job_ends"] == 4 and out["modes"] == {"enforce": 3, "observe": 1}
    assert out["acted"] == 2 and out["users_acted_on"] == ["alice"]
    would = out["would"]
    assert would["acted"] == 1 and would["users"] == ["alice"] and would["processes_signalled"] == 3
    assert would["ssh_lines_removed"] == 1 and out["ssh_lines_removed"] == 2
    assert would["residue"] == {"x_socket": 1, "x_lock": 0, "clsbd": 2, "scratch": 0, "user_files": 4}
    assert out["residue"]["removed"] == {"x_socket": 1, "x_lock": 0, "clsbd": 2, "scratch": 0, "user_files": 4}
    assert out["residue"]["kept"]["clsbd"] == 2, "kept is a decision in either mode"
    assert would["ipc"] == {"removed": {"shm": 1, "sem": 1, "msg": 0}, "bytes": 4096}
    assert out["processes_signalled"] == 6
    assert would["between_jobs"]["removed"]["x_lock"] == 2 and out["between_jobs"]["removed"]["x_lock"] == 0
    assert out["stopped"] == {"job_ends": 1, "acts": 1, "looks": 1, "files": [STOP]}
    assert out["parts_off"] == {"42-lastuserjob-cleanup": 1, "45-stale-x-display": 1}


def test_what_was_done_says_would_under_observe_and_stopped_under_the_brake():
    observed = reader.what_was_done(job_end(OBSERVED, mode="observe"))
    assert observed["mode"] == "observe" and observed["decision"] == "would have acted"
    stopped = reader.what_was_done(job_end(skipped=STOPPED, stopped=STOP))
    assert stopped["decision"] == "stopped" and stopped["stopped"] == STOP
    assert stopped["parts"]["40-lastuserjob-processes"] == f"skipped: stopped by {STOP}"
