"""
The residue sweep: part 45 (45-stale-x-display) runs it at every job end,
and the execution module's ``epilog.sweep`` runs the very same code (it loads
this package from beside itself), so the two cannot drift.

The sweep removes what crashed X/VNC servers and Cadence clients leave in
/tmp, and the ending job's scratch, but only what no live process holds:

=================================================  =========================
residue                                            action
=================================================  =========================
orphan socket /tmp/.X11-unix/X<N>: no live socket  remove
  is bound to it, and a connect is refused
socket held: a live socket is bound to it (the     keep
  kernel's socket diagnostics, every netns)
orphan socket whose lock names a live process of   keep both
  the lock's owner
stale lock /tmp/.X<N>-lock: its pid is dead or     remove
  not the owner's, no socket
/tmp/clsbd.<user>.<pid>, pid a live process of     keep
  the file's owner
/tmp/clsbd.<user>.<pid>, otherwise                 remove
malformed lock content or name                     keep, and report it
unknown: the diagnostics cannot be read            keep
an entry that cannot be judged (EACCES, ...)       keep, report, go on
/tmp entry matching scratch_patterns for the job   remove what the job's
                                                   uid owns, at every depth
=================================================  =========================

Nothing a user can write or print is evidence: a pid in a file counts only
as the file owner's own process, and names in /proc/net/unix count for
nothing. judge_display() is the table's display rows as a function of their
facts.

What users can create is logged summed up: per kind of line, the first few
entries, then how many more (a user's 5,000 malformed locks make one line at
every job end, not 5,000).

Safety as root in a world-writable /tmp: /tmp/.X11-unix must be a real
directory owned by root; every entry is checked with lstat and never followed;
removal is relative to an open directory handle and re-checks the inode; it
never leaves /tmp, never opens a FIFO, and stops when its time budget runs out.
"""

import errno
import os
import re
import socket
import stat
import struct
import sys
import time

from . import system, walk


class SweepError(Exception):
    """The sweep itself could not run (the module reports it as a
    CommandExecutionError)."""


TMP = "/tmp"
X11_DIR = ".X11-unix"
# root, as systemd-tmpfiles makes it: under another owner, none of its
# entries is judged (the unit tests, run without root, stand their own uid in)
X11_DIR_OWNER = 0

# The budget when --budget is not given (part 45 always gives the pillar's).
DEFAULT_BUDGET = 10
# Lines of one kind logged one by one; past that, one line sums them up.
FEW = 3

KINDS = ("x_socket", "x_lock", "clsbd", "scratch")
X_SOCKET_NAME = re.compile(r"X(0|[1-9][0-9]{0,4})\Z")
X_LOCK_NAME = re.compile(r"\.X(0|[1-9][0-9]{0,4})-lock\Z")
X_LOCK_LIKE = re.compile(r"\.X.*-lock\Z", re.S)
CLSBD_NAME = re.compile(r"clsbd\.(.+)\.([0-9]+)\Z", re.S)
# An X server writes its pid as "%10d\n": exactly 11 bytes, nothing else.
LOCK_CONTENT = re.compile(rb" *([0-9]{1,10})\n\Z")
# A scratch pattern: {jobid} once; it may not start with a wildcard or a dot.
PATTERN_OK = re.compile(r"([A-Za-z0-9_-][A-Za-z0-9._*?-]*)?\{jobid\}[A-Za-z0-9._*?-]*\Z")


class _Budget(Exception):
    """The time budget ran out."""


class Terminated(Exception):
    """The runner's SIGTERM: the part's time is up. The sweep ends at the
    next entry, as at its budget, and what it did reaches the log."""


# Set by part 45's SIGTERM handler, read where the sweep checks its budget:
# an entry is never left removed but not logged.
_SIGTERM = []


def terminated(signum, frame):
    _SIGTERM.append(signum)


class _Unjudged(Exception):
    """One entry could not be judged: it is kept and reported, and the sweep
    goes on with the next one."""


# -- held sockets: the kernel's socket diagnostics, per network namespace -----
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
UDIAG_SHOW_VFS = 0x2
UNIX_DIAG_VFS = 1
CLONE_NEWNET = 0x40000000


