"""epilog.verify: its checks and its answer, each problem or warning
opening with its code (docs/releases.md lists them)."""

import errno
import os
import re
import stat

from salt.exceptions import CommandExecutionError

from . import NODE as _node
from .common import SCHEDULE_ENTRIES, _in_slurmds_root, _root, _root_only, _shown, _split_root, _trust
from .pampolicy import _ssh_access
from .releases import PYTHON, _current_release, _release_tool
from .slurmconf import _same_spool, _spool, prolog_flags
from .slurmd import _host_node, _job_container, _judged_confs


def _ipc_note(settings):
    """What the kernel removes of System V IPC by itself, and what the chain
    covers beyond it."""
    try:
        with open("/proc/sys/kernel/shm_rmid_forced", "rb") as handle:
            forced = handle.read(16).strip().decode("ascii", "replace")
    except OSError:
        forced = "unknown"
    kernel = (f"kernel.shm_rmid_forced is {forced}: " + ("the kernel destroys a segment once its creator has exited "
              "and nothing is attached, segments only" if forced == "1" else "the kernel leaves every segment"))
    chain = ("at a user's last job end part 42 removes the segments they created (whoever owns them now) with "
             "nothing attached, the semaphore sets they created that no process waits on, and the message queues "
             "they created that no live process of another uid used last (epilog:ipc_cleanup)"
             if settings.get("ipc_cleanup", True) else "epilog:ipc_cleanup is off: the chain removes none")
    return f"{kernel}; {chain}"


def _schedule_report(settings, salt):
    """What epilog:schedule asks for and what this minion's scheduler holds
    (its entries of the formula's): (report, warnings)."""
    asked = settings.get("schedule") or {}
    held = salt.opts.get("schedule") or {}
    entries = {}
    for name in SCHEDULE_ENTRIES:
        entry = held.get(name)
        if isinstance(entry, dict):
            entries[name] = {key: entry.get(key) for key in ("function", "seconds", "splay", "kwargs", "enabled")}
    warnings = []
    interval = asked.get("interval") or 0
    for name, function in SCHEDULE_ENTRIES.items():
        entry = entries.get(name)
        kwargs = {"kill": asked.get("kill_strays", False)} if name == "epilog-strays" else {}
        if interval and entry is None:
            warnings.append(f"[schedule-entry-missing] epilog:schedule asks for {function} every {interval} s, "
                            f"and this minion's scheduler holds no entry {name}: state.apply epilog.schedule")
        elif interval and (entry["seconds"] != interval or entry["function"] != function
                           or entry["splay"] != asked.get("splay") or (entry["kwargs"] or {}) != kwargs
                           or entry.get("enabled") is False):
            warnings.append(f"[schedule-entry-differs] this minion's schedule entry {name} ({entry}) is not what "
                            f"epilog:schedule asks for ({function} every {interval} s): state.apply epilog.schedule")
        elif not interval and entry is not None:
            warnings.append(f"[schedule-entry-left] epilog:schedule:interval is 0, and this minion's scheduler "
                            f"still holds {name}: state.apply epilog.schedule takes it out")
    return {"asked": asked, "entries": entries}, warnings


# What state.sls returns, instead of running, while another state run holds
# the minion (salt/modules/state.py's running(): the same words on 3006 and
# 3008)
_HELD = re.compile(r'The function "[^"]*" is running as PID ([0-9]+) and was started at .*? with jid ([0-9A-Za-z_.-]+)')


def _held_by(ret):
    """(jid, pid) of the state run that holds the minion when RET, what
    state.sls returned, is Salt's refusal to start another; else None."""
    for item in ret if isinstance(ret, list) else [ret]:
        found = _HELD.search(str(item))
        if found:
            return found.group(2), int(found.group(1))
    return None


def _render_error(ret):
    """The problem of a state run that did not run: another state run
    holds the minion, or the state does not render (its Jinja error, which
    names the bad entry on one line; the rest is Salt's context dump)."""
    held = _held_by(ret)
    if held:
        return (f"[minion-busy] another state run (jid {held[0]}, pid {held[1]}) holds this minion; run verify "
                "again when it ends")
    text = "\n".join(map(str, ret)) if isinstance(ret, list) else str(ret)
    found = re.search(r"Jinja error: ([^\n]*)", text)
    return f"[state-not-rendering] the state epilog does not render: {found.group(1) if found else ret}"


