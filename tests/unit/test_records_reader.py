"""The decision-record reader behind epilog.report and explain (the node
program's record.py, which the module loads): which lines it trusts, how it
reads since=, what each record decided, and the report's counts. Pure: no
root, no Salt loader. Reading real records that real job ends wrote is
tests/salt/test_report.py's."""
import datetime

import pytest

from tests.unit.conftest import node

records = node("record")
reader = node("reader")

GOOD = {"v": 1, "stage": "epilog", "node": "n1", "job": 7, "user": "alice", "uid": 50101, "start": 1.8e9, "ms": 40,
        "other": {"answer": "no", "why": ""}, "guard": {"answer": "act", "why": "not listed in x"}, "warnings": 0,
        "parts": [{"part": "40-lastuserjob-processes", "ran": True, "rc": 0, "ms": 5,
                   "facts": {"kill": {"outcome": "killed", "signalled": 3}}}]}


@pytest.mark.parametrize("change, trusted", [
    ({}, True),
    ({"v": 2}, False),
    ({"parts": {}}, False),
    ({"other": ["no"]}, False),
    ({"start": float("inf")}, False),
    ({"ms": 1e300}, False),
    ({"job": True}, False),
    ({"uid": "0"}, False),
    ({"parts": [{"ran": True}]}, False),
    ({"parts": [{"part": "40", "facts": ["x"]}]}, False),
    ({"other": None, "guard": None, "warnings": None}, True),
], ids=["good", "schema-2", "parts-not-a-list", "other-not-a-dict", "infinite-start", "huge-ms", "bool-job",
        "string-uid", "part-without-name", "facts-not-a-dict", "nulls"])
def test_a_line_is_trusted_only_in_the_schemas_types(change, trusted):
    assert reader.record_ok({**GOOD, **change}) is trusted


def test_non_records_are_not_records():
    for value in (None, [], "x", 1, {"v": 1}):
        assert reader.record_ok(value) is False


NOW = 1.8e9


@pytest.mark.parametrize("since, expect", [
    ("90s", NOW - 90), ("30m", NOW - 1800), ("12h", NOW - 43200), ("1d", NOW - 86400), ("2w", NOW - 1209600),
    (1.7e9, 1.7e9), ("2026-12-01T10:00:00Z", 1796119200.0), ("2026-12-01T11:00+01:00", 1796119200.0),
    ("2026-12-01T05:00:00-0500", 1796119200.0),
    (datetime.datetime(2026, 12, 1, 10, 0, tzinfo=datetime.timezone.utc), 1796119200.0),
])
def test_since_is_a_duration_an_epoch_or_a_time(since, expect):
    assert reader.epoch(since, NOW) == expect


@pytest.mark.parametrize("since, message", [
    (600, "is not an epoch"),           # the CLI reads 10:00 as 600
    (1e12, "is not an epoch"),
    ("yesterday-ish", "since must be a duration"),
    ("12y", "since must be a duration"),
])
def test_since_refuses_what_is_none_of_them(since, message):
    with pytest.raises(reader.RecordError, match=message):
        reader.epoch(since, NOW)


@pytest.mark.parametrize("other, guard, decided", [
    ({"answer": "unknown", "why": "squeue failed (rc 1) for uid 50101"}, {},
     ("unknown", "squeue failed (rc N) for uid N")),
    ({"answer": "yes", "why": "job 8"}, {}, ("spared", "another job of the user on this node")),
    ({"answer": "no"}, {"answer": "act", "why": "not listed in /x"}, ("acted", None)),
    ({"answer": "no"}, {"answer": "spare", "why": "listed in /etc/slurm/localusers.backup"},
     ("spared", "listed in localusers")),
    ({"answer": "no"}, {"answer": "spare", "why": "not listed, but uid 5 is a system account"},
     ("spared", "root or a system account")),
    ({"answer": "no"}, {"answer": "spare", "why": "localusers lookup failed (unreadable)"},
     ("spared", "localusers lookup failed")),
    ({"answer": "no"}, {"answer": "spare", "why": "'x' the user is unknown, doing nothing"},
     ("spared", "the user is unknown")),
    ({}, {"answer": "not asked"}, (None, None)),
], ids=["unknown-numbers-folded", "another-job", "acted", "listed", "system", "lookup-error", "unknown-user",
        "nothing-at-stake"])
