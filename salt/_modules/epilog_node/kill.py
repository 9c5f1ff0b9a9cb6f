"""Part 40, the kill: every process of the user's, ended from a process
that holds her uid as its effective uid alone (kill_uid: why, and how
each round goes), in rounds until none is left or its bound; a frozen
round where a process not hers is within reach (another account's run of
her setuid program), undone for every process not hers whatever cuts it
short. Whose a process is, is reach.py's; kill() is the part's action:
a kill slot, the rounds, the record's fact and the log's lines.
"""
import os
import stat
import time

from . import reach, registry, system
from .system import signal

# outcome: done, bound, refused or failed; rounds; signalled: "pid(name)" of
# what it saw before the first round; left: what survived (bound); why:
# refused or failed, in words; spared: "pid(name) uid R" of the processes
# whose saved uid is the user's and real uid R another's, left alone;
# one_by_one: the rounds that froze her processes and signalled each on its
# own (some such process lived); continued: "pid(name)" of the processes of
# others such a freeze stopped, continued again (freeze_round).
Killed = system.fields("Killed", "outcome rounds signalled left why jobs spared one_by_one continued")
# A login at its password prompt keeps the rounds going for the first
# PATIENCE rounds only.
ROUNDS, SECONDS, PATIENCE = 50, 5, 30
# in run_dir: the kill slots, kill.lock.<i>, each root's alone. A part 40
# holds one while its process holds that slot's uid X (4294967294 - i, never
# the user's own): part 40s of several users' job ends at once each hold an X
# of their own, so none reaches another, and none waits for another.
KILL_LOCK = "kill.lock"
KILL_SLOTS = 16
# _wait_dead's pauses: a process SIGKILL reached is gone within a fraction
# of a millisecond, so the first looks come soon; about 0.1 s in all
DEAD_PAUSES = (0.0001, 0.0002, 0.0004, *(0.0005 * wait for wait in range(2, 21)))
# A frozen round reads every process two or three times and signals each of
# hers on its own: the first starts only with at least this many times the
# kill's first scan left, and the wait for the dead (else it goes unfrozen).
FROZEN_SCANS = 3
# pidfd_open and pidfd_send_signal, by machine: the numbers every
# architecture's table shares since Linux 5.1 (alpha's and ia64's differ:
# those signal by pid)
PIDFD_SYSCALLS = {machine: (434, 424) for machine in ("x86_64", "i686", "aarch64", "armv7l", "ppc64le", "ppc64",
                                                      "s390x", "riscv64", "loongarch64")}


def some(found):
    """N, then the first 20 of FOUND, and ... when there are more."""
    n = len(found)
    return str(n) + ((" " + " ".join(found[:20]) + (" ..." if n > 20 else "")) if n else "")


_pidfd = []  # [(open, send)] or [None], once looked for


def pidfd_calls():
    """(open(pid) -> descriptor or -errno, send(descriptor, signal) -> 0 or
    -errno): pidfd_open and pidfd_send_signal through libc's syscall() (no
    python before 3.9 has them), or None where this machine's numbers are
    not known or the kernel has no pidfd_open (before 5.3)."""
    if _pidfd:
        return _pidfd[0]
    calls = None
    numbers = PIDFD_SYSCALLS.get(os.uname().machine)
    try:
        import ctypes  # pylint: disable=import-outside-toplevel - only a round that signals one by one needs it

        syscall = ctypes.CDLL(None, use_errno=True).syscall
        syscall.restype = ctypes.c_long
    except (ImportError, OSError, AttributeError):
        numbers = None
    if numbers:
        def open_(pid):
            fd = syscall(ctypes.c_long(numbers[0]), ctypes.c_int(pid), ctypes.c_uint(0))
            return fd if fd >= 0 else -ctypes.get_errno()

        def send(fd, sig):
            done = syscall(ctypes.c_long(numbers[1]), ctypes.c_int(fd), ctypes.c_int(sig), None, ctypes.c_uint(0))
            return 0 if done == 0 else -ctypes.get_errno()

        probe = open_(os.getpid())
        if probe >= 0:
            os.close(probe)
            calls = (open_, send)
    _pidfd.append(calls)
    return calls


