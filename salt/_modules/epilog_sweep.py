"""
The epilog formula's residue sweep: all that a node runs of the Python.

The state lays this file down verbatim as ``epilog_sweep.py`` in each release
of the chain, and the epilog part ``45-stale-x-display`` runs it at every job
end with the system python3 and no Salt (a stopped minion must not stop
cleanup). It uses the standard library only and is kept to Python 3.6 (RHEL
8's and SLES 15's python3). The execution module ``epilog`` (epilog.py, beside
it in ``_modules/``) loads this same file for ``salt-call epilog.sweep``, so the
part and the module share one decision table and cannot drift; a change to
the module's operations (verify, rollback, explain) changes no file a node
runs.

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
nothing.

Safety as root in a world-writable /tmp: /tmp/.X11-unix must be a real
directory owned by root; every entry is checked with lstat and never followed;
removal is relative to an open directory handle and re-checks the inode; it
never leaves /tmp, never opens a FIFO, and stops when its time budget runs out.
"""

import errno
import os
import re
import signal
import socket
import stat
import struct
import sys
import time


class SweepError(Exception):
    """The sweep itself could not run (the module reports it as a
    CommandExecutionError)."""


def __virtual__():
    # Synced beside the epilog module, which loads it: not a module of its own.
    return (False, "epilog_sweep is the residue sweep the epilog module and part 45 run, not an execution module")


TMP = "/tmp"
X11_DIR = ".X11-unix"
# root, as systemd-tmpfiles makes it: under another owner, none of its
# entries is judged (the unit tests, run without root, stand their own uid in)
X11_DIR_OWNER = 0
LOG_TAG = "slurm-epilog"

# The budget when --budget is not given (part 45 always gives the pillar's).
DEFAULT_BUDGET = 10

KINDS = ("x_socket", "x_lock", "clsbd", "scratch")
X_SOCKET_NAME = re.compile(r"X(0|[1-9][0-9]{0,4})\Z")
X_LOCK_NAME = re.compile(r"\.X(0|[1-9][0-9]{0,4})-lock\Z")
X_LOCK_LIKE = re.compile(r"\.X.*-lock\Z", re.S)
CLSBD_NAME = re.compile(r"clsbd\.(.+)\.([0-9]+)\Z", re.S)
# An X server writes its pid as "%10d\n": exactly 11 bytes, nothing else.
LOCK_CONTENT = re.compile(rb" *([0-9]{1,10})\n\Z")
# A scratch pattern: {jobid} once; it may not start with a wildcard or a dot.
PATTERN_OK = re.compile(r"([A-Za-z0-9_-][A-Za-z0-9._*?-]*)?\{jobid\}[A-Za-z0-9._*?-]*\Z")


_ESCAPED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _show(name):
    """A path for reports and logs, on one line and printable whatever the
    name holds: a backslash doubled, \\n \\r \\t, any other character that
    is not printable (an ESC of a terminal sequence, DEL, NEL, a line
    separator) as \\xNN or \\uNNNN, a byte that is not UTF-8 as \\\\xNN."""
    if name.isprintable() and "\\" not in name:
        return name  # what the rest would return, the common case at once
    # (not os.fsencode: under LC_ALL=C, python 3.6's file system encoding is
    # ascii, and a name of other letters would raise)
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(_ESCAPED.get(char) or (char if char.isprintable() else ascii(char)[1:-1]) for char in text)


def _root_only(directory):
    """True when DIRECTORY is a real directory (not a symlink) owned by root
    and writable by no group and no other user, and each of its ancestors is
    a real directory of root's that nobody else can write either, or sticky
    (nobody else can then rename or remove root's entry in it): no other
    account can plant or swap anything on the way. The epilog parts open the
    log only in such a directory; the state lays the log directory down so,
    and the runner checks it the same way (epilog_root_only)."""
    path, last = os.path.abspath(directory), True
    while True:
        try:
            st = os.lstat(path)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:
            return False
        if st.st_mode & 0o022 and (last or not st.st_mode & stat.S_ISVTX):
            return False
        if path == "/":
            return True
        path, last = os.path.dirname(path), False


