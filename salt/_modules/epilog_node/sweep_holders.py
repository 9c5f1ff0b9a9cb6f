"""Who holds the residue: whether a live unix socket is bound to an X
display's socket file, and which process that is; whether a listener
answers on it; whether the pid a lock or a clsbd file names is a live
process of the file's owner.

"Held" comes from the kernel alone: its socket diagnostics
(NETLINK_SOCK_DIAG), asked in every network namespace a process is in,
name the bound file by its device and inode, which no user can print or
forge, unlike the names in /proc/net/unix. The processes are read from
/proc: their uids, their names, their descriptors (the holder named in
the report, not evidence).
"""
import errno
import os
import socket
import struct
import time

from . import sweep_report, system
from .sweep_report import Unjudged

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


def _bound_files_here(deadline=None):
    """{(st_dev, st_ino): socket inode} of every file a unix socket of this
    network namespace is bound to, as the kernel reports it
    (NETLINK_SOCK_DIAG, UNIX_DIAG_VFS): the bound file's own identity, which
    no user can print or forge, unlike the names in /proc/net/unix. Until
    DEADLINE (sweep_report.check, every sweep_report.CHECK_EVERY batches of the dump)."""
    found, batches = {}, 0
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(5)
        # struct unix_diag_req: family, protocol, pad, states, ino, show, cookie[2]
        req = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, 0, UDIAG_SHOW_VFS, 0xFFFFFFFF, 0xFFFFFFFF)
        nl.sendto(struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + req,
                  (0, 0))
        while True:
            data = nl.recv(1 << 16)
            batches += 1
            if batches % sweep_report.CHECK_EVERY == 0:
                sweep_report.check(deadline)
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
    for read, pid in enumerate(pids, 1):
        if read % sweep_report.CHECK_EVERY == 0:
            sweep_report.check(deadline)
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
        found.update(_bound_files_here(deadline))
        for space, pid in spaces.items():
            if space == mine:
                continue
            sweep_report.check(deadline)
            try:
                fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue  # the process is gone, and its namespace with it
            try:
                _setns(fd)
                try:
                    found.update(_bound_files_here(deadline))
                finally:
                    _setns(home)
            finally:
                os.close(fd)
    except (OSError, struct.error):
        return None
    finally:
        os.close(home)
    return found


class Processes:
    """The live processes, as one sweep asks about them (their uids and
    pid_max read once), until DEADLINE (time.monotonic())."""

    def __init__(self, deadline):
        self.deadline = deadline
        self._owners = {}
        self._pid_max = None

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
        resolved again): refused means nobody holds it. Unjudged when the
        answer is anything else."""
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=x_fd)
        try:
            if not os.path.samestat(st, os.fstat(fd)):
                raise Unjudged("changed while the sweep ran")
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
                    raise Unjudged(f"connect failed ({exc.strerror})") from exc
                return True
        finally:
            os.close(fd)

    def _over(self):
        """The deadline is past, or the runner's SIGTERM came."""
        return sweep_report.stopped() or time.monotonic() > self.deadline

    def holders(self, inodes):
        """{socket inode: (pid, comm)}: one pass over /proc/*/fd, done only
        when some X socket is held, to name who holds it (a report, not
        evidence: "held" comes from the socket diagnostics)."""
        wanted = {f"socket:[{inode}]": inode for inode in inodes}
        found = {}
        for pid in _proc_pids() or []:
            if len(found) == len(wanted) or self._over():
                break
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for read, fd in enumerate(fds, 1):
                if read % sweep_report.CHECK_EVERY == 0 and self._over():
                    break
                try:
                    inode = wanted.get(os.readlink(f"/proc/{pid}/fd/{fd}"))
                except OSError:
                    continue
                if inode is not None and inode not in found:
                    found[inode] = (int(pid), self.comm(pid))
        return found