def _as_user(uid, x, send):
    """SEND() from effective uid UID (real X, saved 0, read back first),
    then root again: None, or why nothing was sent."""
    os.setresuid(-1, uid, -1)
    try:
        if os.getresuid() != (x, uid, 0):
            return "the sender's uids are %r" % (os.getresuid(),)
        try:
            send()
        except OSError:
            pass
        return None
    finally:
        os.setresuid(-1, 0, -1)


def _signal_each(uid, x, targets, groups):
    """SIGKILL to TARGETS ("pid(name)"), with no kill(-1): first to each
    process group of GROUPS ({"pid(name)": pgid}: whole_groups), whole,
    then to each other target that is still a live process of UID
    (reach.hers()), one at a time: its pidfd opened first (as root), then its status
    read through /proc (while the pidfd is open, /proc/PID is that very
    process, or it is gone and the signal fails), then the signal sent
    through the pidfd: no pid reused meanwhile can be reached. Where there
    is no pidfd (pidfd_calls), by pid, right after the read: a pid reused
    in between (or a group's id a new group took since the scan) reaches
    only what kill(-1) would. Each is sent from
    effective uid UID (real X, saved 0, checked before each). Returns
    None, or why it stopped (its uids were not those)."""
    for pgid in sorted(set(groups.values())):
        why = _as_user(uid, x, lambda pgid=pgid: os.killpg(pgid, signal.SIGKILL))
        if why:
            return why
    calls = None
    for entry in targets:
        if entry in groups:
            continue
        pid = int(entry.split("(", 1)[0])
        if calls is None:
            calls = pidfd_calls() or ()
        fd = calls[0](pid) if calls else None
        if fd is not None and fd < 0:
            continue  # gone
        try:
            fields = system.status(pid)
            if not system.alive(fields) or not reach.hers(pid, fields, uid):
                continue
            why = _as_user(uid, x, (lambda fd=fd, send=calls[1]: send(fd, signal.SIGKILL)) if fd is not None
                           else (lambda pid=pid: os.kill(pid, signal.SIGKILL)))
            if why:
                return why
        finally:
            if fd is not None:
                os.close(fd)
    return None



# how long _thaw waits for a parent to stop itself (su, runuser) after its
# child was continued: PARENT_POLLS reads, PARENT_POLL s apart (a few ms)
PARENT_POLLS, PARENT_POLL = 10, 0.0005


def _pinned(calls, pid):
    """PID's pidfd (calls: pidfd_calls()), None without pidfds, or a
    negative errno when it is gone."""
    return calls[0](int(pid)) if calls else None


def _sender(calls, fd, pid, sig):
    """What sends SIG to PID: through its pidfd FD, or by pid without one."""
    if fd is not None:
        return lambda: calls[1](fd, sig)
    return lambda: os.kill(int(pid), sig)


def _parent_stopped(ppid):
    """PPID's status once it is stopped (state T), polled PARENT_POLLS
    times: su and runuser stop themselves a moment after their child does;
    its status as last read otherwise."""
    fields = system.status(ppid)
    for _ in range(PARENT_POLLS):
        if not fields or fields.get("State", "")[:1] == "T":
            break
        time.sleep(PARENT_POLL)
        fields = system.status(ppid)
    return fields


def _thaw_parent(uid, calls, pid, ppid, before):
    """SIGCONT, as root, to PPID, the parent of the continued process PID
    (still pinned by its pidfd), when reach.thawable() says so of it, it is not
    UID's (reach.hers()) and PID's parent is still PPID once PPID's pidfd is open
    (a pid reused meanwhile is not reached). "pid(name)", or None."""
    if ppid in ("0", "1") or not system.digits(ppid):
        return None
    _parent_stopped(ppid)
    fd = _pinned(calls, ppid)
    if fd is not None and fd < 0:
        return None
    try:
        fields = system.status(ppid)
        if (system.status(pid) or {}).get("PPid") != ppid or not reach.thawable(fields, uid, ppid, before, False) \
                or reach.hers(ppid, fields, uid):
            return None
        try:
            _sender(calls, fd, ppid, signal.SIGCONT)()
        except OSError:
            return None
        return "%s(%s)" % (ppid, system.show(fields.get("Name", "?")))
    finally:
        if fd is not None:
            os.close(fd)