def _managed(preview, chain):
    """The files and directories the state lays down, read from its own
    test=True run (each state's key names its module and function), so this
    list cannot drift from it. A file is a script (run by /usr/bin/python3:
    an entry point of the release, or the release tool) by layout.yaml."""
    files, dirs = [], []
    for key, state in preview.items():
        fields = str(key).split("_|-")
        if fields[0] != "file" or not isinstance(state, dict) or not isinstance(state.get("name"), str):
            continue
        name = state["name"]
        if fields[-1] == "managed":
            # <release id>/<path in the release>, for a file under the releases
            rel = os.path.relpath(name, chain.releases)
            inner = rel.split("/", 1)[1:] if not rel.startswith("../") else []
            script = name == chain.tool or (inner and inner[0] in chain.scripts)
            files.append({"path": name, "script": bool(script)})
        elif fields[-1] == "directory":
            dirs.append(name)
    return files, dirs


def _chain_parts(settings, chain, stage="epilog"):
    """The names of the parts the runner of STAGE runs now, as Run.parts
    finds them (runner.chain_parts): the current release's own that
    SETTINGS leave in (registry.not_run: epilog:parts, epilog:ssh_access),
    and the site's that it admits."""
    found = _node.runner.chain_parts(os.path.join(chain.current, chain.parts_dirs[stage]), chain.own_names[stage],
                                     os.path.join(chain.confdir, chain.parts_dirs[stage]),
                                     chain.formula_names[stage], _trust())
    return [name for name, _, own, why in found
            if why is None and (not own or _node.registry.not_run(name, settings) is None)]


def _chain_time_problems(settings, chain, conf_found):
    """The chain's worst case against its own deadline (the node program's
    budget: the runner shares chain_timeout by the same rule), counting the
    parts the runner would run (_chain_parts), and that deadline against
    Slurm's: slurmd kills an epilog that outlives EpilogTimeout
    (PrologEpilogTimeout before Slurm 25.05) and drains the node."""
    problems = []
    deadline = int(settings["chain_timeout"])
    seconds = len(_chain_parts(settings, chain)), int(settings["part_timeout"]), int(settings["squeue_timeout"])
    worst = _node.budget.worst_case(*seconds)
    if worst > deadline:
        problems.append(f"[chain-worst-case-too-long] the epilog chain's worst case is {worst} s "
                        f"({_node.budget.shown(*seconds)}), above epilog:chain_timeout {deadline}: the last parts "
                        "would be cut off")
    for key in ("epilogtimeout", "prologepilogtimeout"):
        value = conf_found.get(key, "").strip()
        if value.isdigit():
            if deadline >= int(value):
                problems.append(f"[chain-timeout-not-below-slurm] epilog:chain_timeout ({deadline} s) is not below "
                                f"slurm.conf's {key} ({value} s): slurmd would kill a slow epilog and drain the node")
            break
    return problems


def _not_laid(conf, key, value, laid):
    """Why VALUE, slurm.conf CONF's KEY (epilog, prolog), does not name the
    runner LAID that the state laid down here, or None when it does: for a
    slurm.conf read in slurmd's own mount namespace (/proc/PID/root/...),
    the file VALUE reaches in that root, by identity (a path only there, or
    another file there at the laid-down path, is judged as slurmd runs it);
    here, the path."""
    same = _in_slurmds_root(conf, value, laid) if value else None
    if same is None:
        if os.path.normpath(value) == os.path.normpath(laid):
            return None
        return f"{_shown(conf)} has {key.capitalize()}={_shown(value)}, not the laid-down {laid}"
    if same:
        return None
    return (f"{_shown(conf)} has {key.capitalize()}={_shown(value)}, which in slurmd's root (its own mount namespace) "
            f"is not the laid-down {laid} (another file there, or none)")


