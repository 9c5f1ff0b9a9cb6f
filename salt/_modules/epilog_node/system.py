"""What the node program reads from the node, and how it opens what it
writes: who may write a directory (root_only), the processes in /proc, the
account database's ranges, names shown safely, and a lock that is waited for
only so long; and the few tools a job end needs that the standard library
would import a heavy module for. Nothing here decides anything.

What a job end imports is its start-up time, paid at every job end on every
node: the node program never imports re, enum, collections, signal, socket,
datetime or json's Python layer on that path (about 15 ms of python 3.11's
imports together, more than the whole chain's own work). Those it needs come
from the C modules beneath them (_signal, _socket, _json), and fields()
stands in for namedtuple; tests/unit/test_python36.py holds the job end's
imports to this.
"""
import errno
import fcntl
import os
import stat
import time

try:  # the C module under signal: signal.py's enums import enum
    import _signal as signal
except ImportError:  # pragma: no cover - CPython always has it
    import signal  # noqa: F401 - parts and runner take it from here
try:  # the C module under json: json's own Python layer imports re, and re enum
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    _json = None

# The PATH every part runs with: slurmd gives an epilog almost none.
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The kernel's largest uid a process can hold: (uid_t)-1 means "unchanged"
# to setresuid, so a process "dropped" to it stays root.
UID_MAX_REAL = 4294967294


def child_env(env):
    """ENV as a process the chain starts gets it (a site's part, squeue):
    PATH and the C locale set."""
    out = dict(env)
    out.update(PATH=PATH, LC_ALL="C")
    return out



def fields(name, names, doc=""):
    """A tuple type whose items have NAMES (space-separated), as namedtuple
    makes, without importing collections: attribute access, keyword
    arguments, equality and a repr that names them."""
    names = tuple(names.split())

    def __new__(cls, *args, **kwargs):
        if kwargs:
            missing = [n for n in names[len(args):] if n not in kwargs]
            if missing or len(kwargs) != len(names) - len(args):
                raise TypeError("%s takes %s" % (name, ", ".join(names)))
            args += tuple(kwargs[n] for n in names[len(args):])
        if len(args) != len(names):
            raise TypeError("%s takes %s" % (name, ", ".join(names)))
        return tuple.__new__(cls, args)

    def __repr__(self):
        return "%s(%s)" % (name, ", ".join("%s=%r" % pair for pair in zip(names, self)))

    space = {"__slots__": (), "__new__": __new__, "__repr__": __repr__, "__doc__": doc or name, "_fields": names}
    for index, field in enumerate(names):
        space[field] = property(lambda self, index=index: self[index])
    return type(name, (tuple,), space)


def loads(text):
    """JSON TEXT (a str) as json.loads reads it, through json's C scanner;
    ValueError when it is not one JSON value."""
    if _SCANNER is None:
        import json  # pylint: disable=import-outside-toplevel
        return json.loads(text)
    start, end = 0, len(text)
    while start < end and text[start] in " \t\n\r":
        start += 1
    while end > start and text[end - 1] in " \t\n\r":
        end -= 1
    try:
        value, stop = _SCANNER(text, start)
    except StopIteration:
        raise ValueError("not JSON") from None
    if stop != end:
        raise ValueError("extra data after the JSON value")
    return value


def dumps(value, sort_keys=False):
    """VALUE as json.dumps(VALUE, separators=(",", ":"), sort_keys=SORT_KEYS)
    writes it (ASCII, NaN and Infinity as json writes them), through json's
    C encoder."""
    if _json is None or not hasattr(_json, "make_encoder"):
        import json  # pylint: disable=import-outside-toplevel
        return json.dumps(value, separators=(",", ":"), sort_keys=sort_keys)
    encoder = _json.make_encoder({}, _unencodable, _json.encode_basestring_ascii, None, ":", ",", sort_keys, False, True)
    return "".join(encoder(value, 0))


def _unencodable(value):
    raise TypeError("Object of type %s is not JSON serializable" % type(value).__name__)