def _thaw(uid, x, others, before):
    """SIGCONT to each process of OTHERS ("pid(name) uid R": those whose
    saved uid alone is UID, as a scan after the freeze found them) that
    reach.thawable() says the freeze stopped, from the sender (effective UID,
    as the SIGSTOP came) through its pidfd; then, as root, to its parent
    (_thaw_parent: waited for a few ms to stop itself). The "pid(name)"
    continued."""
    calls, done, parents = pidfd_calls() or (), [], set()
    for entry in others:
        pid = entry.split("(", 1)[0]
        fd = _pinned(calls, pid)
        if fd is not None and fd < 0:
            continue  # gone
        try:
            fields = system.status(pid)
            if not reach.thawable(fields, uid, pid, before, True) or reach.hers(pid, fields, uid):
                continue
            _as_user(uid, x, _sender(calls, fd, pid, signal.SIGCONT))
            done.append("%s(%s)" % (pid, system.show(fields.get("Name", "?"))))
            ppid = fields.get("PPid", "")
            if ppid not in parents:  # each parent waited for once, however many children it has
                parents.add(ppid)
                parent = _thaw_parent(uid, calls, pid, ppid, before)
                if parent:
                    done.append(parent)
        finally:
            if fd is not None:
                os.close(fd)
    return done


def _thaw_rest(uid, stopped, before, done):
    """The safety net after a freeze: SIGCONT, as root, through its pidfd,
    to each process of STOPPED (the pids a scan after it found stopped, none
    of them UID's) that the scan before it did not find stopped (BEFORE),
    that _thaw did not continue (DONE: "pid(name)") and that reach.thawable() (as
    a parent: any uid but UID's) and reach.hers() say is not hers: whatever the
    freeze reached that is not hers is never left stopped. The "pid(name)"
    continued."""
    calls, out = pidfd_calls() or (), []
    skip = set(entry.split("(", 1)[0] for entry in done)
    for pid in sorted(set(stopped) - set(before) - skip, key=int):
        fd = _pinned(calls, pid)
        if fd is not None and fd < 0:
            continue
        try:
            fields = system.status(pid)
            if not reach.thawable(fields, uid, pid, before, False) or reach.hers(pid, fields, uid):
                continue
            try:
                _sender(calls, fd, pid, signal.SIGCONT)()
            except OSError:
                continue
            out.append("%s(%s)" % (pid, system.show(fields.get("Name", "?"))))
        finally:
            if fd is not None:
                os.close(fd)
    return out


class Cut(Exception):
    """SIGTERM came while kill_uid acted (the runner's time is up)."""