def _conf_problems(settings, chain, conf, found, node):
    """(problems, warnings) of the slurm.conf CONF ({key: last value}:
    FOUND) that the slurmd of node name NODE reads: does it wire this
    chain, and how."""
    problems, warnings = [], []
    problems.extend(_chain_time_problems(settings, chain, conf_found=found))
    # what reaches the answer, escaped: the file's name and what it says
    raw_conf, raw_found, conf = conf, found, _shown(conf)
    found = {key: [_shown(item) for item in value] if key == "_epilogs" else _shown(value)
             for key, value in found.items()}
    epilog_sh = os.path.join(chain.confdir, chain.runners["epilog"])
    wrong = None
    if len(set(found["_epilogs"])) > 1:
        wrong = (f"{conf} gives Epilog= {len(found['_epilogs'])} times ({', '.join(found['_epilogs'])}): Slurm "
                 "before 24.05 runs only the last; 24.05 and later run each in turn, and one that fails stops the "
                 f"rest and drains the node (want only Epilog={epilog_sh}; a site's own epilog belongs in epilog.d)")
    elif "epilog" not in found:
        wrong = f"{conf} has no Epilog=: the chain never runs (want Epilog={epilog_sh})"
    elif found["epilog"].endswith("*"):
        wrong = f"{conf} has Epilog={found['epilog']}: Slurm runs a glob in reverse order (want Epilog={epilog_sh})"
    else:
        wrong = _not_laid(raw_conf, "epilog", raw_found["epilog"], epilog_sh)
    if wrong:
        problems.append(f"[slurm-conf-epilog] {wrong}")
    prolog_sh = os.path.join(chain.confdir, chain.runners["prolog"])
    wrong = _not_laid(raw_conf, "prolog", raw_found.get("prolog", ""), prolog_sh)
    if wrong:
        problems.append(f"[slurm-conf-prolog] {wrong}")
    if not {"alloc", "contain"} <= prolog_flags(found.get("prologflags", "")):
        problems.append(f"[slurm-conf-prologflags] {conf} has PrologFlags={found.get('prologflags', '')}: want "
                        "Alloc,Contain, or a flag that sets both (Contain, X11, RunInJob): the prolog opens ssh at "
                        "allocation; every allocation needs a step for the last-job check")
    spool = found.get("slurmdspooldir", "/var/spool/slurmd")
    if not _same_spool(spool, settings["slurmd_spool_dir"], node):
        expanded = [value if _spool(value, node) in (value, None) else f"{value} ({_spool(value, node)} on {node})"
                    for value in (spool, settings["slurmd_spool_dir"])]
        problems.append(f"[slurm-conf-spool-dir] {conf} has SlurmdSpoolDir={expanded[0]}, but "
                        f"epilog:slurmd_spool_dir is {expanded[1]}")
    proctrack = found.get("proctracktype", "proctrack/cgroup")
    if proctrack.lower() != "proctrack/cgroup":
        warnings.append(f"[proctrack-not-cgroup] {conf} has ProctrackType={proctrack}: a daemon a job starts "
                        "(setsid, double fork) escapes Slurm's tracking and outlives the job; part 40 kills it only "
                        "after the user's last job here. proctrack/cgroup keeps every process of a job in its cgroup")
    return problems, warnings


class _Looked:
    """What one verify gathers and says: its SETTINGS and CHAIN, what it is
    given of Salt, the release tool's status (RELEASE), the state's preview
    (FILES and DIRS it manages), the slurm.conf it judged (JUDGED), and the
    problems, warnings and info each check adds, in the table's order."""

    def __init__(self, settings, chain, salt, release, looked):
        self.settings, self.chain, self.salt, self.release, self.looked = settings, chain, salt, release, looked
        self.problems, self.warnings, self.info = [], [], looked["info"]
        self.preview, self.files, self.dirs, self.judged = {}, [], [], []


