"""What every room of the Salt side reads through: the memo of one module
call (what it reads once: the running slurmds, each slurm.conf parsed, the
roots they are read in), a process's paths resolved in its root
(epilog_node/roots.py), names as an operator's terminal may show them, and
root-only checks (epilog_node/system.py's Trust)."""

import contextlib
import copy
import os
import posixpath
import re
import threading

from salt.exceptions import CommandExecutionError

from . import NODE as _node

_trust = _node.system.Trust


def _root_only(directory):
    return _trust().root_only(directory)


def _root_file(path):
    return _trust().root_file(path)


def _shown(name):
    """NAME (a path, a file name, a value slurm.conf gives) as it may reach
    an operator's terminal: on one line and printable, by the escaping the
    node program's records and logs use (system.show). Every name verify,
    chain_wired, explain and the strays view put into their answers goes
    through it; one longer than PATH_MAX (a slurm.conf may give anything)
    is cut there, with ... after it."""
    return _node.roots.shown(name)


# -- one call ------------------------------------------------------------------
_MEMO = "_epilog_module_call"


@contextlib.contextmanager
def _one_call():
    """What one call of a function of this module reads once (the running
    slurmds, each slurm.conf parsed, the roots they are read in), kept for
    the call and dropped at its end: never across calls, the next reads the
    node afresh. A call made inside another (verify's state run renders
    parts.sls, which asks chain_wired, in a module the state loads anew)
    shares the outer one's: it is kept on the thread, not in this module."""
    thread = threading.current_thread()
    if getattr(thread, _MEMO, None) is not None:
        yield
        return
    setattr(thread, _MEMO, {})
    try:
        yield
    finally:
        memo = getattr(thread, _MEMO)
        setattr(thread, _MEMO, None)
        for key, value in memo.items():
            if key[0] == "root":
                value.close()


def _memo():
    """The memo of the call this thread is in, or None (outside a call:
    nothing is kept)."""
    return getattr(threading.current_thread(), _MEMO, None)


def _config(renderer, validate, owner, operators_optional=False):
    """epilog._config's (settings, rules, layout) (its docstring), rendered
    from salt://epilog/settings.jinja by RENDERER (Salt's slsutil.renderer).
    In a call (_one_call) it is rendered once for each VALIDATE and OWNER
    (the rooms of one load of the module: a module loaded anew inside the
    call, as verify's state run loads it, renders under its own pillar) and
    OPERATORS_OPTIONAL (map.jinja's, for epilog.clean's calls), and
    each asker gets a copy of its own."""
    memo, key = _memo(), ("config", bool(validate), owner, bool(operators_optional))
    rendered = memo.get(key) if memo is not None else None
    if rendered is None:
        try:
            rendered = renderer(path="salt://epilog/settings.jinja", default_renderer="jinja|json", tpldir="epilog",
                                validate=bool(validate), family=True, operators_optional=bool(operators_optional))
        except Exception as exc:
            text = str(exc)
            found = re.search(r"Jinja error: ([^\n]*)", text)
            raise CommandExecutionError(f"the epilog settings do not render: {found.group(1) if found else text}") from exc
        if not isinstance(rendered, dict) or not all(isinstance(rendered.get(part), dict)
                                                     for part in ("settings", "rules", "layout")):
            raise CommandExecutionError("the epilog settings do not render: salt://epilog/settings.jinja is not "
                                        f"served to this minion, or is not the formula's (got {rendered!r:.200})")
        if memo is not None:
            memo[key] = rendered
    if memo is not None:
        rendered = copy.deepcopy(rendered)
    family = rendered.get("family") if isinstance(rendered.get("family"), dict) else {}
    return {**rendered["settings"], **family}, rendered["rules"], rendered["layout"]


# -- paths inside a process's root (epilog_node/roots.py) -------------------
def _split_root(path):
    """(pid, the path in its root) of a path /proc/PID/root/... (how a
    slurmd's own file is named here), else (None, PATH made absolute)."""
    return _node.roots.split(path)


@contextlib.contextmanager
def _root(pid):
    """The roots.Root of process PID (None: this process's): the call's own
    (opened once per call; a slurmd's refused once its pid names another
    process than the one _running_slurmds found), or one opened for this
    use and closed after."""
    memo = _memo()
    if memo is None:
        root = _node.roots.Root(pid)
        try:
            yield root
        finally:
            root.close()
        return
    key = ("root", pid)
    if key not in memo:
        memo[key] = _node.roots.Root(pid, started=memo.get(("started", pid)))
    yield memo[key]


