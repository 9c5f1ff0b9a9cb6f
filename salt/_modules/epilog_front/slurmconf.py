"""slurm.conf as Slurm reads it (parse_slurm_conf): keys, quotes, Include
and its globs, each parse bounded in all (CONF_*_MAX, CONF_SECONDS); how far
each file read is trusted (conf_trust, _trust_lines); PrologFlags; the
spool directory slurm.conf and the pillar name."""

import os
import posixpath
import re
import stat
import time

from . import NODE as _node
from .common import _memo, _root, _shown, _split_root

# The account slurm-formula (and many sites) gives slurm.conf to
SLURM_ACCOUNT = "slurm"


def conf_trust(uid, mode, regular, placed, slurm_uid):
    """epilog.conf_trust (its docstring there)."""
    if not regular or not placed or mode & 0o022:
        return "untrusted"
    if uid == 0:
        return "root"
    if slurm_uid is not None and slurm_uid != 0 and uid == slurm_uid:
        return "slurm"
    return "untrusted"


_CONF_PAIR = re.compile(r'\s*([A-Za-z][A-Za-z0-9_]*)\s*=\s*(?:"([^"]*)"|(\S*))')


CONF_KEYS = ("epilog", "prolog", "prologflags", "slurmdspooldir", "epilogtimeout", "prologtimeout",
             "prologepilogtimeout", "proctracktype", "jobcontainertype", "namespacetype")


# What one parse of a slurm.conf may do in all, whatever includes what: the
# files it reads, its Include lines, the Includes that are globs, the
# directory entries those list, the files they match, and its time.
CONF_FILES_MAX = 64


CONF_INCLUDES_MAX = 256


CONF_GLOBS_MAX = 64


CONF_ENTRIES_MAX = 20000


CONF_MATCHES_MAX = 256


CONF_SECONDS = 5.0


_CUT = {"files": "more than {CONF_FILES_MAX} files included in all",
        "includes": "more than {CONF_INCLUDES_MAX} Include lines in all",
        "globs": "more than {CONF_GLOBS_MAX} Include globs in all",
        "entries": "more than {CONF_ENTRIES_MAX} directory entries listed for its Include globs",
        "matches": "more than {CONF_MATCHES_MAX} files matched by its Include globs",
        "seconds": "more than {CONF_SECONDS:g} s"}


_MAGIC = re.compile(r"[*?[]")


# -- slurm.conf ------------------------------------------------------------------
class _Bounds:
    """What is left to one parse (CONF_*_MAX, CONF_SECONDS), and the
    bounds it reached (cuts), each once, in order."""

    def __init__(self):
        self.left = {"files": CONF_FILES_MAX, "includes": CONF_INCLUDES_MAX, "globs": CONF_GLOBS_MAX,
                     "entries": CONF_ENTRIES_MAX, "matches": CONF_MATCHES_MAX}
        self.deadline = time.monotonic() + CONF_SECONDS
        self.cuts = []

    def over(self):
        if time.monotonic() > self.deadline:
            self.cut("seconds")
        return "seconds" in self.cuts

    def take(self, what):
        """True when one more of WHAT may be done (and it is counted)."""
        if self.over() or self.left[what] <= 0:
            self.cut(what)
            return False
        self.left[what] -= 1
        return True

    def cut(self, what):
        if what not in self.cuts:
            self.cuts.append(what)


def parse_slurm_conf(path):
    """epilog.parse_slurm_conf (its docstring there)."""
    parsed = _parsed(path)
    return parsed["values"], parsed["files"], parsed["problems"] + parsed["cuts"]


def _parsed(path):
    """parse_slurm_conf's whole answer for PATH: {values, files (shown),
    sources: [(shown name, "file" or "directory", conf_trust verdict)] of
    each file read and each directory an Include glob listed, problems,
    cuts: the [slurm-conf-cut] lines}. Parsed once per call of the module
    (the call's memo, keyed by the root and the path, and used again only
    while every file it read is still the same file)."""
    pid, inner = _split_root(path)
    memo, key = _memo(), ("conf", pid, inner)
    try:
        with _root(pid) as root:
            parsed = _parsed_in(root, inner, memo, key)
    except OSError as exc:  # the root itself: its process has ended
        return {"values": {}, "files": [], "sources": [], "cuts": [], "ids": [],
                "problems": [_unreadable(_shown(path), exc)]}
    if memo is not None:
        memo[key] = parsed
    return parsed