def _verify(expect, verbose, salt):
    if not isinstance(verbose, bool):
        raise CommandExecutionError(f"verbose must be True or False, got {verbose!r}")
    problems, warnings, info = [], [], []
    looked = {"content": None, "manifest": {}, "checked": [], "slurm_conf": [], "schedule": {}, "info": info}
    try:
        settings, chain = salt.settings()
    except CommandExecutionError as exc:
        # a fleet reads this answer by its code like any other: a bad pillar
        # is a problem of the node's, not an error of the function's
        return _answer([f"[pillar-invalid] {exc}; the states refuse it too, and epilog.rollback still works"],
                       warnings, None, verbose, looked)
    try:
        status = _release_tool(chain, "status")
    except CommandExecutionError as exc:
        status = {"problems": [f"[release-tool-failed] {exc}"]}
    if status is None:
        status = {"problems": [f"[chain-not-laid-down] {chain.tool} is missing: the chain is not laid down"]}
    problems.extend(status.get("problems", []))
    release, manifest, content = status.get("release"), status.get("manifest") or {}, status.get("content")
    # The CLI reads an all-digit id as a number (YAML): compare it as one.
    if isinstance(expect, int) and release and release.isdigit():
        expect = release if int(release) == expect or (release[0] == "0" and int(release, 8) == expect) else expect
    if expect is not None and str(expect) not in (release, content):
        problems.append(f"[release-not-expected] the current release is {release} (content {content}), not the "
                        f"expected {expect}")
    if not os.access(PYTHON, os.X_OK):
        problems.append(f"[python-missing] {PYTHON} is not installed: every entry point of the chain runs it")
    looked.update(content=content, manifest=manifest)
    # state.sls(test=True) leaves test=True in the opts it shares with this
    # process's other functions: a rollback after a verify in a minion that
    # runs its jobs in one process would be a preview. Put it back.
    testing = salt.opts.get("test", False)
    try:
        preview = salt.functions["state.sls"]("epilog", test=True)
    finally:
        salt.opts["test"] = testing
    if not isinstance(preview, dict) or not all(isinstance(state, dict) for state in preview.values()):
        return _answer([*problems, _render_error(preview)], warnings, release, verbose, looked)
    v = _Looked(settings, chain, salt, release, looked)
    v.problems.extend(problems)
    v.preview = preview
    v.files, v.dirs = _managed(preview, chain)
    looked["checked"] = sorted([item["path"] for item in v.files] + v.dirs)
    for check, _ in CHECKS:
        check(v)
    return _answer(v.problems, v.warnings, release, verbose, looked)


# -- verify's checks, each given the _Looked of the call ----------------------
def _state_preview(v):
    """What the state would change now (state.sls test=True): a state that fails, a release not current, a
    package missing, a file that differs."""
    problems, release, preview = v.problems, v.release, v.preview
    for state in preview.values():
        name, changes = state.get("name"), state.get("changes") or {}
        if state.get("result") is False:
            problems.append(f"[state-fails] {name}: {state.get('comment')}")
        elif str(state.get("__id__", "")).endswith("release-switch-cmd-run") and state.get("result") is None:
            wanted = name.split(" activate ", 1)[-1].split(" ", 1)[0]
            problems.append(f"[release-not-current] the release the state lays down now ({wanted}) is not current "
                            f"(current: {release})")
        elif changes and "pkg" in str(state.get("__id__", "")):
            problems.append(f"[package-missing] {name} is not installed")
        elif changes:
            what = "is missing" if "newfile" in changes or "directory" in str(changes.get(name, "")) else \
                f"differs from what the state lays down now ({', '.join(sorted(changes))})"
            problems.append(f"[managed-differs] {name} {what}")


def _managed_files(v):
    """Each file the state manages: regular, root's, not writable by group or others; a script executable and
    compiling."""
    problems, files = v.problems, v.files
    for item in files:
        path = item["path"]
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue  # reported by the preview
        if not stat.S_ISREG(st.st_mode):
            problems.append(f"[managed-not-regular] {path} is not a regular file ({_node.sweep.kind_of(st)})")
            continue
        if st.st_uid != 0:
            problems.append(f"[managed-not-root] {path} is owned by uid {st.st_uid}, not root")
        if st.st_mode & 0o022:
            problems.append(f"[managed-writable] {path} is writable by group or others (mode "
                            f"{stat.S_IMODE(st.st_mode):04o})")
        if item["script"] and not st.st_mode & 0o100:
            problems.append(f"[script-not-executable] {path} is not executable")
        if item["script"]:
            try:
                with open(path, "rb") as handle:
                    compile(handle.read(), path, "exec", dont_inherit=True)
            except (OSError, SyntaxError, ValueError) as exc:
                problems.append(f"[script-not-compiling] {path} does not compile: {exc}")


def _managed_dirs(v):
    """Each directory the state manages, and slurm_config_dir: root's and not writable by group or others."""
    problems, settings, dirs = v.problems, v.settings, v.dirs
    for path in [*dirs, settings["slurm_config_dir"]]:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            problems.append(f"[managed-dir-not-root-only] {path} must be a directory owned by root and not writable "
                            "by group or others")


def _config_dir(v):
    """slurm_config_dir and its ancestors: only root can write them."""
    problems, settings = v.problems, v.settings
    # What root runs: anyone who can write slurm_config_dir or one of its
    # ancestors can swap the chain, and anyone who can write a site's part
    # runs code as root at the next job end.
    if os.path.isdir(settings["slurm_config_dir"]) and not _root_only(settings["slurm_config_dir"]):
        problems.append(f"[config-dir-not-root-only] {settings['slurm_config_dir']} (epilog:slurm_config_dir) or one "
                        "of its ancestors is a symlink, not root's, or writable by another account (and not sticky): "
                        "that account can replace the chain root runs")


