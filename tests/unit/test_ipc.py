"""System V IPC at a user's last job end, as decisions: ipc.decide() over
every kind of row /proc/sysvipc gives (hostile ones included: an object
given away with IPC_SET, a row that is not numbers, thousands of objects,
a set of hundreds of semaphores), and the record's and metrics' counts. Pure: rows as text, processes as a
table. The real objects and job ends are tests/node/test_ipc.py's and the
slurm tier's."""
import json

import pytest

from tests.unit.conftest import node

ipc = node("ipc")
record = node("record")
metrics = node("metrics")
reader = node("reader")

ALICE, BOB, OPERATOR = 50101, 50109, 50105
# a system account below UID_MIN, and one in Debian's static range above UID_MAX
DAEMON, SYSTEM_HIGH = 1, 60500
SHM = ("       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      "
       "dtime      ctime                   rss                  swap\n")
SEM = "       key      semid perms      nsems   uid   gid  cuid  cgid      otime      ctime\n"
MSG = ("       key      msqid perms      cbytes       qnum lspid lrpid   uid   gid  cuid  cgid      stime      rtime      "
       "ctime\n")
# pid: (real uid, when it started); 400 is bob's process that took a pid
# after the objects' last use (1700000000 in the rows below)
LIVE = {100: (ALICE, 1600000000), 200: (BOB, 1600000000), 300: (OPERATOR, 1600000000),
        400: (BOB, 1700000000 + ipc.SLACK + 1)}


def live(pid, by=None):
    """ipc.live_uid over the table: the real uid of a live process that
    started no later than BY and the slack."""
    uid, started = LIVE.get(pid, (None, 0))
    return None if by is not None and started > by + ipc.SLACK else uid


def shm(ident, uid, cuid, nattch, size=4 << 20):
    return f"0 {ident} 600 {size} 100 100 {nattch} {uid} {uid} {cuid} {cuid} 0 0 1700000000 0 0\n"


def sem(ident, uid, cuid, nsems=2):
    return f"0 {ident} 600 {nsems} {uid} {uid} {cuid} {cuid} 0 1700000000\n"


def msg(ident, uid, cuid, lspid=0, lrpid=0):
    return f"0 {ident} 600 10 1 {lspid} {lrpid} {uid} {uid} {cuid} {cuid} 0 0 1700000000\n"


def one(kind, text, waiting=False):
    rows = ipc.rows(text)
    assert len(rows) == 1
    return ipc.decide(kind, rows[0], ALICE, live, waiting)


@pytest.mark.parametrize("kind, text, waiting, action", [
    ("shm", SHM + shm(1, ALICE, ALICE, 0), False, "remove"),
    ("shm", SHM + shm(1, ALICE, ALICE, 2), False, "keep"),
    # created by alice, given away (IPC_SET): hers, whoever owns it now (the
    # owner never keeps it, nor makes it another account's)
    ("shm", SHM + shm(1, BOB, ALICE, 0), False, "remove"),
    ("shm", SHM + shm(1, 0, ALICE, 0), False, "remove"),
    ("shm", SHM + shm(1, OPERATOR, ALICE, 0), False, "remove"),
    ("sem", SEM + sem(2, SYSTEM_HIGH, ALICE), False, "remove"),
    # created by an operator or root, given to alice: not hers
    ("shm", SHM + shm(1, ALICE, OPERATOR, 0), False, None),
    ("msg", MSG + msg(3, ALICE, 0), False, None),
    ("shm", SHM + shm(1, BOB, BOB, 0), False, None),
    ("sem", SEM + sem(2, ALICE, ALICE), False, "remove"),
    ("sem", SEM + sem(2, ALICE, ALICE), True, "keep"),  # a live process waits on it
    ("msg", MSG + msg(3, ALICE, ALICE), False, "remove"),
    ("msg", MSG + msg(3, ALICE, ALICE, lspid=100, lrpid=300), False, "keep"),
    ("msg", MSG + msg(3, ALICE, ALICE, lspid=4242, lrpid=-1), False, "remove"),
    # bob's process took the pid that last sent to it after that send: a
    # number handed out again, not its user
    ("msg", MSG + msg(3, ALICE, ALICE, lspid=400), False, "remove"),
], ids=["unattached", "attached", "given-to-an-ordinary-account", "given-to-root", "given-to-an-operator",
        "given-to-a-system-account", "created-by-an-operator", "created-by-root", "not-hers", "sem",
        "sem-waited-on", "msg", "msg-read-by-an-operator", "msg-dead-pids",
        "msg-pid-taken-after-its-use"])
