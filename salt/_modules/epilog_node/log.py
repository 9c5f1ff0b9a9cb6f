"""The log of a job end: one line per decision to log_file (rotated past its
bound, as the records are) and to syslog (tag slurm-epilog, facility
daemon). Best effort: a missing or unsafe log directory, no syslog, a full
syslog queue never fail the caller, and nothing here ever blocks.

The log file is written only inside a directory only root can write
(Debian's /var/log/slurm belongs to the slurm user, who could otherwise swap
epilog.log for a symlink to /etc/nologin), opened without following a
symlink or blocking on a FIFO, and only while it is a regular file with no
other hard link. A job end writes at most LINES_MAX lines: what users can
create (thousands of files in /tmp) is summed up by its callers, and this
bound holds whatever else floods."""
import errno
import os
import stat
import time

from . import system

TAG = "slurm-epilog"
SYSLOG = "/dev/log"
LINES_MAX = 1000
# syslog datagrams go out together, at most this many at a time
SYSLOG_BATCH = 256


def open_append(trust, path, mode):
    """PATH opened to append (created with MODE), or None: only in a
    directory only root can write, never through a symlink or into a FIFO,
    and only a regular file with one link."""
    if not path:
        return None
    directory = os.path.dirname(path) or "/"
    if not trust.root_only(directory):
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
                     | os.O_CLOEXEC, mode)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def rotate(fd, path, max_bytes, lock_fd=None):
    """When the file open on FD is past MAX_BYTES, rename it to PATH.1 (the
    one before is dropped), under a lock and only while it is still the one
    at PATH: of several job ends past the bound at once, one renames it.
    The lock is on LOCK_FD, or on the file itself when only root can open
    it (the records: epilog.report reads them under the same lock). True
    when it was renamed."""
    try:
        if os.fstat(fd).st_size <= max_bytes:
            return False
        if not system.wait_lock(fd if lock_fd is None else lock_fd, 1):
            return False
        if not os.path.samestat(os.fstat(fd), os.lstat(path)):
            return False
        os.rename(path, path + ".1")
        return True
    except OSError:
        return False


class Log:
    """The log of one run of the chain (or of a part run on its own, or of
    epilog.sweep). Each line is "SOURCE job=J user=U release=R: TEXT"; the
    file gets a time stamp and the level in front. In explain mode the lines
    are kept in CAPTURED, and nothing is written anywhere."""

    def __init__(self, path, trust, job=None, user=None, release=None, max_bytes=1 << 20, explain=False,
                 source="epilog.sh", fd=None):
        self.path = path
        self.trust = trust
        self.max_bytes = max_bytes
        self.explain = explain
        self.source = source
        self.context = " job=%s user=%s%s: " % (job or "none", system.show(user) if user else "none",
                                                  " release=%s" % release if release else "")
        self.captured = []
        self.warnings = 0
        self.dropped = 0
        self._lines = 0
        self._fd = fd
        self._opened = fd is not None
        self._syslog = []
        self._stamped = (None, "")

    def line(self, level, text, source=None):
        """One line. Returns the line as logged (without time stamp)."""
        if not text.isprintable():
            text = system.show(text)
        msg = (source or self.source) + self.context + text
        if level == "warning":
            self.warnings += 1
        if self.explain:
            self.captured.append((level, text))
            return msg
        self._lines += 1
        if self._lines > LINES_MAX:
            self.dropped += 1
            return msg
        self._write(level, msg)
        return msg

    def info(self, text, source=None):
        return self.line("info", text, source)

    def warning(self, text, source=None):
        return self.line("warning", text, source)

    def _stamp(self):
        second = int(time.time())
        if second != self._stamped[0]:
            self._stamped = (second, time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(second)))
        return self._stamped[1]

    def _write(self, level, msg):
        if not self._opened:
            self._opened = True
            self._fd = open_append(self.trust, self.path, 0o644)
            if self._fd is not None and self._rotate():
                os.close(self._fd)
                self._fd = open_append(self.trust, self.path, 0o644)
        if self._fd is not None:
            try:
                os.write(self._fd, ("%s %s %s\n" % (self._stamp(), level, msg)).encode("utf-8", "backslashreplace"))
            except OSError:
                pass
        self._syslog.append((level, msg))
        if len(self._syslog) >= SYSLOG_BATCH:
            self.flush()

    def _rotate(self):
        """rotate() under a lock beside the log, root's alone (0600): the log
        is 0644, and any account that can open a file can lock it."""
        try:
            if os.fstat(self._fd).st_size <= self.max_bytes:
                return False
        except OSError:
            return False
        directory, name = os.path.split(self.path)
        lock = open_append(self.trust, os.path.join(directory, ".%s.lock" % name), 0o600)
        if lock is None:
            return False
        try:
            return rotate(self._fd, self.path, self.max_bytes, lock)
        finally:
            os.close(lock)

    def flush(self):
        """Send the lines gathered for syslog, one datagram each, on a
        socket connected once (a syslog that restarts meanwhile is connected
        to again, once); a full queue drops a line, never waits. Returns how
        many were dropped; the file is told."""
        pending, self._syslog = self._syslog, []
        if not pending:
            return 0
        import _socket  # the C module: socket.py's enums cost a job end milliseconds

        dropped, sock, reconnected = 0, None, False
        try:
            for level, msg in pending:
                priority = 3 * 8 + (4 if level == "warning" else 6)  # facility daemon
                datagram = ("<%d>%s: %s" % (priority, TAG, msg)).encode("utf-8", "backslashreplace")
                while True:
                    if sock is None:
                        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM)
                        sock.setblocking(False)
                        sock.connect(SYSLOG)
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
                        continue
                    break
        except OSError:
            pass  # no syslog (any more): the file has every line
        finally:
            if sock is not None:
                sock.close()
        if dropped and self._fd is not None:
            try:
                os.write(self._fd, ("%s warning %s%s%d of these %d lines did not reach syslog (its queue was full)\n"
                                    % (self._stamp(), self.source, self.context, dropped, len(pending))).encode())
            except OSError:
                pass
        return dropped

    def close(self):
        if self.dropped:
            n, self.dropped = self.dropped, 0
            self._lines = 0
            self._write("warning", "%s%s%d more lines of this run were not logged (at most %d a run)"
                        % (self.source, self.context, n, LINES_MAX))
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