class _ScanContext:
    """What json's C scanner reads off a JSONDecoder: json.loads' defaults."""
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    memo = None

    @staticmethod
    def parse_constant(name):
        return {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}[name]


try:
    _SCANNER = _json.make_scanner(_ScanContext()) if _json is not None else None
except (AttributeError, TypeError):  # pragma: no cover - a python whose _json differs: json itself
    _SCANNER = None


_ESCAPED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def show(name):
    """NAME for a log line or a report, on one line and printable whatever
    it holds: a backslash doubled, \\n \\r \\t, any other character that is
    not printable (the ESC of a terminal sequence, DEL, NEL, a line
    separator) as \\xNN or \\uNNNN, a byte that is not UTF-8 as \\\\xNN."""
    if name.isprintable() and "\\" not in name:
        return name  # what the rest would return, the common case at once
    # (not os.fsencode: under LC_ALL=C, python 3.6's file system encoding is
    # ascii, and a name of other letters would raise)
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(_ESCAPED.get(char) or (char if char.isprintable() else ascii(char)[1:-1]) for char in text)


_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


def plain(text, extra=""):
    """TEXT is ASCII letters, digits and the characters of EXTRA only, and not empty."""
    return bool(text) and all(c in _ALNUM or c in extra for c in text)


def digits(text):
    """TEXT is ASCII digits only (str.isdigit also takes other scripts' digits).
    (A strip of the digits leaves nothing: one call, not a generator per
    character; a kill's scan asks it of every name in /proc.)"""
    return bool(text) and not text.strip("0123456789")


def short_hostname():
    """This host's name as slurmd keeps it for %h (gethostname_short in
    Slurm's read_config.c: gethostname, up to the first dot)."""
    return os.uname().nodename.split(".", 1)[0]


def slurmd_path(path, node_name, host_name=None):
    """PATH (SlurmdSpoolDir, epilog:slurmd_spool_dir) as slurmd expands it:
    its first %h becomes HOST_NAME (short_hostname() when None), then the
    first %n of that NODE_NAME, slurmd's node name (SLURMD_NODENAME at a
    job end), as Slurm's slurm_conf_expand_slurmd_path does from 22.05 to
    26.05 with the host name slurmd computed; any other % stays as it is. A
    configless slurmd started without -N expands %n before it knows its
    name, to nothing: NODE_NAME "" does the same. None when the node name
    is needed and unknown (None), or a name would reach out of its path
    component (holds a / or a NUL, or is . or ..): no spool is trusted
    then."""
    out = path
    for token, name in (("%h", host_name if host_name is not None or "%h" not in out else short_hostname()),
                        ("%n", node_name)):
        if token not in out:
            continue
        if name is None or "/" in name or "\0" in name or name in (".", ".."):
            return None
        out = out.replace(token, name, 1)
    return out