def test_each_record_has_one_decision(other, guard, decided):
    assert reader.decision({**GOOD, "other": other, "guard": guard}) == decided


def test_the_summary_counts_each_job_end_once():
    sweep = {"part": "45-stale-x-display", "ran": True, "rc": 0, "ms": 9, "facts": {"sweep": {"counts": {
        "x_socket": {"removed": 2, "kept": 1}, "clsbd": {"removed": 1, "kept": 0}, "bogus": {"removed": 9}}}}}
    chosen = [
        {**GOOD, "parts": GOOD["parts"] + [sweep]},
        {**GOOD, "job": 8, "user": "je.kim", "ms": 90, "guard": {"answer": "spare", "why": "listed in /x"},
         "parts": [{"part": "42-lastuserjob-cleanup", "ran": True, "facts": {"cleanup": {"removed": 4}}}],
         "warnings": 2},
        {**GOOD, "job": 9, "stage": "prolog", "parts": []},
    ]
    out = reader.summary(chosen, start=None)
    assert (out["records"], out["job_ends"], out["prologs"], out["acted"]) == (3, 2, 1, 1)
    assert out["users_acted_on"] == ["alice"] and out["spared"] == {"listed in localusers": 1}
    assert out["processes_signalled"] == 3 and out["sweeps"] == 1 and out["warnings"] == 2
    assert out["residue"]["removed"] == {"x_socket": 2, "x_lock": 0, "clsbd": 1, "scratch": 0, "user_files": 4}
    assert out["residue"]["kept"]["x_socket"] == 1
    assert out["slowest"]["job"] == 8 and out["slowest"]["ms"] == 90


def test_choose_by_time_user_and_job():
    chosen = [GOOD, {**GOOD, "job": 8, "user": "je.kim", "start": NOW + 10}, {**GOOD, "start": None}]
    assert reader.choose(chosen, start=NOW + 1) == [chosen[1]]
    assert reader.choose(chosen, user="alice") == [chosen[0], chosen[2]]
    assert reader.choose(chosen, job="8") == [chosen[1]]


def test_a_symlink_at_the_records_place_is_never_followed(tmp_path):
    (tmp_path / "elsewhere").write_text('{"v":1,"parts":[]}\n')
    (tmp_path / "records.jsonl").symlink_to(tmp_path / "elsewhere")
    found, problems = reader.read(str(tmp_path / "records.jsonl"))
    assert found == [] and any("not read" in p for p in problems), problems


def test_a_report_says_whether_the_records_reach_back_to_since():
    """since=7d over a node whose records begin two days ago: the counts are
    two days', and the report says so (reaches_since false, oldest_record)."""
    held = [{**GOOD, "start": NOW - 2 * 86400}, {**GOOD, "job": 8, "start": NOW - 3600}, {**GOOD, "start": None}]
    first = reader.oldest(held)
    assert first == NOW - 2 * 86400
    week = reader.summary(reader.choose(held, start=NOW - 7 * 86400), NOW - 7 * 86400, first)
    assert week["reaches_since"] is False and week["oldest_record"] == reader.when(NOW - 2 * 86400)
    day = reader.summary(reader.choose(held, start=NOW - 86400), NOW - 86400, first)
    assert day["reaches_since"] is True and day["records"] == 1
    assert reader.summary([], None, None)["reaches_since"] is None
    assert reader.summary([], NOW, reader.oldest([]))["reaches_since"] is False