def _setns(fd):
    setns = getattr(os, "setns", None)  # Python 3.12 and later
    if setns is not None:
        setns(fd, CLONE_NEWNET)
        return
    import ctypes  # pylint: disable=import-outside-toplevel

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _bound_files_here():
    """{(st_dev, st_ino): socket inode} of every file a unix socket of this
    network namespace is bound to, as the kernel reports it
    (NETLINK_SOCK_DIAG, UNIX_DIAG_VFS): the bound file's own identity, which
    no user can print or forge, unlike the names in /proc/net/unix."""
    found = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(5)
        # struct unix_diag_req: family, protocol, pad, states, ino, show, cookie[2]
        req = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, 0, UDIAG_SHOW_VFS, 0xFFFFFFFF, 0xFFFFFFFF)
        nl.sendto(struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + req,
                  (0, 0))
        while True:
            data = nl.recv(1 << 16)
            off = 0
            while off + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, off)
                if length < 16:
                    raise OSError("malformed netlink message")
                if kind == NLMSG_DONE:
                    return found
                if kind == NLMSG_ERROR:
                    raise OSError(-struct.unpack_from("=i", data, off + 16)[0], "sock_diag refused the dump")
                # struct unix_diag_msg: family, type, state, pad, ino, cookie[2]
                sock_ino = struct.unpack_from("=I", data, off + 16 + 4)[0]
                attr, end = off + 16 + 16, off + length
                while attr + 4 <= end:
                    alen, atype = struct.unpack_from("=HH", data, attr)
                    if alen < 4:
                        break
                    if atype == UNIX_DIAG_VFS and alen >= 12:
                        ino, kdev = struct.unpack_from("=II", data, attr + 4)
                        # The kernel's s_dev (major << 20 | minor) as stat reports it.
                        found[(os.makedev(kdev >> 20, kdev & 0xFFFFF), ino)] = sock_ino
                    attr += (alen + 3) & ~3
                off += (length + 3) & ~3


def _proc_pids():
    """The pids in /proc now (as strings), or None when /proc cannot be read."""
    try:
        return system.pids()
    except OSError:
        return None


def bound_socket_files(deadline=None):
    """{(st_dev, st_ino): socket inode} of the files bound by unix sockets in
    every network namespace a process is in, or None when the diagnostics
    cannot be read (then no socket can be called an orphan). Inode numbers
    are the kernel's 32 bits."""
    spaces = {}
    pids = _proc_pids()
    if pids is None:
        return None
    for pid in pids:
        try:
            spaces.setdefault(os.readlink(f"/proc/{pid}/ns/net"), pid)
        except OSError:
            continue
    try:
        home = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    found = {}
    try:
        mine = os.readlink("/proc/self/ns/net")
        found.update(_bound_files_here())
        for space, pid in spaces.items():
            if space == mine:
                continue
            if deadline is not None and time.monotonic() > deadline:
                raise _Budget()
            try:
                fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue  # the process is gone, and its namespace with it
            try:
                _setns(fd)
                try:
                    found.update(_bound_files_here())
                finally:
                    _setns(home)
            finally:
                os.close(fd)
    except (OSError, struct.error):
        return None
    finally:
        os.close(home)
    return found


# One X display's facts: its number; whether its socket file is there; bound
# (a live socket is bound to that file: True, False, or None when the
# kernel's diagnostics cannot be read); holder ((pid, comm) of who holds it,
# for the report); listening() (does a connect to it get an answer: asked
# only when nothing is bound); whether its lock file is there, its path as
# shown, what is wrong with its content (None: a well-formed pid), that pid,
# whether it is a live process of the lock's owner; comm(pid): its name.
Display = system.fields("Display", "display socket bound holder listening lock lock_path lock_problem lock_pid "
                                "lock_alive comm")


def judge_display(f):
    """The decision table's display rows: ([(kind, "keep" or "remove",
    reason)], (level, line) for the log, or (None, None))."""
    out, line = [], (None, None)
    if f.socket:
        if f.bound is None:
            reason = "unknown: the kernel's socket diagnostics cannot be read, cannot tell whether held"
            out.append(("x_socket", "keep", reason))
            if f.lock:
                out.append(("x_lock", "keep", reason))
            return out, line
        if f.bound or f.listening():
            reason = (f"held by pid {f.holder[0]} ({f.holder[1]})" if f.holder else
                      "held: a live socket is bound to it" if f.bound else "held: a listener answers on it")
            out.append(("x_socket", "keep", reason))
            if f.lock:
                out.append(("x_lock", "keep", f"its socket is {reason}"))
            return out, line
        if f.lock and f.lock_problem:
            out.append(("x_socket", "keep", f"its lock is {f.lock_problem}; cannot tell whether the display is in use"))
            out.append(("x_lock", "keep", f.lock_problem))
            return out, ("warning", f"kept display :{f.display}: lock {f.lock_path} is {f.lock_problem}")
        if f.lock_alive:
            reason = f"lock pid {f.lock_pid} alive ({f.comm(f.lock_pid)})"
            out.append(("x_socket", "keep", f"orphan socket, but {reason}"))
            out.append(("x_lock", "keep", reason))
            return out, line
        out.append(("x_socket", "remove", "orphan: no live socket is bound to it, and a connect is refused"))
        if f.lock:
            out.append(("x_lock", "remove", "stale: its display's socket is an orphan"))
        return out, line
    if f.lock:
        if f.lock_problem:
            out.append(("x_lock", "keep", f.lock_problem))
            return out, ("warning", f"kept {f.lock_path}: {f.lock_problem}")
        if f.lock_alive:
            out.append(("x_lock", "keep", f"lock pid {f.lock_pid} alive ({f.comm(f.lock_pid)})"))
            return out, line
        out.append(("x_lock", "remove", "stale: its pid is no live process of its owner, and no socket"))
    return out, line