class Trust:
    """Which directories no account but root can redirect: a real directory
    (not a symlink) of root's that no group and no other user can write, so
    nobody else can plant a symlink or a FIFO in it, and whose ancestors are
    root's real directories nobody else can write either, or sticky (as /tmp
    is: nobody else can then rename or remove root's entry there). Each path
    is looked at once per run."""

    def __init__(self):
        self._seen = {}

    @staticmethod
    def root_dir(st, last):
        """The rule for one directory, from its lstat ST: a real directory
        of root's that no group and no other user can write, or, when it is
        not the LAST (the one a file sits in) but an ancestor, one that is
        sticky. The state epilog.config judges the directories of the log,
        the records, the metrics and the ssh allow file by it, in Jinja
        (tests/unit/test_config_root_only.py holds the two together)."""
        return (stat.S_ISDIR(st.st_mode) and st.st_uid == 0
                and (not st.st_mode & 0o022 or (not last and st.st_mode & stat.S_ISVTX)))

    def _dir(self, path, last):
        key = (path, last)
        if key not in self._seen:
            try:
                ok = self.root_dir(os.lstat(path), last)
            except OSError:
                ok = False
            self._seen[key] = bool(ok)
        return self._seen[key]

    def root_only(self, directory):
        """True when only root can write DIRECTORY and redirect anything in it."""
        if not directory or not directory.startswith("/"):
            return False
        path, last = os.path.normpath(directory), True
        while True:
            if not self._dir(path, last):
                return False
            if path == "/":
                return True
            path, last = os.path.dirname(path), False

    def root_file(self, path):
        """True when PATH, and what it resolves to, sit in directories only
        root can write, and the file is root's and nobody else's to write."""
        try:
            real = os.path.realpath(path)
            st = os.stat(real)
        except (OSError, ValueError):
            return False
        return (stat.S_ISREG(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022
                and self.root_only(os.path.dirname(os.path.abspath(path))) and self.root_only(os.path.dirname(real)))

    def root_tool(self, path):
        """PATH when it is a regular executable file of root's that no group
        or other user can write, in a directory only root can write; a
        symlink (Debian's alternatives) counts by what it resolves to, which
        must pass the same test, and is used by that path. Else None."""
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            try:
                path = os.path.realpath(path)
                st = os.lstat(path)
            except (OSError, ValueError):
                return None
            if not self.root_only(os.path.dirname(path)):
                return None
        if (stat.S_ISREG(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022 and st.st_mode & 0o111):
            return path
        return None


def open_in(directory, name, flags, mode=0o644):
    """NAME in DIRECTORY opened with FLAGS, never through a symlink, never
    blocking on a FIFO, never as a controlling terminal."""
    return os.open(os.path.join(directory, name),
                   flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, mode)


def read_file(path, limit=1 << 20):
    """The first LIMIT bytes of the regular file PATH, opened without
    following a symlink or blocking; raises OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def wait_lock(fd, seconds, exclusive=True):
    """flock FD within SECONDS: True, or False when it was not to be had."""
    deadline = time.monotonic() + max(seconds, 0)
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(pause, max(deadline - time.monotonic(), 0)))
            pause = min(pause * 2, 0.05)
        except OSError:
            return False


# -- processes ------------------------------------------------------------------
def replace_file(path, data, old=None):
    """Write DATA as PATH by a new file beside it (O_EXCL, never through a
    symlink; its directory is one only root can write) renamed over it: a
    reader sees the old file or the new one whole. OLD: the old one's lstat,
    whose owner and mode the new one gets (None: root's, 0644); until then
    it is root's alone. OSError when it cannot, with no new file left
    behind."""
    directory = os.path.dirname(path) or "/"
    tmp = os.path.join(directory, ".%s.epilog-tmp.%d" % (os.path.basename(path), os.getpid()))
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if old is not None:
                os.fchown(fd, old.st_uid, old.st_gid)
            os.fchmod(fd, 0o644 if old is None else stat.S_IMODE(old.st_mode))
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def pids():
    """The pids in /proc now, as strings."""
    return [name for name in os.listdir("/proc") if digits(name)]


def status(pid):
    """{field: text} of /proc/PID/status, or None when there is no such process."""
    # os.open, not open(): a kill scans every process, twice (python's file
    # objects cost as much as the kernel's read)
    try:
        return _fields(read_in(None, "/proc/%s/status" % pid, 8192))
    except OSError:
        return None


# errnos that say a process read is gone, not that the read failed (EMFILE,
# ENOMEM, EACCES): only these may be taken for "no such process"
GONE = (errno.ENOENT, errno.ESRCH)


def open_proc(pid):
    """A descriptor of /proc/PID (the caller closes it), or None when there
    is no such process: what status_in() and read_in() read through it is
    that process's, whatever its pid names later (a read after it ended
    fails). OSError on any other failure: a look that could not be taken
    never reads as no process."""
    try:
        return os.open("/proc/%s" % pid, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in GONE:
            return None
        raise


def read_in(directory_fd, name, limit):
    """Up to LIMIT bytes of the file NAME in the directory DIRECTORY_FD
    (a /proc/PID: the same process's, whatever its pid names later; None:
    NAME is a path)."""
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=directory_fd)
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)


def entries_in(directory_fd, wanted, limit=None):
    """[(name, lstat mode)] of the first LIMIT names (None: all) in the
    directory open at DIRECTORY_FD: only the names WANTED(name) are
    stat'ed and given (one gone meanwhile is left out). OSError when the
    directory cannot be listed."""
    names = os.listdir(directory_fd)
    out = []
    for name in names[:limit] if limit else names:
        if wanted(name):
            try:
                out.append((name, os.stat(name, dir_fd=directory_fd, follow_symlinks=False).st_mode))
            except OSError:
                continue
    return out


def status_in(proc_fd):
    """status() of the process whose /proc/PID directory PROC_FD is, or
    None when it has ended; OSError when the read fails otherwise
    (open_proc)."""
    try:
        return _fields(read_in(proc_fd, "status", 8192))
    except OSError as exc:
        if exc.errno in GONE:
            return None
        raise


def _fields(data):
    out = {}
    for line in data.decode("utf-8", "replace").split("\n"):
        key, sep, value = line.partition(":")
        if sep:
            out[key] = value.strip()
    return out


_BOOT = []


def boot_time():
    """The boot's epoch (/proc/stat's btime), or None; read once per
    process (it never changes while one runs)."""
    if not _BOOT:
        try:
            _BOOT.append(next(int(row.split()[1]) for row in read_file("/proc/stat", 1 << 16).split(b"\n")
                              if row.startswith(b"btime ")))
        except (OSError, IndexError, ValueError, StopIteration):
            return None
    return _BOOT[0]


def started(stat_text):
    """When a process started (an epoch), from its /proc/PID/stat text, or
    None."""
    ticks, boot = start_ticks(stat_text), boot_time()
    if ticks is None or boot is None:
        return None
    return boot + ticks / float(os.sysconf("SC_CLK_TCK"))


def start_ticks(stat_text):
    """When a process started, in clock ticks since the boot, from its
    /proc/PID/stat text (the name in it may hold anything: the fields after
    its last ") " count), or None."""
    try:
        return int(stat_text.rsplit(b") ", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def uids_of(fields):
    """(real, effective, saved) of a status, or None."""
    try:
        return tuple(int(uid) for uid in fields["Uid"].split()[:3])
    except (KeyError, TypeError, ValueError):
        return None


def alive(fields):
    """A status of a live process: a zombie is dead, unless its other threads
    still run (PID 1 may never reap it, and kill -0 succeeds on it)."""
    if fields is None:
        return False
    state = fields.get("State", "")[:1]
    try:
        threads = int(fields.get("Threads", "1"))
    except ValueError:
        threads = 1
    return state not in ("Z", "X") or threads > 1


def stat_text(pid, proc=None):
    """The text of /proc/PID/stat (its first 4096 bytes), or b"" when there
    is no such process; read through PROC (open_proc()) when given."""
    try:
        return read_in(proc, "stat", 4096) if proc is not None else read_file("/proc/%s/stat" % pid, 4096)
    except OSError:
        return b""


def ppid(pid):
    """PID's parent, from /proc/PID/stat (the name in it may hold anything:
    the fields after its last ') ' count), or None."""
    try:
        return int(stat_text(pid).rsplit(b") ", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


def cmdline(pid, limit=4096):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""


# A SLUID as Slurm 26.05's print_sluid() writes it (src/common/sluid.c): "s",
# then 13 of Crockford's base32 digits, the first the top 4 of its 64 bits.
_SLUID_FIRST = frozenset("0123456789ABCDEF")
_SLUID_DIGITS = frozenset("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
# the directories of a /proc/PID/cgroup path whose owners are read, at most
CGROUP_DEPTH = 32
# what is read of /proc/PID/cgroup: a line per hierarchy (a hybrid node's
# dozen v1 ones, then v2's), each path at most PATH_MAX (the kernel
# refuses a longer one)
CGROUP_TEXT = 16 * (4096 + 64)
_STEPD_SCOPE = "slurmstepd.scope"
# The directories of Slurm's own processes in its scope (cgroup_v2.c):
# system/ (SYSTEM_CGDIR, where slurmstepds wait before they join a job) and
# slurmd/ (SLURMD_CGROUP, slurmd's own and its prolog's and epilog's where
# slurmd was started by hand, with no INVOCATION_ID from systemd)
SLURM_OWN = frozenset(("system", "slurmd"))


def stepd_scope(name):
    """Whether NAME is Slurm's [<node>_]slurmstepd.scope, as cgroup/v2 names
    the scope of its slurmstepds (Debian's builds are MULTIPLE_SLURMD)."""
    return name == _STEPD_SCOPE or (name.endswith("_" + _STEPD_SCOPE) and len(name) > len(_STEPD_SCOPE) + 1)


def job_dir(name):
    """("id", "<id>") of a job directory Slurm's cgroup/v2 names job_<id>
    (before 26.05, and with CgroupJobIdPaths=yes), ("sluid", "s...") of one
    it names by the job's SLUID (26.05's default), or None."""
    if name.startswith("job_") and digits(name[4:]):
        return ("id", name[4:])
    if len(name) == 14 and name[0] == "s" and name[1] in _SLUID_FIRST and all(c in _SLUID_DIGITS for c in name[2:]):
        return ("sluid", name)
    return None


def v2_job(names, owners):
    """The job whose Slurm cgroup/v2 directory the cgroup path NAMES (its
    directories below the hierarchy's root) is in: ("id", "<id>"),
    ("sluid", "s..."), ("unknown", why) where the path looks like Slurm's
    but cannot be told, or None: outside any job. OWNERS are (uid, mode)
    of the hierarchy's root and of each directory of NAMES in turn, as far
    as they were read (None: the hierarchy could not be read).

    Slurm's scope is [<node>_]slurmstepd.scope (Debian's builds are
    MULTIPLE_SLURMD) under any parent (slices, CgroupSlice, a container's
    own cgroup) with the job's directory right below it. A name proves
    nothing (a user with a delegated subtree, systemd's user@.service, makes
    any name under it): the directories from the root down to the job's
    must be root's and writable by root alone, the user's delegated
    directory being hers. Slurm's own processes sit in the scope's system/
    and slurmd/, outside any job."""
    scope = next((i for i, name in enumerate(names) if stepd_scope(name)), None)
    if scope is None or scope + 1 >= len(names) or names[scope + 1] in SLURM_OWN:
        return None
    where = "/" + "/".join(names[:scope + 2])
    # What was read is judged first: a directory on the way that is not
    # root's alone makes the path no job's, however deep it goes or
    # whatever could not be read below it (her delegated subtree is hers,
    # and so is what she makes too deep or unreadable under it)
    if any(uid != 0 or mode & 0o022 for uid, mode in (owners or ())[:scope + 3]):
        return None
    if scope + 2 > CGROUP_DEPTH:
        return ("unknown", "%s is deeper than %d directories" % (show(where), CGROUP_DEPTH))
    if owners is None or len(owners) < scope + 3:
        return ("unknown", "the owners of %s could not be read in the cgroup v2 hierarchy" % show(where))
    job = job_dir(names[scope + 1])
    return job if job is not None else ("unknown", "%s is no job directory Slurm names" % show(where))


def job_of_cgroup(data, uid=None, owners=None):
    """The job whose Slurm cgroup the /proc/PID/cgroup text DATA puts the
    process in: ("id", "<id>"), ("sluid", "s..."), ("unknown", why) where
    it cannot be told, or None: outside any job. OWNERS(names) gives
    v2_job() its owners (by default cgroup_owners(), read only for a path
    that names Slurm's scope).

    cgroup v1's job cgroup starts at the root of its hierarchy, in
    directories only root can make: /slurm[_<host>]/uid_<uid>/job_<id>/...
    in any controller (proctrack/cgroup's freezer, task/cgroup's cpuset and
    memory); a v1 path names its uid too: one of another uid than UID (when
    given) is no job of this process's user. cgroup v2's (the 0:: line) is
    v2_job()'s. A v1 job wins over the v2 line of a hybrid node."""
    found = None
    for line in data.split("\n"):
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2].split("/")  # "", then the path's names
        if len(path) >= 4 and path[0] == "" and (path[1] == "slurm" or path[1].startswith("slurm_")) \
                and path[2].startswith("uid_") and digits(path[2][4:]) \
                and path[3].startswith("job_") and digits(path[3][4:]):
            if uid is None or int(path[2][4:]) == uid:
                return ("id", path[3][4:])
            continue
        if parts[0] != "0" or parts[1] or path[0] != "" or found is not None:
            continue
        names = [name for name in path[1:] if name]
        if any(stepd_scope(name) for name in names):
            found = v2_job(names, (owners or cgroup_owners)(names[:CGROUP_DEPTH]))
    return found


