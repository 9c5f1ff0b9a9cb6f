"""The node's cgroup layout, as verify reads it (epilog.verify's
[cgroup-layout-unreadable]): which cgroup version the node runs, where
Slurm's job cgroups are, and whether the chain can read them. Read by
descriptor, bounded, following no symlink; cgroup_layout() is the pure
judgement of what cgroup_facts() read.

No job end imports this: the job whose cgroup a process is in is
system.job_of_cgroup(), with the rules it shares with this (the scope's
name, the job directory's: system.stepd_scope, system.job_dir).
"""
import os
import stat

from . import system

# What verify reads of the node's cgroup layout, at most
LAYOUT_DEPTH = 4
LAYOUT_ENTRIES = 300
# the owner of the directories Slurm's scope is looked for in: root (the
# unit tests, run without root, stand their own uid in)
CGROUP_OWNER = 0
_LISTING = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def cgroup_layout(v1, v2, v1_slurm, scope, proctrack, plugin=None):
    """(version, layout, problem or None) of the node's cgroups, from what
    was read: V1 the cgroup v1 controllers mounted (freezer is
    proctrack/cgroup's), V2 whether a cgroup2 mount of the namespace's root
    could be read, V1_SLURM the /slurm or /slurm_<host> directory (root's
    alone) in the freezer hierarchy or None, SCOPE (path, root's alone,
    names of the directories in it) of a [<node>_]slurmstepd.scope found
    under the cgroup2 mount or None; PROCTRACK and PLUGIN slurm.conf's
    ProctrackType and cgroup.conf's CgroupPlugin (None: not known). A
    layout the chain cannot read is a problem only under proctrack/cgroup."""
    version = {(True, True): "hybrid", (True, False): "v1", (False, True): "v2"}.get((bool(v1), bool(v2)), "none")
    why = None
    if scope is not None:
        path, root_only, names = scope
        kinds = sorted(set(system.job_dir(name)[0] for name in names if system.job_dir(name)))
        odd = sorted(name for name in names if name not in system.SLURM_OWN and system.job_dir(name) is None)
        if not root_only:
            why = "%s is not root's alone: the chain counts no process in it as a job's" % system.show(path)
        elif odd:
            why = "%s holds %s, neither job_<id> nor a SLUID" % (system.show(path), ", ".join(system.show(n) for n in odd[:5]))
        else:
            named = {"id": "job_<id>", "sluid": "SLUID"}
            layout = "v2 (%s, job directories %s)" % (system.show(path), " and ".join(named[k] for k in kinds)
                                                      if kinds else "job_<id> or SLUID, none now")
    elif v1_slurm is not None:
        layout = "v1 (/%s/uid_<uid>/job_<id>)" % system.show(v1_slurm)
    elif v2:
        layout = "v2 (no [<node>_]slurmstepd.scope within %d levels yet)" % LAYOUT_DEPTH
    elif "freezer" in (v1 or ()):
        layout = "v1 (no /slurm[_<host>] in the freezer hierarchy yet)"
    else:
        why = "no cgroup2 mount of the namespace's root could be read, and no cgroup v1 freezer is mounted"
    if why is not None:
        layout = "unknown: " + why
    if plugin:
        layout += ", CgroupPlugin=%s" % system.show(plugin)
    cgroup = (proctrack or "").lower() == "proctrack/cgroup"
    return version, layout, (why if cgroup and why is not None else None)


def _listing(fd, limit):
    """The first LIMIT names of the directory open at FD."""
    try:
        names = os.listdir(fd)
    except OSError:
        return []
    return names[:limit]


def _directories(fd):
    """The names of the directories (not symlinks) among the first
    LAYOUT_ENTRIES names of the directory open at FD."""
    out = []
    for name in _listing(fd, LAYOUT_ENTRIES):
        try:
            if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                out.append(name)
        except OSError:
            continue
    return out