class _Sweep:
    def __init__(self, test, job, patterns, budget, log, uid=None, locks=None, would=False):
        # would: decide as a sweep that removes does (its locks too), and
        # remove nothing (observe mode, the brake, part 45 turned off)
        self.test = test or would
        self.would = would
        self.purged = "would be purged" if self.test else "purged"
        self.locks = locks
        self.job = job
        self.uid = uid
        self.patterns = patterns
        self.deadline = time.monotonic() + budget
        self.budget = budget
        self.log = log
        self.report = {
            "test": self.test,
            "job": job,
            "removed": [],
            "would_remove": [],
            "kept": [],
            "unjudged": [],
            "errors": [],
            "skipped": [],
            "counts": {kind: {"removed": 0, "kept": 0} for kind in KINDS},
            "budget_exhausted": False,
            "left": 0,
        }
        self._candidates = []
        self._decided = set()
        self._owners = {}
        self._holders = {}
        self._pid_max = None
        self._notes = {}

    # -- the log: what users can create is summed up -------------------------
    def note(self, level, kind, line, subject):
        """A line for the log, of a KIND of line (what it says of its
        SUBJECT, a name users can create): the first FEW of a kind are
        logged as they are, the rest counted, and the kind summed up in one
        line when the sweep ends (flush_notes)."""
        lines = self._notes.setdefault((level, kind), [])
        lines.append(line if len(lines) < FEW else subject)

    def flush_notes(self):
        for (level, kind), lines in self._notes.items():
            if len(lines) <= FEW:
                for line in lines:
                    self.log(level, line)
            else:
                self.log(level, f"{kind}: {len(lines)} entries; the first {FEW}: {'; '.join(lines[:FEW])}")
        self._notes = {}

    # -- bookkeeping -------------------------------------------------------
    def keep(self, kind, path, reason):
        self._decided.add(path)
        self.report["kept"].append({"path": system.show(path), "kind": kind, "reason": reason})
        self.report["counts"][kind]["kept"] += 1

    def unjudged(self, kind, path, why):
        """PATH could not be judged: kept, reported, and the sweep goes on."""
        self.keep(kind, path, f"could not be judged: {why}")
        self.report["unjudged"].append(f"{system.show(path)}: {why}")
        self.note("warning", "sweep kept entries it could not judge",
                  f"sweep kept {system.show(path)}: could not be judged: {why}", system.show(path))

    def error(self, path, message):
        self._decided.add(path)
        self.report["errors"].append(f"{system.show(path)}: {message}")
        self.note("warning", "sweep errors", f"sweep error: {system.show(path)}: {message}", system.show(path))

    def check_budget(self):
        if _SIGTERM:
            raise Terminated("stopped by SIGTERM: the chain's time for part 45 ran out")
        if time.monotonic() > self.deadline:
            raise _Budget()

    def lstat_at(self, dir_fd, name):
        """lstat NAME in DIR_FD; None when it is gone; _Unjudged when the
        kernel refuses (a FUSE mount of another user answers EACCES)."""
        try:
            return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _Unjudged(f"lstat failed ({exc.strerror})") from exc

    # -- facts about processes -------------------------------------------
    def uids(self, pid):
        """(real, effective, saved) uids of live process PID, or None when
        there is none. A zombie is dead, unless its other threads still run.
        Read from /proc, never from kill -0, which succeeds on a zombie."""
        if pid in self._owners:
            return self._owners[pid]
        result = None
        if pid > 0:
            try:
                with open(f"/proc/{pid}/status", "rb") as handle:
                    fields = dict(line.split(b":", 1) for line in handle.read().splitlines() if b":" in line)
                state = fields[b"State"].split()[0]
                if state not in (b"Z", b"X") or int(fields.get(b"Threads", b"1")) > 1:
                    result = tuple(int(uid) for uid in fields[b"Uid"].split()[:3])
            except (OSError, KeyError, IndexError, ValueError):
                result = None
        self._owners[pid] = result
        return result

    def alive_as(self, pid, uid):
        """PID is a live process running as UID (the owner of the file that
        names it). A pid written in a file is evidence only of the file
        owner's own process: a user cannot pin a display by writing pid 1
        into a lock of theirs."""
        uids = self.uids(pid)
        return uids is not None and uid in uids

    @staticmethod
    def comm(pid):
        try:
            with open(f"/proc/{pid}/comm", "rb") as handle:
                return system.show(handle.read().strip().decode("utf-8", "backslashreplace"))
        except OSError:
            return "?"

    def pid_max(self):
        """The kernel's pid_max, read once per sweep."""
        if self._pid_max is None:
            try:
                with open("/proc/sys/kernel/pid_max", "rb") as handle:
                    self._pid_max = int(handle.read())
            except (OSError, ValueError):
                self._pid_max = 4194304
        return self._pid_max

    def listener_answers(self, x_fd, name, st):
        """Does a live socket still listen on the socket file NAME? A second,
        independent fact before an orphan is removed: a non-blocking connect
        to the very inode judged (through an O_PATH handle, so the path is not
        resolved again): refused means nobody holds it. _Unjudged when the
        answer is anything else."""
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=x_fd)
        try:
            if not os.path.samestat(st, os.fstat(fd)):
                raise _Unjudged("changed while the sweep ran")
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.setblocking(False)
                try:
                    probe.connect(f"/proc/self/fd/{fd}")
                except ConnectionRefusedError:
                    return False
                except (BlockingIOError, InterruptedError):
                    return True  # a full backlog: a listener is there
                except OSError as exc:
                    if exc.errno == errno.EPROTOTYPE:
                        return True  # bound by a socket of another type
                    raise _Unjudged(f"connect failed ({exc.strerror})") from exc
                return True
        finally:
            os.close(fd)

    def holders(self, inodes):
        """{socket inode: (pid, comm)}: one pass over /proc/*/fd, done only
        when some X socket is held, to name who holds it (a report, not
        evidence: "held" comes from the socket diagnostics)."""
        wanted = {f"socket:[{inode}]": inode for inode in inodes}
        found = {}
        for pid in _proc_pids() or []:
            if len(found) == len(wanted) or time.monotonic() > self.deadline:
                break
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    inode = wanted.get(os.readlink(f"/proc/{pid}/fd/{fd}"))
                except OSError:
                    continue
                if inode is not None and inode not in found:
                    found[inode] = (int(pid), self.comm(pid))
        return found

    # -- removal -----------------------------------------------------------
    def remove(self, kind, dir_fd, name, path, expect):
        """Unlink NAME relative to DIR_FD if it is still the entry we judged;
        a directory goes only as far as its entries are the job uid's. With
        test=True the same judgement is made, and nothing is removed."""
        self.check_budget()
        self._decided.add(path)
        lock = None
        if self.locks is not None and (not self.test or self.would):
            # between jobs: an owner's job end or prolog may be acting; its
            # lock is theirs until it is done
            lock = self.user_lock(expect.st_uid)
            if lock is None:
                self.keep(kind, path, f"a job end or prolog of uid {expect.st_uid} holds its lock")
                return False
        try:
            return self._remove(kind, dir_fd, name, path, expect)
        finally:
            if lock is not None:
                os.close(lock)

    def user_lock(self, uid):
        """The lock of UID in the run directory LOCKS (the one a job end of
        UID's holds through its decision and lastuserjob parts), taken
        without waiting: its descriptor, or None when it is held."""
        try:
            fd = os.open(os.path.join(self.locks, f"lock.{uid}"),
                         os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        if system.wait_lock(fd, 0):
            return fd
        os.close(fd)
        return None

    def _remove(self, kind, dir_fd, name, path, expect):
        try:
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if (now.st_ino, now.st_dev, stat.S_IFMT(now.st_mode), now.st_ctime_ns) != (
                    expect.st_ino, expect.st_dev, stat.S_IFMT(expect.st_mode), expect.st_ctime_ns):
                self.keep(kind, path, "changed while the sweep ran")
                return False
            if stat.S_ISDIR(now.st_mode):
                if not self._remove_tree(kind, dir_fd, name, path, now):
                    return False
            elif not self.test:
                os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return False
        except (OSError, RecursionError) as exc:
            self.error(path, f"could not remove: {exc}")
            return False
        self.report["would_remove" if self.test else "removed"].append(system.show(path))
        self.report["counts"][kind]["removed"] += 1
        return True

    def _remove_tree(self, kind, parent_fd, name, path, st):
        """Remove the directory NAME (owned by the job's uid) relative to
        PARENT_FD as far as it holds only the job uid's entries, at every
        depth: another account's entry stays, with the directories on the
        path to it, and both are reported. The walk is walk.py's (never a
        symlink followed, never the file system or the tree left,
        descriptors bounded at any depth). True when the whole tree went
        (or would go)."""
        fd = walk.open_dir(parent_fd, name, st)
        try:
            tree = walk.Walk(fd, _Scratch(self, kind), path)
            tree.run()
            whole = tree.whole
        finally:
            os.close(fd)
        if not whole:
            self.keep(kind, path, "on the path to entries of another account, kept with them")
        elif not self.test:
            os.rmdir(name, dir_fd=parent_fd)
        return whole

    # -- the decision table ------------------------------------------------
    def read_lock(self, tmp_fd, name, st):
        """(pid, None) for a well-formed lock, (None, why) otherwise. Opens
        only a regular file, non-blocking and without following a symlink."""
        if not stat.S_ISREG(st.st_mode):
            return None, f"not a regular file ({kind_of(st)})"
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=tmp_fd)
        except OSError as exc:
            return None, f"unreadable ({exc.strerror})"
        try:
            if not os.path.samestat(st, os.fstat(fd)):
                return None, "changed while the sweep ran"
            data = os.read(fd, 64)
        except OSError as exc:
            return None, f"unreadable ({exc.strerror})"
        finally:
            os.close(fd)
        match = LOCK_CONTENT.match(data) if len(data) == 11 else None
        if not match:
            return None, f"malformed content {data[:16]!r} ({len(data)} bytes)"
        pid = int(match.group(1))
        if pid < 1 or pid > self.pid_max():
            return None, f"malformed content: pid {pid} out of range"
        return pid, None

    def run(self):
        try:
            tmp_fd = os.open(TMP, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise SweepError(f"cannot open {TMP}: {exc.strerror}") from exc
        started = time.monotonic()
        try:
            try:
                names = os.listdir(tmp_fd)
            except OSError as exc:
                raise SweepError(f"cannot list {TMP}: {exc.strerror}") from exc
            self._sweep(tmp_fd, names)
        except _Budget:
            self.report["budget_exhausted"] = True
            self.report["left"] = sum(path not in self._decided for path in self._candidates)
            self.log("warning", f"sweep budget of {self.budget}s exhausted; "
                                f"{self.report['left']} entries left for the next job end")
        finally:
            os.close(tmp_fd)
            self.flush_notes()
        self.report["elapsed_ms"] = round((time.monotonic() - started) * 1000, 1)
        return self.report

    def _sweep(self, tmp_fd, names):
        locks, clsbd, scratch = {}, [], []
        scratch_res = [_scratch_regex(p, self.job) for p in self.patterns] if self.job else []
        for name in names:
            if X_LOCK_LIKE.match(name):
                match = X_LOCK_NAME.match(name)
                if match:
                    locks[int(match.group(1))] = name
                else:
                    self.keep("x_lock", f"{TMP}/{name}", "malformed lock name")
            elif name.startswith("clsbd."):
                clsbd.append(name)
            elif not name.startswith(".") and any(regex.match(name) for regex in scratch_res):
                scratch.append(name)
        sockets, x_fd = self._x11_entries(tmp_fd)
        self._candidates = ([f"{TMP}/{X11_DIR}/{name}" for name, _ in sockets.values()]
                            + [f"{TMP}/{name}" for name in list(locks.values()) + clsbd + scratch])
        try:
            # The displays last: asking every network namespace is the one
            # step a user can make slow (a namespace per process), and it
            # must not use up the budget of the clsbd files and the scratch.
            for name in clsbd:
                self._one("clsbd", f"{TMP}/{name}", self._clsbd, tmp_fd, name)
            for name in scratch:
                self._one("scratch", f"{TMP}/{name}", self._scratch, tmp_fd, name)
            self._displays(tmp_fd, x_fd, sockets, locks)
        finally:
            if x_fd is not None:
                os.close(x_fd)

    def _one(self, kind, path, judge, *args):
        """Judge one entry; whatever goes wrong with it stays with it."""
        try:
            judge(*args)
        except _Unjudged as exc:
            self.unjudged(kind, path, str(exc))
        except (OSError, ValueError) as exc:
            self.unjudged(kind, path, f"{type(exc).__name__}: {exc}")

    def _scratch(self, tmp_fd, name):
        path = f"{TMP}/{name}"
        st = self.lstat_at(tmp_fd, name)
        if st is None:
            return
        if st.st_uid != self.uid:
            # Only the job's user's own entries are its scratch.
            self.keep("scratch", path, f"owned by uid {st.st_uid}, not the job's uid {self.uid}")
            return
        if self.remove("scratch", tmp_fd, name, path, st):
            self.note("info", f"job scratch {self.purged}", f"job scratch {self.purged}: {system.show(path)}",
                      system.show(path))

    def _x11_entries(self, tmp_fd):
        """{display: (name, lstat)} of the sockets in /tmp/.X11-unix, and an
        open handle on it; ({}, None) when it is absent or not safe. An entry
        that cannot be looked at is reported and kept; the others go on."""
        path = f"{TMP}/{X11_DIR}"
        try:
            st = os.stat(X11_DIR, dir_fd=tmp_fd, follow_symlinks=False)
        except FileNotFoundError:
            return {}, None
        except OSError as exc:
            self.report["skipped"].append(f"{path}: cannot look at it ({exc.strerror}); its entries are left alone")
            return {}, None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != X11_DIR_OWNER:
            why = (f"not a real directory ({kind_of(st)})" if not stat.S_ISDIR(st.st_mode)
                   else f"owned by uid {st.st_uid}, not root")
            self.report["skipped"].append(f"{path}: {why}; its entries are left alone")
            self.log("warning", f"sweep skipped {path}: {why}")
            return {}, None
        try:
            x_fd = os.open(X11_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=tmp_fd)
        except OSError as exc:
            self.report["skipped"].append(f"{path}: cannot open ({exc.strerror})")
            return {}, None
        try:
            if not os.path.samestat(st, os.fstat(x_fd)):
                raise OSError("changed while the sweep ran")
            names = os.listdir(x_fd)
        except OSError as exc:
            os.close(x_fd)
            self.report["skipped"].append(f"{path}: {exc}")
            return {}, None
        sockets = {}
        for name in names:
            entry_path = f"{path}/{name}"
            match = X_SOCKET_NAME.match(name)
            if not match:
                self.keep("x_socket", entry_path, "malformed name")
                continue
            try:
                entry = self.lstat_at(x_fd, name)
            except _Unjudged as exc:
                self.unjudged("x_socket", entry_path, str(exc))
                continue
            if entry is None:
                continue
            if not stat.S_ISSOCK(entry.st_mode):
                self.keep("x_socket", entry_path, f"not a socket ({kind_of(entry)})")
                continue
            sockets[int(match.group(1))] = (name, entry)
        return sockets, x_fd

    def _displays(self, tmp_fd, x_fd, sockets, locks):
        bound = bound_socket_files(self.deadline) if sockets else {}
        held = [bound[(st.st_dev, st.st_ino & 0xFFFFFFFF)] for _, st in sockets.values()
                if bound and (st.st_dev, st.st_ino & 0xFFFFFFFF) in bound]
        self._holders = self.holders(held) if held else {}
        for display in sorted(set(sockets) | set(locks)):
            self.check_budget()
            sock_path = f"{TMP}/{X11_DIR}/X{display}"
            lock_path = f"{TMP}/{locks[display]}" if display in locks else None
            try:
                self._display(tmp_fd, x_fd, display, sockets.get(display), locks.get(display), bound)
            except (_Unjudged, OSError, ValueError) as exc:
                why = str(exc) if isinstance(exc, _Unjudged) else f"{type(exc).__name__}: {exc}"
                for kind, path in (("x_socket", sock_path if display in sockets else None), ("x_lock", lock_path)):
                    if path and path not in self._decided:
                        self.unjudged(kind, path, why)

    def _display(self, tmp_fd, x_fd, display, sock, lock_name, bound):
        """Gather display :DISPLAY's facts, judge them (judge_display) and
        act on the verdict."""
        sock_path = f"{TMP}/{X11_DIR}/X{display}"
        lock_pid, lock_problem, lock_st, lock_path, lock_alive = None, None, None, None, False
        if lock_name:
            lock_path = f"{TMP}/{lock_name}"
            lock_st = self.lstat_at(tmp_fd, lock_name)
            if lock_st is None:
                lock_name = None
            else:
                lock_pid, lock_problem = self.read_lock(tmp_fd, lock_name, lock_st)
                lock_alive = not lock_problem and self.alive_as(lock_pid, lock_st.st_uid)
        held, holder = None, None
        if sock and bound is not None:
            sock_ino = bound.get((sock[1].st_dev, sock[1].st_ino & 0xFFFFFFFF))
            held = sock_ino is not None
            holder = self._holders.get(sock_ino)
        facts = Display(
            display=display, socket=bool(sock), bound=held, holder=holder,
            listening=(lambda: self.listener_answers(x_fd, sock[0], sock[1])) if sock else None,
            lock=bool(lock_name), lock_path=system.show(lock_path) if lock_path else None, lock_problem=lock_problem,
            lock_pid=lock_pid, lock_alive=lock_alive, comm=self.comm)
        verdict, (level, line) = judge_display(facts)
        purged = False
        for kind, action, reason in verdict:
            path = sock_path if kind == "x_socket" else lock_path
            if action == "keep":
                self.keep(kind, path, reason)
            elif kind == "x_socket":
                purged = self.remove(kind, x_fd, sock[0], path, sock[1]) or purged
            else:
                purged = self.remove(kind, tmp_fd, lock_name, path, lock_st) or purged
        if line:
            self.note(level, "kept X displays and locks whose lock is malformed or unreadable", line,
                      lock_path and system.show(lock_path))
        if purged:
            self.note("info", f"stale X displays {self.purged}", f"stale X display {self.purged}: :{display}",
                      f":{display}")

    def _clsbd(self, tmp_fd, name):
        self.check_budget()
        path = f"{TMP}/{name}"
        match = CLSBD_NAME.match(name)
        if not match:
            self.keep("clsbd", path, "malformed name (expected clsbd.<user>.<pid>)")
            return
        st = self.lstat_at(tmp_fd, name)
        if st is None:
            return
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISSOCK(st.st_mode)):
            self.keep("clsbd", path, f"not a regular file or socket ({kind_of(st)})")
            return
        pid = int(match.group(2)) if len(match.group(2)) <= 10 else 0
        if pid < 1 or pid > self.pid_max():
            self.keep("clsbd", path, f"malformed name: pid {match.group(2)[:12]} out of range")
            return
        if self.alive_as(pid, st.st_uid):
            self.keep("clsbd", path, f"pid {pid} alive ({self.comm(pid)})")
            return
        if self.remove("clsbd", tmp_fd, name, path, st):
            self.note("info", f"stale clsbd {self.purged}", f"stale clsbd {self.purged}: {system.show(path)}",
                      system.show(path))


