"""Paths inside a process's root: a slurmd's (the slurm.conf it reads, what
that includes, the chain its Epilog= names, its build's library, the
SLURM_CONF the chain's own squeue reads) resolved as the kernel resolves
them for that process, whatever mount namespace it runs in, each directory
judged on the descriptor opened for it (system.Trust.root_dir). The
module's verify, chain_wired, strays and explain and the runner all use
this one resolver."""
import errno
import os
import stat

from . import system

O_PATH = getattr(os, "O_PATH", 0o10000000)
# openat2(2) (Linux 5.6): its number on every architecture, and its flags
_SYS_OPENAT2 = 437
_RESOLVE_NO_MAGICLINKS, _RESOLVE_IN_ROOT = 0x02, 0x10
SYMLINK_HOPS = 40  # the kernel's own bound (MAXSYMLINKS)
STEPS_MAX = 4096  # names one resolution opens at most: PATH_MAX's worth, links and all
_OPENAT2 = []  # [the C library's syscall function, ctypes], or [None]: not here


def shown(name):
    """NAME as it may reach an operator's terminal: on one line and
    printable (system.show), one longer than PATH_MAX cut there, with ...
    after it."""
    name = str(name)
    return system.show(name) if len(name) <= 4096 else system.show(name[:4096]) + "..."


def split(path):
    """(pid, the path in its root) of a path /proc/PID/root/... (how a
    slurmd's own file is named here), else (None, PATH made absolute)."""
    if path.startswith("/proc/"):
        pid, _, rest = path[len("/proc/"):].partition("/")
        if system.digits(pid) and (rest == "root" or rest.startswith("root/")):
            return int(pid), rest[len("root"):] or "/"
    return None, os.path.abspath(path)


def openat2(dirfd, path, flags, resolve):
    """openat2(DIRFD, PATH, FLAGS, RESOLVE): a descriptor, or None where
    the kernel (or the C library) has no openat2; OSError otherwise."""
    if not _OPENAT2:
        try:
            import ctypes  # pylint: disable=import-outside-toplevel
            syscall = ctypes.CDLL(None, use_errno=True).syscall
            syscall.restype = ctypes.c_long
            _OPENAT2.append((syscall, ctypes))
        except (OSError, AttributeError):
            _OPENAT2.append(None)
    if _OPENAT2[0] is None:
        return None
    syscall, ctypes = _OPENAT2[0]
    how = (ctypes.c_uint64 * 3)(flags | os.O_CLOEXEC, 0, resolve)  # struct open_how: flags, mode, resolve
    fd = syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dirfd), ctypes.c_char_p(os.fsencode(path)),
                 ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            _OPENAT2[0] = None
            return None
        raise OSError(err, os.strerror(err), path)
    return fd


def _ended(pid):
    return OSError(errno.ESRCH, "process %d has ended (its pid now names another)" % pid, "/proc/%d" % pid)