def kill_uid(uid, user, until=None, x=None, rounds_max=None):
    """Kill every process of UID (its real uid, as epilog.strays tells
    them), from this very process, which must be one of its own (its uids
    change; the runner ends the worker that ran it, or resets its own
    scheduling when it ran in the runner, so nothing the user could do to
    it while it acted as UID, a renice, a CPU mask or a utilization clamp,
    lasts into another part). The signals come from a process that holds
    real uid X (a uid no process runs as), saved uid 0 and effective uid
    UID, without ever
    exec'ing (execve would copy the effective uid into the saved one):

    * the user cannot signal or trace it into silence: their uid is none of
      its real and saved uids (and it is not dumpable);
    * kill(-1) from it reaches the processes whose real or saved uid is
      UID or X, and every process, whatever its uids, in a user namespace
      UID owns or one nested in it (the owner holds CAP_KILL there): those
      are hers (owner_of, userns_owners), killed in every round kind, never
      spared; no one else's. No process may hold X as its real
      or saved uid (checked first), and of the part 40s of the node (two
      users' job ends at once) each holds an X of its own (kill()'s slot):
      one X would let each reach the other;
    * a process whose saved uid is UID and real uid another's (owner_of's
      "saved": another account, an operator or root running a copy of a
      program the user made setuid to herself) is not hers, and kill(-1)
      would reach it. Each round's scan (the one just before it) lists
      them: while one lives, the round sends no kill(-1, SIGKILL). It
      freezes first: kill(-1, SIGSTOP) from the same sender, which the
      kernel delivers under tasklist_lock to every process it reaches at
      once, and (since Linux 4.19) to a child being forked meanwhile too,
      and a process with a signal pending forks no more: every process of
      hers stops, a fork loop that leaves its session and group at every
      generation too. A scan then finds them all where they stand, and
      _signal_each kills them: whole each process group of hers whose
      session holds no other process (whole_groups), then each other one
      on its own, through a pidfd (a stopped one too: SIGKILL ends it).
      Once they are dead (the round's wait and scan), _thaw undoes the
      freeze for the others it reached: SIGCONT, from the same sender,
      through a pidfd, to each saved-only process stopped now that the
      scan before the freeze did not find stopped (one the user or its
      owner had stopped stays so; a traced one is its tracer's), and, as
      root, to its parent of another uid when that stopped itself
      meanwhile (su, runuser: below); they are reported (spared,
      continued) and otherwise left alone. Between that scan and the
      freeze (the wait of one round, at most about 10 ms) a process can
      come to be one only by another account exec'ing the user's setuid
      file (that account's act, at a moment the user does not choose), by
      a program of root's or of another account setting its own uids so,
      or by a process the user started herself exec'ing another account's
      setuid program that moves her uid to its saved one (it was hers when
      the scan looked); those a kill(-1) in that window reaches (the
      freeze's SIGSTOP, undone as for the others). one_by_one in the
      record counts the rounds of that kind. Then, as root, _thaw_rest
      continues whatever else the freeze stopped that is not hers. The
      freeze is undone whatever cuts the round short (try/finally; the
      runner's SIGTERM, while kill_uid runs in the main thread, raises Cut
      into it, and is sent again to the old handler before returning); no
      frozen round starts with less time left than the last took (bound),
      nor the first with less than FROZEN_SCANS times the kill's first
      scan: until one has run, such a round goes without the freeze (hers
      signalled by group and one by one through pidfds, as _signal_each
      does, which stops nothing: a cut leaves nothing to undo), and a bound
      reached so says why. A second SIGTERM never cuts _unfreeze short.
      A continued saved-only process runs her code: after a thaw the kill
      scans again before it may end done, and ends bound (why:
      kept_coming()) while hers keep coming;
    * each other round sends one signal, kill(-1, SIGKILL), and nothing
      else. The kernel walks its task list for kill(-1) under tasklist_lock,
      which fork needs for writing, and fork refuses a child to a process
      with a fatal signal pending: a fork loop has no child the walk misses,
      and none after it, so one round leaves it no survivor. SIGSTOP only
      where a process not hers is within reach: util-linux su and runuser,
      which run as root, stop themselves when their child stops, and a
      child killed while they are stopped stays their unreaped zombie,
      their PAM session open; a freeze stops every such parent of hers
      (resume_parents(), after the kill, continues each, as it does one the
      user stopped that way) and of a saved-only process (_thaw);
    * after each round, as root again, it waits a little for those it saw
      to die and scans /proc for any process of UID still alive, until none
      is left or the bound (50 rounds, 5 s; ROUNDS_MAX rounds when given)
      is hit. A login that passed its check just before 39
      revoked it is still in progress while root's sshd monitor for it
      ("sshd: USER [priv]", a title only root's sshd can set) lives, so the
      rounds go on until those are gone too (a monitor still at the password
      prompt, which anybody can hold open, only for the first 30 rounds).
      The bound ends at UNTIL (a time.monotonic()) when that is sooner.

    Before each signal it reads its uids back from the kernel and sends
    nothing unless they are exactly effective UID, real X, saved 0. Returns
    a Killed, whose jobs maps each process first seen (the first
    reach.CLASSIFY_MAX of them) that is in a Slurm job's cgroup to its job; the
    process is root again when it returns."""
    if not isinstance(uid, int) or not 1 <= uid <= system.UID_MAX_REAL:
        return Killed("failed", 0, [], [], "uid %r is not one from 1 to 4294967294" % (uid,), {}, [], 0, [])
    if x is None:
        x = 4294967293 if uid == 4294967294 else 4294967294
    if x == uid or not system.UID_MAX_REAL - KILL_SLOTS < x <= system.UID_MAX_REAL:
        return Killed("failed", 0, [], [], "uid X %r is not a kill slot's, or is the user's" % (x,), {}, [], 0, [])
    groups = os.getgroups()
    looked = time.monotonic()
    xs, seen, monitors, others, whole, stopped = reach.scan(uid, user, x)
    scanned = time.monotonic() - looked
    if xs:
        return Killed("refused", 0, [], [], "a process of uid %d runs" % x, {}, others, 0, [])
    seen = [entry for entry in seen if entry not in monitors]
    signalled, spared, told, known = list(seen), list(others), set(others), set(seen)
    jobs = reach.in_jobs(seen, uid)
    deadline = time.monotonic() + SECONDS
    if until is not None:
        deadline = min(deadline, until)
    rounds = one_by_one = alone = 0
    # what a frozen round needs, at least: the last frozen round's time, and
    # before the first, FROZEN_SCANS times the scan just taken and the wait
    # for the dead (every process is read two or three times, each of hers
    # signalled)
    continued, last, real = [], FROZEN_SCANS * scanned + sum(DEAD_PAUSES), list(seen)
    cut, undoing = [], []

    def end(outcome, left=(), why=""):
        if outcome == "bound" and not why and alone:
            why = "too little time was left for a frozen round (about %.1f s): the user's were signalled by group " \
                  "and one by one, nothing stopped, while processes of saved uid hers lived: %s" % (last, some(spared))
        return Killed(outcome, rounds, signalled, list(left), why, jobs, spared, one_by_one, continued)

    def on_term(signum, _frame):
        if not cut:
            cut.append(signum)
            if not undoing:  # an undo under way is let finish: the signal is sent again at the end
                raise Cut()

    try:
        term = signal.signal(signal.SIGTERM, on_term)
        if term is None:
            term = signal.SIG_DFL  # one not set from Python: the runner's worker sets SIG_DFL
    except ValueError:
        term = None  # not the main thread: no handler of ours
    try:
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(x, 0, 0)
        while True:
            frozen = bool(others)
            started = time.monotonic()
            single = False
            if frozen and deadline - started < last:
                # a freeze cut off by the runner's time would leave others stopped
                if one_by_one:
                    return end("bound", real, why=kept_coming(spared))
                # none has run yet: hers are signalled by group and one by
                # one without it, which stops nothing (_signal_each)
                frozen, single = False, True
            rounds += 1
            if single:
                alone += 1
                why = _signal_each(uid, x, seen, whole)
                _wait_dead(seen if not why else (), uid, user)
                _, left, _, others, whole, stopped = reach.scan(uid, user, x)
            elif frozen:
                # Everything kill(-1) reaches stops at once, fork loops
                # too; then hers are killed one by one, and the others it
                # stopped continued (_thaw, once hers are dead), whatever
                # cuts the round short.
                one_by_one += 1
                # found: what the undo of a cut-off round continues first
                before, pending, found = stopped, True, (others, ())
                try:
                    why = _as_user(uid, x, lambda: os.kill(-1, signal.SIGSTOP))
                    if not why:
                        _, now, waited, held, whole, halted = reach.scan(uid, user, x)
                        found = (held, halted)
                        seen = now = [entry for entry in now if entry not in waited]
                        signalled += [entry for entry in now if entry not in known]
                        known.update(now)
                        why = _signal_each(uid, x, seen, whole)
                    _wait_dead(seen if not why else (), uid, user)
                    _, left, _, others, whole, stopped = reach.scan(uid, user, x)
                    found = (others, stopped)
                    thawed = _thaw(uid, x, others, before)
                    thawed += _thaw_rest(uid, stopped, before, thawed)
                    pending = False
                finally:
                    if pending:
                        undoing.append(True)
                        continued += _unfreeze(uid, user, x, before, found)
                        undoing.pop()
                continued += thawed
                if thawed:
                    # a process continued runs again (a saved-only one her
                    # code): never end on a scan taken before that
                    _, left, _, others, whole, stopped = reach.scan(uid, user, x)
                last = time.monotonic() - started
            else:
                why = _as_user(uid, x, lambda: os.kill(-1, signal.SIGKILL))
                _wait_dead(seen if not why else (), uid, user)
                _, left, _, others, whole, stopped = reach.scan(uid, user, x)
            if why:
                return end("failed", why=why)
            spared += [entry for entry in others if entry not in told]
            told.update(others)
            real = [entry for entry in left if not entry.endswith("(sshd: %s [pre-auth])" % user)]
            if rounds >= PATIENCE:
                left = real
            if not left:
                return end("done")
            if rounds >= (rounds_max or ROUNDS) or time.monotonic() > deadline:
                return end("bound", real, why=kept_coming(spared) if one_by_one else "") if real else end("done")
            seen = left
            time.sleep(0.01)
    except Cut:
        return end("failed", why="ended by SIGTERM (the runner's time was up)")
    except OSError as exc:
        return end("failed", why="cannot act as uid %d: %s" % (uid, exc.strerror or exc))
    finally:
        try:
            os.setresuid(0, 0, 0)
            os.setresgid(0, 0, 0)
            os.setgroups(groups)
        except OSError:
            pass
        if term is not None:
            signal.signal(signal.SIGTERM, term)
            if cut:
                os.kill(os.getpid(), signal.SIGTERM)  # the runner's SIGTERM, to its own handler now