def _site_parts(v):
    """Each site part of the chain's site directories the runner would skip (runner.admit_site_part)."""
    problems, chain = v.problems, v.chain
    # a directory another account can write is named on its own
    # ([managed-dir-not-root-only], [config-dir-not-root-only])
    codes = {"symlink": "[site-part-symlink] ", "owner": "[site-part-not-root-only] "}
    for stage, taken in chain.formula_names.items():
        site_dir = os.path.join(chain.confdir, chain.parts_dirs[stage])
        for _, _, admitted in sorted(_node.runner.site_parts(site_dir, taken, _trust())):
            if admitted.kind in codes:
                problems.append(f"{codes[admitted.kind]}{admitted.why}; the runner skips it")


def _localusers(v):
    """localusers.backup holds the pillar's localusers, and each name resolves here."""
    problems, settings, chain = v.problems, v.settings, v.chain
    backup = os.path.join(chain.confdir, chain.localusers)
    try:
        with open(backup, encoding="utf-8", errors="strict") as handle:
            listed = handle.read().splitlines()
        if listed != list(settings["localusers"]):
            problems.append(f"[localusers-backup-differs] {backup} does not hold exactly the pillar's localusers "
                            f"{settings['localusers']}: {listed}")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"[localusers-backup-unreadable] {backup} is not readable: {exc}")
    # The guard spares the uid of every listed name: one that does not
    # resolve here might be at a job's uid, so no job end acts on this node.
    import pwd  # pylint: disable=import-outside-toplevel
    for name in settings["localusers"]:
        try:
            pwd.getpwnam(name)
        except KeyError:
            problems.append(f"[localuser-unresolved] epilog:localusers names {name!r}, which does not resolve on this "
                            "node: the guard cannot tell whether a job's uid is theirs, so no job end acts here, and "
                            "under ssh_access listfile no job start grants anybody an ssh line (make the account, or "
                            "take the name off the list)")


def _sock_diag(v):
    """The kernel's unix socket diagnostics, the sweep's evidence, can be read."""
    if _node.sweep_holders.bound_socket_files() is None:
        v.problems.append("[sock-diag-unreadable] the kernel's unix socket diagnostics (NETLINK_SOCK_DIAG) cannot "
                          "be read: the sweep cannot tell whether an X socket is held, and keeps them all")


def _file_dirs(v):
    """The directories of the log, the allow file, the record and the metrics: only root can write them."""
    problems, settings = v.problems, v.settings
    for key, what in (("log_file", "the parts never open the log"), ("ssh_allow_file", "39 and 50 leave it alone"),
                      ("record_file", "the runner writes no decision record (epilog.report has none)"),
                      ("metrics_file", "the runner writes no metrics")):
        if not settings.get(key):
            continue  # metrics_file: none
        directory = os.path.dirname(settings[key]) or "/"
        if not _root_only(directory):
            problems.append(f"[file-dir-not-root-only] {directory} (epilog:{key}) is not a directory only root can "
                            "write (it, or an ancestor that is not sticky, is a symlink, not root's, or writable by "
                            f"group or others): {what}")


def _run_dir(v):
    """run_dir, where the job marks are: only root can write it."""
    problems, settings = v.problems, v.settings
    if os.path.lexists(settings["run_dir"]) and not _root_only(settings["run_dir"]):
        problems.append(f"[run-dir-not-root-only] {settings['run_dir']} (epilog:run_dir) is not a directory only "
                        "root can write: the epilog cannot trust the job marks there, and asks squeue instead")


def _old_chain(v):
    """No slurm.conf runs another chain of this formula's (chain_wired's elsewhere, each with its why)."""
    problems, salt = v.problems, v.salt
    try:
        wired = salt.chain_wired()
    except OSError as exc:
        wired = {"elsewhere": []}
        problems.append(f"[chain-wired-failed] slurm.conf cannot be read for Epilog=/Prolog=: {exc}")
    for item in wired["elsewhere"]:
        problems.append(f"[slurm-conf-old-chain] {item['why']}")


def _judged_slurm_confs(v):
    """Each slurm.conf slurmd reads, how it is found and how far it is trusted (slurmd._judged_confs gives the
    codes)."""
    problems, warnings, info, settings = v.problems, v.warnings, v.info, v.settings
    judged, conf_problems, conf_warnings, conf_info = _judged_confs(settings)
    problems.extend(conf_problems)
    warnings.extend(conf_warnings)
    info.extend(conf_info)
    v.judged = judged


