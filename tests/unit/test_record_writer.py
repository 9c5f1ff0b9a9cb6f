"""The decision record and the metrics as the runner writes them
(epilog_node/record.py): built from the decisions, one line of JSON below
4000 bytes whatever the names and the facts, and the metrics' counters from
the record. No files but the test's own, no root: the node tier writes them
at real job ends (tests/node/test_records.py)."""
import json

import pytest

from tests.unit.conftest import node
from tests.unit.test_observe import Trusting

record = node("record")
metrics = node("metrics")
reader = node("reader")
guard = node("guard")
evidence = node("evidence")

ACT = guard.Verdict("act", 50101, "not listed in x; acting for uid 50101", "info", "not listed", False)
NO = evidence.Answer("no", "node-local: no step of another job in /var/spool/slurmd", (), False)


def build(user="alice", other=NO, verdict=ACT, parts=(), warnings=0):
    return record.build("epilog", node="n1", job="7", user=user, uid="50101", release="0123456789ab",
                        start=1800000000.1234, ms=42, other=other, guard=verdict, warnings=warnings, parts=parts)


def test_a_record_of_a_job_end_that_acted():
    rec = build(parts=[record.part_ran("40-lastuserjob-processes", 0, 3.7, {"kill": {"outcome": "done",
                                                                                       "signalled": 2}})])
    assert rec == {"v": 1, "stage": "epilog", "node": "n1", "job": 7, "user": "alice", "uid": 50101,
                   "release": "0123456789ab", "mode": "enforce", "start": 1800000000.123, "ms": 42,
                   "other": {"answer": "no", "why": NO.why},
                   "guard": {"answer": "act", "why": ACT.why, "listed": "not listed", "system": False},
                   "warnings": 0,
                   "parts": [{"part": "40-lastuserjob-processes", "ran": True, "rc": 0, "ms": 3,
                              "facts": {"kill": {"outcome": "done", "signalled": 2}}}]}
    assert reader.record_ok(json.loads(record.line(rec)))
    assert metrics.outcome(rec) == "acts"


def test_a_prolog_and_a_job_end_that_asked_no_guard():
    prolog = record.build("prolog", node="n1", job="7", user="alice", uid="50101", release="0123456789ab", start=1.0,
                          ms=1)
    assert prolog["other"] is None and prolog["guard"] is None and metrics.outcome(prolog) is None
    unknown = build(other=evidence.Answer("unknown", "squeue failed", (), False), verdict=None)
    assert unknown["guard"] == {"answer": "not asked", "why": ""} and metrics.outcome(unknown) == "unknowns"


def test_each_kind_of_record_is_built_whole_from_its_own_fields():
    """A record is built from named fields, those its kind declares
    (record.KINDS): a look between jobs carries its source, kill and counts
    from the start, and a field of another kind is refused, not written."""
    look = record.build("strays", node="n1", release="abc", start=1.5, ms=3, source="schedule", kill=True,
                        strays={"stray_users": 1}, off=["40-lastuserjob-processes"])
    assert [key for key in look if key not in ("v", "stage")] == [
        "node", "job", "user", "uid", "release", "mode", "start", "ms", "other", "guard", "warnings", "parts", "off",
        "source", "kill", "strays"]
    assert (look["job"], look["other"], look["source"], look["kill"]) == (None, None, "schedule", True)
    sweep = record.build("sweep", node="n1", release=None, start=1.5, ms=3, source="call")
    assert sweep["source"] == "call" and "kill" not in sweep and "strays" not in sweep
    for stage, field in (("epilog", {"source": "call"}), ("prolog", {"other": NO}), ("sweep", {"job": "7"}),
                         ("sweep", {"strays": {}}), ("strays", {"guard": ACT})):
        with pytest.raises(ValueError, match=f"a {stage} record has no"):
            record.build(stage, node="n1", release="abc", start=1.5, ms=3, **field)
    with pytest.raises(TypeError):
        record.build("epilog", "n1", "7", "alice", "50101", "abc", 1.5, 3, NO, ACT, 0, [])  # no positional fields