def _wait_dead(seen, uid, user):
    """Wait a little (about 0.1 s at most) for SEEN ("pid(name)") to die."""
    for pause in DEAD_PAUSES:
        seen = [entry for entry in seen if (reach.live(entry.split("(", 1)[0], uid, user) or (0,))[0] == 1]
        if not seen:
            return
        time.sleep(pause)


def kept_coming(spared):
    """Why a kill that froze ended at its bound: processes of hers kept
    coming while processes whose saved uid alone is hers (SPARED) lived;
    a saved-only one continued runs her code, and may make more."""
    return "processes of the user's kept coming while processes of saved uid hers lived: %s" % some(spared)


def _unfreeze(uid, user, x, before, found=None):
    """Undo a freeze cut short (an error, SIGTERM): root again; first
    _thaw and _thaw_rest of what the round's last scan since the freeze
    found (FOUND: its saved-only processes and the others stopped), which
    takes no look at every process (the runner's SIGKILL follows its
    SIGTERM 2 s later, and a scan of a node of very many processes can
    take longer); then a scan, and _thaw and _thaw_rest of what it finds
    stopped (a parent that stopped itself since, or all of them when the
    cut came before the round's first scan). The "pid(name)" continued."""
    done = []
    try:
        os.setresuid(x, 0, 0)
        if found is not None:
            done += _thaw(uid, x, found[0], before)
            done += _thaw_rest(uid, found[1], before, done)
        _, _, _, others, _, stopped = reach.scan(uid, user, x)
        done += _thaw(uid, x, others, before)
        return done + _thaw_rest(uid, stopped, before, done)
    except (OSError, Cut):
        return done