def _parsed_in(root, inner, memo, key):
    """_parsed of the path INNER in ROOT: the call's MEMO's under KEY while
    every file it read is the same file, else parsed now."""
    if memo is not None and key in memo:
        hit = memo[key]
        try:
            if all(_identity(root.stat(name)) == seen for name, seen in hit["ids"]):
                return hit
        except (OSError, ValueError):
            pass
    parsed = {"values": {}, "files": [], "sources": [], "problems": [], "cuts": [], "ids": [], "listed": []}
    bounds = _Bounds()
    _parse_into(root, inner, parsed, bounds, 0)
    try:
        import pwd  # pylint: disable=import-outside-toplevel
        slurm_uid = pwd.getpwnam(SLURM_ACCOUNT).pw_uid
    except KeyError:
        slurm_uid = None
    for name, st, placed in parsed.pop("listed"):
        parsed["sources"].append((root.shown(name), "directory", conf_trust(
            st.st_uid, st.st_mode, stat.S_ISDIR(st.st_mode), placed, slurm_uid)))
    parsed["sources"] = [(name, kind, conf_trust(*facts, slurm_uid) if kind == "file" else facts)
                         for name, kind, facts in parsed["sources"]]
    parsed["problems"] = list(dict.fromkeys(parsed["problems"]))  # a line given a thousand times: once
    # each bound by its value now (a test may set one low)
    parsed["cuts"] = [f"[slurm-conf-cut] {root.shown(inner)} is read only in part: "
                      f"{_CUT[what].format(**globals())}; what lies past that is not judged" for what in bounds.cuts]
    return parsed


def _unreadable(shown, exc):
    """The problem of the file SHOWN that cannot be read, for EXC."""
    return f"[slurm-conf-unreadable] {shown} cannot be read: {_shown(getattr(exc, 'strerror', None) or exc)}"


def _identity(st):
    return st.st_dev, st.st_ino, st.st_ctime_ns, st.st_size


def _parse_into(root, path, parsed, bounds, depth):
    """Read the file PATH of ROOT into PARSED (see _parsed), Includes in
    place, within BOUNDS."""
    shown = root.shown(path)
    if not bounds.take("files"):
        return
    try:
        # never blocks on a FIFO, never reads a device or more than 4 MiB:
        # the type first, on the descriptor the resolution opened, and the
        # regular file read is that very inode
        fd, st, placed = root.resolve(path)
        try:
            if not stat.S_ISREG(st.st_mode):
                parsed["problems"].append(f"[slurm-conf-not-regular] {shown} is not a regular file")
                return
            data = root.read(fd, 4 << 20)
        finally:
            os.close(fd)
    except (OSError, ValueError) as exc:
        parsed["problems"].append(_unreadable(shown, exc))
        return
    parsed["files"].append(shown)
    parsed["sources"].append((shown, "file", (st.st_uid, st.st_mode, True, placed)))
    parsed["ids"].append((path, _identity(st)))
    # a trailing backslash continues the line, as Slurm joins them
    text = re.sub(r"\\\n", "", data.decode("utf-8", "replace"))
    values = parsed["values"]
    for raw in text.splitlines():
        # '#' starts a comment unless escaped; then Slurm drops every
        # backslash left (its escape character)
        line = re.sub(r"(?<!\\)#.*", "", raw).replace("\\", "")
        named = _include_of(line)
        if named is not None:
            if not bounds.take("includes"):
                continue
            target = named.strip('"')
            if not target.startswith("/"):
                target = posixpath.join(posixpath.dirname(path), target)
            if _MAGIC.search(target):
                found = root.glob(target, bounds, parsed["listed"]) if bounds.take("globs") else []
            else:
                found = [target]
            if not found and not bounds.cuts:
                parsed["problems"].append(f"[slurm-conf-include-missing] {shown}: Include {_shown(named)} names no "
                                          "file")
            if depth >= 10:
                parsed["problems"].append(f"[slurm-conf-include-too-deep] {shown}: Include nested more than 10 deep")
                continue
            for name in found:
                _parse_into(root, name, parsed, bounds, depth + 1)
            continue
        pos = 0
        while True:
            pair = _CONF_PAIR.match(line, pos)
            if not pair:
                break
            values.setdefault(pair.group(1).lower(), []).append(
                pair.group(2) if pair.group(2) is not None else pair.group(3))
            pos = pair.end()