class _Scratch(walk.Rules):
    """The sweep's rules for the walk of a job's scratch directory: the job
    uid's entries go; another account's entry, a mount point and what
    cannot be looked at stay and are reported, and so are the directories
    on the path to them."""

    def __init__(self, sweep, kind):
        self.sweep = sweep
        self.kind = kind
        self.test = sweep.test

    def check(self):
        self.sweep.check_budget()

    def judge(self, tree, name, st):
        sweep = self.sweep
        if st.st_uid != sweep.uid:
            sweep.keep(self.kind, tree.path(name), f"owned by uid {st.st_uid}, not the job's uid {sweep.uid}")
            return walk.KEEP
        if st.st_dev != tree.device:
            sweep.keep(self.kind, tree.path(name), "on another file system (a mount point)")
            return walk.KEEP
        return walk.ENTER if stat.S_ISDIR(st.st_mode) else walk.REMOVE

    def leave(self, tree, name, st, whole):
        if not whole:
            self.sweep.keep(self.kind, tree.path(name), "on the path to entries of another account, kept with them")
            return walk.KEEP
        return walk.REMOVE

    def failed(self, tree, name, exc, doing):
        if doing == "lstat":
            self.sweep.unjudged(self.kind, tree.path(name), f"lstat failed ({walk.why(exc)})")
        else:
            self.sweep.error(tree.path(name), f"could not remove: {walk.why(exc)}")