def _spool_dir(v):
    """The spool a job end looks in (slurmd_spool_dir, expanded): only root can write it."""
    warnings, settings, judged = v.warnings, v.settings, v.judged
    # the spool a job end looks in: %n and %h expanded for the node name
    # slurmd runs as (the first judged slurmd's)
    spool = _spool(settings["slurmd_spool_dir"], judged[0][3] if judged else _host_node())
    if spool is None or not _root_only(spool):
        warnings.append(f"[spool-not-root-only] {spool or settings['slurmd_spool_dir']} (epilog:slurmd_spool_dir) is "
                        "not a directory only root can write (Debian's /var/lib/slurm/slurmd belongs to slurm): the "
                        "last-job check skips its step sockets and looks for root's slurmstepd of another job, then asks "
                        "squeue")


def _chain_in_slurm_confs(v):
    """Each judged slurm.conf runs this chain, in time, with what it needs (_conf_problems,
    _chain_time_problems and slurmd._job_container give the codes)."""
    problems, warnings, info, settings, chain, looked = v.problems, v.warnings, v.info, v.settings, v.chain, v.looked
    if not v.judged:
        problems.extend(_chain_time_problems(settings, chain, conf_found={}))
    for conf, found, how, node in v.judged:
        looked["slurm_conf"].append({"file": _shown(conf), "how": how})
        more_problems, more_warnings = _conf_problems(settings, chain, conf, found, node)
        problems.extend(more_problems)
        warnings.extend(more_warnings)
        container_info, container_warnings = _job_container(conf, found, settings, node)
        info.extend(container_info)
        warnings.extend(container_warnings)


def _cgroup_plugin(conf):
    """cgroup.conf's CgroupPlugin beside the slurm.conf CONF (the last
    one), or None: none, or the file cannot be read without a symlink."""
    try:
        text = _node.system.read_file(os.path.join(os.path.dirname(conf), "cgroup.conf"), 1 << 20)
    except OSError:
        return None
    found = None
    for line in text.decode("utf-8", "replace").split("\n"):
        key, sep, value = line.split("#", 1)[0].strip().partition("=")
        if sep and key.strip().lower() == "cgroupplugin" and value.strip():
            found = value.strip()
    return found


def _slurmds_cgroups(conf):
    """cgroups.cgroup_facts of the mount namespace the slurmd of the judged
    slurm.conf CONF runs in: its mountinfo and mounts read through its own
    root where CONF was read there (/proc/PID/root/...: a slurmd in a mount
    namespace of its own, whose cgroups may not be the minion's), else
    this process's."""
    pid = _split_root(conf)[0] if conf else None
    if pid is None:
        return _node.cgroups.cgroup_facts(_node.system.read_file("/proc/self/mountinfo", 4 << 20))
    with _root(pid) as root:
        def opener(path):
            fd, _, placed = root.resolve(path, follow=False)
            try:
                if not placed:  # a mount point reached through a directory another account may write
                    raise OSError(errno.EPERM, "not reached through root's directories alone", path)
                return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
            finally:
                os.close(fd)
        return _node.cgroups.cgroup_facts(root.read_proc("mountinfo", 4 << 20), opener)


def _cgroup_layout(v):
    """Which cgroup version and layout the node runs (info), and a layout the chain cannot read under
    proctrack/cgroup (cgroups.cgroup_layout)."""
    conf, found = (v.judged[0][0], v.judged[0][1]) if v.judged else (None, {})
    proctrack = found.get("proctracktype", "proctrack/cgroup") if conf else None
    try:
        facts = _slurmds_cgroups(conf)
    except OSError:
        facts = ((), False, None, None)
    version, layout, problem = _node.cgroups.cgroup_layout(*facts, proctrack, conf and _cgroup_plugin(conf))
    v.info.append(f"cgroup {version}: {layout}" + (f", ProctrackType={_shown(proctrack)}" if proctrack else ""))
    if problem:
        v.problems.append(f"[cgroup-layout-unreadable] cgroup {version}, {_shown(conf)} has "
                          f"ProctrackType={_shown(proctrack)}, and the chain cannot read the layout: {problem}; part "
                          "40 and epilog.strays would tell no job's process from a stray by its cgroup")


