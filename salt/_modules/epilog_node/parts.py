"""What each of the formula's parts does, once it runs:

  39-lastuserjob-ssh        revoke: remove the user's line from the ssh allow
                            file (before 40 kills: no new login after it)
  40-lastuserjob-processes  kill every process of the job's uid
  42-lastuserjob-cleanup    remove the uid's files under /tmp and /dev/shm
  45-stale-x-display        sweep the residue no live process holds
  50-exclusive-ssh          grant: add the user's line (a prolog part), only
                            for a user the guard says act for, as 39-42

The runner decides whether a part runs (the guard, the last-job evidence,
the deadlines) and runs it in a process of its own; a part run on its own
(by hand) asks the guard itself. Each part's action reports what it changed
as facts for the job end's record (ctx.fact). The edit of the allow file is
a decision of its own: allow_change(op, user, lines).
"""
import errno
import os
import stat
import time

from . import guard, system, walk
from .system import signal

# -- 39 and 50: the ssh allow file ------------------------------------------------
# how long an edit waits for ssh_allow.lock at most (within its part's deadline)
LOCK_WAIT = 10

def allow_lines(data):
    """The allow file's lines as a shell's mapfile reads them: without their
    newline, a last line without one still a line."""
    if not data:
        return []
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return lines


def _name(line):
    return line[:-1] if line.endswith(b"\r") else line


def _filler(line):
    """A line an in-place edit left: #s only, which no account is named."""
    return bool(line) and not _name(line).strip(b"#")


def allow_change(op, user, lines):
    """(change, new lines or None) of adding (op "add") or removing
    ("remove") the line USER (bytes) among LINES: whole-line equality, a CR
    at the end of a line ignored; every other line, blank ones too, kept as
    it is, but for the lines of #s an in-place edit left (in_place_writes);
    never a duplicate. change: added, removed, present (add: already there)
    or absent (remove: not there)."""
    present = any(_name(line) == user for line in lines)
    if op == "add":
        return ("present", None) if present else ("added", [line for line in lines if not _filler(line)] + [user])
    if not present:
        return "absent", None
    return "removed", [line for line in lines if _name(line) != user and not _filler(line)]


def in_place_writes(op, user, data):
    """The writes [(offset, bytes)], in order, that make the change of
    allow_change in the file DATA itself, when the file system has no room
    for a new file: nothing moves and the file never gets shorter, so no
    torn state (a part stopped between two writes, a write cut short, a
    reader in the middle of one) holds a name that is neither in the file
    before nor after. A revoke overwrites each of USER's lines with as many
    #s (no account is named with a #; a half-written one is a name with #s
    in it); a grant appends a line of #s, then writes USER over it."""
    if op == "remove":
        writes, offset = [], 0
        for line in data.split(b"\n"):
            if _name(line) == user:
                writes.append((offset, b"#" * len(user)))
            offset += len(line) + 1
        return writes
    lead = b"\n" if data and not data.endswith(b"\n") else b""
    return [(len(data), lead + b"#" * len(user) + b"\n"), (len(data) + len(lead), user)]