def kind_of(st):
    mode = st.st_mode
    for test, word in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device")):
        if test(mode):
            return word
    return "unknown type"


def _scratch_regex(pattern, job):
    """slurm{jobid}* for job 12 matches slurm12.x but not slurm123 (another job)."""
    head, tail = pattern.split("{jobid}", 1)

    def glob(chunk):
        return re.escape(chunk).replace(r"\*", ".*").replace(r"\?", ".")

    return re.compile(glob(head) + r"(?<![0-9])" + re.escape(job) + r"(?![0-9])" + glob(tail) + r"\Z", re.S)


def _check_args(job, patterns, budget, uid):
    if job is not None:
        job = str(job)
        if not system.digits(job):
            raise SweepError(f"job must be a numeric Slurm job id, got {job!r}")
        if uid is None or not system.digits(str(uid)) or not 1 <= int(uid) <= 4294967294:
            raise SweepError("a job's scratch is removed only with the job's user (its uid): give user=")
        uid = int(uid)
    for pattern in patterns:
        if not isinstance(pattern, str) or not PATTERN_OK.match(pattern):
            raise SweepError(
                f"scratch pattern {pattern!r} must hold {{jobid}} once and only letters, digits and . _ - * ?, "
                "and may not start with a wildcard or a dot")
    # Only what a deadline needs: a finite time ahead. The range a site may
    # set is rules.yaml's (seconds), checked by map.jinja for the pillar and
    # by epilog.sweep for budget=; main(), by hand, takes any time ahead.
    try:
        budget = float(budget)
    except (TypeError, ValueError) as exc:
        raise SweepError(f"budget must be a number of seconds, got {budget!r}") from exc
    if not 0 < budget < float("inf"):
        raise SweepError(f"budget must be a positive number of seconds, got {budget}")
    return job, list(patterns), budget, uid