def test_each_object_is_judged_by_its_row(kind, text, waiting, action):
    verdict = one(kind, text, waiting)
    assert (verdict.action if verdict else None) == action, verdict
    if verdict:
        assert verdict.reason


@pytest.mark.parametrize("text", [
    SHM + "0 1 600 x 1 1 0 50101 1 50101 1 0 0 0 0 0\n",  # a field that is not a number
    SHM + "0 1 600\n",  # too few
    SHM + shm(1, ALICE, ALICE, 0).strip() + " 7\n",  # too many
    "",
    "garbage\n\n\n",
])
def test_a_row_that_is_not_the_kernels_is_no_object(text):
    assert ipc.rows(text) == []


def test_thousands_of_objects_are_judged_each_once():
    text = SHM + "".join(shm(i, ALICE, ALICE, i % 2) for i in range(4096))
    verdicts, left = ipc.judge_all(ALICE, read=lambda kind: ipc.rows(text) if kind == "shm" else [],
                                   live=live, waiting=lambda ident, n, deadline: False)
    assert left == 0
    assert len(verdicts) == 4096 and sum(v.action == "remove" for v in verdicts) == 2048
    assert all(v.bytes == 4 << 20 for v in verdicts)


def test_the_record_and_the_metrics_count_removed_and_kept_by_why():
    fact = {"removed": {"shm": 2, "sem": 1, "msg": 0}, "bytes": 8 << 20,
            "kept": {"attached": 1, "last used by a live process of another uid": 1, ipc.WAITED_ON: 1,
                     "owned by another account that is never acted for": 1, "changed since it was judged": 1}}
    rec = record.build("epilog", node="n1", job="7", user="alice", uid="50101", release="abc", start=1.8e9, ms=10,
                       parts=[record.part_ran("42-lastuserjob-cleanup", 0, 1, {"cleanup": {"removed": 0, "rc": 0},
                                                                         "ipc": fact})])
    rec = json.loads(record.line(rec))
    assert metrics.ipc(rec) == {"removed": {"shm": 2, "sem": 1, "msg": 0}, "bytes": 8 << 20,
                               "kept": {"attached": 1, "in_use": 2, "other_owner": 1, "other": 1}}
    summary = reader.summary([rec, rec])
    assert summary["ipc"]["removed"]["shm"] == 4 and summary["ipc"]["bytes"] == 16 << 20
    text = metrics.render_metrics({metrics.IPC_METRIC % "shm": 3, metrics.IPC_BYTES_METRIC: 12})
    back = metrics.read_metrics(text.encode())
    assert back['epilog_ipc_removed_total{kind="shm"}'] == 3 and back["epilog_ipc_bytes_removed_total"] == 12
    assert back['epilog_ipc_kept_total{reason="in_use"}'] == 0


def test_a_set_whose_waiters_cannot_be_told_is_kept():
    row = ipc.rows(SEM + sem(2, ALICE, ALICE))[0]
    assert ipc.decide("sem", row, ALICE, live, None).action == "keep"


def test_a_sets_last_pids_and_times_are_not_asked():
    """A set is judged by whether a process waits on it, never by its
    last pids or times, which its creator moves (an IPC_SET, a semop of
    her own) and the kernel hands out again: judge_all asks for the
    waiters of all 300 semaphores, and nothing else; whoever's live
    process holds a pid like a semaphore's last one, the set goes when
    nobody waits on it."""
    row = ipc.rows(SEM + sem(2, ALICE, ALICE, nsems=300))[0]
    asked = []

    def waiting(ident, nsems, deadline):
        asked.append((ident, nsems))
        return False

    def no_live(pid, by=None):
        raise AssertionError(f"a set's last pid was asked for: {pid}")
    verdicts, left = ipc.judge_all(ALICE, read=lambda kind: [row] if kind == "sem" else [], live=no_live,
                                   waiting=waiting)
    assert asked == [(2, 300)] and left == 0 and [v.action for v in verdicts] == ["remove"]


def test_a_set_not_read_whole_by_the_deadline_is_left_for_want_of_time():
    """Never judged by some of its semaphores: a set whose reading the
    deadline cut is left (counted, judged again later), and the objects
    after it too; sem_waiting says LATE before its first count past it."""
    rows = ipc.rows(SEM + sem(2, ALICE, ALICE, nsems=32000) + sem(3, ALICE, ALICE))
    verdicts, left = ipc.judge_all(ALICE, read=lambda kind: rows if kind == "sem" else [], live=live,
                                   waiting=lambda ident, nsems, deadline: ipc.LATE if nsems > 2 else False)
    assert [v.id for v in verdicts] == [3] and left == 1
    assert ipc.sem_waiting(2, 32000, deadline=0) == ipc.LATE