def _stat(path):
    """os.stat of PATH, a /proc/PID/root/... path resolved in that root."""
    pid, inner = _split_root(path)
    if pid is None:
        return os.stat(path)
    with _root(pid) as root:
        return root.stat(inner)


def _resolved(pid, path, follow=True):
    """(fstat, placed) of PATH resolved in the root of process PID (None:
    this process's), as roots.Root.resolve gives them; None when it names
    nothing."""
    try:
        with _root(pid) as root:
            fd, st, placed = root.resolve(path, follow)
            os.close(fd)
    except (OSError, ValueError):
        return None
    return st, placed


def _lexists(path):
    """os.path.lexists of PATH, a /proc/PID/root/... path resolved in that root."""
    pid, inner = _split_root(path)
    return os.path.lexists(path) if pid is None else _resolved(pid, inner, follow=False) is not None


def _root_only_in(directory):
    """_root_only of DIRECTORY, a /proc/PID/root/... directory judged in
    that root (its every directory on the descriptors resolved there)."""
    pid, inner = _split_root(directory)
    if pid is None:
        return _root_only(directory)
    try:
        with _root(pid) as root:
            return root.root_only(inner)
    except OSError:
        return False


def _in_slurmds_root(conf, value, mine):
    """For a slurm.conf CONF read through a slurmd's root (/proc/PID/root/...:
    that slurmd runs in another mount namespace, where a path may name
    another file than here, or one only there): whether VALUE (a path it
    gives, relative to its directory) names, inside that root, the file or
    directory MINE (a path here: what the state laid down) or one below it,
    compared by identity (device and inode, each directory on the way up
    reached by its descriptor), never by name. None for a slurm.conf read
    in this namespace (there a path is compared as it always was)."""
    pid, inner = _split_root(conf)
    if pid is None:
        return None
    try:
        ident = os.stat(mine)
        with _root(pid) as root:
            return bool(root.within(posixpath.join(posixpath.dirname(inner), value), (ident.st_dev, ident.st_ino)))
    except (OSError, ValueError):
        return False


def _readlink(path):
    try:
        return os.readlink(path)
    except OSError:
        return None


# the minion's schedule entries epilog.schedule lays down: their functions
SCHEDULE_ENTRIES = {"epilog-sweep": "epilog.sweep", "epilog-strays": "epilog.strays"}


class _Chain:
    """Where layout.yaml puts the chain under CONFDIR (the releases, the
    current one, the release tool, the site's part directories) and what a
    release holds (the runners, localusers): the module spells none of these
    names itself."""

    def __init__(self, confdir, layout):
        releases = layout["releases"]
        self.confdir = confdir
        self.releases = os.path.join(confdir, releases["dir"])
        self.current = os.path.join(self.releases, releases["current"])
        self.tool = os.path.join(self.releases, releases["tool"]["path"])
        self.tool_source = f"salt://_modules/{releases['tool']['module']}"
        self.localusers = next(f["path"] for f in layout["release_data"] if f["id"] == "localusers-backup")
        self.allow_lock = os.path.join(confdir, next(f["path"] for f in layout["data"]
                                                     if f["id"] == "config-ssh-allow-lock"))
        scripts = {script["id"]: script["path"] for script in layout["scripts"]}
        # the entry points' paths in a release: Python that /usr/bin/python3 runs
        self.scripts = set(scripts.values())
        # stage: the runner's path in a release, which is also its entry's name
        self.runners = {stage: scripts[f"runner-{stage}"] for stage in ("epilog", "prolog")}
        # stage: the names of the formula's parts now (those a release runs)
        self.own_names = {stage: _node.registry.part_names(layout["scripts"], stage) for stage in self.runners}
        # stage: the names of the formula's parts, now and before (a site part so named never runs)
        self.formula_names = {stage: _node.registry.part_names(layout["scripts"] + layout["retired"], stage)
                              for stage in self.runners}
        # stage: the directory of its parts, in a release and beside it
        self.parts_dirs = {script["stage"]: os.path.dirname(script["path"]) for script in layout["scripts"]
                           if os.path.dirname(script["path"])}
