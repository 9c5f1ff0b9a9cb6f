"""Whose a process is to part 40's kill (reach.owner_of), against the
kernel's own rule for who a signal reaches (kernel/signal.c,
kill_ok_by_cred: the sender's real or effective uid is the target's real or
saved uid): the kill's sender holds real uid X, effective uid the user's.
A process is the user's by its real uid alone, as epilog.strays tells
them; one whose saved uid alone is hers (another account's run of a
program she made setuid to herself) is reached by kill(-1) and is not
hers: the round that finds one signals hers one by one."""
import errno
import itertools
import os
import signal
import struct

import pytest

from tests.unit.conftest import node

kill, reach = node("kill"), node("reach")
worker = node("worker")

HER, OTHER, X = 50101, 50102, 4294967294


def reached(sender, target):
    """kill_ok_by_cred of a sender (real, effective) and a target (real,
    effective, saved), without CAP_KILL."""
    return bool({sender[0], sender[1]} & {target[0], target[2]})


@pytest.mark.parametrize("uids, owner", [
    ((HER, HER, HER), "user"),
    ((HER, 0, 0), "user"),  # her run of root's setuid program (passwd): hers
    ((HER, OTHER, OTHER), "user"),  # her run of another account's setuid program
    ((OTHER, HER, HER), "saved"),  # another account's run of her setuid program
    ((0, HER, HER), "saved"),  # root's
    ((OTHER, OTHER, HER), "saved"),  # its effective uid given back to its real owner
    ((OTHER, HER, OTHER), None),  # her effective uid alone: out of the sender's reach
    ((OTHER, OTHER, OTHER), None),
    ((X, 0, 0), "x"),  # another part 40's sender
    ((0, 0, X), "x"),
])
def test_whose_a_process_is_to_the_kill(uids, owner):
    assert reach.owner_of(uids, HER, X) == owner


def test_kill_minus_one_reaches_exactly_the_users_x_holders_and_saved_only_processes():
    """Over every (real, effective, saved) of her uid, another's, root's and
    X: kill(-1) from the sender reaches a process exactly when owner_of
    names it, and the user's (the kill's targets) are all reached."""
    for uids in itertools.product((HER, OTHER, 0, X), repeat=3):
        owner = reach.owner_of(uids, HER, X)
        assert reached((X, HER), uids) == (owner is not None), uids
        assert (owner == "user") == (uids[0] == HER and X not in (uids[0], uids[2])), uids


SUB = 200000  # a subordinate uid of hers (newuidmap)


@pytest.mark.parametrize("uids, ns_owners, owner", [
    ((SUB, SUB, HER), (HER,), "user"),  # a saved-only process of her own making, in her namespace: hers
    ((SUB, SUB, SUB), (HER,), "user"),  # a subuid of hers in her namespace: kill(-1) reaches it, she owns it
    ((0, 0, 0), (HER,), "user"),  # root who entered her namespace: she holds every capability there
    ((OTHER, OTHER, OTHER), (OTHER, HER), "user"),  # a namespace nested in one of hers
    ((OTHER, HER, HER), (OTHER,), "saved"),  # another's namespace: as in none
    ((OTHER, OTHER, OTHER), (OTHER,), None),
    ((X, 0, 0), (HER,), "x"),
])
def test_a_process_in_a_user_namespace_she_owns_is_hers(uids, ns_owners, owner):
    """The owner of a user namespace holds CAP_KILL in it (and in those
    nested in it): kill(-1) from her reaches every process there, whatever
    its uids, so each is hers: killed, never spared as saved-only."""
    assert reach.owner_of(uids, HER, X, ns_owners) == owner


def test_a_process_in_pid_1s_user_namespace_has_no_owners_to_walk():
    assert reach.userns_owners(os.getpid()) == ()
    assert reach.userns_owners("999999999") == ()


def test_a_bound_reached_while_saved_only_processes_lived_names_them():
    why = kill.kept_coming(["7(hersleep) uid 0"])
    assert "kept coming" in why and "1 7(hersleep) uid 0" in why