def _ssh(v):
    """sshd's account stack under ssh_access (pampolicy._ssh_access) and the ssh lines no job end revokes
    (_never_revoked)."""
    settings, chain = v.settings, v.chain
    problems_pam, warnings_pam = _ssh_access(settings)
    v.problems.extend(problems_pam)
    v.warnings.extend(warnings_pam + _never_revoked(settings, chain) + _allow_file_shape(settings))


def _allow_file_shape(settings):
    """[ssh-allow-file-writable], a warning: the allow file is not root's
    alone (its owner or group can change who logs in; pam_listfile admits
    nobody through a file others can write); [ssh-allow-line-too-long]: its
    lines longer than the LINE_MAX bytes pam_listfile (Linux-PAM 1.5) reads
    as one name, each read as several names (prolog 50 grants none now)."""
    path, out = settings["ssh_allow_file"], []
    try:
        if _node.registry.not_run(_node.registry.REVOKE, settings):
            return []
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            return []  # _never_revoked says so
        shared = _node.allow.not_roots_alone(_shown(path), st)
        if shared:
            out.append(f"[ssh-allow-file-writable] {shared}")
        lines = _node.allow.allow_lines(_node.system.read_file(path, _node.allow.ALLOW_MAX))
    except OSError:
        return out
    long_lines = [line for line in lines if len(line) > _node.guard.LINE_MAX]
    if long_lines:
        heads = ", ".join(_shown(os.fsdecode(line[:40])) + "..." for line in long_lines[:5])
        out.append(f"[ssh-allow-line-too-long] {len(long_lines)} line(s) of {_shown(path)} are longer than the "
                   f"{_node.guard.LINE_MAX} bytes pam_listfile reads as one name, so it reads each as several, any "
                   f"of them maybe another account's: {heads}; remove them by hand")
    return out


def _schedule(v):
    """The minion's schedule entries are what epilog:schedule asks for (_schedule_report)."""
    looked, salt, settings = v.looked, v.salt, v.settings
    looked["schedule"], schedule_warnings = _schedule_report(settings, salt)
    v.warnings.extend(schedule_warnings)


def _ipc(v):
    """What the chain does with IPC objects here (info, no code)."""
    v.info.append(_ipc_note(v.settings))


def _mode(v):
    """observe mode, the brake and the parts turned off (_mode_and_brake)."""
    _mode_and_brake(v.settings, v.problems, v.warnings)


# verify's checks in the order they run, each with the codes it gives
# itself (those of the helper it names in its docstring are that helper's)
# removes the lines that are exactly its first argument (no pattern: sed's
# regex would take je.kim for jeXkim too, and a name is no Perl code)
REMOVE_LINE = "perl -ni -e 'BEGIN { $n = shift } print unless $_ eq \"$n\\n\"'"

CHECKS = [
    (_state_preview, ("state-fails", "release-not-current", "package-missing", "managed-differs")),
    (_managed_files, ("managed-not-regular", "managed-not-root", "managed-writable", "script-not-executable",
                      "script-not-compiling")),
    (_managed_dirs, ("managed-dir-not-root-only",)),
    (_config_dir, ("config-dir-not-root-only",)),
    (_site_parts, ("site-part-symlink", "site-part-not-root-only")),
    (_localusers, ("localusers-backup-differs", "localusers-backup-unreadable", "localuser-unresolved")),
    (_sock_diag, ("sock-diag-unreadable",)),
    (_file_dirs, ("file-dir-not-root-only",)),
    (_run_dir, ("run-dir-not-root-only",)),
    (_old_chain, ("chain-wired-failed", "slurm-conf-old-chain")),
    (_judged_slurm_confs, ()),
    (_spool_dir, ("spool-not-root-only",)),
    (_chain_in_slurm_confs, ()),
    (_cgroup_layout, ("cgroup-layout-unreadable",)),
    (_ssh, ()),
    (_schedule, ()),
    (_ipc, ()),
    (_mode, ()),
]


