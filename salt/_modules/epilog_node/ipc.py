"""System V IPC residue: shared memory segments, semaphore sets and message
queues a user's jobs leave in the node's IPC namespace, removed at the
user's last job end (part 42, under the same guard and last-job evidence as
parts 40 and 42's files).

decide() is the decision, a function of its facts: a row of
/proc/sysvipc/{shm,sem,msg} (readable by everyone, written by the kernel),
the job's uid, and which processes live as which uid. An object is the
user's when the user created it (its cuid): its owner (uid), which its
creator may set to any account with IPC_SET, root's, an operator's or a
system account's included, neither keeps it nor makes it another
account's. The same rule between jobs (holders(): the accounts whose
objects a look judges are their creators). Of the user's objects:

* a segment stays while any process is attached to it (nattch > 0);
* a semaphore set stays while a process waits on one of its semaphores
  (GETNCNT, GETZCNT: the kernel's count of the processes blocked in semop
  on it now, every semaphore read, however many the set has; a stopped
  one is not counted, nor one that holds a semaphore without waiting),
  the kernel's own word that someone uses it now, and one no process of
  hers can make another account's. At a job end her processes are dead
  by part 42 (part 40); where they are not (part 40 off or bound, a look
  between jobs that kills nothing), one of hers that waits keeps the set
  too: it stays rather than goes. A set's last pids (sempid) are not
  evidence: each is a number the
  kernel hands out again, and the set's times (otime, ctime) are the
  whole set's, which its creator moves when she likes (a semop of her own
  on another semaphore, an IPC_SET that changes nothing): a user who had
  her fork loop's children touch a semaphore each, every free pid in
  turn, would hold her sets for as long as any process of anybody's that
  took one of those numbers during her job lived;
* a queue stays while the last process that sent to it or received from
  it (lspid, lrpid) is a live process of another uid that started no
  later than that use (stime, rtime: the kernel sets each with its pid,
  in the same call): someone else still uses it. A process that began
  after the last use cannot be the one that used it (the times are whole
  seconds: SLACK seconds of slack), and neither is this process or its
  parent;
* a set whose semaphores cannot all be read before the deadline is left
  for want of time (counted as left, and judged again at a later job end
  or between jobs), never judged by some of them;
* everything else of the user's goes.

remove() acts on one verdict: IPC_STAT right before IPC_RMID, and the
object goes only while its key, owner, creator and change time are still
the ones judged (and a segment's attach count still 0, no process waiting
on a set, a queue's last users still no live process of another uid): an
id that now names something else, or an object changed or used since, is
left alone. The offsets are those of x86_64 glibc's structures; on another
machine nothing is removed (each object is kept, and says so).
"""
import os
import time

from . import system

KINDS = ("shm", "sem", "msg")
PROC = "/proc/sysvipc/"
# IPC_RMID, IPC_STAT, GETNCNT, GETZCNT
IPC_RMID, IPC_STAT, GETNCNT, GETZCNT = 0, 2, 14, 15
# sem_waiting() reads every semaphore of a set, however many it has, and
# looks at the clock (the deadline) before each run of this many
SEMS_PER_LOOK = 4096
# what sem_waiting() answers, and remove() says, when the deadline came
# before every semaphore of a set was read: the set is counted as left
LATE = "left for want of time"
# why a set stays (decide(), remove())
WAITED_ON = "waited on by a live process"
UNTOLD = "whether a process waits on it cannot be told"
# where the x86_64 glibc structures keep the fields IPC_STAT is checked by
_KEY, _UID, _CUID = 0, 4, 12
_CTIME = {"shm": 72, "sem": 64, "msg": 64}
_NATTCH = 88
_STAT_BYTES = 256

Verdict = system.fields("Verdict", "kind id key uid cuid ctime bytes action reason job_uid nsems")


def rows(text, uid=None):
    """The rows of a /proc/sysvipc file's TEXT as {column: value}, by its
    header's names (whole numbers; a row that is not one is skipped); with
    UID, only those it created (cuid: decide()'s rule; most others cost a
    substring test, not a split)."""
    lines = text.split("\n")
    if not lines:
        return []
    names = lines[0].split()
    creator = names.index("cuid") if "cuid" in names else -1
    want = None if uid is None else str(uid)
    out = []
    for line in lines[1:]:
        if want is not None and want not in line:
            continue  # its cuid cannot be the uid (a substring test costs far less than a split)
        fields = line.split()
        if len(fields) != len(names):
            continue
        if want is not None and (creator < 0 or fields[creator] != want):
            continue
        try:
            out.append({name: int(value) for name, value in zip(names, fields)})
        except ValueError:
            continue
    return out


