"""The running slurmds and the slurm.conf each reads, as slurmd resolves it
(its -f, SLURM_CONF, its build's default, a configless node's cache), read
through its own root; chain_wired's answer; verify's judgement of each
slurm.conf (_judged_confs) and of job_container/tmpfs (_job_container);
what a job end would be given (_slurmd_view)."""

import json
import os
import posixpath
import re
import socket
import stat
import time

from . import GRAINS_HOST
from . import NODE as _node
from .common import (
    _in_slurmds_root,
    _lexists,
    _memo,
    _one_call,
    _resolved,
    _root,
    _root_only,
    _root_only_in,
    _shown,
    _split_root,
    _stat,
)
from .slurmconf import _MAGIC, CONF_KEYS, _conf_spool, _parsed, _same_spool, _spool, _trust_lines, parse_slurm_conf


def _running_slurmds():
    """[(pid, executable)] of each running slurmd of root's (real uid 0, read
    from the kernel's status, not from the owner of /proc/PID). Debian and
    Ubuntu install it as slurmd-wlm (slurmd is an alternatives link).
    Each is read through its /proc/PID opened once, and its start time kept
    for the call: every later read of it (its root, command line,
    environment, maps, namespace) is refused if the pid has been taken by
    another process since (roots.Root's check)."""
    out, memo = [], _memo()
    for pid in _node.system.pids():
        try:
            proc = _node.system.open_proc(pid)
        except OSError:
            continue
        if proc is None:
            continue
        try:
            exe = os.readlink("exe", dir_fd=proc)
            uids = _node.system.uids_of(_node.system.status_in(proc))
            started = _node.system.started(_node.system.read_in(proc, "stat", 4096))
        except OSError:
            continue
        finally:
            os.close(proc)
        if exe.endswith(" (deleted)"):
            exe = exe[:-len(" (deleted)")]
        if os.path.basename(exe) in ("slurmd", "slurmd-wlm") and (uids or (-1,))[0] == 0 and started is not None:
            if memo is not None:
                memo[("started", int(pid))] = started
            out.append((int(pid), exe))
    return out


def _slurmd_conf_paths(settings=None):
    """The slurm.conf each running slurmd reads, as it resolves it."""
    return [found["conf"] for found in _slurmds_confs(settings) if found["conf"]]


# slurmd's options that take an argument (its getopt string, 22.05 to 26.05),
# and its long options (getopt_long takes any unique prefix of one)
SLURMD_ARG_OPTIONS = "dfLnN"


SLURMD_LONG_OPTIONS = {"conf-server": True, "conf": True, "extra": True, "instance": True, "authinfo": False,
                       "help": False, "usage": False, "version": False, "systemd": False}


def slurmd_argv(argv):
    """epilog.slurmd_argv (its docstring there)."""
    short, long_, i = {}, {}, 1
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            found = [n for n in SLURMD_LONG_OPTIONS if n == name] or \
                [n for n in SLURMD_LONG_OPTIONS if n.startswith(name)] if name else []
            if len(found) != 1:
                continue
            if SLURMD_LONG_OPTIONS[found[0]] and not eq and i < len(argv):
                value, i = argv[i], i + 1
            long_[found[0]] = value
            continue
        if not arg.startswith("-") or arg == "-":
            continue
        for k, letter in enumerate(arg[1:], 1):
            if letter in SLURMD_ARG_OPTIONS:
                if k + 1 < len(arg):
                    short[letter] = arg[k + 1:]
                elif i < len(argv):
                    short[letter], i = argv[i], i + 1
                break
            short[letter] = ""
    return short, long_


def slurmd_resolves(argv, env, default_conf, exists):
    """epilog.slurmd_resolves (its docstring there)."""
    cache = env.get("SLURMD_RECONF_CONF_CACHE")
    if cache:
        return cache.rstrip("/") + "/slurm.conf", "reconf-cache"
    short, long_ = slurmd_argv(argv)
    if "conf-server" in long_:
        return None, "configless"
    if short.get("f"):
        return short["f"], "-f"
    if env.get("SLURM_CONF"):
        return env["SLURM_CONF"], "SLURM_CONF"
    if default_conf is None:
        return None, "unknown"
    if exists(default_conf):
        return default_conf, "default"
    return None, "configless"