def _never_revoked(settings, chain):
    """[ssh-allow-line-never-revoked], a warning: the allow file's lines
    part 39 would never remove (allow.never_revoked), judged by the current
    release's list and rules as a job end of each account would be: lines
    an earlier release granted (before prolog 50 followed the guard), or a
    hand wrote. The file is read as part 39 reads it, never through a
    symlink; the first 20 names are shown, escaped."""
    path = settings["ssh_allow_file"]
    try:
        if _node.registry.not_run(_node.registry.REVOKE, settings):
            return []
        release_dir, _ = _current_release(chain)
        chars = _node.runner.load(release_dir)[1]["account_chars"]
    except (CommandExecutionError, OSError, ValueError, KeyError):
        return []  # no current release to judge by: verify says so
    try:
        found = _node.allow.never_revoked(_node.allow.allow_lines(_node.system.read_file(path, 16 << 20)),
                                          _node.guard.judge_names(os.path.join(release_dir, chain.localusers), chars))
        names = ", ".join(f"{_shown(name)} ({why})" for name, why in found[:20]) + (" ..." if len(found) > 20 else "")
        said = (f"{len(found)} line(s) of {_shown(path)} name accounts the localusers guard does not act for, so part "
                f"39 never removes them (nor does prolog 50 grant them now): {names}; remove each by hand, under the "
                f"lock parts 39 and 50 take: flock {chain.allow_lock} {REMOVE_LINE} NAME {_shown(path)}")
    except FileNotFoundError:
        return []
    except OSError as exc:
        found, said = True, (f"{_shown(path)} is not a regular file that can be read without following a symlink "
                             f"({exc.strerror or exc}): part 39 leaves every line of it alone")
    return [f"[ssh-allow-line-never-revoked] {said}"] if found else []


def _mode_and_brake(settings, problems, warnings):
    """What verify says of epilog:mode, epilog:parts and the brake
    (epilog:stop_file), each line led by a code to grep for across a
    fleet: observe mode, parts turned off and a brake that holds are
    WARNINGS (a rollout still passes, and an operator may have set
    them on purpose); a stop file the chain ignores, or a place where none
    could be trusted, are PROBLEMS: the brake would not hold."""
    if settings.get("mode") == "observe":
        warnings.append("[mode-observe] epilog:mode is observe: every job end and look between jobs decides and records "
                        "what it would do, and the chain acts on nothing (no ssh line revoked, no process killed, no "
                        "file or System V IPC object removed, no residue swept; the prolog still adds the job user's "
                        "ssh line); epilog.report's would section counts what it would have done")
    off = sorted(name for name, on in (settings.get("parts") or {}).items() if on is False)
    if off:
        warnings.append(f"[parts-off] epilog:parts turns off {', '.join(off)}: never run, recorded as off")
    path = settings.get("stop_file")
    if path and not _root_only(os.path.dirname(path) or "/"):
        problems.append(f"[stop-file-dir] {os.path.dirname(path) or '/'} (where epilog:stop_file {path} goes) is "
                        "missing or not a directory only root can write: the chain does not look in it, and the "
                        "brake cannot be put on there")
        return
    found = _node.parts.brake(path, _trust())
    if found is not None and found.state == "on":
        since = _node.reader.when(found.since)
        warnings.append(f"[brake-on] {path} exists (since {since}): every job end skips parts 39, 40, 42 and 45, and "
                        "epilog.strays, epilog.sweep and the IPC removal between jobs act on nothing; the prolog and "
                        f"the site's own parts still run; rm {path} releases it")
    elif found is not None:
        problems.append(f"[stop-file-untrusted] {found.why}: a stop file counts only as a regular file of root's in "
                        f"a directory only root can write (anybody else could plant one); rm {path}, and touch it "
                        "as root to put the brake on")


# A problem or warning opens with its code: [lowercase-kebab], then a space
_CODED = re.compile(r"\[[a-z0-9]+(?:-[a-z0-9]+)*\] ")


def _answer(problems, warnings, release, verbose, looked):
    """verify's answer: result, release, problems and warnings (the few
    lines a fleet reads), and with VERBOSE what it LOOKED at. A message
    without a code (from a release tool older than this module) gets
    [uncoded], so every line can be told by its code. Each line is one
    line, printable: a name that reached one unescaped (_shown escapes them
    where they are put in) is escaped here, the whole line with it."""
    problems, warnings = ([_one_line(text if _CODED.match(text) else f"[uncoded] {text}") for text in map(str, texts)]
                          for texts in (problems, warnings))
    answer = {"result": not problems, "release": release, "problems": problems, "warnings": warnings}
    if verbose:
        looked["info"] = [_one_line(str(text)) for text in looked.get("info", [])]
        answer.update(looked)
    return answer


def _one_line(text):
    """TEXT as it is when every character of it prints, else escaped whole
    by _shown: never a line break or a terminal's control sequence."""
    return text if text.isprintable() else _shown(text)
