"""The sweep's removal, as root in a world-writable /tmp: an entry goes
only while it is still the very entry judged (its inode, type and ctime
looked at again, relative to an open directory handle: never a path
resolved again, never a symlink followed); a directory of the job's
scratch only as far as the job's uid owns it, at every depth (walk.py's
walk, which never leaves the tree or its file system); between jobs, only
while its owner's lock in the run directory is free (a job end or prolog
of theirs may be acting).
"""
import os
import stat

from . import system, walk
from .sweep_report import Report


class Removal(Report):
    """A sweep's books and its removal. UID: the job's uid, whose entries
    alone are the job's scratch; LOCKS: the run directory, between jobs (or
    None); WOULD: decide as a sweep that removes, locks included, and remove
    nothing."""

    def __init__(self, test, job, budget, log, uid=None, locks=None, would=False):
        super().__init__(test or would, job, budget, log)
        self.would = would
        self.uid = uid
        self.locks = locks

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
        self.gone(kind, path)
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