def job_cgroup(pid, uid=None, proc=None):
    """job_of_cgroup() of a live process PID, or None; read through PROC,
    its /proc/PID descriptor (open_proc()), when given."""
    try:
        data = read_in(proc, "cgroup", CGROUP_TEXT) if proc is not None else \
            read_in(None, "/proc/%s/cgroup" % pid, CGROUP_TEXT)
    except OSError:
        return None
    return job_of_text(data, uid)


def job_of_text(data, uid=None):
    """job_of_cgroup() of a /proc/PID/cgroup read (bytes), whole lines alone."""
    # whole lines alone: a line a read cut short names something else
    # (job_12 cut to job_1)
    data = data[:data.rfind(b"\n") + 1]
    # surrogateescape: a name that is not UTF-8 is opened (cgroup_owners) as
    # the very bytes the kernel printed
    return job_of_cgroup(data.decode("utf-8", "surrogateescape"), uid)


_CGROUP2 = []
_DIRECTORY = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def cgroup2_mounts(text):
    """[(mount point, device)] of the cgroup2 mounts in the mountinfo TEXT
    (bytes) whose root is the cgroup namespace's root ("/"), in order; a
    mount point the kernel escaped (a space, a backslash) is left out."""
    out = []
    for row in text.split(b"\n"):
        left, sep, right = row.partition(b" - ")
        fields, kind = left.split(), right.split()
        if not sep or len(fields) < 5 or not kind or kind[0] != b"cgroup2" or fields[3] != b"/" \
                or b"\\" in fields[4] or not fields[4].startswith(b"/"):
            continue
        major, _, minor = fields[2].partition(b":")
        if major.isdigit() and minor.isdigit():
            out.append((fields[4].decode("utf-8", "surrogateescape"), os.makedev(int(major), int(minor))))
    return out


def cgroup_owners(names):
    """[(uid, mode)] of the cgroup v2 hierarchy's root (a cgroup2 mount of
    the namespace's root, from the kernel's /proc/self/mountinfo, read once
    per process) and of each of NAMES below it, as far as they are there:
    each directory opened by descriptor from the one above (no symlink
    followed, nothing re-resolved) and checked to be on that mount. None
    where no such mount can be opened."""
    if not _CGROUP2:
        try:
            _CGROUP2.append(cgroup2_mounts(read_file("/proc/self/mountinfo")))
        except OSError:
            _CGROUP2.append([])
    for where, device in _CGROUP2[0]:
        try:
            fd = os.open(where, _DIRECTORY)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if info.st_dev != device:
                continue  # another mount over it
            out = [(info.st_uid, info.st_mode)]
            for name in names[:CGROUP_DEPTH]:
                if name in (".", ".."):
                    break
                try:
                    below = os.open(name, _DIRECTORY, dir_fd=fd)
                except (OSError, ValueError):
                    break
                os.close(fd)
                fd = below
                info = os.fstat(fd)
                if info.st_dev != device:
                    break
                out.append((info.st_uid, info.st_mode))
            return out
        finally:
            os.close(fd)
    return None