def would_kill(uid, user):
    """What kill_uid would signal now, with nothing signalled (observe
    mode): the very scan its first round starts from (every live process
    whose real uid is UID, root's sshd monitors of USER's logins waited
    for, not signalled; those whose saved uid alone is UID spared),
    classified as it classifies them. A Killed whose outcome is would."""
    if not isinstance(uid, int) or not 1 <= uid <= system.UID_MAX_REAL:
        return Killed("failed", 0, [], [], "uid %r is not one from 1 to 4294967294" % (uid,), {}, [], 0, [])
    _, seen, monitors, others, _, _ = reach.scan(uid, user, None)
    seen = [entry for entry in seen if entry not in monitors]
    return Killed("would", 0, seen, [], "", reach.in_jobs(seen, uid), others, 0, [])


def resume_parents(uid, pids):
    """SIGCONT to each stopped process (state T, never a traced one) of
    another uid whose child is a zombie of UID: util-linux su and runuser,
    root's, stop themselves when their child stops (the user can stop their
    own process), and would keep their killed child unreaped and their PAM
    session open until somebody continued them; continued, they reap it and
    exit. Only PIDS (the processes the kill saw: a parent of another uid
    is one's) are looked at, each a read or two. The pids resumed."""
    resumed = []
    for pid in pids:
        try:
            if os.lstat("/proc/" + pid).st_uid != uid:
                continue
        except OSError:
            continue
        fields = system.status(pid)
        uids = system.uids_of(fields)
        if not fields or fields.get("State", "")[:1] != "Z" or not uids or uids[0] != uid:
            continue
        parent = fields.get("PPid", "")
        if not system.digits(parent) or parent in ("0", "1"):
            continue
        above = system.status(parent)
        owner = system.uids_of(above)
        if above and above.get("State", "")[:1] == "T" and owner and owner[0] != uid:
            try:
                os.kill(int(parent), signal.SIGCONT)
                resumed.append("%s(%s)" % (parent, above.get("Name", "?")))
            except OSError:
                pass
    return resumed