def test_judging_stops_at_its_deadline_and_counts_what_it_left():
    text = SHM + "".join(shm(i, ALICE, ALICE, 0) for i in range(100))
    verdicts, left = ipc.judge_all(ALICE, read=lambda kind: ipc.rows(text) if kind == "shm" else [],
                                   live=live, waiting=lambda ident, n, deadline: False, deadline=0)
    assert verdicts == [] and left == 100


def test_a_gift_is_its_creators_at_the_job_end_and_between_jobs_alike():
    """Alice gives a segment, a set and a queue to root, an operator and
    system accounts (IPC_SET): between jobs the look judges them as hers
    (holders: their creator), and her job end and that look (both
    judge_all for her uid) remove them all. What root or an operator made
    and gave her is not hers at either: its creator is the one looked at,
    and the guard never acts for them."""
    texts = {"shm": SHM + shm(1, 0, ALICE, 0) + shm(2, OPERATOR, ALICE, 0) + shm(3, ALICE, OPERATOR, 0),
             "sem": SEM + sem(4, DAEMON, ALICE) + sem(5, ALICE, 0),
             "msg": MSG + msg(6, SYSTEM_HIGH, ALICE)}

    def read(kind):
        return ipc.rows(texts[kind])
    assert ipc.holders(read) == {ALICE, OPERATOR, 0}
    verdicts, left = ipc.judge_all(ALICE, read=read, live=live, waiting=lambda ident, n, deadline: False)
    assert left == 0 and sorted((v.id, v.action) for v in verdicts) == [(1, "remove"), (2, "remove"),
                                                                          (4, "remove"), (6, "remove")]


def test_rows_of_other_creators_cost_only_a_split():
    text = SHM + shm(1, ALICE, ALICE, 0) + shm(2, BOB, BOB, 0) + shm(3, BOB, ALICE, 0) + shm(4, ALICE, 0, 0)
    assert [row["shmid"] for row in ipc.rows(text, ALICE)] == [1, 3]
    assert len(ipc.rows(text)) == 4


def test_the_holders_between_jobs_are_the_creators():
    """Whose objects a look between jobs judges: their creators (an object
    alice gave to bob is one of hers to look at; the owner a creator may set
    to anything names nobody), from the rows the kernel gives; a garbage row
    names nobody."""
    texts = {"shm": SHM + shm(1, BOB, ALICE, 0) + "0 1 600 x y\n", "sem": SEM + sem(2, 0, 0),
             "msg": MSG + msg(3, OPERATOR, OPERATOR)}
    assert ipc.holders(lambda kind: ipc.rows(texts[kind])) == {ALICE, 0, OPERATOR}
    # the uid prefilter is a substring test: a uid that is only part of another column is no match
    assert ipc.rows(SHM + shm(1, BOB, BOB, 0, size=501010), ALICE) == []
    assert [row["shmid"] for row in ipc.rows(SHM + shm(1, BOB, ALICE, 0) + shm(2, BOB, BOB, 0), ALICE)] == [1]


def test_a_last_user_that_cannot_be_read_stops_the_look_and_what_went_before_is_told(monkeypatch):
    """ipc.clean: a process that last used an object and cannot be read
    (live_uid raises: not gone, unreadable; tests/unit/test_system.py makes
    a real EMFILE) judges nothing more and removes nothing more, and the
    objects let go before it are in the fact, with why the look stopped,
    and in part 42's line."""
    import errno  # pylint: disable=import-outside-toplevel
    import time  # pylint: disable=import-outside-toplevel

    tables = {"shm": ipc.rows(SHM + shm(1, ALICE, ALICE, 0)), "sem": [],
              "msg": ipc.rows(MSG + msg(3, ALICE, ALICE, lspid=100) + msg(4, ALICE, ALICE))}
    asked = []

    def unreadable(pid, by=None):
        asked.append(pid)
        raise OSError(errno.EMFILE, "Too many open files")

    fact = ipc.clean(ALICE, time.monotonic() + 60, test=True, read=tables.get, live=unreadable)
    assert fact["removed"] == {"shm": 1, "sem": 0, "msg": 0} and fact["bytes"] == 4 << 20
    assert asked == [100] and "Too many open files" in fact["unreadable"]
    lines = []
    ctx = type("Ctx", (), {"settings": {"mode": "observe"}, "deadline": time.monotonic() + 60,
                           "fact": lambda self, key, value: None, "log": lambda self, *line: lines.append(line)})()
    monkeypatch.setattr(ipc, "clean", lambda uid, deadline, test=False: fact)
    node("parts").clean_ipc(ctx, ALICE)
    assert lines[0][0] == "warning" and "1 segment(s)" in lines[0][1] and "stopped: a process" in lines[0][1]
