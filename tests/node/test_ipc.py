"""System V IPC at a user's last job end, on real objects: real accounts
make real segments, semaphore sets and queues (ipcmk, and shmat and msgsnd
through ctypes) in an IPC namespace of the test's own (with a /tmp and
/dev/shm of its own: nothing of the machine's is touched), and part 42, as
the chain laid it down, removes alice's that nobody else uses (a set of
hundreds of semaphores, and what she gave root, too); what another user's
live process holds, and what is not hers, stays."""
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.helpers import Chain, as_user, in_namespaces, kill_all_of, live_spool, mount_namespace, slurmd_env, uid_of
from tests.node.test_strays import look, mark_running, told
from tests.unit.conftest import node

ALICE, OTHER, OPERATOR = "alice", "alicex", "je.kim"
HOLD = """
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
kind, ident = sys.argv[1], int(sys.argv[2])
if kind == "shm":
    libc.shmat.restype = ctypes.c_void_p
    ok = libc.shmat(ident, None, 0o10000) not in (None, ctypes.c_void_p(-1).value)
elif kind == "sem":
    # waits on semaphore argv[3] (its value is 0: a semop that takes 1
    # blocks), in a thread (ctypes lets go of the GIL); ready once the
    # kernel counts it among the semaphore's waiters (GETNCNT)
    import threading
    n = int(sys.argv[3])
    waiter = threading.Thread(target=libc.semop, args=(ident, (ctypes.c_short * 3)(n, -1, 0), 1), daemon=True)
    waiter.start()
    while waiter.is_alive() and libc.semctl(ident, n, 14) == 0:
        time.sleep(0.01)
    ok = waiter.is_alive() and libc.semctl(ident, n, 14) == 1
else:
    buf = ctypes.create_string_buffer(b"\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00x", 9)
    ok = libc.msgsnd(ident, buf, 1, 0o4000) == 0
print("ready" if ok else "failed %d" % ctypes.get_errno(), flush=True)
time.sleep(600)
"""


def make(ns, user, *args):
    """ipcmk ARGS as USER in the namespace: the new object's id."""
    out = subprocess.run([*ns, *as_user(user), "ipcmk", *args], capture_output=True, text=True, check=True).stdout
    return int(out.split()[-1])


def objects(ns):
    """{(kind, id): owner uid} of every object in the namespace."""
    out = {}
    for kind in ("shm", "sem", "msg"):
        text = subprocess.run([*ns, "cat", f"/proc/sysvipc/{kind}"], capture_output=True, text=True,
                              check=True).stdout
        names = text.split("\n")[0].split()
        for line in text.split("\n")[1:]:
            if line.split():
                row = dict(zip(names, line.split()))
                out[(kind, int(row[{"shm": "shmid", "sem": "semid", "msg": "msqid"}[kind]]))] = int(row["uid"])
    return out


