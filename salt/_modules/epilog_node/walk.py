"""The walk of a tree the node program removes from as root, in a directory
every user can write (part 42's /tmp and /dev/shm, part 45's job scratch):
one mechanism for both, at any depth, with a bounded number of descriptors.

The rules of what goes and what stays are the caller's (Rules); the walk
keeps these promises whatever the rules say:

- it never follows a symlink: an entry is judged by its lstat, relative to
  the directory handle it was listed from, and a directory is entered with
  openat(parent, name, O_NOFOLLOW | O_DIRECTORY) and entered only when that
  handle's fstat is the lstat that chose it (same device and inode);
- it never leaves the file system of the tree's top (a mount point below it,
  a user's FUSE mount, is never entered);
- it never leaves the tree: it holds a handle on the deepest KEEP_OPEN
  directories only, and goes up to a closed one with openat(child, "..",
  O_NOFOLLOW | O_DIRECTORY), whose device and inode must be the ones recorded
  when that directory was entered. Otherwise a user moved the directory out
  from under the walk: the walk gives up what is left above it, up to the
  top, says so (Rules.failed), and never acts through that "..". What it already held of a branch moved away meanwhile
  (entries given to it in the tree) it finishes; the branch's new parent it
  never touches;
- it acts by name relative to a handle it holds (unlinkat, and rmdir after
  an lstat that finds the same directory there), never through a path
  resolved again from the top;
- it lists a directory in batches (os.scandir on the handle, where the
  python has it: 3.7 and later; 3.6 lists each directory at once), so a
  directory too big to list at once needs no more memory than a batch while
  the walk holds it; what is left of a directory the walk stops holding (it
  went more than KEEP_OPEN levels below it) is read into memory then;
- it asks Rules.check before every entry (the caller's deadline: it raises
  to stop the walk), and closes every handle it opened, whatever happens.
"""
import os
import stat

# The deepest directories the walk holds open, each with a handle of its own
# and one for its listing: 2 * KEEP_OPEN descriptors, two for the top, and
# one more while the walk goes down or up.
KEEP_OPEN = 16

ENTER, KEEP, REMOVE = "enter", "keep", "remove"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Moved(OSError):
    """A directory the walk was in is no longer where the walk entered it."""


def why(exc):
    """EXC in a few words for a log line or a report."""
    return exc.strerror or str(exc)