def run_sweep(test=False, job=None, patterns=(), budget=10, log=None, uid=None, locks=None, would=False):
    """The sweep, as part 45 and epilog.sweep run it. With JOB, that job's
    scratch goes too, and only the entries owned by UID. LOG(level, line)
    gets what the sweep did (a preview, test=True, logs nothing). LOCKS:
    the run directory, between jobs (epilog.sweep): an entry goes only
    while its owner's lock there is free, and is kept while a job end or
    prolog of theirs holds it (a directory only root can write; else
    None). WOULD: decide as a sweep that removes, locks included, log what
    would go, and remove nothing (observe mode; between jobs, the brake or
    part 45 turned off): a report like test's. Returns the report dict;
    raises SweepError when the sweep itself cannot run."""
    job, patterns, budget, uid = _check_args(job, patterns, budget, uid)
    if (test and not would) or log is None:
        log = _quiet
    return _Sweep(bool(test), job, patterns, budget, log, uid=uid, locks=locks, would=bool(would)).run()


def _quiet(level, line):
    pass


# What part 45 hands the runner for the job end's record: the counts, and
# the paths removed and kept up to a cap of characters, so that the record
# stays one short line however much residue there was.
FACT_PATH_CHARS = 1500


def fact(report):
    """The sweep's fact for the job end's record: the counts per kind, the
    paths removed and kept (each list cut when it would pass half of
    FACT_PATH_CHARS, with how many were left out); of a sweep that removed
    nothing (test, would), what would have gone, and would: true."""
    out = {"counts": {kind: dict(report["counts"][kind]) for kind in KINDS}}
    gone = report["would_remove"] if report.get("test") else report["removed"]
    for key, paths in (("removed", gone), ("kept", [kept["path"] for kept in report["kept"]])):
        shown, size = [], 0
        for path in paths:
            size += len(ascii(path)) + 1
            if size > FACT_PATH_CHARS // 2:
                break
            shown.append(path)
        out[key] = shown
        out[key + "_more"] = len(paths) - len(shown)
    if report.get("test"):
        out["would"] = True
    return out