# alice gives her segment to root: IPC_STAT, shm_perm.uid (offset 4 of
# x86_64's shmid_ds) set to 0, IPC_SET
GIVE = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
ident, buf = int(sys.argv[1]), ctypes.create_string_buffer(256)
assert libc.shmctl(ident, 2, buf) == 0, ctypes.get_errno()
buf[4:8] = bytes(4)
assert libc.shmctl(ident, 1, buf) == 0, ctypes.get_errno()
"""


def hold(ns, user, kind, ident, *more):
    proc = subprocess.Popen([*ns, *as_user(user), "/usr/bin/python3", "-c", HOLD, kind, str(ident), *map(str, more)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture
def var_chain(accounts):
    """own_chain's, under /var/tmp (the namespace's /tmp is a tmpfs of its own)."""
    bases = []

    def make(**settings):
        base = Path(tempfile.mkdtemp(prefix="epilog-ipc-", dir="/var/tmp"))
        bases.append(base)
        live_spool(base / "spool")
        return Chain(base / "slurm", base / "localusers", base / "epilog.log", base / "spool").lay_down(**settings)
    yield make
    for base in bases:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def ns(accounts):
    with mount_namespace(fresh=("/tmp", "/dev/shm"), ipc=True) as prefix:
        yield prefix
    for user in (ALICE, OTHER, OPERATOR):
        kill_all_of(user)


def test_part_42_removes_alices_objects_that_nobody_else_uses(var_chain, ns):
    """Her big set (300 semaphores, none waited on) goes, judged by all of
    them; another big set, on whose semaphore #200 alicex's live process
    waits, stays. The segment she gave root (IPC_SET) goes: she made it."""
    chain = var_chain()
    given = ("shm", make(ns, ALICE, "-M", "8192"))
    subprocess.run([*ns, *as_user(ALICE), "/usr/bin/python3", "-c", GIVE, str(given[1])], check=True)
    assert objects(ns)[given] == 0
    gone = [("shm", make(ns, ALICE, "-M", str(4 << 20))), ("sem", make(ns, ALICE, "-S", "2")),
            ("msg", make(ns, ALICE, "-Q")), ("sem", make(ns, ALICE, "-S", "300")), given]
    attached = ("shm", make(ns, ALICE, "-M", "4096", "-p", "0644"))
    queue = ("msg", make(ns, ALICE, "-Q", "-p", "0666"))
    used = ("sem", make(ns, ALICE, "-S", "300", "-p", "0666"))
    operators = ("shm", make(ns, OPERATOR, "-M", "4096"))
    holders = [hold(ns, OTHER, *attached), hold(ns, OTHER, *queue), hold(ns, OTHER, *used, 200)]
    try:
        ret = chain.run_part("42-lastuserjob-cleanup", slurmd_env(ALICE), prefix=ns)
        assert ret.returncode == 0, ret
        left = objects(ns)
        assert not any(key in left for key in gone), left
        assert {attached, queue, used, operators} <= set(left), left
        log = chain.log_text()
        assert (f"System V IPC of uid {uid_of(ALICE)}: removed 2 segment(s) ({(4 << 20) + 8192} bytes), 2 semaphore "
                f"set(s), 1 queue(s); kept 3 (attached: 1; last used by a live process of another uid: 1; waited on "
                f"by a live process: 1)") in log, log
    finally:
        for proc in holders:
            proc.kill()
            proc.wait()


def test_ipc_cleanup_off_leaves_them_all(var_chain, ns):
    chain = var_chain(ipc_cleanup=False)
    mine = ("shm", make(ns, ALICE, "-M", "4096"))
    ret = chain.run_part("42-lastuserjob-cleanup", slurmd_env(ALICE), prefix=ns)
    assert ret.returncode == 0, ret
    assert mine in objects(ns)


def test_between_jobs_the_objects_of_accounts_with_no_job_are_told_and_removed_only_when_asked(var_chain, accounts):
    """epilog.strays and the sweep's look (ipc_only), as the module runs
    them, in an IPC namespace of the test's own: alice runs nothing and has
    no job here, and her crashed job left a segment, a set and a queue,
    and a segment she gave root (IPC_SET: still hers); alicex's job runs
    here; je.kim is an operator. Only alice's go, and only when asked."""
    chain = var_chain()
    mark_running(chain, OTHER)

    def inside():
        given = ("shm", make([], ALICE, "-M", "4096"))
        subprocess.run([*as_user(ALICE), "/usr/bin/python3", "-c", GIVE, str(given[1])], check=True)
        mine = {("shm", make([], ALICE, "-M", str(1 << 20))), ("sem", make([], ALICE, "-S", "1")),
                ("msg", make([], ALICE, "-Q")), given}
        others = {("shm", make([], OTHER, "-M", "4096")), ("shm", make([], OPERATOR, "-M", "4096"))}
        before = set(objects([]))
        seen = {"full": look(chain, test=True), "preview": look(chain, ipc_only=True, kill=True, test=True),
                "listed": look(chain, ipc_only=True)}
        kept = set(objects([]))
        seen["removed"] = look(chain, ipc_only=True, kill=True)
        return mine, others, before, kept, set(objects([])), seen

    mine, others, before, kept, after, seen = in_namespaces(inside, pid=False, ipc=True)
    assert mine | others <= before and kept == before, (before, kept)
    full = told(seen["full"])
    assert full[ALICE]["answer"] == "stray" and full[ALICE]["processes"] == 0, full
    assert full[ALICE]["ipc"]["remove"] == {"shm": 2, "sem": 1, "msg": 1}
    assert full[ALICE]["ipc"]["bytes"] == (1 << 20) + 4096
    for report in (seen["preview"], seen["listed"]):
        users = told(report)
        assert set(users) >= {ALICE} and OPERATOR not in users and users[OTHER]["answer"] == "job", users
        assert report["counts"]["ipc_users"] == 1 and report["counts"]["ipc_objects"] == 4, report["counts"]
        assert report["counts"]["ipc_removed"] == 0
    assert told(seen["preview"])[ALICE]["kill"] == "would kill"
    removed = told(seen["removed"])[ALICE]["kill"]
    # an account that runs nothing: no part 39 or 40, only its objects
    assert removed["parts"] == {} and removed["ipc"]["removed"] == {"shm": 2, "sem": 1, "msg": 1}, removed
    assert seen["removed"]["counts"]["ipc_removed"] == 4
    assert seen["removed"]["counts"]["ipc_bytes_removed"] == (1 << 20) + 4096
    assert not mine & after and others <= after, after
    # ipc_only looks are the sweep's: its record says them, not one of their own
    assert not chain.record_file.exists() or not [rec for rec in chain.records() if rec["stage"] == "strays"]