@pytest.mark.parametrize("name", ['x"y', "back\\slash", "new\nline", "-v", "\x1b[2J", "\u00e9\udcff", '"\\' * 1500])
def test_a_name_is_printable_ascii_cut_at_256_bytes(name):
    rec = build(user=name)
    raw = name.encode("utf-8", "surrogateescape")[:256].decode("latin-1")
    assert rec["user"] == "".join(ch if " " <= ch <= "~" else "?" for ch in raw)
    text = record.line(rec)
    assert text.isascii() and "\n" not in text and len(text) < record.RECORD_BYTES


def test_a_record_too_long_loses_its_facts_then_its_parts():
    big = {"sweep": {"removed": ["/tmp/" + "x" * 200] * 10}}
    rec = build(parts=[record.part_ran(f"{i:02d}-site-part", 0, 1, big) for i in range(10)])
    bare = json.loads(record.line(rec))
    assert bare["facts_dropped"] is True and all("facts" not in part for part in bare["parts"])
    many = build(parts=[record.part_skipped(f"{i:02d}-site-part-with-a-long-name-" + "y" * 100, "z" * 200)
                        for i in range(40)])
    none = json.loads(record.line(many))
    assert none["parts_dropped"] is True and none["parts"] == []
    assert len(record.line(many)) < record.RECORD_BYTES


def test_the_metrics_count_a_record_and_parse_back():
    rec = build(parts=[record.part_ran("42-lastuserjob-cleanup", 0, 1, {"cleanup": {"removed": 3, "rc": 0}}),
                       record.part_ran("45-stale-x-display", 0, 1, {"sweep": {"counts": {
                           "x_socket": {"removed": 1, "kept": 0}, "clsbd": {"removed": 2, "kept": 5}}}})],
                warnings=2)
    assert metrics.removed(rec) == {"user_files": 3, "x_socket": 1, "clsbd": 2}
    text = metrics.render_metrics({'epilog_job_ends_total{stage="epilog"}': 4, "epilog_acts_total": 1,
                                  'epilog_last_chain_seconds{stage="epilog"}': "0.042"})
    back = metrics.read_metrics(text.encode())
    assert back['epilog_job_ends_total{stage="epilog"}'] == 4 and back['epilog_job_ends_total{stage="prolog"}'] == 0
    assert back['epilog_last_chain_seconds{stage="epilog"}'] == "0.042"


@pytest.mark.parametrize("line,kept", [
    ("epilog_acts_total 12", True), ("epilog_acts_total 012", True), ("epilog_acts_total -1", False),
    ("epilog_acts_total 1e3", False), ("epilog_acts_total 1234567890123456", False), ("# HELP x y", False),
    ('epilog_last_chain_seconds{stage="epilog"} 1.5', False), ('epilog_last_chain_seconds{stage="epilog"} 1.500', True),
])
def test_the_metrics_read_back_only_what_they_wrote(line, kept):
    assert bool(metrics.read_metrics(line.encode())) == kept


