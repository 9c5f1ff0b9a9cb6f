"""The residue's names, in one place: where the sweep looks (/tmp and its
.X11-unix), what each kind of residue is called and the patterns its names
must match, the kinds the sweep counts, and part 45's first look
(has_residue). Part 45, the sweep (sweep.py, which compiles the patterns),
epilog.sweep and the metrics all read them from here.

Imports neither re nor anything of the sweep: part 45 looks at every job
end, and on a node without residue nothing more is imported. The patterns
are Python regular expressions, written here as text.
"""
import os
import stat

TMP = "/tmp"
X11_DIR = ".X11-unix"
# root, as systemd-tmpfiles makes it: under another owner, none of its
# entries is judged (the unit tests, run without root, stand their own uid in)
X11_DIR_OWNER = 0

# What the sweep counts, removed and kept, for the record and the metrics.
KINDS = ("x_socket", "x_lock", "clsbd", "scratch")

# The first characters of what the sweep judges in /tmp: an X lock and a
# clsbd file (what has_residue looks for).
X_LOCK_START = ".X"
CLSBD_START = "clsbd."
# An X display's socket in /tmp/.X11-unix: X<N>, N as the X server writes it.
X_SOCKET_NAME = r"X(0|[1-9][0-9]{0,4})\Z"
# Its lock in /tmp: .X<N>-lock; any other .X...-lock is a malformed one.
X_LOCK_NAME = r"\.X(0|[1-9][0-9]{0,4})-lock\Z"
X_LOCK_LIKE = r"\.X.*-lock\Z"
# A Cadence client's file: clsbd.<user>.<pid>.
CLSBD_NAME = r"clsbd\.(.+)\.([0-9]+)\Z"
# An X server writes its pid as "%10d\n": exactly 11 bytes, nothing else.
LOCK_BYTES = 11
LOCK_CONTENT = rb" *([0-9]{1,10})\n\Z"
# A scratch pattern (epilog:scratch_patterns): {jobid} once; it may not start
# with a wildcard or a dot (rules.yaml's scratch_pattern, held equal to it by
# a unit test: epilog.sweep runs on nodes without that file).
JOBID = "{jobid}"
SCRATCH_PATTERN = r"([A-Za-z0-9_-][A-Za-z0-9._*?-]*)?\{jobid\}[A-Za-z0-9._*?-]*\Z"


def has_residue(job):
    """A look first: /tmp holds something the sweep would judge (an X
    lock, a clsbd file, the X socket directory's entries, JOB's scratch)?
    On a node without residue the sweep is never imported."""
    try:
        with os.scandir(TMP) as entries:  # read in batches: a /tmp users filled is never held whole
            for entry in entries:
                name = entry.name
                if name.startswith((X_LOCK_START, CLSBD_START)) and name != X11_DIR:
                    return True
                if job and job in name:
                    return True
    except OSError:
        return True  # the sweep says why
    try:
        st = os.lstat(TMP + "/" + X11_DIR)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    if not stat.S_ISDIR(st.st_mode):
        return True
    try:
        with os.scandir(TMP + "/" + X11_DIR) as entries:  # its first name is enough
            return next(entries, None) is not None
    except OSError:
        return True