def _include_of(line):
    """What an Include LINE of slurm.conf names (its value, trimmed), or
    None when it is no Include: the word, any case, then whitespace and a
    value. Split, not matched by a regular expression: a lazy one retried
    its trailing whitespace at every character of a long run of it, and a
    line of 4 MiB a user may write in an included file held the parse for
    hours."""
    text = line.strip()
    if len(text) < 9 or text[:7].lower() != "include" or not text[7].isspace():
        return None
    return text[8:].strip()


def _trust_lines(parsed):
    """(problems, warnings) of what slurmd reads in PARSED that another
    account than root can write: each file read and each directory an
    Include glob listed, judged by conf_trust."""
    problems, warnings = [], []
    for name, kind, trust in parsed["sources"]:
        if trust == "untrusted" and kind == "file":
            problems.append(f"[slurm-conf-not-root-only] {name}, which slurmd reads, is not a file only root (or the "
                            f"{SLURM_ACCOUNT} account alone) can write: another account could have it name any "
                            "Epilog=, and what verify reads proves nothing")
        elif trust == "untrusted":
            problems.append(f"[slurm-conf-include-dir-not-root-only] {name}, a directory an Include of slurm.conf "
                            f"lists, is not one only root (or the {SLURM_ACCOUNT} account alone) can write: another "
                            "account could put a file there that slurmd then reads, naming any Epilog=")
        elif trust == "slurm":
            warnings.append(f"[slurm-conf-owned-by-slurm] {name}, which slurmd reads, is owned by the "
                            f"{SLURM_ACCOUNT} account: that account can run anything as root through Epilog= or "
                            "Prolog= (slurmd runs them as root). Make it root's (chown root) unless the site "
                            "accepts that (slurm-formula lays slurm.conf down as slurm's)")
    return problems, warnings


# PrologFlags as Slurm reads them (read_config.c): a flag sets the ones it
# needs. Contain (pam_slurm_adopt's usual setting) runs the prolog at
# allocation; X11 and RunInJob need the extern step Contain makes.
PROLOG_FLAGS_SET = {
    "contain": ("alloc",),
    "x11": ("alloc", "contain"),
    "runinjob": ("alloc", "contain"),
    "deferbatch": ("alloc",),
    "forcerequeueonfail": ("alloc",),
}


def prolog_flags(value):
    """epilog.prolog_flags (its docstring there)."""
    flags = set()
    for raw in str(value).split(","):
        token = raw.strip().lower()
        if token:
            flags.add(token)
            flags.update(PROLOG_FLAGS_SET.get(token, ()))
    return flags


def _spool(value, node):
    """VALUE (a SlurmdSpoolDir or epilog:slurmd_spool_dir) as the slurmd of
    node name NODE expands it (%n, %h): the node program's own expansion,
    which its job ends use. None when it cannot be told."""
    return _node.system.slurmd_path(value, node)


def _same_spool(conf_value, pillar_value, node):
    """Slurm's SlurmdSpoolDir CONF_VALUE and epilog:slurmd_spool_dir
    PILLAR_VALUE name one directory for the slurmd of node name NODE: the
    same words, or the same path once each is expanded."""
    if conf_value is None:
        return False
    if os.path.normpath(conf_value) == os.path.normpath(pillar_value):
        return True
    mine, theirs = _spool(pillar_value, node), _spool(conf_value, node)
    return mine is not None and theirs is not None and os.path.normpath(mine) == os.path.normpath(theirs)


def _conf_spool(conf):
    """The SlurmdSpoolDir slurm.conf CONF gives (Slurm's default when it
    gives none), or None when it cannot be read."""
    values, _, problems = parse_slurm_conf(conf)
    if problems and not values:
        return None
    return os.path.normpath((values.get("slurmdspooldir") or ["/var/spool/slurmd"])[-1])