def _root_file(path):
    """True when PATH, and what it resolves to, sit in directories only root
    can write (_root_only), and the file is root's and nobody else's to
    write."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except (OSError, ValueError):
        return False
    return (stat.S_ISREG(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022
            and _root_only(os.path.dirname(os.path.abspath(path))) and _root_only(os.path.dirname(real)))


class _Log:
    """Best-effort log: each line to the log file, and as a datagram to
    /dev/log. Never raises and never blocks (the syslog socket is
    non-blocking).

    Lines are gathered and go out together (flush): when FLUSH_LINES have
    gathered or the oldest has waited FLUSH_SECONDS, and when the sweep ends
    (part 45 turns the runner's SIGTERM into an exception, so that end is
    reached). A sweep of hundreds of entries then opens the file and a
    syslog socket once per flush, not once per line. A datagram syslog has
    no room for (its queue is full: a user can fill it) is dropped, never
    waited for; the file says how many were.

    The file is LOG_FD when the epilog part hands its open log over, else
    LOG_FILE, opened only in a directory only root can write, without
    following a symlink, without blocking, and only when it is a regular file
    with no other hard link."""

    FLUSH_LINES = 256
    FLUSH_SECONDS = 0.5
    SYSLOG = "/dev/log"

    def __init__(self, log_file, source, job=None, user=None, enabled=True, log_fd=None, release=None):
        self.log_file = log_file
        self.log_fd = log_fd
        self.prefix = f"{source} job={job or 'none'} user={_show(user) if user else 'none'}"
        self.prefix += f" release={release}: " if release else ": "
        self.enabled = enabled
        self._pending = []
        self._since = 0.0
        self._stamped = (None, "")

    def _open(self):
        if self.log_fd is not None:
            return self.log_fd, False
        if not self.log_file or not _root_only(os.path.dirname(self.log_file) or "/"):
            return None, False
        fd = os.open(self.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_NOCTTY | os.O_CLOEXEC, 0o644)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            return None, False
        return fd, True

    def _stamp(self):
        """The log's time stamp, formatted once per second."""
        second = int(time.time())
        if second != self._stamped[0]:
            self._stamped = (second, time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(second)))
        return self._stamped[1]

    def __call__(self, level, message):
        if not self.enabled:
            return
        now = time.monotonic()
        if not self._pending:
            self._since = now
        self._pending.append((self._stamp(), level, self.prefix + message))
        if len(self._pending) >= self.FLUSH_LINES or now - self._since >= self.FLUSH_SECONDS:
            self.flush()

    def _syslog(self, pending):
        """Send PENDING to syslog, one datagram a line, on a socket connected
        once per flush (no syslog here: none is tried line by line, and the
        file has every line). A syslog that restarts mid-flush is connected
        to again, once. Returns how many lines its full queue dropped."""
        dropped, sock, reconnected = 0, None, False
        try:
            for _, level, line in pending:
                priority = 3 * 8 + (4 if level == "warning" else 6)  # facility daemon
                datagram = f"<{priority}>{LOG_TAG}: {line}".encode("utf-8", "backslashreplace")
                while True:
                    if sock is None:
                        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                        sock.setblocking(False)
                        sock.connect(self.SYSLOG)
                    try:
                        sock.send(datagram)
                    except BlockingIOError:
                        dropped += 1  # syslog's queue is full: never wait for it
                    except OSError as exc:
                        if exc.errno not in (errno.ECONNREFUSED, errno.ECONNRESET, errno.ENOTCONN):
                            break  # this line only (too long, say): the file has it
                        sock.close()
                        sock = None
                        if reconnected:
                            raise
                        reconnected = True
                        continue  # syslog restarted: its new socket, once
                    break
        except OSError:
            pass  # no syslog (any more): the file has every line
        finally:
            if sock is not None:
                sock.close()
        return dropped

    def flush(self):
        pending, self._pending = self._pending, []
        if not pending:
            return
        dropped = self._syslog(pending)
        text = "".join(f"{stamp} {level} {line}\n" for stamp, level, line in pending)
        if dropped:
            text += (f"{self._stamp()} warning {self.prefix}"
                     f"{dropped} of these {len(pending)} lines did not reach syslog (its queue was full)\n")
        try:
            fd, close = self._open()
            if fd is not None:
                try:
                    os.write(fd, text.encode("utf-8", "backslashreplace"))
                finally:
                    if close:
                        os.close(fd)
        except OSError:
            pass


class _Budget(Exception):
    """The time budget ran out."""


class _Terminated(Exception):
    """The runner's SIGTERM: the part's time is up. The sweep ends at the
    next entry, as at its budget, and what it did reaches the log."""