def _build_default_conf(pid):
    """The slurm.conf slurmd PID's build reads by default (its sysconfdir's,
    compiled into libslurm: DEFAULT_SLURM_CONF), from the libslurm it has
    mapped, when only root can have put that library there; else None."""
    try:
        with _root(pid) as root:
            maps = root.read_proc("maps", 1 << 20).decode(errors="replace").splitlines()
    except OSError:
        return None
    libs = {}
    for line in maps:
        fields = line.split(None, 5)
        if len(fields) == 6 and os.path.basename(fields[5]).startswith("libslurm") and ".so" in fields[5]:
            libs.setdefault(fields[5], fields[0])
    for lib, where in sorted(libs.items()):
        # a library replaced by an upgrade since slurmd started is read
        # through the mapping itself (root's file, nobody else's to write);
        # else the path slurmd mapped, resolved and judged in its root
        try:
            with _root(pid) as root:
                if lib.endswith(" (deleted)"):
                    fd, placed = os.open(f"map_files/{where}", os.O_RDONLY | os.O_CLOEXEC, dir_fd=root.proc), True
                    found = None
                else:
                    found, _, placed = root.resolve(lib)
            if found is not None:
                try:
                    fd = os.open(f"/proc/self/fd/{found}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
                finally:
                    os.close(found)
        except (OSError, ValueError):
            continue
        try:
            st = os.fstat(fd)
            trusted = stat.S_ISREG(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022 and placed
            data = os.read(fd, 64 << 20) if trusted else b""
            while trusted and len(data) < st.st_size and len(data) < 64 << 20:
                more = os.read(fd, 64 << 20)
                if not more:
                    break
                data += more
        except OSError:
            continue
        finally:
            os.close(fd)
        if not data:
            continue
        for found in re.finditer(rb"\0(/[A-Za-z0-9._+@/-]+/slurm\.conf)\0", data):
            path = found.group(1).decode()
            if not path.startswith("/run/slurm/"):  # the configless link, not the default
                return path
    return None


def _slurmd_env(data):
    """{name: value} of a process's environment, its /proc/PID/environ DATA."""
    return dict(item.split("=", 1) for item in data.decode(errors="replace").split("\0") if "=" in item)


def _slurmds_confs(settings=None):
    """Each running slurmd of root's whose executable only root can have put
    there, and the slurm.conf it reads, as slurmd resolves it from its own
    command line and environment (never from anything another account can
    write): [{pid, exe, conf, how, node}]. A configless slurmd's conf is its
    cache: /run/slurm/conf's (the link slurmd makes) when only root can
    have made it, else SETTINGS' slurmd_spool_dir/conf-cache/slurm.conf;
    conf None when neither is there. A slurmd that cannot be read, or whose
    executable another account could have written, has conf None and says
    why in how."""
    memo, key = _memo(), ("slurmds", settings and settings["slurmd_spool_dir"])
    if memo is not None and key in memo:
        return memo[key]
    out = []
    for pid, exe in _running_slurmds():
        entry = {"pid": int(pid), "exe": exe, "conf": None, "how": "", "node": None}
        out.append(entry)
        if not _root_tool_in(pid, exe):
            entry["how"] = f"its executable {_shown(exe)} is not only root's to write: not trusted"
            continue
        try:
            with _root(pid) as root:
                argv = root.read_proc("cmdline", 1 << 16).decode(errors="replace").split("\0")
                env = _slurmd_env(root.read_proc("environ", 1 << 20))
        except OSError as exc:
            entry["how"] = f"its command line and environment cannot be read ({exc.strerror})"
            continue
        entry["node"] = slurmd_argv(argv)[0].get("N") or None
        try:
            with _root(pid) as root:
                conf, how = slurmd_resolves(argv, env, _build_default_conf(pid), root.exists)
            if how == "configless":
                conf = _configless_cache(pid, settings, entry["node"])
        except OSError as exc:
            entry["how"] = f"its root cannot be opened ({exc.strerror})"
            continue
        if how == "unknown":
            entry["how"] = ("it was started with neither -f nor SLURM_CONF, and its build's default slurm.conf "
                            "cannot be read from the libslurm it runs")
            continue
        if conf and not os.path.isabs(conf):
            # read before slurmd changed its directory: where, nobody can tell now
            entry["how"] = f"it was started with the relative path {_shown(conf)} ({how})"
            continue
        entry["conf"], entry["how"] = _as_slurmd_sees_it(pid, conf), how
    if memo is not None:
        memo[key] = out
    return out


def _root_tool_in(pid, exe):
    """Trust.root_tool of process PID's executable EXE, resolved and judged
    in its root: a regular executable file of root's that no group or other
    user can write, every directory its resolution went through one only
    root can write."""
    found = _resolved(pid, exe)
    if found is None:
        return False
    st, placed = found
    return placed and stat.S_ISREG(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022 \
        and bool(st.st_mode & 0o111)


def _configless_cache(pid, settings, node):
    """The configless slurmd PID's cache of the controller's slurm.conf, in
    its root: where /run/slurm/conf (the link slurmd makes) leads when only
    root can have made it, else SETTINGS' slurmd_spool_dir/conf-cache; None
    when neither is there."""
    cache = None
    with _root(pid) as root:
        try:
            fd, st, placed = root.resolve("/run/slurm/conf", follow=False)
            try:
                if stat.S_ISLNK(st.st_mode) and placed:
                    cache = posixpath.join("/run/slurm", os.readlink("", dir_fd=fd), "slurm.conf")
            finally:
                os.close(fd)
        except (OSError, ValueError):
            pass
        # started without -N, slurmd expands %n in its spool before it
        # knows its name (to nothing): the cache is where it put it
        spool = _spool(settings["slurmd_spool_dir"], node or "") if settings is not None else None
        if cache is None and spool is not None:
            cache = posixpath.join(spool, "conf-cache", "slurm.conf")
        return cache if cache and root.exists(cache) else None


def _as_slurmd_sees_it(pid, conf):
    """CONF as slurmd PID opens it: the same path here, unless slurmd runs
    in another mount namespace where that path is another file (a node's
    slurmd in a container, a verify run in a namespace of its own): then
    the file through slurmd's own root, /proc/PID/root/..."""
    if conf is None:
        return None
    try:
        with _root(pid) as root:
            their_ns = os.stat("ns/mnt", dir_fd=root.proc)
        if os.stat("/proc/self/ns/mnt").st_ino == their_ns.st_ino:
            return conf
    except OSError:
        return conf
    theirs = f"/proc/{pid}/root{conf}"
    try:
        mine, seen = os.stat(conf), _stat(theirs)
        if (mine.st_dev, mine.st_ino) == (seen.st_dev, seen.st_ino):
            return conf
    except (OSError, ValueError):
        pass
    return theirs


def _slurm_confs(settings, also=(), running=True):
    """Every slurm.conf that may be the node's: $SLURM_CONF (the minion's),
    slurm_config_dir/slurm.conf, /etc/slurm/slurm.conf, the slurm.conf in
    each directory of ALSO, what each running slurmd reads (unless not
    RUNNING), and a configless node's cache in its spool: with no slurmd
    running, the order verify trusts them in. Returns [(path, how)] of
    those that exist."""
    candidates = [(os.environ.get("SLURM_CONF"), "the minion's SLURM_CONF"),
                  (os.path.join(settings["slurm_config_dir"], "slurm.conf"), "slurm_config_dir"),
                  ("/etc/slurm/slurm.conf", "the default /etc/slurm")]
    candidates += [(os.path.join(directory, "slurm.conf"), "given") for directory in also]
    if running:
        candidates += [(path, "slurmd") for path in _slurmd_conf_paths(settings)]
    spool = _spool(settings["slurmd_spool_dir"], _host_node())
    if spool is not None:
        candidates += [(os.path.join(spool, "conf-cache", "slurm.conf"), "configless")]
    out, seen = [], set()
    for path, how in candidates:
        if path and os.path.normpath(path) not in seen and _lexists(path):
            seen.add(os.path.normpath(path))
            out.append((path, how))
    return out


def _roots_chain(directory, rules, releases):
    """Whether DIRECTORY holds a chain this formula laid down: a name the
    pillar's path rule allows, outside any release, only root can write it
    and its ancestors (so no other account can pass a directory of its own,
    or swap one in, for a chain), and root's own RELEASES directory in it
    (never followed)."""
    if not re.match(rules["path"], directory) or releases in directory.split("/"):
        return False
    try:
        st = os.lstat(os.path.join(directory, releases))
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022 and _root_only(directory)


def _old_chain(conf, key, value, where, confdir):
    """An Epilog=/Prolog= (KEY=VALUE) of slurm.conf CONF that runs the old
    chain in WHERE, not the one in CONFDIR: the old-chain warning, its one
    home (``why``: the state epilog warns of it on every apply, verify
    reports it as [slurm-conf-old-chain])."""
    clean = json.dumps({"epilog_clean": {"slurm_config_dir": where}})
    return {"conf": conf, "key": key, "value": value, "dir": where,
            "why": f"{conf} has {key}={value}: slurmd runs the chain in {where}, not the one in "
                   f"epilog:slurm_config_dir {confdir} (renamed?), and that old chain no longer gets the pillar's "
                   f"updates. Point {key}= at {confdir}/{key.lower()}.sh, run scontrol reconfigure, then remove the "
                   f"old one: state.apply epilog.clean pillar='{clean}'"}


def _chain_wired(slurm_config_dir, config):
    """chain_wired's answer under CONFIG, the front's (settings, rules, layout)."""
    settings, rules, layout = config
    confdir = os.path.normpath(slurm_config_dir or settings["slurm_config_dir"])
    mine = {confdir, os.path.realpath(confdir)}
    report = {"known": True, "wired": [], "unknown": [], "read": [], "elsewhere": [], "old_dirs": []}
    confs = _slurm_confs(settings, also=[confdir])
    if not confs:
        report["known"] = False
        report["unknown"].append("no slurm.conf found ($SLURM_CONF, slurm_config_dir, /etc/slurm, slurmd's, "
                                 "the configless cache): cannot tell whether it names the chain")
    for path, _ in confs:
        parsed = _parsed(path)
        values = parsed["values"]
        report["read"].extend(parsed["files"])
        # a parse cut short cannot tell either
        if parsed["problems"] or parsed["cuts"]:
            report["known"] = False
            report["unknown"].extend(parsed["problems"] + parsed["cuts"])
        # what another account can write may say anything: it may refuse a
        # clean, never point one elsewhere (the slurm account's own file is
        # what slurmd runs: it counts, as verify judges it)
        trusted = all(trust != "untrusted" for _, _, trust in parsed["sources"])
        for key in ("epilog", "prolog"):
            for value in values.get(key, []):
                # a relative value is Slurm's, in slurm.conf's directory; the
                # path is compared resolved (//x, symlinked directories)
                target = os.path.join(os.path.dirname(path), value)
                if "\0" in value:  # not a path Slurm can run either
                    report["known"] = False
                    report["unknown"].append(f"{_shown(path)} has {key.capitalize()}={_shown(value)}, not a path")
                    continue
                theirs = [_in_slurmds_root(path, candidate, d) for d in mine
                          for candidate in (value.split("*", 1)[0] or "/", os.path.dirname(value) or ".")]
                if theirs[0] is not None:
                    # slurmd's own namespace: the path as it resolves there,
                    # the chain by identity (its directory, or one below it)
                    if any(theirs):
                        report["wired"].append(f"{_shown(path)} names {_shown(value)} ({key.capitalize()}=)")
                    continue
                resolved = os.path.realpath(target.split("*", 1)[0] or "/")
                where = os.path.realpath(os.path.dirname(target))
                if any(p == d or p.startswith(d.rstrip("/") + "/") for d in mine for p in (resolved, where)):
                    report["wired"].append(f"{_shown(path)} names {_shown(value)} ({key.capitalize()}=)")
                    continue
                # the runner of another chain of this formula's (the
                # slurm_config_dir before a rename): it no longer gets the
                # pillar's updates, yet slurmd runs it
                if (trusted and not _MAGIC.search(value) and os.path.basename(target) == f"{key}.sh"
                        and _roots_chain(where, rules, layout["releases"]["dir"])):
                    report["elsewhere"].append(_old_chain(_shown(path), key.capitalize(), _shown(value), where,
                                                          confdir))
                    if where not in report["old_dirs"]:
                        report["old_dirs"].append(where)
    return report


_HOW = {"-f": "its -f", "SLURM_CONF": "SLURM_CONF in its environment", "default": "its build's default path",
        "configless": "its configless cache of the controller's", "reconf-cache": "its configless cache of the "
        "controller's"}


def _started(pid):
    """When process PID started (an epoch), system.started of its
    system.stat_text, or None; a slurmd's as _running_slurmds found it, in
    a call."""
    memo = _memo()
    if memo is not None and ("started", pid) in memo:
        return memo[("started", pid)]
    return _node.system.started(_node.system.stat_text(pid))


def _changed_since_start(conf, how, pid):
    """A warning when slurmd PID's own slurm.conf CONF (not a configless cache,
    which slurmd writes itself) was created or changed after slurmd
    started: what it runs with is what it read then (a default made since
    it started configless is not what it reads at all), until it is
    restarted or reconfigured. None otherwise."""
    if pid is None or how in ("configless", "reconf-cache"):
        return None
    started = _started(pid)
    try:
        changed = _stat(conf).st_ctime
    except (OSError, ValueError):
        return None
    if started is None or changed <= started + 1:
        return None
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(changed))
    return (f"[slurm-conf-changed-since-start] {_shown(conf)} was created or changed at {when}, after slurmd {pid} started "
            f"at {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(started))}: slurmd runs with what it read when "
            "it started (configless, if this file was not there then) until it is restarted or reconfigured "
            "(scontrol reconfigure)")


def _file_id(path):
    """The file PATH is (its device and inode; a path that names nothing,
    its real path): two paths of one file, through symlinks or another
    mount namespace's root, are one."""
    try:
        st = _stat(path)
        return st.st_dev, st.st_ino
    except (OSError, ValueError):
        return os.path.realpath(path)


def _judged_confs(settings):
    """([(slurm.conf, {key: last value}, how, node name)] verify judges,
    problems, warnings, info): the slurm.conf each running slurmd reads,
    as it resolves it, and that slurmd's node name (its -N, else this
    host's; two slurmds on one file: judged once; info says which slurmd
    reads it); with no slurmd running, the first of today's order
    ($SLURM_CONF, slurm_config_dir, /etc/slurm, the configless cache), with
    a warning that no running slurmd confirmed it.
    A slurm.conf verify did not judge that names another Epilog= than the
    judged one is a stale file: a warning."""
    problems, warnings, info, judged, seen = [], [], [], [], set()
    slurmds = _slurmds_confs(settings)
    for entry in slurmds:
        pid, conf, how = entry["pid"], entry["conf"], entry["how"]
        if conf is None:
            why = (f"{how}: the slurm.conf it reads cannot be told" if how != "configless" else
                   "runs configless, and no cache of the controller's slurm.conf is here (/run/slurm/conf, "
                   "slurmd_spool_dir/conf-cache): Epilog= cannot be checked")
            problems.append(f"[slurmd-conf-unknown] slurmd {pid}: {why}")
            continue
        if _file_id(conf) in seen:
            continue
        seen.add(_file_id(conf))
        judged.append((conf, how, pid, entry["node"] or _host_node()))
    if not slurmds:
        confs = [(path, how) for path, how in _slurm_confs(settings, running=False)]
        if not confs:
            problems.append("[slurm-conf-missing] no slurm.conf found here ($SLURM_CONF, slurm_config_dir, "
                            "/etc/slurm, the configless cache), and no slurmd runs: Epilog= cannot be checked")
        else:
            path, how = confs[0]
            seen.add(_file_id(path))
            judged.append((path, how, None, _host_node()))
            warnings.append(f"[slurmd-not-running] no slurmd runs here: judged {_shown(path)} (found as {how}), which no "
                            "running slurmd confirmed")
    out = []
    wiring = set()
    for conf, how, pid, node in judged:
        parsed = _parsed(conf)
        values = parsed["values"]
        problems.extend(parsed["problems"])
        # a bound reached: what was read is judged, and the rest is said
        warnings.extend(parsed["cuts"])
        trust_problems, trust_warnings = _trust_lines(parsed)
        problems.extend(trust_problems)
        warnings.extend(trust_warnings)
        found = {key: items[-1] for key, items in values.items() if key in CONF_KEYS and items}
        found["_epilogs"] = values.get("epilog", [])
        wiring.add((found.get("epilog"), found.get("prolog")))
        late = _changed_since_start(conf, how, pid)
        if late:
            warnings.append(late)
        if pid is not None:
            info.append(f"slurmd {pid} reads {_shown(conf)} ({_HOW.get(how, how)}): judged")
        out.append((conf, found, how, node))
    for path, how in _slurm_confs(settings, running=False):
        if _file_id(path) in seen or not judged:
            continue
        values = _parsed(path)["values"]
        other = ((values.get("epilog") or [None])[-1], (values.get("prolog") or [None])[-1])
        if other not in wiring:
            warnings.append(f"[slurm-conf-stale] {_shown(path)} ({how}) is not the slurm.conf a running slurmd reads, "
                            f"and it gives Epilog={_shown(other[0] or '')} Prolog={_shown(other[1] or '')}: a stale "
                            "file, not judged")
    return out, problems, warnings, info


def _job_container(conf, found, settings, node):
    """(info, warnings): what verify says of job_container/tmpfs
    (namespace/tmpfs from 25.11): each job's /tmp and /dev/shm are its
    own, which the chain's parts never see (info); and the BasePath job
    directories that no running job owns (warnings)."""
    plugin = (found.get("namespacetype") or found.get("jobcontainertype") or "").strip()
    if plugin.lower() not in ("job_container/tmpfs", "namespace/tmpfs"):
        return [], []
    info = [f"{_shown(conf)} has {_shown(plugin)}: each job's /tmp and /dev/shm are its own, under BasePath, and Slurm removes "
            "them at the job's end; parts 42 and 45 clean the node's /tmp and /dev/shm (what runs outside a job's "
            "namespace writes there: an ssh session pam_slurm_adopt did not adopt, a stray), never a job's"]
    container_conf = os.path.join(os.path.dirname(conf), "job_container.conf")
    node = socket.gethostname().split(".")[0]
    if not _root_only_in(os.path.dirname(container_conf)):
        return info, [f"[job-container-dir-not-root-only] {_shown(os.path.dirname(container_conf))} is not a directory only "
                      "root can write (a configless cache in the spool?): its job_container.conf is not trusted for "
                      "BasePath, and stale job directories are not looked for"]
    # read as slurm.conf is: never blocking on a FIFO, a regular file only
    values, _, problems = parse_slurm_conf(container_conf)
    if problems:
        return info, [f"{problem}: BasePath is not checked for stale job directories" for problem in problems]
    bases = [value.replace("%n", node) for value in values.get("basepath", []) if value]
    # slurmd's paths, in slurmd's root (its own mount namespace's, read
    # through /proc/PID/root as its slurm.conf is)
    pid = _split_root(conf)[0]
    # BasePath first, then the spool: a job that starts in between is in
    # neither; one that ends in between looks stale only until Slurm removes it
    listed = {}
    for base in dict.fromkeys(bases):
        entries = listed[base] = {}
        for top in (base, os.path.join(base, node)):
            found = _entries_in(pid, top, 4096, lambda name: name.isdigit())
            if found is not None:  # a job's directory is its id: nothing else is stat'ed
                entries[top] = [name for name, mode in found if stat.S_ISDIR(mode)]
    spool = _spool(settings["slurmd_spool_dir"], node) or settings["slurmd_spool_dir"]
    if not _root_only_in(spool if pid is None else f"/proc/{pid}/root{spool}"):
        return info, [f"[job-container-spool-untrusted] {spool} is not a directory only root can write: which jobs "
                      "run here cannot be told, and BasePath is not checked for stale job directories"]
    try:
        running = set(_node.evidence.step_jobs(_entries_in(pid, spool, None, _node.evidence.step_name, strict=True)))
    except OSError as exc:
        return info, [f"[job-container-spool-unreadable] {spool} cannot be read ({exc.strerror}): BasePath is not "
                      "checked for stale job directories"]
    warnings = []
    for base, entries in listed.items():
        stale = _node.evidence.stale_job_dirs(base, node, entries, running)
        if stale:
            warnings.append(f"[job-container-stale-dirs] {len(stale)} job director"
                            f"{'y' if len(stale) == 1 else 'ies'} under BasePath {base} that no running job owns (no "
                            f"step of theirs in {spool}), left by a failed launch or teardown: "
                            f"{', '.join(stale[:20])}{' ...' if len(stale) > 20 else ''}")
    return info, warnings


def _entries_in(pid, directory, limit, wanted, strict=False):
    """system.entries_in of DIRECTORY, a path in the root of process PID
    (None: this process's), resolved there and listed through its
    descriptor. None when DIRECTORY cannot be listed, unless STRICT: then
    OSError."""
    try:
        with _root(pid) as root:
            fd = root.resolve(directory)[0]
        try:
            listed = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        finally:
            os.close(fd)
        try:
            return _node.system.entries_in(listed, wanted, limit)
        finally:
            os.close(listed)
    except (OSError, ValueError):
        if strict:
            raise
        return None


def _slurmd_view(settings):
    """({SLURMD_NODENAME, SLURM_CONF}, slurmd's pid or 0): what the running
    slurmd would give a job end, its own node name and slurm.conf (a
    configless node's cache when it was started with neither). The
    slurmds and their slurm.conf are read once for the call (strays,
    explain, the sweep's look at IPC objects)."""
    env = {"SLURMD_NODENAME": _host_node()}
    with _one_call():
        found = [entry for entry in _slurmds_confs(settings) if entry["conf"] is not None]

        # of several slurmds (another cluster's beside this one), the one
        # whose spool is the chain's (epilog:slurmd_spool_dir: its evidence
        # is there), each expanded for that slurmd's node name
        def theirs(entry):
            node = entry["node"] or env["SLURMD_NODENAME"]
            return _same_spool(_conf_spool(entry["conf"]), settings["slurmd_spool_dir"], node)

        for entry in sorted(found, key=lambda entry: not theirs(entry)):
            env["SLURM_CONF"] = entry["conf"]
            env["SLURMD_NODENAME"] = entry["node"] or env["SLURMD_NODENAME"]
            return env, entry["pid"]
    return env, 0


def _host_node():
    """The node name a slurmd started without -N has here, as far as the
    module tells it: this host's short name (Slurm matches it to a NodeName
    of slurm.conf; sites keep the two the same)."""
    return GRAINS_HOST() or socket.gethostname().split(".")[0]