# -- by hand: python3 -m epilog_node.sweep sweep ... (from a release's directory) --
def main(argv=None):
    import argparse  # only by hand: a job end never needs it  # pylint: disable=import-outside-toplevel

    from . import log as logs  # pylint: disable=import-outside-toplevel

    parser = argparse.ArgumentParser(prog="epilog_node.sweep", description="The epilog formula's residue sweep.")
    # (required= needs Python 3.7: the file runs on RHEL 8's and SLES 15's 3.6)
    sub = parser.add_subparsers(dest="command")
    cmd = sub.add_parser("sweep", help="sweep /tmp for X display, clsbd and job scratch residue")
    cmd.add_argument("--test", action="store_true", help="report, remove nothing")
    cmd.add_argument("--job", help="the ending job's id: also remove its scratch")
    cmd.add_argument("--uid", default=None, help="the job's uid: only its entries are the job's scratch")
    cmd.add_argument("--pattern", action="append", default=[], help="a scratch pattern holding {jobid}")
    cmd.add_argument("--budget", default=DEFAULT_BUDGET, help="seconds the sweep may take")
    cmd.add_argument("--log-file", default=None)
    cmd.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.command != "sweep":
        parser.error("a command is required: sweep")
    log = logs.Log(args.log_file, system.Trust(), job=args.job, source="epilog_node.sweep") if args.log_file else None
    try:
        report = run_sweep(test=args.test, job=args.job or None, patterns=args.pattern, budget=args.budget,
                           log=log.line if log else None, uid=args.uid)
    except SweepError as exc:
        print(f"epilog_node.sweep: {exc}", file=sys.stderr)
        return 1
    finally:
        if log:
            log.close()
    if args.json:
        import json  # only for --json: a job end never needs it  # pylint: disable=import-outside-toplevel

        print(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