def open_dir(parent_fd, name, st):
    """NAME in PARENT_FD opened as a directory, without following a symlink,
    when it is still the directory ST (its lstat) describes; OSError
    otherwise."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    if not os.path.samestat(st, os.fstat(fd)):
        os.close(fd)
        raise Moved("changed while the walk looked at it")
    return fd


class Rules:
    """What goes: the caller's. The walk calls check() before each entry,
    judge() for each entry (ENTER a directory, REMOVE, or KEEP; a directory
    judged REMOVE is kept), removed() for what went (or would, with test),
    failed() for what could not be looked at, entered or removed (DOING:
    "lstat", "open", "list", "unlink", "rmdir", or "up" for a branch moved
    out of the walk; NAME None for the directory the walk is in), and
    leave() for a directory it entered, once its entries are done: REMOVE
    (the walk removes it, if WHOLE: nothing in it stays) or KEEP."""

    test = False

    def check(self):
        pass

    def judge(self, walk, name, st):
        raise NotImplementedError

    def leave(self, walk, name, st, whole):
        return REMOVE if whole else KEEP

    def removed(self, walk, name, st):
        pass

    def failed(self, walk, name, exc, doing):
        pass


class _Frame:
    __slots__ = ("fd", "listing", "name", "rest", "st", "whole")

    def __init__(self, fd, name, st):
        self.fd = fd
        self.listing = None  # the os.scandir iterator, while the walk holds fd
        self.rest = None  # the names left, read at once (python 3.6, or fd closed)
        self.name = name
        self.st = st
        self.whole = True

    def start(self):
        if os.scandir in os.supports_fd:
            self.listing = os.scandir(self.fd)
        else:
            self.rest = os.listdir(self.fd)

    def next_name(self):
        if self.listing is not None:
            for entry in self.listing:
                return entry.name
            self.listing.close()
            self.listing = None
            self.rest = []
        return self.rest.pop() if self.rest else None

    def close(self, keep=True):
        """Stop holding the directory; with KEEP, what is left of its
        listing is kept as names. The OSError that cut the listing short,
        if one did."""
        cut = None
        if self.listing is not None and not keep:
            self.listing.close()
            self.listing = None
        if self.listing is not None:
            self.rest = []
            try:
                for entry in self.listing:
                    self.rest.append(entry.name)
            except OSError as exc:
                cut = exc
                self.whole = False
            finally:
                self.listing.close()
                self.listing = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        return cut


class Walk:
    """The walk of the directory TOP_FD (open, held by the caller, never
    removed by the walk) by RULES. path(name) shows an entry for a report."""

    def __init__(self, top_fd, rules, top_path="", keep_open=KEEP_OPEN):
        self.rules = rules
        self.top_path = top_path
        self.keep_open = keep_open
        top = _Frame(top_fd, None, os.fstat(top_fd))
        self.device = top.st.st_dev
        self.frames = [top]
        self._held = 1  # frames[_held:] are held open (the top always is)

    @property
    def whole(self):
        """Nothing under the top stays (or would, with test), once run."""
        return self.frames[0].whole

    @property
    def depth(self):
        """Levels below the top of the directory the walk is in."""
        return len(self.frames) - 1

    def path(self, name=None, most=8):
        """The path of NAME in the directory the walk is in (of that
        directory without NAME), for a report: TOP_PATH, the names below it,
        their middle cut out past MOST levels, so that a deep tree's report
        stays bounded. Raw: the caller escapes it (system.show)."""
        names = [frame.name for frame in self.frames[1:1 + most // 2]]
        below = len(self.frames) - 1
        if below > most:
            names.append("[%d levels]" % (below - most))
            names.extend(frame.name for frame in self.frames[-(most - most // 2):])
        else:
            names.extend(frame.name for frame in self.frames[1 + most // 2:])
        if name is not None:
            names.append(name)
        return "/".join([self.top_path.rstrip("/"), *names]) if names else self.top_path

    def run(self):
        """Walk the tree; whatever Rules.check raises ends it, every handle
        the walk opened closed."""
        try:
            self._start(self.frames[0])
            while True:
                frame = self.frames[-1]
                name = self._next(frame)
                if name is not None:
                    self._entry(frame, name)
                elif len(self.frames) == 1:
                    break
                else:
                    self._up()
        finally:
            top = self.frames[0]
            for frame in self.frames[1:]:
                frame.close(keep=False)
            if top.listing is not None:
                top.listing.close()
                top.listing = None
            self.frames = [top]

    def _start(self, frame):
        try:
            frame.start()
        except OSError as exc:
            frame.rest = []
            frame.whole = False
            self.rules.failed(self, None, exc, "list")

    def _next(self, frame):
        try:
            return frame.next_name()
        except OSError as exc:  # a listing cut short: what is left stays
            if frame.listing is not None:
                frame.listing.close()
            frame.listing = None
            frame.rest = []
            frame.whole = False
            self.rules.failed(self, None, exc, "list")
            return None

    def _entry(self, frame, name):
        rules = self.rules
        rules.check()
        try:
            st = os.stat(name, dir_fd=frame.fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        except OSError as exc:  # a FUSE mount of another user answers EACCES
            frame.whole = False
            rules.failed(self, name, exc, "lstat")
            return
        verdict = rules.judge(self, name, st)
        if verdict == ENTER and stat.S_ISDIR(st.st_mode) and st.st_dev == self.device:
            self._down(frame, name, st)
        elif verdict == REMOVE and not stat.S_ISDIR(st.st_mode):
            try:
                if not rules.test:
                    os.unlink(name, dir_fd=frame.fd)
            except FileNotFoundError:
                return
            except OSError as exc:
                frame.whole = False
                rules.failed(self, name, exc, "unlink")
                return
            rules.removed(self, name, st)
        else:
            frame.whole = False

    def _down(self, frame, name, st):
        try:
            fd = open_dir(frame.fd, name, st)
        except OSError as exc:
            frame.whole = False
            self.rules.failed(self, name, exc, "open")
            return
        child = _Frame(fd, name, st)
        self.frames.append(child)
        if len(self.frames) - self._held > self.keep_open:
            cut = self.frames[self._held].close()
            self._held += 1
            if cut is not None:
                self.rules.failed(self, None, cut, "list")
        self._start(child)

    def _up(self):
        """The directory the walk is in is done: back to its parent (opened
        again through ".." if the walk no longer held it), and the directory
        removed or kept as the rules say."""
        child = self.frames.pop()
        try:
            parent = self.frames[-1]
            if parent.fd is None:
                try:
                    fd = os.open("..", _DIR_FLAGS, dir_fd=child.fd)
                except OSError as exc:
                    self._abandon(child, exc)
                    return
                if not os.path.samestat(parent.st, os.fstat(fd)):
                    os.close(fd)
                    self._abandon(child, Moved("moved out of the tree while the walk was in it"))
                    return
                parent.fd = fd
                self._held -= 1
            self._leave(parent, child)
        finally:
            child.close()

    def _leave(self, parent, child):
        rules = self.rules
        if rules.leave(self, child.name, child.st, child.whole) != REMOVE or not child.whole:
            parent.whole = False
            return
        try:
            if not rules.test:
                now = os.stat(child.name, dir_fd=parent.fd, follow_symlinks=False)
                if not os.path.samestat(child.st, now):
                    raise Moved("changed while the walk was in it")
                os.rmdir(child.name, dir_fd=parent.fd)
        except FileNotFoundError:
            return
        except OSError as exc:
            parent.whole = False
            rules.failed(self, child.name, exc, "rmdir")
            return
        rules.removed(self, child.name, child.st)

    def _abandon(self, child, exc):
        """CHILD's parent is not where the walk left it: give up the
        directories the walk no longer holds (those between the top and
        CHILD), acting on none of them."""
        self.frames.append(child)
        self.rules.failed(self, None, exc, "up")
        self.frames.pop()
        while self.frames[-1].fd is None:
            self.frames.pop()
        self._held = len(self.frames)
        self.frames[-1].whole = False