def kill_slots(ctx, uid):
    """The kill slots free now, each (descriptor held, its uid X), taken
    one at a time as the caller asks (a generator: the caller closes each
    descriptor). A slot whose lock another part 40 holds is passed over;
    when all are held, it waits for one, polling, within SECONDS and the
    part's deadline. run_dir is made, root's alone, when missing (a part
    run on its own before any chain); when it is not a directory only root
    can write (anybody could hold its locks), the one slot is the first X,
    without a lock (None), as a lone part 40 would have it."""
    run_dir = ctx.settings["run_dir"]
    if not os.path.lexists(run_dir):
        try:
            os.mkdir(run_dir, 0o700)
        except OSError:
            pass
    if not ctx.trust.root_only(run_dir):
        ctx.log("warning", "%s is not a directory only root can write: killing without a kill slot" % run_dir)
        yield None, system.UID_MAX_REAL - (1 if uid == system.UID_MAX_REAL else 0)
        return
    until = min(time.monotonic() + SECONDS, ctx.deadline - SECONDS - 1)
    slots = [i for i in range(KILL_SLOTS) if system.UID_MAX_REAL - i != uid]
    tried, pause = set(), 0.001
    while True:
        for i in slots:
            x = system.UID_MAX_REAL - i
            if i in tried:
                continue
            name = KILL_LOCK if i == 0 else "%s.%d" % (KILL_LOCK, i)
            try:
                fd = os.open(os.path.join(run_dir, name), os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                             | os.O_NOCTTY | os.O_CLOEXEC, 0o600)
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o077 \
                        and system.wait_lock(fd, 0):
                    tried.add(i)
                    yield fd, x
                    continue
            except OSError:
                pass
            os.close(fd)
        if len(tried) == len(slots) or time.monotonic() + pause > until:
            return
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def kill(ctx):
    """40: every process of the user, killed from a kill slot of its own.
    A slot whose X some process holds (a part 40 stuck past its end) is
    passed over for the next; with no slot to be had, nothing is sent."""
    uid = ctx.act_uid
    result = Killed("refused", 0, [], [], "no kill slot was free (%s/%s*: each held by another part 40)"
                    % (ctx.settings["run_dir"], KILL_LOCK), {}, [], 0, [])
    if registry.observing(ctx.settings):
        result = would_kill(uid, ctx.user)
    for fd, x in kill_slots(ctx, uid) if result.outcome != "would" else ():
        try:
            result = kill_uid(uid, ctx.user, until=ctx.deadline - 0.5, x=x)
        finally:
            if fd is not None:
                os.close(fd)
        if result.outcome != "refused":
            break
    resumed = resume_parents(uid, [entry.split("(", 1)[0] for entry in result.signalled]) \
        if result.outcome in ("done", "bound") else []
    classified = min(len(result.signalled), reach.CLASSIFY_MAX)
    own, other, unknown = reach.job_cgroups(result.jobs, ctx.job, ctx.env.get("SLURM_JOB_SLUID"))
    fact = {"outcome": result.outcome, "rounds": result.rounds, "signalled": len(result.signalled),
            "strays": classified - len(result.jobs), "in_job_cgroup": len(own), "in_other_job_cgroup": len(other),
            "unclassified": len(result.signalled) - classified + len(unknown), "resumed": len(resumed),
            "saved_only": len(result.spared), "one_by_one": result.one_by_one, "continued": len(result.continued)}
    if result.spared:
        fact["saved_only_first"] = result.spared[:20]
    if result.outcome == "bound" and result.why:
        fact["why"] = result.why
    if result.outcome == "would":
        fact["would"] = True
    ctx.fact("kill", fact)
    if result.spared:
        # another account's (a job's, an operator's, root's) run of a program
        # the user made setuid to herself: not hers, and kill(-1) would reach it
        how = "; the user's would be frozen with SIGSTOP, then killed by group and one by one" \
            if result.outcome == "would" else "; the user's were frozen with SIGSTOP, then killed by group and one " \
            "by one, in %d round(s); continued again, of those the freeze stopped: %s" \
            % (result.one_by_one, some(result.continued)) if result.one_by_one else ""
        ctx.log("warning", "left alone the processes whose saved uid is %d but real uid another's (a program of "
                "the user's, setuid to her, run by another account): %s%s" % (uid, some(result.spared), how))
    if resumed:
        ctx.log("info", "resumed the stopped parents of killed processes of uid %d (su, runuser): %s"
                % (uid, some(resumed)))
    signalled = some(result.signalled)
    if own:
        # Under proctrack/cgroup Slurm ends what is in the job's cgroup before
        # the epilog: one still there is Slurm's kill of it not yet done.
        signalled += "; of them in this job's cgroup: %s" % some(sorted(own))
    if other:
        # In another job's cgroup: a job of the user's here that the evidence
        # did not see, or one whose cgroup Slurm could not empty.
        ctx.log("warning", "processes of uid %d were in the cgroup of another Slurm job, %s with the rest: %s"
                % (uid, "would be killed" if result.outcome == "would" else "killed", some(other)))
    if unknown:
        ctx.log("warning", "processes of uid %d were in a cgroup whose Slurm layout the chain cannot read (counted "
                "unclassified), %s with the rest: %s" % (uid, "would be killed" if result.outcome == "would"
                                                         else "killed", some(unknown)))
    if result.outcome == "would":
        ctx.log("info", "would kill the processes of uid %d (observe mode, epilog:mode: none signalled): %s"
                % (uid, signalled))
    elif result.outcome == "done":
        ctx.log("info", "killed the processes of uid %d (%d round(s)): %s" % (uid, result.rounds, signalled))
    elif result.outcome == "bound":
        ctx.log("warning", "processes of uid %d survived %d %s; gave up (bound: %d rounds or %d s)%s; killed first: %s"
                % (uid, result.rounds, some(result.left), ROUNDS, SECONDS,
                   " (%s)" % result.why if result.why else "", signalled))
    elif result.outcome == "refused":
        ctx.log("warning", "did not kill the processes of uid %d: %s; the sender would reach them too"
                % (uid, result.why))
    else:
        ctx.log("warning", "could not kill the processes of uid %s (%s)" % (uid, result.why))

