"""The last-job evidence's decision table (epilog_node/evidence.py):
decide() called directly with the facts given as data (the marks, the user's
lock, the spool's step sockets, root's slurmstepd processes, squeue's lines),
each row an answer (yes, no, unknown) and its evidence. A fact decide()
should not need is not there to ask (asking it fails the row): a node-local
answer never asks the controller. No root, no processes, no files: the node
and slurm tiers run the same decisions on real ones."""
import pytest

from tests.unit.conftest import node

evidence = node("evidence")
UID, JOB, NODE = "50101", "7", "n1"
NOW = 1_800_000_000


class Facts:
    """The facts of a row: every one not given fails when asked."""

    def __init__(self, marks_trusted=True, locked=True, marks=(), spool_trusted=True, spool=(), found=1, stepds=None,
                 held=None, squeue=None, states=None, marked=(), stamped=False, since=None):
        self.marks_trusted, self.locked, self.spool_trusted = marks_trusted, locked, spool_trusted
        self.run_dir, self.spool_dir, self.node, self.now = "/run/slurm-epilog", "/var/spool/slurmd", NODE, NOW
        self._marks, self._spool, self._found, self._stepds = list(marks), list(spool), found, stepds or {}
        self._held, self._squeue, self._states = held, squeue, states or {}
        self._marked, self._stamped, self._since = set(marked), stamped, since
        self.asked = []

    def marks(self, uid, job):
        self.asked.append("marks")
        return [(jid, state, start) for jid, state, start in self._marks if jid != job]

    def stepds(self, job):
        self.asked.append("stepds")
        return self._found, self._stepds

    def held_by_stepd(self, pids, uid):
        self.asked.append("held")
        return self._held

    def spool_jobs(self):
        self.asked.append("spool")
        return self._spool

    def squeue(self):
        self.asked.append("squeue")
        if self._squeue is None:
            raise AssertionError("squeue asked for a node-local answer")
        return self._squeue

    def mark_state(self, uid, jid):
        return self._states.get(jid)

    def marked(self, jid):
        return jid in self._marked

    def stamped_complete(self):
        return self._stamped

    def since(self):
        return self._since


def down(why="squeue failed or timed out (rc=1)"):
    return None, why


# id, the facts, the answer, a piece of its evidence
ROWS = [
    ("lock-held-by-another-chain", Facts(locked=False), "unknown",
     "cannot lock /run/slurm-epilog/lock.50101 (a prolog or epilog of the user holds it)"),
    ("a-fresh-mark-of-another-job", Facts(marks=[("8", "running", NOW - 5)]), "yes",
     "node-local: job 8 of uid 50101 started here 5 s ago and has not ended"),
    ("a-job-still-in-its-prolog-has-only-its-mark", Facts(marks=[("8", "running", NOW)], spool=["9"]), "yes",
     "job 8 of uid 50101 started here 0 s ago"),
    ("a-done-mark-is-an-ended-job", Facts(marks=[("8", "done", 0)]), "no",
     "node-local: no step of another job in /var/spool/slurmd"),
    ("the-jobs-own-mark-is-no-other-job", Facts(marks=[(JOB, "running", NOW)]), "no", "no step of another job"),
    ("an-old-mark-whose-job-has-a-slurmstepd", Facts(marks=[("5", "running", 1)], found=0, stepds={900: "5"}),
     "yes", "node-local: job 5 of uid 50101 runs here (root's slurmstepd of it)"),
    ("an-old-mark-the-controller-cannot-confirm", Facts(marks=[("5", "running", 1)], squeue=down()), "unknown",
     "job(s) 5 of uid 50101 marked as started here long ago, with no slurmstepd; the controller cannot confirm "
     "they ended: squeue failed"),
    ("an-old-mark-the-controller-still-runs", Facts(marks=[("5", "running", 1)], squeue=(["5 RUNNING 1 50101"], None)),
     "yes", "squeue: job 5 of uid 50101 on n1 (RUNNING)"),
    ("an-old-empty-mark-is-running", Facts(marks=[("5", "running", 0)], squeue=down()), "unknown", "job(s) 5"),
    ("untrusted-marks-untrusted-spool-no-slurmstepd", Facts(marks_trusted=False, spool_trusted=False), "no",
     "node-local: no slurmstepd of root on this node"),
    ("another-jobs-slurmstepd-runs-the-users-process",
     Facts(spool=["9"], found=0, stepds={900: "9"}, held=(901, 900)), "yes",
     "node-local: root's slurmstepd 900 of another job runs process 901 of uid 50101"),
    ("other-jobs-here-none-of-the-user-marks-complete",
     Facts(spool=["9"], found=0, stepds={900: "9"}, stamped=True), "no",
     "node-local: no other job of uid 50101 marked here, and no slurmstepd of another job runs a process of uid"),
    ("marks-shown-complete-by-the-controller",
     Facts(spool=["9"], found=0, stepds={900: "9"}, since=NOW - 3600, marked={"9"},
           squeue=([f"9 RUNNING {NOW - 60} 50102", "10 PENDING 0 50103"], None)), "no", "no other job of uid"),
    ("a-job-from-before-the-marks-without-one",
     Facts(spool=["9"], found=0, stepds={900: "9"}, since=NOW - 60,
           squeue=([f"9 RUNNING {NOW - 3600} 50102"], None)), "no", "squeue: no other job of uid 50101 on n1"),
    ("untrusted-marks-the-controller-has-another-job",
     Facts(marks_trusted=False, spool_trusted=False, found=0, squeue=(["7 COMPLETING 1 50101", "8 SUSPENDED 1 50101"],
                                                                      None)), "yes",
     "squeue: job 8 of uid 50101 on n1 (SUSPENDED)"),
    ("the-controller-down", Facts(marks_trusted=False, spool_trusted=False, found=0, squeue=down()), "unknown",
     "squeue failed or timed out (rc=1)"),
    ("the-controllers-ended-jobs-hold-nothing",
     Facts(marks_trusted=False, spool_trusted=False, found=0,
           squeue=(["8 COMPLETED 1 50101", "9 CANCELLED 1 50101", "10 RUNNING 1 50102"], None)), "no",
     "squeue: no other job"),
    ("a-line-the-runner-cannot-read-could-be-one",
     Facts(marks_trusted=False, spool_trusted=False, found=0, squeue=(["x running? -1 y"], None)), "yes",
     "squeue: job unknown of uid unknown on n1 (UNKNOWN)"),
    ("a-job-whose-epilog-began-here-has-ended",
     Facts(marks_trusted=True, spool=["9"], found=2, squeue=(["8 COMPLETING 1 50101"], None), states={"8": "done"}),
     "no", "squeue: no other job"),
]