# Set by part 45's SIGTERM handler, read where the sweep checks its budget:
# an entry is never left removed but not logged.
_SIGTERM = []


def _terminated(signum, frame):
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
        return [entry.name for entry in os.scandir("/proc") if entry.name.isdigit()]
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


class _Sweep:
    def __init__(self, test, job, patterns, budget, log, uid=None):
        self.test = test
        self.job = job
        self.uid = uid
        self.patterns = patterns
        self.deadline = time.monotonic() + budget
        self.budget = budget
        self.log = log
        self.report = {
            "test": test,
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

    # -- bookkeeping -------------------------------------------------------
    def keep(self, kind, path, reason):
        self._decided.add(path)
        self.report["kept"].append({"path": _show(path), "kind": kind, "reason": reason})
        self.report["counts"][kind]["kept"] += 1

    def unjudged(self, kind, path, why):
        """PATH could not be judged: kept, reported, and the sweep goes on."""
        self.keep(kind, path, f"could not be judged: {why}")
        self.report["unjudged"].append(f"{_show(path)}: {why}")
        self.log("warning", f"sweep kept {_show(path)}: could not be judged: {why}")

    def error(self, path, message):
        self._decided.add(path)
        self.report["errors"].append(f"{_show(path)}: {message}")
        self.log("warning", f"sweep error: {_show(path)}: {message}")

    def check_budget(self):
        if _SIGTERM:
            raise _Terminated("stopped by SIGTERM: the chain's time for part 45 ran out")
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
                return _show(handle.read().strip().decode("utf-8", "backslashreplace"))
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
        self.report["would_remove" if self.test else "removed"].append(_show(path))
        self.report["counts"][kind]["removed"] += 1
        return True

    def _remove_tree(self, kind, parent_fd, name, path, st):
        """Remove the directory NAME (owned by the job's uid) relative to
        PARENT_FD as far as it holds only the job uid's entries, at every
        depth: another account's entry stays, with the directories on the
        path to it, and both are reported. Never follows a symlink, never
        leaves the file system. True when the whole tree went (or would go)."""
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
        whole = True
        try:
            if not os.path.samestat(st, os.fstat(fd)):
                raise OSError(f"{_show(path)} changed while the sweep ran")
            for entry in os.listdir(fd):
                self.check_budget()
                child = f"{path}/{entry}"
                try:
                    sub = os.stat(entry, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    self.unjudged(kind, child, f"lstat failed ({exc.strerror})")
                    whole = False
                    continue
                if sub.st_uid != self.uid:
                    self.keep(kind, child, f"owned by uid {sub.st_uid}, not the job's uid {self.uid}")
                    whole = False
                elif sub.st_dev != st.st_dev:
                    self.keep(kind, child, "on another file system (a mount point)")
                    whole = False
                elif stat.S_ISDIR(sub.st_mode):
                    whole = self._remove_tree(kind, fd, entry, child, sub) and whole
                elif not self.test:
                    os.unlink(entry, dir_fd=fd)
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
            return None, f"not a regular file ({_kind_of(st)})"
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
            self.log.flush()
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
            self.log("info", f"job scratch purged: {_show(path)}")

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
            why = (f"not a real directory ({_kind_of(st)})" if not stat.S_ISDIR(st.st_mode)
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
                self.keep("x_socket", entry_path, f"not a socket ({_kind_of(entry)})")
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
        sock_path = f"{TMP}/{X11_DIR}/X{display}"
        lock_pid, lock_problem, lock_st, lock_path = None, None, None, None
        if lock_name:
            lock_path = f"{TMP}/{lock_name}"
            lock_st = self.lstat_at(tmp_fd, lock_name)
            if lock_st is None:
                lock_name = None
            else:
                lock_pid, lock_problem = self.read_lock(tmp_fd, lock_name, lock_st)
        lock_alive = bool(lock_name and not lock_problem and self.alive_as(lock_pid, lock_st.st_uid))
        purged = False
        if sock:
            name, st = sock
            if bound is None:
                reason = "unknown: the kernel's socket diagnostics cannot be read, cannot tell whether held"
                self.keep("x_socket", sock_path, reason)
                if lock_name:
                    self.keep("x_lock", lock_path, reason)
                return
            sock_ino = bound.get((st.st_dev, st.st_ino & 0xFFFFFFFF))
            if sock_ino is not None or self.listener_answers(x_fd, name, st):
                holder = self._holders.get(sock_ino)
                reason = (f"held by pid {holder[0]} ({holder[1]})" if holder else
                          "held: a live socket is bound to it" if sock_ino is not None else
                          "held: a listener answers on it")
                self.keep("x_socket", sock_path, reason)
                if lock_name:
                    self.keep("x_lock", lock_path, f"its socket is {reason}")
                return
            if lock_name and lock_problem:
                self.keep("x_socket", sock_path, f"its lock is {lock_problem}; cannot tell whether the display is in use")
                self.keep("x_lock", lock_path, lock_problem)
                self.log("warning", f"kept display :{display}: lock {_show(lock_path)} is {lock_problem}")
                return
            if lock_alive:
                reason = f"lock pid {lock_pid} alive ({self.comm(lock_pid)})"
                self.keep("x_socket", sock_path, f"orphan socket, but {reason}")
                self.keep("x_lock", lock_path, reason)
                return
            purged = self.remove("x_socket", x_fd, name, sock_path, st)
            if lock_name:
                purged = self.remove("x_lock", tmp_fd, lock_name, lock_path, lock_st) or purged
        elif lock_name:
            if lock_problem:
                self.keep("x_lock", lock_path, lock_problem)
                self.log("warning", f"kept {_show(lock_path)}: {lock_problem}")
                return
            if lock_alive:
                self.keep("x_lock", lock_path, f"lock pid {lock_pid} alive ({self.comm(lock_pid)})")
                return
            purged = self.remove("x_lock", tmp_fd, lock_name, lock_path, lock_st)
        if purged:
            self.log("info", f"stale X display purged: :{display}")

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
            self.keep("clsbd", path, f"not a regular file or socket ({_kind_of(st)})")
            return
        pid = int(match.group(2)) if len(match.group(2)) <= 10 else 0
        if pid < 1 or pid > self.pid_max():
            self.keep("clsbd", path, f"malformed name: pid {match.group(2)[:12]} out of range")
            return
        if self.alive_as(pid, st.st_uid):
            self.keep("clsbd", path, f"pid {pid} alive ({self.comm(pid)})")
            return
        if self.remove("clsbd", tmp_fd, name, path, st):
            self.log("info", f"stale clsbd purged: {_show(path)}")


def _kind_of(st):
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
        if not _digits(job):
            raise SweepError(f"job must be a numeric Slurm job id, got {job!r}")
        if uid is None or not _digits(str(uid)) or not 1 <= int(uid) <= 4294967294:
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


def run_sweep(test=False, job=None, patterns=(), budget=10, log_file=None, source="epilog.sweep", user=None,
              uid=None, log_fd=None, release=None):
    """The sweep, as both callers run it. With JOB, that job's scratch goes
    too, and only the entries owned by UID. Returns the report dict; raises
    SweepError when the sweep itself cannot run."""
    job, patterns, budget, uid = _check_args(job, patterns, budget, uid)
    # A preview (test=True) changes nothing, the log included.
    log = _Log(log_file, source, job=job, user=user, enabled=not test, log_fd=log_fd, release=release)
    return _Sweep(bool(test), job, patterns, budget, log, uid=uid).run()


# -- the epilog part: epilog_sweep.part(), at every job end ---------------------
PART_OPTIONS = ("budget", "release", "pattern", "log-fd", "fact-fd")
# What part 45 hands the runner for the job end's record (fact_line): the
# counts, and the paths removed and kept up to a cap of characters, so that
# the record stays one short line however much residue there was.
FACT_PATH_CHARS = 1500


def _json_text(text):
    """TEXT as a JSON string of printable ASCII (the standard library's json
    costs a job end its import)."""
    out = []
    for char in text:
        code = ord(char)
        if 0x20 <= code < 0x7F and char not in '"\\':
            out.append(char)
        elif code > 0xFFFF:
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            out.append(f"\\u{code:04x}")
    return '"' + "".join(out) + '"'


def fact_line(report):
    """The sweep's fact for the runner's record, one line: 'fact sweep JSON'
    with the counts per kind, the paths removed and kept (each list cut when
    it would pass half of FACT_PATH_CHARS, with how many were left out)."""
    counts = ",".join(f'"{kind}":{{"removed":{report["counts"][kind]["removed"]:d},'
                      f'"kept":{report["counts"][kind]["kept"]:d}}}' for kind in KINDS)
    lists = []
    for key, paths in (("removed", report["removed"]), ("kept", [kept["path"] for kept in report["kept"]])):
        shown, size = [], 0
        for path in paths:
            text = _json_text(path)
            if size + len(text) > FACT_PATH_CHARS // 2:
                break
            shown.append(text)
            size += len(text) + 1
        lists.append(f'"{key}":[{",".join(shown)}],"{key}_more":{len(paths) - len(shown):d}')
    return f'fact sweep {{"counts":{{{counts}}},{",".join(lists)}}}\n'


def _digits(text):
    """TEXT is ASCII digits only (str.isdigit also takes other scripts' digits)."""
    return bool(text) and all(c in "0123456789" for c in text)


def part(argv=None):
    """Part 45's entry, run at every job end as

        python3 -I -S -B -c '...; sys.exit(__import__(...).part())' RELEASE_DIR epilog_sweep --opt=value ...

    so that the release's bytecode of this file (release.py writes it at the
    deploy) is used, and nothing a job end does not need is imported (no
    argparse). Every argument is a pillar value, each as --opt=value (opt in
    PART_OPTIONS, --pattern= again for each pattern). The job's id, uid and
    user come from slurmd's environment (SLURM_JOB_*), never from arguments:
    a user named -v or --budget=0 never meets this parser. Always returns 0:
    a failing epilog drains the node; what went wrong is in the log."""
    options = {"budget": DEFAULT_BUDGET, "release": None, "pattern": [], "log-fd": None, "fact-fd": None}
    unknown = []
    for arg in sys.argv[1:] if argv is None else argv:
        name, sep, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if not sep or name not in PART_OPTIONS:
            unknown.append(arg)
        elif name == "pattern":
            options["pattern"].append(value)
        else:
            options[name] = value
    release = options["release"] if re.fullmatch(r"[0-9a-f]{12}", options["release"] or "") else None
    log_fd = options["log-fd"]
    log_fd = int(log_fd) if _digits(log_fd) else None
    source, user = "45-stale-x-display", os.environ.get("SLURM_JOB_USER") or None
    job, uid = os.environ.get("SLURM_JOB_ID") or None, os.environ.get("SLURM_JOB_UID") or None
    if not (_digits(job) and _digits(uid) and 1 <= int(uid) <= 4294967294):
        job = uid = None  # no scratch without a plain job id and uid
    log = _Log(None, source, job, user, log_fd=log_fd, release=release)
    signal.signal(signal.SIGTERM, _terminated)
    try:
        if unknown:
            raise SweepError(f"unknown arguments {unknown!r} (each must be --opt=value, opt one of {PART_OPTIONS})")
        report = run_sweep(job=job, patterns=options["pattern"], budget=options["budget"], source=source,
                           user=user, uid=uid, log_fd=log_fd, release=release)
        if _digits(options["fact-fd"]):
            try:
                os.write(int(options["fact-fd"]), fact_line(report).encode("ascii"))
            except OSError:
                pass  # the runner's pipe is gone: the record goes without the sweep's facts
    except SweepError as exc:
        log("warning", f"sweep could not run: {exc}")
        log.flush()
        print(f"epilog_sweep.py: {exc}", file=sys.stderr)
    except _Terminated as exc:
        log("warning", f"sweep {exc}; what is left waits for the next job end")
        log.flush()
    except Exception as exc:  # noqa: BLE001  # the part must never fail the epilog
        log("warning", f"sweep failed: {exc!r}")
        log.flush()
    return 0


# -- by hand: python3 epilog_sweep.py sweep ... ---------------------------------
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:2] == ["sweep", "--part"]:
        return part(argv[2:])  # part 45's entry, run by hand
    import argparse  # only by hand: a job end never needs it  # pylint: disable=import-outside-toplevel

    parser = argparse.ArgumentParser(prog="epilog_sweep.py", description="The epilog formula's residue sweep.")
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
        parser.error("a command is required: sweep (sweep --part is part 45's, see part())")
    try:
        report = run_sweep(test=args.test, job=args.job or None, patterns=args.pattern, budget=args.budget,
                           log_file=args.log_file, source="epilog_sweep.py", uid=args.uid)
    except SweepError as exc:
        print(f"epilog_sweep.py: {exc}", file=sys.stderr)
        return 1
    if args.json:
        import json  # only for --json: a job end never needs it  # pylint: disable=import-outside-toplevel

        print(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