def test_what_the_chain_left_or_did_another_way_reaches_the_metrics_and_the_report(tmp_path):
    """Part 40's processes left alone by saved uid and its rounds without
    kill(-1), a part run in the runner and one not run for want of a pid,
    part 42's IPC objects left for want of time and prolog 50's lines not
    granted: a counter each on the node, and a key of the report only
    where it is not 0."""
    kill = {"kill": {"outcome": "done", "signalled": 3, "saved_only": 2, "one_by_one": 1},
            "ran_in_runner": "no free pid"}
    rec = build(parts=[record.part_ran("40-lastuserjob-processes", 0, 1, kill),
                       record.part_skipped("42-lastuserjob-cleanup", "no free pid"),
                       record.part_ran("43-x", 0, 1, {"ipc": {"removed": {"shm": 1}, "bytes": 0, "kept": {},
                                                             "left": 4, "would": True}})])
    prolog = record.build("prolog", node="n1", job="8", user="je.kim", uid="50102", release="0123456789ab",
                          start=1.0, ms=1, parts=[record.part_ran("50-exclusive-ssh", 0, 1, {"allow": {
                              "op": "add", "change": "not granted", "why": "listed"}})])
    path = tmp_path / "epilog.prom"
    for each in (rec, prolog, build()):
        assert metrics.update_metrics(Trusting(), str(path), each)
    counters = metrics.read_metrics(path.read_bytes())
    assert {key: counters[key] for key in (
        "epilog_processes_left_saved_only_total", "epilog_kill_rounds_one_by_one_total",
        "epilog_parts_ran_in_runner_total", "epilog_parts_not_run_no_fork_total", "epilog_ipc_left_total",
        'epilog_ssh_not_granted_total{why="listed"}', 'epilog_ssh_not_granted_total{why="system_account"}')} == {
        "epilog_processes_left_saved_only_total": 2, "epilog_kill_rounds_one_by_one_total": 1,
        "epilog_parts_ran_in_runner_total": 1, "epilog_parts_not_run_no_fork_total": 1, "epilog_ipc_left_total": 4,
        'epilog_ssh_not_granted_total{why="listed"}': 1, 'epilog_ssh_not_granted_total{why="system_account"}': 0}
    assert "# HELP epilog_ssh_not_granted_total " in path.read_text()
    out = reader.summary([rec, prolog, rec, build()])
    assert {key: out[key] for key in (key for key, _, _ in metrics.SHORTFALLS)} == {
        "processes_left_saved_only": 4, "kill_rounds_one_by_one": 2, "parts_ran_in_runner": 2,
        "parts_not_run_no_fork": 2, "ipc_left": 8}
    assert out["ssh_lines_not_granted"] == {"listed": 1}
    quiet = reader.summary([build()])
    assert not set(quiet) & {"ssh_lines_not_granted", *(key for key, _, _ in metrics.SHORTFALLS)}


def test_every_why_of_a_line_not_granted_has_its_counter(tmp_path):
    """Each why prolog 50 gives for a line not granted (guard.spared_as of
    the grant's verdict: an alias's too) is a label of
    epilog_ssh_not_granted_total, and epilog.report counts it."""
    path = tmp_path / "epilog.prom"
    for why in ("listed", "system account", "lookup error", "unknown user", "not the account's name", "name too long"):
        prolog = record.build("prolog", node="n1", job="8", user="Alice", uid="50101", release="0123456789ab",
                              start=1.0, ms=1, parts=[record.part_ran("50-exclusive-ssh", 0, 1, {"allow": {
                                  "op": "add", "change": "not granted", "why": why}})])
        assert metrics.update_metrics(Trusting(), str(path), prolog)
        label = why.replace(" ", "_").replace("'", "")
        assert metrics.read_metrics(path.read_bytes())[metrics.NOT_GRANTED_METRIC % label] == 1
        assert reader.summary([prolog])["ssh_lines_not_granted"] == {label: 1}


def test_every_metric_the_writer_emits_is_in_the_operators_table():
    """docs/records-and-metrics.md's table names every family the textfile
    holds (an operator alerting on a counter finds it there)."""
    from pathlib import Path
    table = (Path(__file__).resolve().parents[2] / "docs" / "records-and-metrics.md").read_text()
    text = metrics.render_metrics({"epilog_release_info": 1})
    families = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    assert len(families) > 20
    missing = sorted(f for f in families if f"`{f}" not in table
                     and not (f.startswith("epilog_would_") and "`epilog_would_<x>`" in table))
    assert not missing, f"docs/records-and-metrics.md's metrics table lacks {missing}"