# a process that started up to this many seconds after an object's last
# use may still be its user (the kernel keeps that time in whole seconds,
# and a process's start is read to a tick from a boot time in seconds)
SLACK = 2


def used_at(row, which="lspid"):
    """When a queue's last pids were recorded: its stime for its lspid,
    rtime for its lrpid (its ctime when those are 0: none yet, and the pid
    is 0 too)."""
    return row.get("stime" if which == "lspid" else "rtime", 0) or row.get("ctime", 0)


def decide(kind, row, uid, live, waiting=False):
    """A Verdict for one object of KIND (shm, sem, msg) whose /proc row is
    ROW, at the end of UID's last job, or None when it is not the user's
    (UID did not create it: whoever owns it now). LIVE(pid, by) -> the real
    uid of a live process PID that started no later than BY (an epoch, the
    queue's last use) and SLACK, or None; WAITING: whether a process waits
    on one of a semaphore set's semaphores, every one of them read
    (sem_waiting; None: it cannot be told, and the set is kept)."""
    ident = row.get("shmid" if kind == "shm" else "semid" if kind == "sem" else "msqid")
    owner, creator = row.get("uid"), row.get("cuid")
    if ident is None or owner is None or creator != uid:
        return None
    size = row.get("size", 0) if kind == "shm" else row.get("cbytes", 0) if kind == "msg" else 0

    def verdict(action, reason):
        return Verdict(kind, ident, row.get("key", 0), owner, creator, row.get("ctime", 0), max(size, 0), action,
                       reason, uid, row.get("nsems", 0))

    if kind == "shm":
        if row.get("nattch", 1) != 0:
            return verdict("keep", "attached")
        return verdict("remove", "unattached")
    if kind == "sem":
        if waiting is None:
            return verdict("keep", UNTOLD)
        if waiting:
            return verdict("keep", WAITED_ON)
        return verdict("remove", "no process waits on it")
    for which in ("lspid", "lrpid"):
        pid = row.get(which, 0)
        if pid and pid > 0:
            holder = live(pid, used_at(row, which))
            if holder is not None and holder != uid:
                return verdict("keep", "last used by a live process of another uid")
    return verdict("remove", "no live process of another uid uses it")


def read_rows(kind, uid=None):
    try:
        return rows(system.read_file(PROC + kind, 64 << 20).decode("ascii", "replace"), uid)
    except OSError:
        return []


def holders(read=read_rows):
    """The uids that created a System V IPC object here (between jobs:
    whose objects to judge, processes or not). The creator, not the owner,
    as at a job end (decide()): a creator may give an object to any uid
    (IPC_SET), root and the operators included; an object given away is
    still its creator's."""
    out = set()
    for kind in KINDS:
        for row in read(kind):
            if isinstance(row.get("cuid"), int):
                out.add(row["cuid"])
    return out


def live_uid(pid, by=None):
    """The real uid of the live process PID, or None; with BY (an epoch),
    None too when it started more than SLACK after BY (a pid handed out
    again since, not the process that used an object then), or is this
    process or its parent (the chain's own). Its status and stat are read
    through one descriptor of /proc/PID, so both are the same process's.
    OSError when they cannot be read and the process is not known to be
    gone (system.open_proc): the object is then not judged unused."""
    if int(pid) in (os.getpid(), os.getppid()):
        return None
    fd = system.open_proc(pid)
    if fd is None:
        return None
    try:
        fields = system.status_in(fd)
        if not system.alive(fields):
            return None
        if by is not None:
            start = system.started(system.read_in(fd, "stat", 4096))
            if start is not None and start > by + SLACK:
                return None
    except OSError as exc:
        if exc.errno in system.GONE:
            return None
        raise
    finally:
        os.close(fd)
    uids = system.uids_of(fields)
    return uids[0] if uids else None


_LIBC = []