FLOOD = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
n = int(sys.argv[1])
made = {"shm": 0, "sem": 0, "msg": 0}
for i in range(n):
    made["sem"] += libc.semget(0, 1 + i % 3, 0o1600) >= 0
    made["msg"] += libc.msgget(0, 0o1600) >= 0
    ident = libc.shmget(0, 4096, 0o1600)
    if ident >= 0:
        made["shm"] += 1
        if i % 50 == 0:
            # attached by a child that forks and exits: nothing is attached once it has
            pid = os.fork()
            if pid == 0:
                libc.shmat(ident, None, 0)
                os._exit(0 if os.fork() else 0)
            os.waitpid(pid, 0)
print(made["shm"], made["sem"], made["msg"], flush=True)
"""


def test_thousands_of_objects_go_within_the_parts_deadline_in_one_line_and_never_drain(var_chain, ns):
    """alice floods the namespace (1,500 each of segments, semaphore sets and
    queues; some segments attached by children that forked and exited) and
    her last job ends: the chain exits 0 within its deadline, part 42's log
    says it in one line, and whatever its deadline left is counted."""
    chain = var_chain(part_timeout=10, chain_timeout=60)
    made = subprocess.run([*ns, *as_user(ALICE), "/usr/bin/python3", "-c", FLOOD, "1500"], capture_output=True,
                          text=True, check=True, timeout=120).stdout.split()
    assert [int(n) for n in made] == [1500, 1500, 1500], made
    ret = chain.run(chain.conf_dir / "epilog.sh", slurmd_env(ALICE), prefix=ns, timeout=60)
    assert ret.returncode == 0, ret
    lines = [line for line in chain.log_text().splitlines() if "System V IPC of uid" in line]
    assert len(lines) == 1, lines
    part = next(p for p in chain.records()[-1]["parts"] if p["part"] == "42-lastuserjob-cleanup")
    fact = part["facts"]["ipc"]
    assert part["rc"] == 0 and part["ms"] < 10_000, part
    left = [key for key, owner in objects(ns).items() if owner == uid_of(ALICE)]
    assert sum(fact["removed"].values()) + fact["left"] + sum(fact["kept"].values()) == 4500, fact
    assert len(left) == fact["left"] + sum(fact["kept"].values()), (len(left), fact)
    assert fact["removed"]["shm"] + fact["removed"]["sem"] + fact["removed"]["msg"] > 0, fact


def test_a_big_set_waited_on_since_it_was_judged_is_left_alone(accounts):
    """remove()'s check right before IPC_RMID reads every semaphore again:
    a set of 300 judged "remove" while nobody waited on it, then alicex's
    live process waits on semaphore #200, stays; once that process is
    gone, the set goes. A check the deadline cuts short says so (left for
    want of time), and removes nothing. Root's set, in an IPC namespace of
    the test's own."""
    ipc = node("ipc")
    other = uid_of(OTHER)

    def inside():
        import ctypes  # pylint: disable=import-outside-toplevel
        import os  # pylint: disable=import-outside-toplevel
        import signal  # pylint: disable=import-outside-toplevel
        import time  # pylint: disable=import-outside-toplevel

        libc = ctypes.CDLL(None, use_errno=True)
        ident = libc.semget(0, 300, 0o1666)
        row = next(r for r in ipc.read_rows("sem") if r["semid"] == ident)
        verdict = ipc.decide("sem", row, 0, ipc.live_uid, ipc.sem_waiting(ident, 300))
        child = os.fork()
        if child == 0:  # pragma: no cover - the child: alicex's process, waiting on semaphore #200
            try:
                os.setgid(other)
                os.setuid(other)
                libc.semop(ident, (ctypes.c_short * 3)(200, -1, 0), 1)
            finally:
                os._exit(0)
        try:
            while libc.semctl(ident, 200, ipc.GETNCNT) == 0:
                assert os.waitpid(child, os.WNOHANG)[0] == 0, "alicex's process did not wait on #200"
                time.sleep(0.01)  # (the event waited for is the kernel counting the waiter)
            seen = [verdict.action, ipc.sem_waiting(ident, 300), ipc.remove(verdict, ipc.live_uid, 300, deadline=0),
                    ipc.remove(verdict, ipc.live_uid, 300)]
        finally:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
        seen.append(ipc.remove(verdict, ipc.live_uid, 300))
        return seen

    assert in_namespaces(inside, pid=False, ipc=True) == [
        "remove", True, (False, ipc.LATE), (False, "waited on since it was judged"), (True, "")]