@pytest.mark.parametrize("facts,answer,why", [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_the_last_job_decision_row_by_row(facts, answer, why):
    got = evidence.decide(JOB, UID, facts, chain_timeout=110)
    assert got.answer == answer, got
    assert why in got.why, got


def test_a_mark_the_controller_no_longer_has_is_set_aside():
    facts = Facts(marks=[("5", "running", 1), ("6", "running", 2)], squeue=(["9 RUNNING 1 50102"], None))
    got = evidence.decide(JOB, UID, facts, chain_timeout=110)
    assert got.answer == "no" and got.set_aside == ("5", "6") and got.why == "squeue: no other job of uid 50101 on n1"


def test_marks_shown_complete_once_get_their_stamp():
    facts = Facts(spool=["9"], found=0, stepds={900: "9"}, since=NOW - 3600, marked={"9"},
                  squeue=([f"9 RUNNING {NOW - 60} 50102"], None))
    assert evidence.decide(JOB, UID, facts, chain_timeout=110).complete is True
    stamped = Facts(spool=["9"], found=0, stepds={900: "9"}, stamped=True)
    assert evidence.decide(JOB, UID, stamped, chain_timeout=110).complete is False


def test_a_node_local_answer_never_asks_the_controller():
    for facts in (Facts(marks=[("8", "running", NOW)]), Facts(), Facts(marks_trusted=False, spool_trusted=False)):
        evidence.decide(JOB, UID, facts, chain_timeout=110)
        assert "squeue" not in facts.asked


@pytest.mark.parametrize("line,fields", [
    ("7 RUNNING 1700000000 50101", ("7", "RUNNING", 1700000000, "50101")),
    ("7 RUNNING", ("7", "RUNNING", 0, "unknown")),
    ("x y z w", ("unknown", "UNKNOWN", 0, "unknown")),
    ("7 OUT_OF_MEMORY N/A 50101", ("7", "OUT_OF_MEMORY", 0, "50101")),
    ("\u0667 RUNNING 1 \u0661", ("unknown", "RUNNING", 1, "unknown")),
    ("7 Running 1 50101", ("7", "UNKNOWN", 1, "50101")),
])
def test_squeue_fields_are_each_checked_and_read_cautiously(line, fields):
    assert evidence.squeue_fields(line) == fields


@pytest.mark.parametrize("content,state,start", [
    (b"running 1700000000\n", "running", 1700000000),
    (b"done\n", "done", 0),
    (b"", "running", 0),
    (b"runn", "running", 0),
    (b"done later\n", "done", 0),
    (b"running x\n", "running", 0),
], ids=["running", "done", "empty", "torn", "done-with-more", "running-no-time"])
def test_only_done_means_ended(tmp_path, content, state, start):
    mark = tmp_path / "50101.8"
    mark.write_bytes(content)
    assert evidence.read_mark(str(mark)) == (state, start)
    assert evidence.read_mark(str(tmp_path / "missing")) == ("running", 0)