def _libc():
    """(ctypes, libc, semctl(int, int, int) for GETNCNT and GETZCNT),
    loaded once per process (only when an object of the user's is there to
    look at). The count's call is a function object of its own, its
    argument types set once: a call costs no ctypes object (libc.semctl
    keeps its variadic calls, IPC_STAT's buffer and IPC_RMID)."""
    if not _LIBC:
        import ctypes  # pylint: disable=import-outside-toplevel

        libc = ctypes.CDLL(None, use_errno=True)
        count = libc["semctl"]  # (a new function object: libc.semctl is untouched)
        count.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int)
        count.restype = ctypes.c_int
        _LIBC.append((ctypes, libc, count))
    return _LIBC[0]


def sem_waiting(ident, nsems, deadline=None):
    """Whether a process waits on one of the NSEMS semaphores of set IDENT
    (GETNCNT: for it to grow, GETZCNT: for it to be zero), every semaphore
    read, however many, up to the first one waited on; None when it cannot
    be told (no libc, a count that fails: the set is gone); LATE when
    DEADLINE (a time.monotonic()) came before the last one was read."""
    if nsems < 0:
        return None
    try:
        count = _libc()[2]
    except (ImportError, OSError):
        return None
    for start in range(0, nsems, SEMS_PER_LOOK):
        if deadline is not None and time.monotonic() > deadline:
            return LATE
        for n in range(start, min(nsems, start + SEMS_PER_LOOK)):
            waiters = count(ident, n, GETNCNT)
            if waiters == 0:
                waiters = count(ident, n, GETZCNT)
            if waiters < 0:
                return None
            if waiters:
                return True
    return False


def _stat(ctypes, libc, kind, ident):
    buf = ctypes.create_string_buffer(_STAT_BYTES)
    if kind == "shm":
        rc = libc.shmctl(ctypes.c_int(ident), ctypes.c_int(IPC_STAT), buf)
    elif kind == "sem":
        rc = libc.semctl(ctypes.c_int(ident), ctypes.c_int(0), ctypes.c_int(IPC_STAT), buf)
    else:
        rc = libc.msgctl(ctypes.c_int(ident), ctypes.c_int(IPC_STAT), buf)
    if rc != 0:
        return None
    raw = buf.raw

    def num(offset, size, signed=False):
        return int.from_bytes(raw[offset:offset + size], "little", signed=signed)

    # a queue's msg_stime and msg_rtime follow the 48-byte ipc_perm
    times = {"stime": num(48, 8, True), "rtime": num(56, 8, True)}
    return {"key": num(_KEY, 4, True), "uid": num(_UID, 4), "cuid": num(_CUID, 4),
            "ctime": num(_CTIME[kind], 8, True), "nattch": num(_NATTCH, 8) if kind == "shm" else 0,
            "pids": (num(_LSPID, 4, True), num(_LSPID + 4, 4, True)) if kind == "msg" else (),
            "times": times}


# a queue's lspid and lrpid in x86_64 glibc's msqid_ds
_LSPID = 96


def remove(verdict, live=None, nsems=0, deadline=None):
    """IPC_RMID of a "remove" VERDICT, only while IPC_STAT still finds the
    object judged, no process waits on a set (NSEMS: its semaphores, every
    one read again before DEADLINE, or LATE), and (LIVE: pid -> real uid
    of a live process, or None) no live process of another uid has used a
    queue since: (removed, why not)."""
    machine = os.uname().machine
    if machine != "x86_64":
        return False, "not checked on %s" % machine
    try:
        ctypes, libc, _ = _libc()
    except (ImportError, OSError) as exc:
        return False, "no libc: %s" % exc
    now = _stat(ctypes, libc, verdict.kind, verdict.id)
    if now is None:
        return False, "gone"
    # the key as /proc prints it (a signed int) and IPC_STAT's
    if (now["key"], now["uid"], now["cuid"], now["ctime"]) != (_signed(verdict.key), verdict.uid, verdict.cuid,
                                                               verdict.ctime):
        return False, "changed since it was judged"
    if verdict.kind == "shm" and now["nattch"] != 0:
        return False, "attached since it was judged"
    if verdict.kind == "sem":
        waiting = sem_waiting(verdict.id, nsems, deadline)
        if waiting == LATE:
            return False, LATE
        if waiting is None:
            return False, UNTOLD
        if waiting:
            return False, "waited on since it was judged"
    if live is not None and verdict.kind == "msg":
        used = dict(now["times"], ctime=now["ctime"])
        pids = [(now["pids"][0], used_at(used, "lspid")), (now["pids"][1], used_at(used, "lrpid"))]
        if any(pid > 0 and live(pid, by) not in (None, verdict.job_uid) for pid, by in pids):
            return False, "used by a live process of another uid since it was judged"
    if verdict.kind == "shm":
        rc = libc.shmctl(ctypes.c_int(verdict.id), ctypes.c_int(IPC_RMID), None)
    elif verdict.kind == "sem":
        rc = libc.semctl(ctypes.c_int(verdict.id), ctypes.c_int(0), ctypes.c_int(IPC_RMID))
    else:
        rc = libc.msgctl(ctypes.c_int(verdict.id), ctypes.c_int(IPC_RMID), None)
    if rc != 0:
        return False, os.strerror(ctypes.get_errno())
    return True, ""