@pytest.mark.parametrize("mine, others, whole", [
    ([(700, 700), (700, 700), (800, 800)], {1, 900}, {700, 800}),  # sessions of hers alone
    ([(700, 700), (710, 700)], {700}, set()),  # another's process in her session: no group of it whole
    ([(700, 650), (800, 800)], {650}, {800}),
    ([(0, 0), (700, 0)], set(), set()),  # not told (a kernel before 4.1)
])
def test_a_group_is_signalled_whole_only_when_its_session_is_hers_alone(mine, others, whole):
    assert reach.whole_groups(mine, others) == whole


@pytest.mark.parametrize("errno_name, why", [("EAGAIN", "no free pid"), ("ENOMEM", "cannot fork: ")])
def test_a_refused_fork_is_told_by_its_errno(errno_name, why):
    code = getattr(errno, errno_name)
    assert worker.fork_failure(OSError(code, os.strerror(code))).startswith(why)



def test_what_the_user_could_change_on_the_runner_is_put_back():
    """While the runner itself acts as the user (no free pid: 40 ran in
    it), the user may renice it, pin it to one CPU or make it SCHED_BATCH
    (their effective uid is all that takes): scheduling() puts those back.
    Lowering the nice value again needs root; without it, only the rest is
    looked at. In a child, so that the test's own process is untouched."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            before = (os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0), os.sched_getaffinity(0))
            restore = worker.scheduling()
            os.sched_setaffinity(0, {min(before[2])})
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
            if os.geteuid() == 0:
                os.setpriority(os.PRIO_PROCESS, 0, before[0] + 5)
            restore()
            after = (os.getpriority(os.PRIO_PROCESS, 0), os.sched_getscheduler(0), os.sched_getaffinity(0))
            code = 0 if after == before else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


@pytest.mark.parametrize("state, uids, before, saved, thaw", [
    ("T (stopped)", (OTHER, HER, HER), set(), True, True),  # another's run of her program, the freeze stopped it
    ("T (stopped)", (0, HER, HER), {"42"}, True, False),  # stopped before the freeze: stays so
    ("t (tracing stop)", (OTHER, HER, HER), set(), True, False),  # its tracer's to resume
    ("S (sleeping)", (OTHER, HER, HER), set(), True, False),  # not stopped
    ("T (stopped)", (HER, HER, HER), set(), True, False),  # hers: killed, never continued
    ("T (stopped)", (OTHER, OTHER, OTHER), set(), True, False),  # out of the freeze's reach
    ("T (stopped)", (0, 0, 0), set(), False, True),  # its parent, root's su, stopped itself
    ("T (stopped)", (0, 0, 0), {"42"}, False, False),  # a parent stopped before
    ("T (stopped)", (HER, HER, HER), set(), False, False),
])
def test_a_freeze_is_undone_for_exactly_what_it_stopped(state, uids, before, saved, thaw):
    fields = {"State": state, "Uid": "\t".join(str(uid) for uid in (*uids, uids[2]))}
    assert reach.thawable(fields, HER, "42", before, saved) is thaw
    assert not reach.thawable(None, HER, "42", before, saved)


def test_a_utilization_clamp_is_packed_as_sched_setattr_reads_it():
    """struct sched_attr (SCHED_ATTR_SIZE_VER1, 56 bytes) that sets the
    clamp alone (KEEP_POLICY, KEEP_PARAMS, UTIL_CLAMP_MIN and _MAX), and
    the clamp read back from what sched_getattr fills."""
    raw = worker.clamp_attr((128, 900))
    assert len(raw) == 56 == worker.SCHED_ATTR_SIZE
    assert worker.clamp_of(raw) == (128, 900)
    assert worker.clamp_of(raw[:48]) is None  # a kernel before 5.3: no clamp in it
    size, policy, flags, nice, priority, *_, low, high = struct.unpack("=IIQiIQQQII", raw)
    assert (size, policy, flags, nice, priority, low, high) == (56, 0, 0x78, 0, 0, 128, 900)


def test_a_utilization_clamp_the_user_set_on_the_runner_is_put_back():
    """While 40 runs in the runner, the user may clamp its utilization
    (sched_setattr needs only its effective uid): scheduling()'s restore
    sets the clamp read before back. On a kernel without
    CONFIG_UCLAMP_TASK no clamp can be set (the errno is one NO_CLAMP
    names) and none is read changed; one read changed there is said
    (restore's note), not raised.
    In a child, so that the test's own process is untouched."""
    before = worker.utilization_clamp()
    assert before is not None  # sched_getattr: every kernel since 3.14
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            restore = worker.scheduling()
            refused = worker.set_utilization_clamp((100, 200))
            if refused is None:
                code = 0 if worker.utilization_clamp() == (100, 200) and restore() is None \
                    and worker.utilization_clamp() == before else 3
            elif refused in worker.NO_CLAMP and worker.utilization_clamp() == before and restore() is None:
                # the ignore path: a clamp read changed that the kernel will not set
                worker.utilization_clamp = lambda: (before[0] + 1, before[1])
                note = restore()
                code = 0 if note and note.startswith("the kernel sets no utilization clamp") else 5
            else:
                code = 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_the_safety_net_continues_what_the_freeze_stopped_and_not_what_was_stopped_before():
    """_thaw_rest, on a real stopped child of this test's (not hers): it
    is continued when the scan before the freeze did not find it stopped,
    left stopped when it did, and never when _thaw already continued it."""
    pid = os.fork()
    if pid == 0:
        os.kill(os.getpid(), signal.SIGSTOP)
        signal.pause()  # until the test kills it: continued, it is still there to be waited for
        os._exit(0)
    try:
        _, status = os.waitpid(pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
        assert kill._thaw_rest(HER, {str(pid)}, {str(pid)}, []) == []
        assert kill._thaw_rest(HER, {str(pid)}, set(), [f"{pid}(python)"]) == []
        assert kill._thaw_rest(HER, {str(pid)}, set(), [])[0].startswith(f"{pid}(")
        _, status = os.waitpid(pid, os.WCONTINUED)
        assert os.WIFCONTINUED(status)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)


@pytest.fixture
def parent_and_child():
    """A real parent (a child of this test's, of its uid) with a child of
    its own; the parent stops itself once the test writes to its pipe (as
    su does when its child stops): (parent pid, child pid, go)."""
    r_pid, w_pid = os.pipe()
    r_go, w_go = os.pipe()
    parent = os.fork()
    if parent == 0:
        try:
            child = os.fork()
            if child == 0:
                signal.pause()
                os._exit(0)
            os.write(w_pid, str(child).encode())
            os.read(r_go, 1)
            os.kill(os.getpid(), signal.SIGSTOP)
            signal.pause()
        finally:
            os._exit(0)
    os.close(w_pid)
    os.close(r_go)
    child = int(os.read(r_pid, 32))
    try:
        yield parent, child, lambda: os.write(w_go, b"x")
    finally:
        for pid in (child, parent):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.waitpid(parent, 0)
        for fd in (r_pid, w_go):
            os.close(fd)


def test_a_parent_that_stops_itself_after_its_child_is_waited_for_and_continued(parent_and_child, monkeypatch):
    """_thaw_parent polls for the parent to stop (su stops itself a moment
    after its child stops): one that stops only after the poll began is
    continued. PARENT_POLLS is raised so the poll waits for the event."""
    parent, child, go = parent_and_child
    monkeypatch.setattr(kill, "PARENT_POLLS", 10 ** 6)
    go()
    done = kill._thaw_parent(HER, kill.pidfd_calls() or (), str(child), str(parent), set())
    assert done and done.startswith(f"{parent}("), done
    _, status = os.waitpid(parent, os.WCONTINUED)
    assert os.WIFCONTINUED(status)


def test_a_parent_is_not_continued_when_stopped_before_hers_or_no_longer_the_parent(parent_and_child):
    """The parent stays stopped when the scan before the freeze found it
    stopped, when it is the user's own (its real uid UID's), and when the
    continued process's parent is not that pid (a pid reused meanwhile)."""
    parent, child, go = parent_and_child
    go()
    _, status = os.waitpid(parent, os.WUNTRACED)
    assert os.WIFSTOPPED(status)
    calls = kill.pidfd_calls() or ()
    assert kill._thaw_parent(HER, calls, str(child), str(parent), {str(parent)}) is None
    assert kill._thaw_parent(os.getuid(), calls, str(child), str(parent), set()) is None
    assert kill._thaw_parent(HER, calls, str(os.getpid()), str(parent), set()) is None
    assert kill._thaw_parent(HER, calls, str(child), "1", set()) is None
    with open(f"/proc/{parent}/stat") as handle:
        assert handle.read().rsplit(")", 1)[1].split()[0] == "T"