def test_a_sets_last_pids_and_times_keep_it_for_nobody(accounts):
    """A set's last pids are numbers the kernel hands out again, and its
    times are its creator's to move: neither keeps it. Root's set (its
    creator, as the user is at her job end): a process of the creator's
    sets semaphore #1 (its last pid is that process's) and ends; a live
    process of alicex's is then given the same pid (ns_last_pid, in a pid
    namespace of the test's own: the kernel's own way to ask for a pid, as
    a fork loop that sweeps every pid gets it), and the creator moves the
    set's change time past that process's start with an IPC_SET that
    changes nothing. The set goes; while a process waits on it, it stays.
    In an IPC namespace of the test's own."""
    ipc = node("ipc")
    other = uid_of(OTHER)

    def inside():
        import ctypes  # pylint: disable=import-outside-toplevel
        import os  # pylint: disable=import-outside-toplevel
        import time  # pylint: disable=import-outside-toplevel

        libc = ctypes.CDLL(None, use_errno=True)
        ident = libc.semget(0, 2, 0o1666)
        recorder = os.fork()
        if recorder == 0:  # pragma: no cover - the child: SETVAL, and its pid is semaphore #1's last
            os._exit(0 if libc.semctl(ident, 1, 16, 1) == 0 else 1)
        assert os.waitpid(recorder, 0)[1] == 0 and libc.semctl(ident, 1, 11) == recorder

        def alicex(wait_on):
            """A process of alicex's, once it is hers, that waits on
            semaphore #0 when WAIT_ON (else on a pipe): (pid, its pipe's
            write end)."""
            (said, says), (wait, done) = os.pipe(), os.pipe()
            child = os.fork()
            if child == 0:  # pragma: no cover - the child
                try:
                    os.setgid(other)
                    os.setuid(other)
                    os.write(says, b"y")
                    if wait_on:
                        libc.semop(ident, (ctypes.c_short * 3)(0, -1, 0), 1)
                    else:
                        os.read(wait, 1)
                finally:
                    os._exit(0)
            assert os.read(said, 1) == b"y"
            return child, done

        def judged():
            row = next(r for r in ipc.read_rows("sem") if r["semid"] == ident)
            return ipc.decide("sem", row, 0, ipc.live_uid, ipc.sem_waiting(ident, 2)).action

        used = next(r for r in ipc.read_rows("sem") if r["semid"] == ident)["ctime"]
        while time.time() <= used + ipc.SLACK + 1:
            time.sleep(0.05)  # (the event waited for is the clock passing the set's last use)
        with open("/proc/sys/kernel/ns_last_pid", "w") as handle:
            handle.write(str(recorder - 1))
        again, done = alicex(False)
        # her process began after the last use: by the set's own time, not its user
        seen = [again == recorder, libc.semctl(ident, 1, 11) == again, ipc.live_uid(again, used) is None]
        buf = ctypes.create_string_buffer(256)
        assert libc.semctl(ident, 0, 2, buf) == 0 and libc.semctl(ident, 0, 1, buf) == 0  # IPC_STAT, IPC_SET
        moved = next(r for r in ipc.read_rows("sem") if r["semid"] == ident)["ctime"]
        # by the time the creator moved, she would be
        seen += [moved > used, ipc.live_uid(again, moved) == other, judged()]
        waiter, _ = alicex(True)
        while libc.semctl(ident, 0, ipc.GETNCNT) == 0:
            assert os.waitpid(waiter, os.WNOHANG)[0] == 0, "alicex's process did not wait on #0"
            time.sleep(0.01)  # (the event waited for is the kernel counting the waiter)
        seen.append(judged())
        os.kill(waiter, 9)
        os.waitpid(waiter, 0)
        os.write(done, b"x")
        os.waitpid(again, 0)
        return seen

    assert in_namespaces(inside, pid=True, ipc=True) == [True, True, True, True, True, "remove", "keep"]