def _below(fd, name, device):
    """(descriptor, root's alone) of the directory NAME under FD, on
    DEVICE, opened without following a symlink, or None."""
    try:
        below = os.open(name, _LISTING, dir_fd=fd)
    except (OSError, ValueError):
        return None
    info = os.fstat(below)
    if info.st_dev != device:
        os.close(below)
        return None
    return below, info.st_uid == CGROUP_OWNER and not info.st_mode & 0o022


def _find_scope(where, device):
    """(path, root's alone, names in it) of the first [<node>_]slurmstepd.scope
    at most LAYOUT_DEPTH levels under the cgroup2 mount open at WHERE (a
    descriptor, not closed here), looking at
    most at LAYOUT_ENTRIES names; None where none is found. Only
    directories root's alone are entered: below one that is not (a user's
    delegated user@<uid>.service) its owner makes any name, and a scope
    there is not Slurm's (the job end's v2_job judges a path so)."""
    queue, budget = [(os.dup(where), "", 1)], LAYOUT_ENTRIES
    try:
        while queue:
            fd, path, depth = queue.pop(0)
            try:
                names = _listing(fd, budget)
                budget -= len(names)
                for name in sorted(names, key=lambda n: not system.stepd_scope(n)):
                    if depth > LAYOUT_DEPTH or not (system.stepd_scope(name) or name.endswith((".slice", ".scope", ".service"))):
                        continue
                    opened = _below(fd, name, device)
                    if opened is None:
                        continue
                    if system.stepd_scope(name):
                        try:
                            return (path + "/" + name, opened[1], _directories(opened[0]))
                        finally:
                            os.close(opened[0])
                    if not opened[1]:
                        os.close(opened[0])
                        continue
                    queue.append((opened[0], path + "/" + name, depth + 1))
            finally:
                os.close(fd)
        return None
    finally:
        for item in queue:
            os.close(item[0])


def _open_here(path):
    return os.open(path, _LISTING)


def cgroup_facts(mountinfo, opener=_open_here):
    """(v1 controllers, cgroup2 readable, /slurm[_<host>] name or None,
    scope or None) as cgroup_layout() takes them, read from the mountinfo
    TEXT (bytes) and by descriptor below its mounts, each mount point
    opened as a directory by OPENER (a path of that mountinfo's namespace
    -> a descriptor: this process's namespace unless given; verify gives
    one that opens it in a slurmd's own root, which reads its mountinfo)."""
    v1, freezer = set(), None
    for row in mountinfo.split(b"\n"):
        left, sep, right = row.partition(b" - ")
        fields, kind = left.split(), right.split()
        if sep and len(fields) >= 5 and len(kind) >= 3 and kind[0] == b"cgroup" and fields[3] == b"/" \
                and b"\\" not in fields[4]:
            options = set(kind[2].decode("utf-8", "replace").split(","))
            v1 |= options & {"freezer", "cpuset", "memory", "cpu", "cpuacct", "devices", "pids"}
            if "freezer" in options and freezer is None:
                freezer = fields[4].decode("utf-8", "surrogateescape")
    v1_slurm = None
    if freezer is not None:
        try:
            fd = opener(freezer)
        except OSError:
            fd = None
        if fd is not None:
            try:
                device = os.fstat(fd).st_dev
                for name in sorted(_listing(fd, LAYOUT_ENTRIES)):
                    if name == "slurm" or name.startswith("slurm_"):
                        opened = _below(fd, name, device)
                        if opened is not None:
                            os.close(opened[0])
                            if opened[1]:
                                v1_slurm = name
                                break
            finally:
                os.close(fd)
    v2, scope = False, None
    for where, device in system.cgroup2_mounts(mountinfo):
        try:
            fd = opener(where)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_dev != device:
                continue
            v2, scope = True, _find_scope(fd, device)
        finally:
            os.close(fd)
        break
    return sorted(v1), v2, v1_slurm, scope