def _signed(key):
    key &= 0xFFFFFFFF
    return key - (1 << 32) if key >= 1 << 31 else key


def cached(live):
    """LIVE, asked once per pid."""
    seen = {}

    def ask(pid, by=None):
        if (pid, by) not in seen:
            seen[pid, by] = live(pid, by)
        return seen[pid, by]
    return ask


def judged(uid, read=read_rows, live=live_uid, waiting=sem_waiting, deadline=None):
    """The verdict on each object UID created in the node's IPC namespace,
    one at a time (clean() removes each before it judges the next: a
    deadline that ends the look ends no removal of what it judged), or
    None for one left unjudged at DEADLINE (a time.monotonic()): reached
    before it, or while its semaphores were read."""
    for kind in KINDS:
        for row in (read(kind, uid) if read is read_rows else read(kind)):
            if row.get("cuid") != uid:
                continue
            if deadline is not None and time.monotonic() > deadline:
                yield None
                continue
            waited = False
            if kind == "sem":
                waited = waiting(row.get("semid", -1), row.get("nsems", 0), deadline)
                if waited == LATE:
                    yield None
                    continue
            verdict = decide(kind, row, uid, live, waited)
            if verdict is not None:
                yield verdict


def judge_all(uid, read=read_rows, live=live_uid, waiting=sem_waiting, deadline=None):
    """(the verdicts on UID's objects in the node's IPC namespace, how
    many of UID's were left unjudged at DEADLINE, a time.monotonic())."""
    out, left = [], 0
    for verdict in judged(uid, read, live, waiting, deadline):
        if verdict is None:
            left += 1
        else:
            out.append(verdict)
    return out, left


def clean(uid, deadline, test=False, read=read_rows, live=live_uid):
    """Remove UID's objects that decide() lets go, until DEADLINE (a
    time.monotonic()); TEST: judge them the same and remove none. The fact
    for the record: {removed: {kind: n}, bytes, kept: {reason: n}, left:
    those judged or removed by no DEADLINE}, and would: true under TEST
    (what would have gone); unreadable: why the look ended early, when a last
    user could not be read (LIVE raised: not gone, unreadable), after which
    nothing more is judged or removed (what went before is counted).
    READ: the rows of a kind (read_rows)."""
    fact = {"removed": dict.fromkeys(KINDS, 0), "bytes": 0, "kept": {}, "left": 0}
    if test:
        fact["would"] = True
    try:
        for verdict in judged(uid, read=read, live=cached(live), deadline=deadline):
            if verdict is None:
                fact["left"] += 1
                continue
            if verdict.action == "keep":
                fact["kept"][verdict.reason] = fact["kept"].get(verdict.reason, 0) + 1
                continue
            if test:
                done, why = True, ""
            else:
                done, why = remove(verdict, live, verdict.nsems, deadline)
            if done:
                fact["removed"][verdict.kind] += 1
                fact["bytes"] += verdict.bytes
            elif why == LATE:
                fact["left"] += 1
            elif why != "gone":
                fact["kept"][why] = fact["kept"].get(why, 0) + 1
    except OSError as exc:
        fact["unreadable"] = "a process that last used one of them could not be read (%s): the rest stay" % (
            exc.strerror or exc)
    return fact