class Root:
    """The root directory process PID sees (None: this process's), held
    open: /proc/PID opened once as a directory (the same process whatever
    its pid names later; with STARTED, its start time as system.started
    gives it, checked there: a pid reused since it was found is refused),
    and its root entered through that descriptor, in the process's own
    mount namespace. Every path of its is resolved inside that root as the
    kernel resolves it for that process: an absolute symlink or path from
    that root, .. never above it, no magic link of a /proc in it followed.
    Shown as /proc/PID/root/... in the answers."""

    def __init__(self, pid=None, started=None):
        self.pid = None if pid is None else int(pid)
        self.prefix = "" if pid is None else "/proc/%d/root" % self.pid
        self.proc = self.fd = None
        if pid is None:
            self.fd = os.open("/", O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            return
        self.proc = os.open("/proc/%d" % self.pid, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if started is not None:
                try:
                    now = system.started(system.read_in(self.proc, "stat", 4096))
                except OSError:
                    now = None
                if now != started:
                    raise _ended(self.pid)
            self.fd = os.open("root", O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.proc)
        except BaseException:
            self.close()
            raise

    def close(self):
        for name in ("fd", "proc"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)

    def read_proc(self, name, limit):
        """Up to LIMIT bytes of /proc/PID/NAME of this very process (never
        of another that took its pid since)."""
        fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.proc)
        try:
            data = b""
            while len(data) < limit:
                more = os.read(fd, limit - len(data))
                if not more:
                    break
                data += more
            return data
        finally:
            os.close(fd)

    def shown(self, path):
        return shown(self.prefix + path)

    def resolve(self, path, follow=True, trail=None):
        """PATH (absolute, in this root) resolved one name at a time, each
        opened O_PATH|O_NOFOLLOW in the directory opened before it: a
        symlink's text is read from its descriptor and resolved in this
        root (40 at most), .. goes back to the directory it came from and
        never above the root; the last name's symlink is not followed unless
        FOLLOW. Returns (an O_PATH descriptor of what PATH names, which the
        caller closes; its fstat; placed), placed True when each directory
        the resolution went through passed Trust's rule on the descriptor
        opened for it (an ancestor may be sticky, the directory that holds
        the file or a symlink may not). OSError when it names nothing, or
        takes more than STEPS_MAX names. TRAIL (a list), when given, gets
        the fstat of each directory from the root down to what PATH names,
        and of that, as the resolution went (.. and symlinks undone).

        Descriptors held at once are bounded (the root's, the directory a
        name is looked up in, that name's), whatever the depth: a directory
        left is closed, its fstat kept; a .. back to it reopens it as ..
        of the directory below and must find that very directory (device
        and inode) again, else the resolution fails (EAGAIN: a directory
        moved meanwhile, never a path resolved anew)."""
        rule = system.Trust.root_dir
        stack = [[os.dup(self.fd), os.fstat(self.fd)]]  # [descriptor or None (closed), fstat] per level
        todo = [name for name in reversed(path.split("/")) if name]
        hops, placed, steps = 0, True, 0
        try:
            while todo:
                name = todo.pop()
                steps += 1
                if steps > STEPS_MAX:
                    raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), self.prefix + path[:256])
                if name == ".":
                    continue
                if name == "..":
                    if len(stack) > 1:
                        self._back(stack)
                    continue
                fd = os.open(name, O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=stack[-1][0])
                st = os.fstat(fd)
                link = stat.S_ISLNK(st.st_mode)
                # the directory NAME is in holds the last name (a file, or a
                # symlink: not sticky) or is an ancestor (of a directory,
                # or on the way: sticky will do), as Trust.root_only has it
                placed = placed and bool(rule(stack[-1][1], last=link or (not todo and not stat.S_ISDIR(st.st_mode))))
                if link and (todo or follow):
                    try:
                        target = os.readlink("", dir_fd=fd)
                    finally:
                        os.close(fd)
                    hops += 1
                    if hops > SYMLINK_HOPS:
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), self.prefix + path)
                    if target.startswith("/"):
                        while len(stack) > 1:
                            self._back(stack, reopen=False)
                    todo.extend(name for name in reversed(target.split("/")) if name)
                    continue
                if len(stack) > 1:  # the directory left: its fstat is kept, its descriptor not
                    os.close(stack[-1][0])
                    stack[-1][0] = None
                stack.append([fd, st])
                if todo and not stat.S_ISDIR(st.st_mode):
                    raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), self.prefix + path)
            if trail is not None:
                trail.extend(st for _, st in stack)
            fd, st = stack.pop()
            return fd, st, placed
        finally:
            for fd, _ in stack:
                if fd is not None:
                    os.close(fd)

    def _back(self, stack, reopen=True):
        """Leave the directory on top of STACK for the one below it,
        reopened (unless not REOPEN: the one below is left too) as .. of
        the one left, and checked to be the directory it came from."""
        fd, _ = stack.pop()
        try:
            if not reopen or stack[-1][0] is not None:
                return
            if len(stack) == 1:
                stack[-1][0] = os.dup(self.fd)
                return
            parent = os.open("..", O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
            now, then = os.fstat(parent), stack[-1][1]
            if (now.st_dev, now.st_ino) != (then.st_dev, then.st_ino):
                os.close(parent)
                raise OSError(errno.EAGAIN, "a directory moved during the resolution", self.prefix)
            stack[-1][0] = parent
        finally:
            if fd is not None:
                os.close(fd)

    def stat(self, path):
        """The stat of what PATH names in this root, resolved by the kernel
        (openat2's RESOLVE_IN_ROOT and RESOLVE_NO_MAGICLINKS) where it has
        openat2, else by resolve(). OSError when it names nothing."""
        if "\0" in path:
            raise ValueError("embedded null byte")
        fd = openat2(self.fd, path, O_PATH, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
        if fd is None:
            fd = self.resolve(path)[0]
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def exists(self, path):
        try:
            self.stat(path)
            return True
        except (OSError, ValueError):
            return False

    def root_only(self, directory):
        """Trust.root_only of DIRECTORY in this root: it and every directory
        its resolution went through judged on their descriptors."""
        try:
            fd, st, placed = self.resolve(directory)
            os.close(fd)
        except (OSError, ValueError):
            return False
        return placed and bool(system.Trust.root_dir(st, True))

    def within(self, path, ident):
        """Whether what PATH names in this root is the file or directory
        IDENT ((st_dev, st_ino), another namespace's view of it) or lies
        below it: each directory its resolution went down through, from
        this root, compared by identity (never by name). None when PATH
        names nothing."""
        trail = []
        try:
            os.close(self.resolve(path, trail=trail)[0])
        except (OSError, ValueError):
            return None
        return any((st.st_dev, st.st_ino) == tuple(ident) for st in trail)

    @staticmethod
    def read(fd, limit):
        """The first LIMIT bytes of the regular file whose O_PATH descriptor
        is FD: that very inode, reopened through the descriptor, never
        blocking on a FIFO."""
        with os.fdopen(os.open("/proc/self/fd/%d" % fd, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC),
                       "rb") as handle:
            return handle.read(limit)

    @staticmethod
    def names(fd, bounds):
        """The names in the directory whose O_PATH descriptor is FD, listed
        through it while BOUNDS allows one more entry."""
        out = []
        listed = os.open("/proc/self/fd/%d" % fd, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            with os.scandir(listed) as entries:
                for entry in entries:
                    if not bounds.take("entries"):
                        break
                    out.append(entry.name)
        finally:
            os.close(listed)
        return out

    def glob(self, pattern, bounds, listed):
        """The paths in this root PATTERN (absolute) names, sorted, as
        glob(3) finds them: a name fnmatch's * ? [...] match in a directory
        listed through its descriptor, a name with a leading dot only by a
        pattern with one, each match there (lstat). Each directory listed
        is added to LISTED as (its path, fstat, placed); BOUNDS bounds the
        entries listed, the matches and the time."""
        import fnmatch  # pylint: disable=import-outside-toplevel
        found = ["/"]
        for part in (part for part in pattern.split("/") if part):
            if not any(c in part for c in "*?["):
                found = [os.path.join(path, part) for path in found]
                continue
            matched = []
            for base in found:
                if bounds.over():
                    break
                try:
                    fd, st, placed = self.resolve(base)
                except (OSError, ValueError):
                    continue
                try:
                    if not stat.S_ISDIR(st.st_mode):
                        continue
                    listed.append((base, st, placed))
                    names = self.names(fd, bounds)
                except OSError:
                    continue
                finally:
                    os.close(fd)
                matched += [os.path.join(base, name) for name in names
                            if (part.startswith(".") or not name.startswith(".")) and fnmatch.fnmatchcase(name, part)]
            found = matched
        out = []
        for path in sorted(found):
            if not bounds.take("matches"):
                break
            try:
                os.close(self.resolve(path, follow=False)[0])
            except (OSError, ValueError):
                continue
            out.append(path)
        return out