def _in_place(path, writes, old, size, done):
    """Make WRITES (in_place_writes) in the very file PATH, which must still
    be the one of OLD (its lstat) and SIZE bytes long; DONE[0] counts the
    writes made whole. OSError when one cannot be."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not os.path.samestat(old, st) or st.st_size != size:
            raise OSError(errno.ESTALE, "changed while it was edited")
        for offset, data in writes:
            view = memoryview(data)
            while view:
                view = view[os.pwrite(fd, view, offset + len(data) - len(view)):]
            done[0] += 1
        os.fsync(fd)
    finally:
        os.close(fd)


def allow_edit(ctx, op, user):
    """Add or remove USER's exact line in the ssh allow file, under the lock
    of ssh_allow.lock (root's, 0600: no other account can open it, so none
    can hold the lock). The file is replaced whole by a rename; when the
    file system has no room for a new file (no free inode: any user can use
    them up where /var/tmp and /etc share one), it is edited in place
    (in_place_writes), so that a revoke never fails open there. The record
    gets what changed: added, removed, present, absent, or left alone (the
    log says why); in observe mode a revoke decides under the lock and
    writes nothing: would remove."""
    change = allow_change_here(ctx, op, user)
    fact = {"op": op, "change": change}
    if change.startswith("would "):
        fact["would"] = True
    ctx.fact("allow", fact)


def allow_change_here(ctx, op, user):
    path, lock = ctx.names["allow_file"], ctx.names["allow_lock"]
    directory = os.path.dirname(path) or "/"
    if not ctx.trust.root_only(directory):
        ctx.log("warning", "%s is not a directory only root can write; %s left alone" % (directory, path))
        return "left alone"
    lock_fd = None
    try:
        lock_fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        lock_st = os.fstat(lock_fd)
        if not stat.S_ISREG(lock_st.st_mode) or lock_st.st_uid != 0:
            raise OSError(errno.EPERM, "not root's regular file")
        if lock_st.st_mode & 0o077:
            # another account could open it, and hold it for ever: root's
            # alone again (a descriptor opened meanwhile stays; verify
            # names the mode the state lays down)
            os.fchmod(lock_fd, 0o600)
            ctx.log("warning", "%s was mode %04o; made 0600" % (lock, stat.S_IMODE(lock_st.st_mode)))
    except OSError:
        if lock_fd is not None:
            os.close(lock_fd)
        ctx.log("warning", "cannot lock %s to edit %s; left alone" % (lock, path))
        return "left alone"
    try:
        # within the part's own deadline: a part stopped at its timeout says nothing
        if not system.wait_lock(lock_fd, max(0, min(LOCK_WAIT, ctx.deadline - time.monotonic() - 0.5))):
            ctx.log("warning", "cannot lock %s to edit %s; left alone" % (lock, path))
            return "left alone"
        try:  # only under the lock: what another edit did before it is kept
            old = os.lstat(path)
        except FileNotFoundError:
            old = None
        except OSError:
            old = False
        if old is False or (old is not None and not stat.S_ISREG(old.st_mode)):
            ctx.log("warning", "ssh allow file %s is not a regular file; left alone" % path)
            return "left alone"
        try:
            data = system.read_file(path, 16 << 20) if old is not None else b""
        except OSError:
            ctx.log("warning", "cannot read %s; left alone" % path)
            return "left alone"
        name = os.fsencode(user)
        change, lines = allow_change(op, name, allow_lines(data))
        if lines is None:
            ctx.log("info", ("already in %s" if change == "present" else "not in %s; nothing to remove") % path)
            return change
        if op == "remove" and observing(ctx.settings):
            ctx.log("info", "would remove the line from %s (observe mode, epilog:mode: nothing written)" % path)
            return "would " + op
        new = b"".join(line + b"\n" for line in lines)
        where = ""
        try:
            system.replace_file(path, new, old)
        except OSError as exc:
            if old is None:
                ctx.log("warning", "could not %s the line in %s (%s); left as it was" % (op, path, exc.strerror))
                return "left alone"
            writes = in_place_writes(op, name, data)
            done = [0]
            try:
                _in_place(path, writes, old, len(data), done)
            except OSError as again:
                said = "%s, then in place: %s" % (exc.strerror, again.strerror or again)
                if op == "remove":
                    ctx.log("warning", "could not remove the line from %s (%s); %d of the user's %d line(s) overwritten "
                            "with #s" % (path, said, done[0], len(writes)))
                else:
                    ctx.log("warning", "could not add the line to %s (%s); at most a line of #s added" % (path, said))
                return "left alone"
            where = " (in place: no room for a new file, %s)" % exc.strerror
        ctx.log("info", ("added to %s%s" if op == "add" else "removed from %s%s") % (path, where))
        return change
    finally:
        os.close(lock_fd)


def revoke_ssh(ctx):
    allow_edit(ctx, "remove", ctx.user)


# what part 39, not run because a lookup failed, says of the line 50 granted
LINE_STAYS = ("the user's line in %s, if any, stays until a job end of theirs here at which the lookups succeed, "
              "or until removed by hand")


def never_revoked(lines, verdict_of):
    """[(name, why)] of the allow file's LINES (allow_lines) that part 39
    would never remove: each name once, as it reads it (a CR at the end
    ignored; blank lines and the #s of an in-place edit are no name).
    VERDICT_OF: name (str) -> the guard's verdict at a job end of that
    account (guard.judge_names). A name the guard acts for goes at its last
    job end, one it cannot judge for a lookup error at a job end where the
    lookup succeeds; any other (listed, system account, unknown user) never:
    WHY is guard.spared_as."""
    out, seen = [], set()
    for line in lines:
        name = _name(line)
        if not name or _filler(line) or name in seen:
            continue
        seen.add(name)
        verdict = verdict_of(os.fsdecode(name))
        if verdict.answer != "act" and verdict.listed != "lookup error":
            out.append((os.fsdecode(name), guard.spared_as(verdict)))
    return out


def grant_ssh(ctx):
    """50: the user's line, only for a user the lastuserjob parts act for
    (guard.check, the one rule of both ends): a line part 39 would never
    remove (a listed operator's, root's, a system account's, or one for a
    user whose lookup failed) is never granted. One line says why not;
    the record's fact is allow: {op: add, change: not granted, why}."""
    verdict = guard.check(ctx.identity, ctx.user, ctx.names["localusers"])
    if verdict.answer == "act":
        allow_edit(ctx, "add", ctx.user)
        return
    why = guard.spared_as(verdict)
    ctx.fact("allow", {"op": "add", "change": "not granted", "why": why})
    ctx.log(verdict.level, "%s; not added to %s (%s: part 39 would never remove the line)"
            % (verdict.why, ctx.names["allow_file"], why))


# -- 40: the kill -----------------------------------------------------------------
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
# The processes whose cgroup the record reads before the first round: the
# read costs as much as the scan's own, and a fork loop gains that time.
CLASSIFY_MAX = 1000
# pidfd_open and pidfd_send_signal, by machine: the numbers every
# architecture's table shares since Linux 5.1 (alpha's and ia64's differ:
# those signal by pid)
PIDFD_SYSCALLS = {machine: (434, 424) for machine in ("x86_64", "i686", "aarch64", "armv7l", "ppc64le", "ppc64",
                                                      "s390x", "riscv64", "loongarch64")}


def some(found):
    """N, then the first 20 of FOUND, and ... when there are more."""
    n = len(found)
    return str(n) + ((" " + " ".join(found[:20]) + (" ..." if n > 20 else "")) if n else "")


def owner_of(uids, uid, x=None, ns_owners=()):
    """Whose a process whose uids are UIDS (real, effective, saved) is, to a
    kill of UID's processes sent from a process of real uid X, effective
    UID: "x" when its real or saved uid is X; "user" when its real uid is
    UID (the user's, as epilog.strays tells processes apart), or when UID is
    in NS_OWNERS (userns_owners(): the owners of its user namespace and of
    each above it), whatever its uids: she owns that namespace, so she holds
    every capability in it (CAP_KILL: kill(-1) from her reaches it; a
    subordinate uid of hers through newuidmap, or root of the host who
    entered it, is hers to end there); "saved" when
    its saved uid is UID and its real uid another's (another account, an
    operator or root running a program the user made setuid to herself):
    kill(-1) from the sender would reach it (the kernel lets a signal reach
    every process whose real or saved uid is the sender's real or
    effective uid), and it is not the user's; None otherwise (an effective
    uid of UID alone is out of the sender's reach)."""
    real, _, saved = uids
    if x is not None and x in (real, saved):
        return "x"
    if real == uid or uid in ns_owners:
        return "user"
    if saved == uid:
        return "saved"
    return None


# ioctl(2) on a /proc/PID/ns/user descriptor (linux/nsfs.h): the uid that
# owns it (writes a uid_t), and its parent's descriptor (EPERM at the top)
NS_GET_PARENT, NS_GET_OWNER_UID = 0xb702, 0xb704
# user namespaces nest at most 32 deep
NS_DEPTH = 33
_init_ns = []  # [(st_dev, st_ino)] of PID 1's user namespace, once read


def userns_owners(pid):
    """The uids that own PID's user namespace and each one above it, asked
    of the kernel (NS_GET_OWNER_UID, then NS_GET_PARENT up to where it
    answers EPERM), as root; () for a process in PID 1's (a stat alone; the
    chain's own where PID 1's cannot be read) or one that cannot be read
    (gone)."""
    import fcntl  # pylint: disable=import-outside-toplevel - only a process in a namespace of its own needs it
    import struct  # pylint: disable=import-outside-toplevel

    if not _init_ns:
        for where in ("/proc/1/ns/user", "/proc/self/ns/user"):
            try:
                st = os.stat(where)  # PID 1's, or (not readable: a sandbox) the chain's own
                _init_ns.append((st.st_dev, st.st_ino))
                break
            except OSError:
                continue
        else:
            _init_ns.append(None)
    try:
        fd = os.open("/proc/%s/ns/user" % pid, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return ()
    owners = []
    try:
        for _ in range(NS_DEPTH):
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == _init_ns[0]:
                break
            raw = bytearray(4)
            fcntl.ioctl(fd, NS_GET_OWNER_UID, raw, True)
            owners.append(struct.unpack("=I", bytes(raw))[0])
            parent = fcntl.ioctl(fd, NS_GET_PARENT)
            os.close(fd)
            fd = parent
    except OSError:
        pass
    finally:
        os.close(fd)
    return tuple(owners)


def whole_groups(mine, others):
    """The process groups a round may signal whole when kill(-1) may not
    be sent: the pgids of MINE ([(pgid, sid)] of the user's processes)
    whose session holds no process of OTHERS (the sessions of every other
    live process the scan read). Only a process of that session can join
    one of its groups (setpgid), and a child is born in its parent's: a
    process of another real uid can come into it only by one of hers
    exec'ing another account's setuid program that moves its real uid
    away. A signal to the group reaches each of its members at once, a
    fork loop's children too (as kill(-1) does), and no other process; a
    pgid or sid not known (0, before Linux 4.1) is no group."""
    return {pgid for pgid, sid in mine if pgid > 0 and sid > 0 and sid not in others}


def _ids(fields):
    """(pgid, sid) of a status, as this pid namespace numbers them; 0 when
    not told."""
    out = []
    for key in ("NSpgid", "NSsid"):
        value = (fields.get(key) or "").split()
        out.append(int(value[0]) if value and system.digits(value[0]) else 0)
    return tuple(out)


def _live(pid, uid, user, x=None, fields=None):
    """(1, name) when PID is a live process of UID (owner_of's "user": its
    real uid, or a user namespace of UID's); (5,
    name, R) when its saved uid is UID and its real uid R another's
    (owner_of's "saved"); (2, title) when it is root's sshd monitor of a
    login of USER still in progress; (3, title) when that login is still
    at its password prompt; (4, name) when its real or saved uid is X;
    else None. A zombie is dead, unless its other threads still run. Names
    are as system.show() writes them. FIELDS: its status, when read."""
    if fields is None:
        fields = system.status(pid)
    if not system.alive(fields):
        return None
    uids = system.uids_of(fields)
    if uids is None:
        return None
    real, effective, _ = uids
    name = system.show(fields.get("Name", "?"))
    owner = owner_of(uids, uid, x)
    if owner not in ("x", "user"):
        owner = owner_of(uids, uid, x, userns_owners(pid))
    if owner == "x":
        return 4, name
    if owner == "user":
        return 1, name
    if owner == "saved":
        return 5, name, real
    if real == 0 and effective == 0 and name.startswith("sshd"):
        title = system.cmdline(pid, 256)
        for head in (b"sshd: ", b"sshd-session: "):
            if title.startswith(head + os.fsencode(user) + b" [priv]"):
                break
        else:
            return None
        # sshd titles its monitor so as soon as the user name is known,
        # before authentication: a login still at its password prompt has a
        # child of the privilege separation user. Anybody can hold one open,
        # so it is waited for only briefly, and never reported.
        try:
            with open("/proc/%s/task/%s/children" % (pid, pid), "rb") as handle:
                kids = handle.read(4096).split()
        except OSError:
            kids = []
        for kid in kids:
            try:
                owner = os.lstat(b"/proc/" + kid).st_uid
            except OSError:
                continue
            if owner not in (0, uid):
                return 3, "sshd: %s [pre-auth]" % user
        return 2, "sshd: %s [priv]" % user
    return None


def _scan(uid, user, x):
    """(whether X runs any process, "pid(name)" of the live processes of UID
    (real uid) and the sshd monitors of USER's logins, those of the
    monitors alone: told by what _live found, root's sshd, never by a
    name, which a process of UID can give itself; "pid(name) uid R" of the
    processes whose saved uid is UID and real uid R another's; {"pid(name)":
    pgid} of the processes of UID whose group whole_groups() lets a round
    signal whole; the pids of the other processes that were stopped, state
    T or t, when read). Every process costs a read of its status (its saved uid
    is nowhere else, and a process running the user's setuid program may
    have given its effective uid, which names /proc/PID, back to its real
    owner), but root's without an executable (kernel threads)."""
    xs, found, monitors, others, stopped, me = False, [], [], [], set(), os.getpid()
    mine, sessions = {}, {_ids(system.status(me) or {})[1]}
    for pid in system.pids():
        if int(pid) == me:
            continue
        try:
            owner = os.lstat("/proc/" + pid).st_uid
        except OSError:
            continue
        if owner == x:
            # a zombie of X holds nothing (a PID 1 that never reaps keeps one)
            if system.alive(system.status(pid)):
                xs = True
            continue
        if owner == 0:
            try:
                os.readlink("/proc/%s/exe" % pid)
            except OSError:
                continue
        fields = system.status(pid)
        seen = _live(pid, uid, user, x, fields)
        if seen and seen[0] == 1:
            found.append("%s(%s)" % (pid, seen[1]))
            mine[found[-1]] = _ids(fields)
            continue
        if system.alive(fields):
            sessions.add(_ids(fields)[1])
            if fields.get("State", "")[:1] in ("T", "t"):
                stopped.add(pid)
        if seen and seen[0] == 4:
            xs = True
        elif seen and seen[0] == 5:
            others.append("%s(%s) uid %d" % (pid, seen[1], seen[2]))
        elif seen:
            found.append("%s(%s)" % (pid, seen[1]))
            monitors.append(found[-1])
    whole = whole_groups(mine.values(), sessions)
    return xs, found, monitors, others, {entry: ids[0] for entry, ids in mine.items() if ids[0] in whole}, stopped


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
    (hers()), one at a time: its pidfd opened first (as root), then its status
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
            if not system.alive(fields) or not hers(pid, fields, uid):
                continue
            why = _as_user(uid, x, (lambda fd=fd, send=calls[1]: send(fd, signal.SIGKILL)) if fd is not None
                           else (lambda pid=pid: os.kill(pid, signal.SIGKILL)))
            if why:
                return why
        finally:
            if fd is not None:
                os.close(fd)
    return None


def thawable(fields, uid, pid, before, saved):
    """Whether a freeze's SIGSTOP is to be undone for the process PID whose
    status is FIELDS (read while its pidfd pins it): it is stopped (state
    T: a traced one, t, is its tracer's to resume), was not when the scan
    before the freeze read it (BEFORE: the pids it found stopped; one the
    user or its owner stopped stays so), its real uid is not UID (hers are
    killed) and, when SAVED (a process the freeze reached), its saved uid
    is UID; else (a parent of one, which stopped itself because its child
    stopped: util-linux su and runuser do) any uid's."""
    if not fields or pid in before or fields.get("State", "")[:1] != "T":
        return False
    uids = system.uids_of(fields)
    if not uids or uids[0] == uid:
        return False
    return uids[2] == uid or not saved


def hers(pid, fields, uid):
    """Whether the process PID, whose status is FIELDS, is UID's to kill
    (owner_of's "user": its real uid, or a user namespace of UID's)."""
    uids = system.uids_of(fields)
    if not uids:
        return False
    return uids[0] == uid or owner_of(uids, uid, None, userns_owners(pid)) == "user"


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
    (still pinned by its pidfd), when thawable() says so of it, it is not
    UID's (hers()) and PID's parent is still PPID once PPID's pidfd is open
    (a pid reused meanwhile is not reached). "pid(name)", or None."""
    if ppid in ("0", "1") or not system.digits(ppid):
        return None
    _parent_stopped(ppid)
    fd = _pinned(calls, ppid)
    if fd is not None and fd < 0:
        return None
    try:
        fields = system.status(ppid)
        if (system.status(pid) or {}).get("PPid") != ppid or not thawable(fields, uid, ppid, before, False) \
                or hers(ppid, fields, uid):
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
    thawable() says the freeze stopped, from the sender (effective UID,
    as the SIGSTOP came) through its pidfd; then, as root, to its parent
    (_thaw_parent: waited for a few ms to stop itself). The "pid(name)"
    continued."""
    calls, done = pidfd_calls() or (), []
    for entry in others:
        pid = entry.split("(", 1)[0]
        fd = _pinned(calls, pid)
        if fd is not None and fd < 0:
            continue  # gone
        try:
            fields = system.status(pid)
            if not thawable(fields, uid, pid, before, True) or hers(pid, fields, uid):
                continue
            _as_user(uid, x, _sender(calls, fd, pid, signal.SIGCONT))
            done.append("%s(%s)" % (pid, system.show(fields.get("Name", "?"))))
            parent = _thaw_parent(uid, calls, pid, fields.get("PPid", ""), before)
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
    that _thaw did not continue (DONE: "pid(name)") and that thawable() (as
    a parent: any uid but UID's) and hers() say is not hers: whatever the
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
            if not thawable(fields, uid, pid, before, False) or hers(pid, fields, uid):
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
      frozen round starts with less time left than the last took (bound).
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
    CLASSIFY_MAX of them) that is in a Slurm job's cgroup to its job; the
    process is root again when it returns."""
    if not isinstance(uid, int) or not 1 <= uid <= system.UID_MAX_REAL:
        return Killed("failed", 0, [], [], "uid %r is not one from 1 to 4294967294" % (uid,), {}, [], 0, [])
    if x is None:
        x = 4294967293 if uid == 4294967294 else 4294967294
    if x == uid or not system.UID_MAX_REAL - KILL_SLOTS < x <= system.UID_MAX_REAL:
        return Killed("failed", 0, [], [], "uid X %r is not a kill slot's, or is the user's" % (x,), {}, [], 0, [])
    groups = os.getgroups()
    xs, seen, monitors, others, whole, stopped = _scan(uid, user, x)
    if xs:
        return Killed("refused", 0, [], [], "a process of uid %d runs" % x, {}, others, 0, [])
    seen = [entry for entry in seen if entry not in monitors]
    signalled, spared, told, known = list(seen), list(others), set(others), set(seen)
    jobs = _in_jobs(seen, uid)
    deadline = time.monotonic() + SECONDS
    if until is not None:
        deadline = min(deadline, until)
    rounds = one_by_one = 0
    continued, last, real = [], 0.0, list(seen)
    cut = []

    def end(outcome, left=(), why=""):
        return Killed(outcome, rounds, signalled, list(left), why, jobs, spared, one_by_one, continued)

    def on_term(signum, _frame):
        if not cut:
            cut.append(signum)
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
            if frozen and rounds and deadline - started < last:
                # a freeze cut off by the runner's time would leave others stopped
                return end("bound", real, why=kept_coming(spared))
            rounds += 1
            if frozen:
                # Everything kill(-1) reaches stops at once, fork loops
                # too; then hers are killed one by one, and the others it
                # stopped continued (_thaw, once hers are dead), whatever
                # cuts the round short.
                one_by_one += 1
                before, pending = stopped, True
                try:
                    why = _as_user(uid, x, lambda: os.kill(-1, signal.SIGSTOP))
                    if not why:
                        _, now, waited, _, whole, _ = _scan(uid, user, x)
                        seen = now = [entry for entry in now if entry not in waited]
                        signalled += [entry for entry in now if entry not in known]
                        known.update(now)
                        why = _signal_each(uid, x, seen, whole)
                    _wait_dead(seen if not why else (), uid, user)
                    _, left, _, others, whole, stopped = _scan(uid, user, x)
                    thawed = _thaw(uid, x, others, before)
                    thawed += _thaw_rest(uid, stopped, before, thawed)
                    pending = False
                finally:
                    if pending:
                        continued += _unfreeze(uid, user, x, before)
                continued += thawed
                if thawed:
                    # a process continued runs again (a saved-only one her
                    # code): never end on a scan taken before that
                    _, left, _, others, whole, stopped = _scan(uid, user, x)
            else:
                why = _as_user(uid, x, lambda: os.kill(-1, signal.SIGKILL))
                _wait_dead(seen if not why else (), uid, user)
                _, left, _, others, whole, stopped = _scan(uid, user, x)
            last = time.monotonic() - started
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
    for wait in range(1, 21):
        seen = [entry for entry in seen if (_live(entry.split("(", 1)[0], uid, user) or (0,))[0] == 1]
        if not seen:
            return
        time.sleep(0.0005 * wait)


def kept_coming(spared):
    """Why a kill that froze ended at its bound: processes of hers kept
    coming while processes whose saved uid alone is hers (SPARED) lived;
    a saved-only one continued runs her code, and may make more."""
    return "processes of the user's kept coming while processes of saved uid hers lived: %s" % some(spared)


def _unfreeze(uid, user, x, before):
    """Undo a freeze cut short (an error, SIGTERM): root again, a scan,
    then _thaw and _thaw_rest of what it found stopped. The "pid(name)"
    continued."""
    try:
        os.setresuid(x, 0, 0)
        _, _, _, others, _, stopped = _scan(uid, user, x)
        done = _thaw(uid, x, others, before)
        return done + _thaw_rest(uid, stopped, before, done)
    except (OSError, Cut):
        return []


def _in_jobs(seen, uid):
    """{"pid(name)": job} (system.job_of_cgroup()) of the first CLASSIFY_MAX
    of SEEN that are in a Slurm job's cgroup (proctrack/cgroup: the job's,
    which Slurm kills) or in one whose layout cannot be told; the others
    run outside any job. For the record alone: kill(-1) reaches
    both alike."""
    jobs = {}
    for entry in seen[:CLASSIFY_MAX]:
        job = system.job_cgroup(entry.split("(", 1)[0], uid)
        if job is not None:
            jobs[entry] = job
    return jobs


def job_cgroups(jobs, job, sluid=None):
    """(own, other, unknown) of JOBS ({"pid(name)": system.job_of_cgroup()}):
    the entries in the cgroup of the ending JOB (its id, or its SLUID, which
    26.05's slurmd gives the epilog as SLURM_JOB_SLUID and its cgroup/v2
    names job directories by), "pid(name) job J" of those in another job's,
    "pid(name): why" of those whose layout cannot be told."""
    own, other, unknown = [], [], []
    for entry, found in jobs.items():
        if found[0] == "unknown":
            unknown.append("%s: %s" % (entry, found[1]))
        elif found == ("id", job) or (sluid and found == ("sluid", sluid)):
            own.append(entry)
        else:
            other.append("%s job %s" % (entry, found[1]))
    return own, sorted(other), sorted(unknown)


def would_kill(uid, user):
    """What kill_uid would signal now, with nothing signalled (observe
    mode): the very scan its first round starts from (every live process
    whose real uid is UID, root's sshd monitors of USER's logins waited
    for, not signalled; those whose saved uid alone is UID spared),
    classified as it classifies them. A Killed whose outcome is would."""
    if not isinstance(uid, int) or not 1 <= uid <= system.UID_MAX_REAL:
        return Killed("failed", 0, [], [], "uid %r is not one from 1 to 4294967294" % (uid,), {}, [], 0, [])
    _, seen, monitors, others, _, _ = _scan(uid, user, None)
    seen = [entry for entry in seen if entry not in monitors]
    return Killed("would", 0, seen, [], "", _in_jobs(seen, uid), others, 0, [])


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
    if observing(ctx.settings):
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
    classified = min(len(result.signalled), CLASSIFY_MAX)
    own, other, unknown = job_cgroups(result.jobs, ctx.job, ctx.env.get("SLURM_JOB_SLUID"))
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


# -- 42: the user's files ---------------------------------------------------------
CLEANED = ("/tmp", "/dev/shm")


class _Late(Exception):
    """Part 42's deadline came before its walk was done."""


class _Clear(walk.Rules):
    """Part 42's rules for the walk of TOP (walk.py: never a symlink
    followed, never TOP's file system or tree left, descriptors bounded at
    any depth): what UID owns goes, at every depth; another account's entry
    stays, and so do the directories on the path to it (a directory of
    UID's kept so counts as an error, as rmdir would find it not empty);
    another account's directory is walked into, never removed; a mount
    point stays. TEST (observe mode): the same walk, with nothing unlinked
    or removed; what would go is counted as removed. Counts what went and
    the errors: what could not be looked at or removed, a branch moved out
    of the walk, the deadline."""

    def __init__(self, uid, deadline, test=False):
        self.uid = uid
        self.deadline = deadline
        self.test = test
        self.removed_count = self.errors = 0

    def check(self):
        if time.monotonic() > self.deadline:
            raise _Late()

    def judge(self, tree, name, st):
        if st.st_dev != tree.device:
            return walk.KEEP  # another file system, mounted here: never entered
        if stat.S_ISDIR(st.st_mode):
            return walk.ENTER
        return walk.REMOVE if st.st_uid == self.uid else walk.KEEP

    def leave(self, tree, name, st, whole):
        if st.st_uid != self.uid:
            return walk.KEEP
        if not whole:
            self.errors += 1
            return walk.KEEP
        return walk.REMOVE

    def removed(self, tree, name, st):
        self.removed_count += 1

    def failed(self, tree, name, exc, doing):
        self.errors += 1

    def run(self, top):
        """(removed, errors) under TOP."""
        try:
            top_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return 0, 0
        except OSError:
            return 0, 1
        try:
            walk.Walk(top_fd, self, top).run()
        except _Late:
            self.errors += 1
        finally:
            os.close(top_fd)
        return self.removed_count, self.errors


def _clear(top, uid, deadline, test=False):
    """Remove what UID owns under TOP by _Clear's rules: (removed, errors)."""
    return _Clear(uid, deadline, test).run(top)


# part 42's time, shared: /tmp's walk, then /dev/shm's, then System V IPC,
# each until its share of what is left (time one leaves unused goes to the
# next), so that a tree no walk gets through in time (a user's millions of
# entries, which every user's part 42 walks: another's entry may lie in it)
# leaves /dev/shm and IPC their time
SHARES = (2, 1, 1)


def share_until(deadline, shares, now=None):
    """When a step whose share is SHARES[0], of the steps SHARES still to
    run, is to stop, of the time left until DEADLINE."""
    now = time.monotonic() if now is None else now
    return now + max(0.0, deadline - now) * shares[0] / float(sum(shares))


def cleanup(ctx):
    uid = ctx.act_uid
    removed = errors = 0
    would = observing(ctx.settings)
    shares = SHARES if ctx.settings.get("ipc_cleanup", True) else SHARES[:-1]
    for i, top in enumerate(CLEANED):
        done, failed = _clear(top, uid, share_until(ctx.deadline, shares[i:]), test=would)
        removed += done
        errors += failed
    fact = {"removed": removed, "rc": 1 if errors else 0}
    said = "removed"
    if would:
        fact["would"] = True
        said = "would remove (observe mode, epilog:mode: nothing removed)"
    ctx.fact("cleanup", fact)
    if errors:
        ctx.log("warning", "%s %d entries of uid %d under /tmp and /dev/shm; %d could not be removed or looked at"
                % (said, removed, uid, errors))
    else:
        ctx.log("info", "%s %d entries of uid %d under /tmp and /dev/shm" % (said, removed, uid))
    if ctx.settings.get("ipc_cleanup", True):
        clean_ipc(ctx, uid)


def clean_ipc(ctx, uid):
    """42, System V IPC: the user's shared memory segments, semaphore sets
    and message queues that ipc.decide() lets go (epilog:ipc_cleanup), one
    line per job end, whatever their number."""
    from . import ipc  # pylint: disable=import-outside-toplevel

    fact = ipc.clean(uid, ctx.deadline - 0.5, test=observing(ctx.settings))
    ctx.fact("ipc", fact)
    removed = fact["removed"]
    kept = sum(fact["kept"].values())
    if sum(removed.values()) or kept or fact["left"]:
        ctx.log("warning" if fact["left"] else "info",
                "System V IPC of uid %d: %s %d segment(s) (%d bytes), %d semaphore set(s), %d queue(s); kept "
                "%d%s%s" % (uid, "would remove (observe mode)" if fact.get("would") else "removed", removed["shm"],
                            fact["bytes"], removed["sem"], removed["msg"], kept,
                            " (%s)" % "; ".join("%s: %d" % item for item in sorted(fact["kept"].items())) if kept
                            else "", "; %d left for want of time" % fact["left"] if fact["left"] else ""))


# -- 45: the residue sweep --------------------------------------------------------
def sweep(ctx):
    from . import sweep_names  # pylint: disable=import-outside-toplevel

    settings = ctx.settings
    job = ctx.job if system.digits(ctx.job or "") and system.digits(ctx.env.get("SLURM_JOB_UID") or "") else None
    if not sweep_names.has_residue(job):
        return  # on a node without residue the sweep is never imported
    from . import sweep as residue  # pylint: disable=import-outside-toplevel
    from . import sweep_report  # pylint: disable=import-outside-toplevel

    uid = ctx.env.get("SLURM_JOB_UID")
    if not (job and system.digits(uid or "") and 1 <= int(uid) <= system.UID_MAX_REAL):
        job = uid = None  # no scratch without a plain job id and uid
    # the runner's SIGTERM (the part's time is up) stops the sweep at the next
    # entry, and what it did is logged
    signal.signal(signal.SIGTERM, sweep_report.terminated)
    try:
        report = residue.run_with(settings, job=job, log=ctx.log, uid=uid, would=observing(settings))
    except residue.SweepError as exc:
        ctx.log("warning", "sweep could not run: %s" % exc)
        return
    except sweep_report.Terminated as exc:
        ctx.log("warning", "sweep %s; what is left waits for the next job end" % exc)
        return
    ctx.fact("sweep", sweep_report.fact(report))


# The formula's parts, by name: what each does once it runs.
# the parts after which their worker ends (the runner starts another): 40's
# kill acts as the user for a moment, who could renice it or pin it to a CPU
# meanwhile, and nothing of that may last into the next part
ENDS_WORKER = ("40-lastuserjob-processes",)
# the parts the runner runs in itself when it cannot fork a worker (the
# user's processes hold every pid): they fork nothing, their own bounds end
# them (the allow file's lock wait, the kill's rounds), and the kill frees
# pids for the parts after it
IN_PROCESS = ("39-lastuserjob-ssh", "40-lastuserjob-processes", "50-exclusive-ssh")


def warm(settings):
    """What parts 42 and 45 import only when they run, imported ahead by a
    worker that waits for them (the runner forks it while 40 runs)."""
    # pylint: disable=import-outside-toplevel,unused-import
    try:
        if settings.get("ipc_cleanup", True):
            from . import ipc  # noqa: F401
    except ImportError:
        pass  # the part says why when it runs

# the parts that edit the ssh allow file: run only when it governs ssh
# (epilog:ssh_access listfile)
ALLOW_FILE_PARTS = ("39-lastuserjob-ssh", "50-exclusive-ssh")
REVOKE = ALLOW_FILE_PARTS[0]

# Why a part does not run under the settings: WHY for the log, RECORDED for
# the record.
Off = system.fields("Off", "why recorded")


def not_run(name, settings):
    """Why the formula's part NAME does not run under SETTINGS (an Off), or
    None: turned off (epilog:parts), or an allow file part where the file
    governs no ssh (epilog:ssh_access)."""
    if (settings.get("parts") or {}).get(name) is False:
        why = "off: epilog:parts:%s is false" % name
        return Off(why, why)
    access = settings.get("ssh_access", "listfile")
    if name in ALLOW_FILE_PARTS and access != "listfile":
        return Off("epilog:ssh_access is %s: the chain never edits the ssh allow file"
                   % ("adopt (pam_slurm_adopt governs ssh)" if access == "adopt" else access), "epilog:ssh_access")
    return None


# -- observe mode and the brake -----------------------------------------------------
# The parts that act on users' things: observe mode has them decide and
# record what they would do, and do none of it; the brake skips them. Part
# 50's grant is neither: adding the job user's line harms nobody, and
# leaving it out would lock users out of their own job's node.
ACTING = ("39-lastuserjob-ssh", "40-lastuserjob-processes", "42-lastuserjob-cleanup", "45-stale-x-display")


def observing(settings):
    """epilog:mode is observe: decide, record what would be done, do none of it."""
    return settings.get("mode") == "observe"


# on: the brake holds (since: the file's mtime); ignored: a file is there
# that fails the trust rules (why says how)
Brake = system.fields("Brake", "state path why since")


def brake(path, trust):
    """The brake, epilog:stop_file at PATH: None while no file is there (an
    ordinary job end's whole cost: the directory's trust, kept by TRUST,
    and one lstat); on while it is a regular file of root's in a directory
    only root can write (TRUST: system.Trust); any other file there is
    ignored, and says why: a user who could plant one must not be able to
    stop the cleanup of their own processes. The directory is judged first,
    and nothing in one another account can write is looked at (a mount
    there could hold the lstat past the chain's deadline): that brake is
    ignored, file or none. Looked at again before each acting part, so a
    brake set mid-chain stops the parts still to come."""
    if not path:
        return None
    directory = os.path.dirname(path) or "/"
    if not trust.root_only(directory):
        return Brake("ignored", path, "%s is in %s, which another account can write (or it, or an ancestor, is "
                     "missing, a symlink or not root's): not looked at; ignored, the brake cannot be put on there"
                     % (path, directory), None)
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return Brake("ignored", path, "%s cannot be looked at (%s)" % (path, exc.strerror), None)
    if not stat.S_ISREG(st.st_mode):
        why = "%s is not a regular file (%s)" % (path, "a symlink" if stat.S_ISLNK(st.st_mode) else
                                                   "a directory" if stat.S_ISDIR(st.st_mode) else "not a file")
    elif st.st_uid != 0:
        why = "%s is owned by uid %d, not root" % (path, st.st_uid)
    else:
        return Brake("on", path, "stopped by %s" % path, st.st_mtime)
    return Brake("ignored", path, why + ": ignored, the brake is not on", None)


ACTIONS = {
    "39-lastuserjob-ssh": revoke_ssh,
    "40-lastuserjob-processes": kill,
    "42-lastuserjob-cleanup": cleanup,
    "45-stale-x-display": sweep,
    "50-exclusive-ssh": grant_ssh,
}
