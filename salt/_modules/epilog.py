"""
The epilog formula's execution module: ``epilog.sweep``, ``verify``,
``rollback``, ``checkpoint``, ``explain``, ``report`` and ``chain_wired``.

The node program (``epilog_node/`` beside this file, synced with it from
``_modules/``) is what every release holds and every job end runs; this
module loads the synced copy for ``epilog.sweep`` (its sweep) and
``epilog.report`` (its record reader), and the current release's own copy
for ``epilog.explain`` (its runner, in a dry run). Nothing in this file is
laid down on a node: changing it changes no release.
"""

import contextlib
import importlib
import importlib.util
import json
import os
import posixpath
import re
import socket
import stat
import subprocess
import sys
import threading
import time

from salt.exceptions import CommandExecutionError

__virtualname__ = "epilog"
# the node program's package, beside this file and in each release
PACKAGE = "epilog_node"


def _load_package(directory, name):
    """The package in DIRECTORY (its __init__.py and, on import, its other
    files), loaded under NAME, afresh each time this module is loaded: a
    minion that reloads its modules after a sync runs the new node program,
    not the one it first imported. Never writes bytecode: a release's files
    are what its manifest says, and nothing else."""
    for key in [key for key in sys.modules if key == name or key.startswith(name + ".")]:
        del sys.modules[key]
    spec = importlib.util.spec_from_file_location(name, os.path.join(directory, "__init__.py"),
                                                  submodule_search_locations=[directory])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
        for sub in ("system", "log", "guard", "evidence", "record", "sweep", "parts", "runner"):
            setattr(module, sub, importlib.import_module(f"{name}.{sub}"))
        # what verify and explain alone ask (a release made before them has none)
        for sub in ("pam", "ipc", "roots", "context", "slurm", "worker", "metrics", "reader"):
            if os.path.isfile(os.path.join(directory, f"{sub}.py")):
                setattr(module, sub, importlib.import_module(f"{name}.{sub}"))
    except BaseException:
        for key in [key for key in sys.modules if key == name or key.startswith(name + ".")]:
            del sys.modules[key]
        raise
    finally:
        sys.dont_write_bytecode = writes
    return module


def _synced():
    """(the node program synced beside this file, None) or (None, why)."""
    directory = os.path.join(os.path.dirname(os.path.abspath(__file__)), PACKAGE)
    try:
        return _load_package(directory, "_epilog_node_synced"), None
    except Exception as exc:  # noqa: BLE001 - whatever it is, the loader gets a reason, not a traceback
        return None, f"cannot load {directory} ({type(exc).__name__}: {exc}): run saltutil.sync_modules"


_node, _NODE_MISSING = _synced()
if _node is not None:
    _trust = _node.system.Trust
    _bound_socket_files = _node.sweep.bound_socket_files


def _root_only(directory):
    return _trust().root_only(directory)


def _root_file(path):
    return _trust().root_file(path)


# The account slurm-formula (and many sites) gives slurm.conf to
SLURM_ACCOUNT = "slurm"


def conf_trust(uid, mode, regular, placed, slurm_uid):
    """How far a slurm.conf, or a file it includes, or a directory an
    Include glob of it lists, is trusted, from its facts: its owner UID, its
    MODE, whether it is a REGULAR file (for a directory: a directory),
    whether it is PLACED in directories only root can write (every
    directory its resolution went through, in the root of the slurmd that
    reads it), and the uid of the slurm account (None: no such account). "root": a file only root can write. "slurm": the slurm
    account's, writable by it alone (saltstack-formulas/slurm-formula lays
    slurm.conf down so): what it says is what slurmd runs, so it is judged,
    and the slurm account can run anything as root through Epilog= and
    Prolog=, which is the site's risk to know (a warning). "untrusted":
    anything else (another account's, writable by a group or others, not a
    regular file, or in a directory another account can write): what it
    says proves nothing. The one rule verify and chain_wired judge every
    slurm.conf by."""
    if not regular or not placed or mode & 0o022:
        return "untrusted"
    if uid == 0:
        return "root"
    if slurm_uid is not None and slurm_uid != 0 and uid == slurm_uid:
        return "slurm"
    return "untrusted"


def __virtual__():
    if not sys.platform.startswith("linux"):
        return (False, "the epilog module needs Linux (/proc and /tmp/.X11-unix)")
    if _node is None:
        return (False, _NODE_MISSING)
    return __virtualname__


# -- Salt ---------------------------------------------------------------------
def _config(validate=True):
    """(settings, rules, layout): the node's settings, merged and validated by
    the formula's map.jinja (defaults.yaml, osfamilymap.yaml, the pillar) with
    the rules of rules.yaml, as the states see them, and layout.yaml, which
    names what the states lay down. Rendered from the formula's
    settings.jinja, so the module has no defaults, merge, rules or names of
    laid-down files of its own, and a bad pillar fails here with the message the state gives.
    VALIDATE=False: the same merge without the checks, for the recovery
    operations, which must work under the pillar that broke a deploy; they
    check the one setting they use themselves (_recovery_settings)."""
    try:
        rendered = __salt__["slsutil.renderer"](  # noqa: F821 - a Salt dunder
            path="salt://epilog/settings.jinja", default_renderer="jinja|json", tpldir="epilog",
            validate=bool(validate), family=True)
    except Exception as exc:
        text = str(exc)
        found = re.search(r"Jinja error: ([^\n]*)", text)
        raise CommandExecutionError(f"the epilog settings do not render: {found.group(1) if found else text}") from exc
    if not isinstance(rendered, dict) or not all(isinstance(rendered.get(key), dict)
                                                 for key in ("settings", "rules", "layout")):
        raise CommandExecutionError("the epilog settings do not render: salt://epilog/settings.jinja is not "
                                    f"served to this minion, or is not the formula's (got {rendered!r:.200})")
    family = rendered.get("family") if isinstance(rendered.get("family"), dict) else {}
    return {**rendered["settings"], **family}, rendered["rules"], rendered["layout"]


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
        self.site_dirs = list(layout["directories"])
        # stage: the directory of its parts, in a release and beside it
        self.parts_dirs = {script["stage"]: os.path.dirname(script["path"]) for script in layout["scripts"]
                           if os.path.dirname(script["path"])}


def _settings():
    """(settings, chain): the validated settings and where their chain is."""
    settings, _, layout = _config()
    return settings, _Chain(settings["slurm_config_dir"], layout)


def _recovery_settings():
    """_settings for rollback and checkpoint: merged whatever else the
    pillar gets wrong, with slurm_config_dir held to the path rule."""
    settings, rules, layout = _config(validate=False)
    confdir = settings.get("slurm_config_dir")
    if not isinstance(confdir, str) or not re.match(rules["path"], confdir) or re.search(rules["path_dots"], confdir):
        raise CommandExecutionError(f"epilog:slurm_config_dir ({confdir!r}) must be an absolute path of letters, "
                                    "digits and . _ + @ - without . or .. components")
    return settings, _Chain(confdir, layout)


def sweep(test=None, job=None, user=None, budget=None, remove_ipc=False, **kwargs):
    """
    Sweep /tmp for residue of crashed X/VNC servers and Cadence clients
    (orphan /tmp/.X11-unix/X<N> sockets, stale /tmp/.X<N>-lock files, dead
    /tmp/clsbd.<user>.<pid> files) and, with ``job``, that job's scratch
    (``epilog:scratch_patterns``). Removes only what no live process holds.

    Between jobs (by hand, or the minion's scheduler under
    ``epilog:schedule``) an entry goes only while its owner's lock is free:
    one a job end or prolog of theirs holds is kept, for that chain. Unless
    ``test``, each sweep is a record of the record file (stage ``sweep``,
    source ``call`` or ``schedule``), which ``epilog.report`` counts.

    It also looks at the System V IPC objects (shared memory, semaphore
    sets, message queues) of accounts that have no job on the node, decided
    as ``epilog.strays`` decides (the current release's own guard and
    last-job evidence, under the user's lock), and removes those part 42
    would remove only with ``remove_ipc=True``.

    Held back as a job end is: under ``epilog:mode: observe``, while the
    brake holds (``epilog:stop_file``) or with part 45 turned off
    (``epilog:parts``), it decides as a sweep that removes and removes
    nothing (its report is a preview's, ``held_back`` says why), and its
    record says so; the IPC objects go only under the rules of part 42 the
    same way.

    Returns a report: ``removed`` (or, with ``test=True``, ``would_remove``),
    ``kept`` with a reason for each path, ``errors``, ``skipped``,
    ``counts`` per kind, and ``ipc``: ``users`` (each account with objects
    and no job here: what would go, and with ``remove_ipc`` what went) and
    ``counts``, or why it could not look. Raises an error (exit code 1) only
    when the sweep itself cannot run: a bad ``job`` or ``budget``, an
    unknown ``user``, an argument it does not take.

    test
        Report what would be removed and remove nothing. Defaults to the
        minion's ``test`` option.

    job
        A Slurm job id: also remove that job's scratch entries, those owned
        by ``user``.

    user
        The job's user; needed with ``job``.

    budget
        Whole seconds the sweep may take, 1 to 3600 (rules.yaml's seconds;
        default ``epilog:sweep_budget``).

    remove_ipc
        Remove the System V IPC objects of accounts with no job here that
        part 42 would remove at their last job end (default: only report
        them).

    CLI Example:

    .. code-block:: bash

        salt-call epilog.sweep
        salt '*' epilog.sweep test=True
        salt '*' epilog.sweep job=1234 user=alice
        salt '*' epilog.sweep remove_ipc=True
    """
    source = _source(kwargs)
    if test is None:
        test = __opts__.get("test", False)  # noqa: F821 - a Salt dunder
    if not isinstance(remove_ipc, bool):
        raise CommandExecutionError(f"remove_ipc must be True or False, got {remove_ipc!r}")
    settings, rules, layout = _config()
    if budget is not None:
        seconds = rules["seconds"]
        # The pillar's rule for sweep_budget, from rules.yaml: a whole number
        # in its range (True is no number of seconds).
        whole = int(budget) if isinstance(budget, str) and re.fullmatch(r"[0-9]{1,9}", budget) else budget
        if isinstance(whole, bool) or not isinstance(whole, int) or not seconds["min"] <= whole <= seconds["max"]:
            raise CommandExecutionError(f"budget ({budget!r}) must be a whole number of seconds from "
                                        f"{seconds['min']} to {seconds['max']}")
        budget = whole
    uid = None
    if user is not None:
        import pwd  # pylint: disable=import-outside-toplevel
        try:
            uid = pwd.getpwnam(str(user)).pw_uid
        except KeyError as exc:
            raise CommandExecutionError(f"no account {user!r} on this node") from exc
    log = _node.log.Log(settings["log_file"], _trust(), job=job, user=user, source="epilog.sweep",
                        max_bytes=settings.get("log_max_kb", 1024) * 1024)
    # Between jobs, an owner's entries wait while a job end or prolog of
    # theirs holds their lock (in a run directory only root can write).
    locks = settings["run_dir"] if _root_only(settings["run_dir"]) else None
    start = time.time()
    held, brake, off = _held_back(settings, "45-stale-x-display")
    try:
        if brake and brake.state == "ignored" and not test:
            log.warning(f"stop file {brake.why}")
        report = _node.sweep.run_sweep(
            test=test, job=job, patterns=settings["scratch_patterns"],
            budget=settings["sweep_budget"] if budget is None else budget, log=log.line, uid=uid, locks=locks,
            would=bool(held) and not test,
        )
    except _node.sweep.SweepError as exc:
        raise CommandExecutionError(str(exc)) from exc
    finally:
        log.close()
    report["mode"] = settings.get("mode", "enforce")
    if held:
        report["held_back"] = "; ".join(held)
    report["ipc"], ipc_fact, ipc_held = _between_jobs_ipc(settings, _Chain(settings["slurm_config_dir"], layout), test,
                                                          remove_ipc, source)
    if not test:
        facts = {"sweep": _node.sweep.fact(report)}
        if ipc_fact:
            facts["ipc"] = ipc_fact
        _between_jobs_record(settings, "sweep", start, source, parts=[_node.record.part_ran(
            "epilog.sweep", 0, report.get("elapsed_ms", 0), facts)],
            stopped=brake.path if brake and brake.state == "on" else ipc_held.get("stopped"),
            stop_ignored=brake.why if brake and brake.state == "ignored" else ipc_held.get("stop_ignored"),
            off=sorted({*off, *ipc_held.get("off", ())}))
    return report


def _held_back(settings, part):
    """Why a look between jobs does not do PART's act now: ([reasons], the
    brake (parts.brake: None, on or ignored), [the parts turned off]):
    observe mode, the brake, the part turned off (epilog:parts)."""
    brake = _node.parts.brake(settings.get("stop_file"), _trust())
    off = _node.parts.not_run(part, settings)
    held = [why for why in (brake.why if brake and brake.state == "on" else None, off and off.why,
                            "observe mode (epilog:mode): decided and recorded, not done"
                            if _node.parts.observing(settings) else None) if why]
    return held, brake, [part] if off and (settings.get("parts") or {}).get(part) is False else []


def _between_jobs_ipc(settings, chain, test, remove, source):
    """The sweep's look at System V IPC: (what the current release's strays
    program says of the accounts that hold objects and have no job here,
    the objects it removed as a record fact or None). Nothing to look at
    (no object but root's and the system accounts') costs no program; a
    look that cannot be made says why, and the sweep goes on."""
    if not settings.get("ipc_cleanup", True):
        return "epilog:ipc_cleanup is off: IPC objects are neither looked at nor removed", None, {}
    defs = _node.system.login_defs()
    if all(_node.guard.system_uid(uid, defs) for uid in _node.ipc.holders()):
        return {"users": [], "counts": {"users": 0, "objects": 0, "bytes": 0, "removed": 0, "bytes_removed": 0,
                                        "would_remove": 0, "bytes_would_remove": 0}}, None, {}
    try:
        found = _strays_program(settings, chain, {"kill": remove, "test": test, "source": source, "ipc_only": True})
    except CommandExecutionError as exc:
        return f"not looked at: {exc}", None, {}
    users = [{key: user[key] for key in ("user", "uid", "answer", "why", "ipc", "kill") if key in user}
             for user in found.get("users", []) if user.get("answer") in ("stray", "unknown")]
    for user in users:
        if isinstance(user.get("kill"), dict):
            user["removed"] = user.pop("kill").get("ipc")
        user.pop("kill", None)
    counts = found.get("counts", {})
    fact = found.get("ipc_fact") if remove and not test else None
    out = {"users": users, "counts": {"users": counts.get("ipc_users", 0), "objects": counts.get("ipc_objects", 0),
                                      "bytes": counts.get("ipc_bytes", 0), "removed": counts.get("ipc_removed", 0),
                                      "bytes_removed": counts.get("ipc_bytes_removed", 0),
                                      "would_remove": counts.get("ipc_would_remove", 0),
                                      "bytes_would_remove": counts.get("ipc_bytes_would_remove", 0)}}
    # what held the removal back (the release's strays program says)
    held = {key: found[key] for key in ("stopped", "stop_ignored", "off") if found.get(key)} if remove else {}
    why = ([f"stopped by {held['stopped']}"] if held.get("stopped") else []) \
        + [f"off: epilog:parts:{name} is false" for name in held.get("off", ())] \
        + (["observe mode (epilog:mode): decided and recorded, not done"] if remove and found.get("mode") == "observe"
           else [])
    if why:
        out["held_back"] = "; ".join(why)
    return out, fact, held


def _source(kwargs):
    """schedule when the minion's scheduler runs the function (it passes the
    entry's name as __pub_schedule), else call. An argument of the caller's
    that the function does not take (a typo of test=) is refused."""
    unknown = sorted(key for key in kwargs if not str(key).startswith("__pub_"))
    if unknown:
        raise CommandExecutionError(f"unknown argument(s): {', '.join(map(str, unknown))}")
    return "schedule" if kwargs.get("__pub_schedule") else "call"


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
             "nothing attached, and the semaphore sets and message queues they created that no live process of "
             "another uid used last (epilog:ipc_cleanup)"
             if settings.get("ipc_cleanup", True) else "epilog:ipc_cleanup is off: the chain removes none")
    return f"{kernel}; {chain}"


# the minion's schedule entries epilog.schedule lays down: their functions
SCHEDULE_ENTRIES = {"epilog-sweep": "epilog.sweep", "epilog-strays": "epilog.strays"}


def schedule_held():
    """
    The formula's schedule entries this minion holds (``entries``: the
    names of epilog-sweep and epilog-strays, each held with the formula's
    function: another function under such a name is the site's), in the
    running minion's memory or in the file a minion reads when it starts
    (minion.d/_schedule.conf). epilog.clean takes these entries out (from
    the file when no salt-minion daemon runs: salt/epilog/minion.jinja).

    CLI Example:

    .. code-block:: bash

        salt-call epilog.schedule_held
    """
    held = dict(__opts__.get("schedule") or {})  # noqa: F821 - a Salt dunder
    saved = __salt__["schedule.list"](show_all=True, return_yaml=False, offline=True)  # noqa: F821
    if isinstance(saved, dict):
        held.update(saved)
    entries = sorted(name for name, function in SCHEDULE_ENTRIES.items()
                     if isinstance(held.get(name), dict) and held[name].get("function") == function)
    return {"entries": entries}


def _schedule_report(settings):
    """What epilog:schedule asks for and what this minion's scheduler holds
    (its entries of the formula's): (report, warnings)."""
    asked = settings.get("schedule") or {}
    held = __opts__.get("schedule") or {}  # noqa: F821 - a Salt dunder
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


def _between_jobs_record(settings, stage, start, source, parts, stopped=None, stop_ignored=None, off=()):
    """The record of a sweep run between jobs, in the job ends' record file
    (and its counters in the metrics), for epilog.report: its mode, and
    what held its acts back (the brake's STOPPED file, the parts turned
    OFF; STOP_IGNORED: a stop file that was ignored)."""
    record = _node.record
    rec = record.build(stage, node=__grains__.get("host", socket.gethostname().split(".")[0]),  # noqa: F821
                       release=None, start=start, ms=(time.time() - start) * 1000, warnings=1 if stop_ignored else 0,
                       parts=parts, mode=settings.get("mode", "enforce"), stopped=stopped,
                       stop_ignored=stop_ignored, off=off, source=source)
    record.write(_trust(), settings["record_file"], settings["record_max_kb"] * 1024, rec)
    if settings.get("metrics_file"):
        _node.metrics.update_metrics(_trust(), settings["metrics_file"], rec)


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
    """slurm.conf as Slurm reads it: keys in any case, spaces around '=',
    quoted values, several pairs on a line, '#' comments ('\\#' is a
    literal '#'), Include (relative to the including file's directory,
    globs allowed) read in place. A /proc/PID/root/... path is read in that
    process's root, its absolute Includes too. Returns ({key lowercased:
    [values in order]}, [files read], [problems]); the last value is the one
    Slurm uses (Epilog= and Prolog= may be given more than once from
    24.05). A parse is bounded in all, whatever includes what (CONF_*_MAX,
    CONF_SECONDS: a file that includes itself, a glob of /proc, a thousand
    Include lines are answered in bounded time), and each bound it reached
    is one of the problems, [slurm-conf-cut]. Names are shown escaped
    (_shown)."""
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
    """The flags (lower case) Slurm sets for PrologFlags=VALUE, each flag
    with the ones it sets."""
    flags = set()
    for raw in str(value).split(","):
        token = raw.strip().lower()
        if token:
            flags.add(token)
            flags.update(PROLOG_FLAGS_SET.get(token, ()))
    return flags


def _running_slurmds():
    """[(pid, executable)] of each running slurmd of root's (real uid 0, read
    from the kernel's status, not from the owner of /proc/PID). Debian and
    Ubuntu install it as slurmd-wlm (slurmd is an alternatives link).
    Each is read through its /proc/PID opened once, and its start time kept
    for the call: every later read of it (its root, command line,
    environment, maps, namespace) is refused if the pid has been taken by
    another process since (roots.Root's check)."""
    out, memo = [], _memo()
    for pid in filter(_node.system.digits, os.listdir("/proc")):
        try:
            proc = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
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
    """({option letter: its argument}, {long option: its argument}) of a
    slurmd command line ARGV, read as slurmd's getopt_long reads it: short
    options clustered (-Df /x), an argument joined (-f/x) or the next word,
    a long option by any unique prefix (--conf-s=host), -- the end."""
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
    """(slurm.conf, how) as slurmd resolves its configuration from its
    command line ARGV, its environment ENV, the build's DEFAULT_CONF (its
    sysconfdir's slurm.conf; None when it cannot be told) and EXISTS(path),
    in the precedence of slurmd.c's _establish_configuration: a
    configuration cache handed to a re-exec'd slurmd
    (SLURMD_RECONF_CONF_CACHE, 24.11 on reconfigure); --conf-server
    (configless); -f; SLURM_CONF; the build's default when it exists; else
    configless (DNS SRV records). A configless answer's path is None: the
    cache is in slurmd's spool (the caller finds it); with no -f or
    SLURM_CONF and a default that cannot be told, (None, "unknown"). how:
    reconf-cache, -f, SLURM_CONF, default, configless, unknown."""
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


def chain_wired(slurm_config_dir=None):
    """
    Whether any slurm.conf of this node still names the chain under
    SLURM_CONFIG_DIR (the pillar's by default) in Epilog= or Prolog=, read
    the way Slurm reads it (Include, quotes, any case, $SLURM_CONF, what
    slurmd was started with, a configless node's cache, and
    SLURM_CONFIG_DIR's own slurm.conf). ``epilog.clean`` refuses unless
    ``wired`` is empty and ``known`` is True.

    ``elsewhere`` lists each Epilog=/Prolog= that names the runner of
    another chain of this formula's (``conf``, ``key``, ``value``, ``dir``),
    and ``old_dirs`` those directories: after a rename of
    ``slurm_config_dir``, the old chain slurmd still runs, which no longer
    gets the pillar's updates. Only a slurm.conf that only root can write
    counts there, and only a directory that only root can write holding
    root's epilog-releases.

    CLI Example:

    .. code-block:: bash

        salt-call epilog.chain_wired
        salt-call epilog.chain_wired slurm_config_dir=/etc/slurm-old
    """
    with _one_call():
        return _chain_wired(slurm_config_dir)


def _chain_wired(slurm_config_dir):
    settings, rules, layout = _config()
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
                    report["elsewhere"].append({"conf": _shown(path), "key": key.capitalize(), "value": _shown(value),
                                                "dir": where})
                    if where not in report["old_dirs"]:
                        report["old_dirs"].append(where)
    return report


def _chain_time_problems(settings, chain, conf_found):
    """The chain's worst case against its own deadline, and that deadline
    against Slurm's: a part gets part_timeout plus 2 s to die, the squeue
    fallback squeue_timeout plus 1, the wait for the user's lock 10 s, and
    the runner keeps 5 s for killing a
    part, its whole-second clock and the syslog flush; slurmd kills an
    epilog that outlives EpilogTimeout (PrologEpilogTimeout before Slurm
    25.05) and drains the node."""
    problems = []
    deadline = int(settings["chain_timeout"])
    parts = set()
    # the release's own parts and the site's: the runner runs both
    for parts_dir in (os.path.join(chain.current, chain.parts_dirs["epilog"]),
                      os.path.join(chain.confdir, chain.parts_dirs["epilog"])):
        try:
            parts.update(name for name in os.listdir(parts_dir) if re.fullmatch(r"[0-9]{2}-[A-Za-z0-9_-]+", name)
                         and os.access(os.path.join(parts_dir, name), os.X_OK))
        except OSError:
            pass
    worst = len(parts) * (int(settings["part_timeout"]) + 2) + 10 + int(settings["squeue_timeout"]) + 1 + 5
    if worst > deadline:
        problems.append(f"[chain-worst-case-too-long] the epilog chain's worst case is {worst} s ({len(parts)} "
                        f"parts x (part_timeout {settings['part_timeout']} + 2) + 10 for the user's lock + "
                        f"squeue_timeout {settings['squeue_timeout']} + 1 + 5), above epilog:chain_timeout "
                        f"{deadline}: the last parts would be cut off")
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


_HOW = {"-f": "its -f", "SLURM_CONF": "SLURM_CONF in its environment", "default": "its build's default path",
        "configless": "its configless cache of the controller's", "reconf-cache": "its configless cache of the "
        "controller's"}


def _started(pid):
    """When process PID started (an epoch), from /proc (the fields after
    its name's last ') '), or None; a slurmd's as _running_slurmds found
    it, in a call."""
    memo = _memo()
    if memo is not None and ("started", pid) in memo:
        return memo[("started", pid)]
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return _node.system.started(handle.read(4096))
    except OSError:
        return None


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


def verify(expect=None, verbose=False):
    """
    Check, without changing anything, that the epilog chain on this node is
    what the state lays down and that it can run:

    - the current release (epilog-releases/current) matches the sha256
      manifest recorded when it was made current, and is the release the
      state lays down now; epilog.sh, prolog.sh and localusers.backup are
      the symlinks to it;

    - each managed file's content, owner and mode equal what ``state.apply
      epilog`` would lay down now (a ``test=True`` run of the state);
    - root owns each file, group and others cannot write it, scripts are
      executable and compile as the Python /usr/bin/python3 runs;
    - ``localusers.backup`` is readable and holds exactly the pillar list;
    - the slurm.conf this node's Slurm reads wires the chain (``Epilog=``,
      ``Prolog=``, ``PrologFlags``, ``SlurmdSpoolDir``, the timeouts), with
      warnings on ``ProctrackType`` and ``job_container/tmpfs``;
    - sshd's PAM account stack agrees with ``epilog:ssh_access``;
    - the minion's schedule entries agree with ``epilog:schedule`` (a
      warning);
    - the ssh allow file's lines part 39 would never remove (a warning,
      ``[ssh-allow-line-never-revoked]``: the first 20 names and why);
    - the mode and the brake: ``[mode-observe]``, ``[parts-off]`` and
      ``[brake-on]`` are warnings (a rollout still passes); a stop file the
      chain ignores (``[stop-file-untrusted]``) or a place where none could
      be trusted (``[stop-file-dir]``) is a problem.

    Returns ``result`` (True when there is no problem), the ``release`` id
    that is current, the ``problems`` and the ``warnings``, each a sentence
    that opens with its code in brackets (``[slurm-conf-epilog] ...``: the
    codes are listed in docs/releases.md) and names its file. A minion that
    another state run holds answers ``[minion-busy]``: run it again when
    that run ends.

    expect
        The release id (or content digest) every node should run: another
        one is a problem.

    verbose
        Also return what was looked at: the release's ``content`` digest
        and ``manifest`` (path: sha256), the ``checked`` paths, the
        ``slurm_conf`` files judged, the ``schedule`` asked for and the
        minion's entries of it, and ``info``, what verify found that is
        neither a problem nor a warning.

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-*' epilog.verify
        salt 'slurm-work-*' epilog.verify expect=0123456789ab
        salt 'slurm-work-01' epilog.verify verbose=True
        salt 'slurm-work-*' epilog.verify | grep -F '[slurm-conf-epilog]'
    """
    with _one_call():
        return _verify(expect, verbose)


def _verify(expect, verbose):
    if not isinstance(verbose, bool):
        raise CommandExecutionError(f"verbose must be True or False, got {verbose!r}")
    problems, warnings, info = [], [], []
    looked = {"content": None, "manifest": {}, "checked": [], "slurm_conf": [], "schedule": {}, "info": info}
    try:
        settings, chain = _settings()
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
    testing = __opts__.get("test", False)  # noqa: F821 - a Salt dunder
    try:
        preview = __salt__["state.sls"]("epilog", test=True)  # noqa: F821 - a Salt dunder
    finally:
        __opts__["test"] = testing  # noqa: F821 - a Salt dunder
    if not isinstance(preview, dict) or not all(isinstance(state, dict) for state in preview.values()):
        return _answer([*problems, _render_error(preview)], warnings, release, verbose, looked)
    files, dirs = _managed(preview, chain)
    looked["checked"] = sorted([item["path"] for item in files] + dirs)
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
    for path in [*dirs, settings["slurm_config_dir"]]:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            problems.append(f"[managed-dir-not-root-only] {path} must be a directory owned by root and not writable "
                            "by group or others")
    # What root runs: anyone who can write slurm_config_dir or one of its
    # ancestors can swap the chain, and anyone who can write a site's part
    # runs code as root at the next job end.
    if os.path.isdir(settings["slurm_config_dir"]) and not _root_only(settings["slurm_config_dir"]):
        problems.append(f"[config-dir-not-root-only] {settings['slurm_config_dir']} (epilog:slurm_config_dir) or one "
                        "of its ancestors is a symlink, not root's, or writable by another account (and not sticky): "
                        "that account can replace the chain root runs")
    for stage in chain.site_dirs:
        site_dir = os.path.join(chain.confdir, stage)
        try:
            names = sorted(os.listdir(site_dir))
        except OSError:
            continue
        for name in names:
            path = os.path.join(site_dir, name)
            if not re.fullmatch(r"[0-9]{2}-[A-Za-z0-9_-]+", name):
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                problems.append(f"[site-part-symlink] {path} is a symlink: the runner runs only regular files of "
                                "root's as site parts (what a link points to may sit where another account can "
                                "write); it skips it")
            elif stat.S_ISREG(st.st_mode) and st.st_mode & 0o111 and (st.st_uid != 0 or st.st_mode & 0o022):
                problems.append(f"[site-part-not-root-only] {path} is run by root at every job end, but it is owned "
                                f"by uid {st.st_uid} or writable by group or others (mode "
                                f"{stat.S_IMODE(st.st_mode):04o}): that account runs code as root; the runner skips "
                                "it")

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

    if _bound_socket_files() is None:
        problems.append("[sock-diag-unreadable] the kernel's unix socket diagnostics (NETLINK_SOCK_DIAG) cannot be "
                        "read: the sweep cannot tell whether an X socket is held, and keeps them all")
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
    if os.path.lexists(settings["run_dir"]) and not _root_only(settings["run_dir"]):
        problems.append(f"[run-dir-not-root-only] {settings['run_dir']} (epilog:run_dir) is not a directory only "
                        "root can write: the epilog cannot trust the job marks there, and asks squeue instead")
    try:
        wired = chain_wired()
    except OSError as exc:
        wired = {"elsewhere": []}
        problems.append(f"[chain-wired-failed] slurm.conf cannot be read for Epilog=/Prolog=: {exc}")
    for item in wired["elsewhere"]:
        problems.append(f"[slurm-conf-old-chain] {item['conf']} has {item['key']}={item['value']}: slurmd runs the "
                        f"chain in {item['dir']}, not the one in epilog:slurm_config_dir "
                        f"{settings['slurm_config_dir']} (renamed?), and that old chain no longer gets the pillar's "
                        f"updates. Point {item['key']}= at {settings['slurm_config_dir']}/{item['key'].lower()}.sh, "
                        f"run scontrol reconfigure, then remove the old one: state.apply epilog.clean "
                        f"pillar='{{\"epilog_clean\": {{\"slurm_config_dir\": \"{item['dir']}\"}}}}'")
    judged, conf_problems, conf_warnings, conf_info = _judged_confs(settings)
    problems.extend(conf_problems)
    warnings.extend(conf_warnings)
    info.extend(conf_info)
    # the spool a job end looks in: %n and %h expanded for the node name
    # slurmd runs as (the first judged slurmd's)
    spool = _spool(settings["slurmd_spool_dir"], judged[0][3] if judged else _host_node())
    if spool is None or not _root_only(spool):
        warnings.append(f"[spool-not-root-only] {spool or settings['slurmd_spool_dir']} (epilog:slurmd_spool_dir) is "
                        "not a directory only root can write (Debian's /var/lib/slurm/slurmd belongs to slurm): the "
                        "last-job check skips its step sockets and asks pgrep, then squeue")
    if not judged:
        problems.extend(_chain_time_problems(settings, chain, conf_found={}))
    for conf, found, how, node in judged:
        looked["slurm_conf"].append({"file": _shown(conf), "how": how})
        more_problems, more_warnings = _conf_problems(settings, chain, conf, found, node)
        problems.extend(more_problems)
        warnings.extend(more_warnings)
        container_info, container_warnings = _job_container(conf, found, settings, node)
        info.extend(container_info)
        warnings.extend(container_warnings)
    problems_pam, warnings_pam = _ssh_access(settings)
    problems.extend(problems_pam)
    warnings.extend(warnings_pam + _never_revoked(settings, chain))
    looked["schedule"], schedule_warnings = _schedule_report(settings)
    warnings.extend(schedule_warnings)
    info.append(_ipc_note(settings))
    _mode_and_brake(settings, problems, warnings)
    return _answer(problems, warnings, release, verbose, looked)


def _never_revoked(settings, chain):
    """[ssh-allow-line-never-revoked], a warning: the allow file's lines
    part 39 would never remove (parts.never_revoked), judged by the current
    release's list and rules as a job end of each account would be: lines
    an earlier release granted (before prolog 50 followed the guard), or a
    hand wrote. The file is read as part 39 reads it, never through a
    symlink; the first 20 names are shown, escaped."""
    path = settings["ssh_allow_file"]
    try:
        if _node.parts.not_run("39-lastuserjob-ssh", settings):
            return []
        release_dir, _ = _current_release(chain)
        chars = _node.runner.load(release_dir)[1]["account_chars"]
    except (CommandExecutionError, OSError, ValueError, KeyError):
        return []  # no current release to judge by: verify says so
    try:
        found = _node.parts.never_revoked(_node.parts.allow_lines(_node.system.read_file(path, 16 << 20)),
                                          _node.guard.judge_names(os.path.join(release_dir, chain.localusers), chars))
        names = ", ".join(f"{_shown(name)} ({why})" for name, why in found[:20]) + (" ..." if len(found) > 20 else "")
        said = (f"{len(found)} line(s) of {_shown(path)} name accounts the localusers guard does not act for, so part "
                f"39 never removes them (nor does prolog 50 grant them now): {names}; remove each by hand, under the "
                f"lock parts 39 and 50 take: flock {chain.allow_lock} sed -i '/^NAME$/d' {_shown(path)}")
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
        names = _entries_in(pid, spool, None, lambda name: "_" in name and "." in name, strict=True)
    except OSError as exc:
        return info, [f"[job-container-spool-unreadable] {spool} cannot be read ({exc.strerror}): BasePath is not "
                      "checked for stale job directories"]
    running, warnings = set(), []
    for name, mode in names:
        if stat.S_ISSOCK(mode):
            running.add(name.rsplit("_", 1)[1].split(".", 1)[0])
    for base, entries in listed.items():
        stale = _node.evidence.stale_job_dirs(base, node, entries, running)
        if stale:
            warnings.append(f"[job-container-stale-dirs] {len(stale)} job director"
                            f"{'y' if len(stale) == 1 else 'ies'} under BasePath {base} that no running job owns (no "
                            f"step of theirs in {spool}), left by a failed launch or teardown: "
                            f"{', '.join(stale[:20])}{' ...' if len(stale) > 20 else ''}")
    return info, warnings


def _entries_in(pid, directory, limit, wanted, strict=False):
    """[(name, lstat mode)] of the first LIMIT names (None: all) in
    DIRECTORY, a path in the root of process PID (None: this process's),
    resolved there and listed through its descriptor; only the names
    WANTED(name) are stat'ed and given (one gone meanwhile is left out).
    None when DIRECTORY cannot be listed, unless STRICT: then OSError."""
    try:
        with _root(pid) as root:
            fd = root.resolve(directory)[0]
        try:
            listed = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        finally:
            os.close(fd)
        try:
            names = os.listdir(listed)
            out = []
            for name in names[:limit] if limit else names:
                if wanted(name):
                    try:
                        out.append((name, os.stat(name, dir_fd=listed, follow_symlinks=False).st_mode))
                    except OSError:
                        continue
            return out
        finally:
            os.close(listed)
    except (OSError, ValueError):
        if strict:
            raise
        return None


def _ssh_access(settings):
    """(problems, warnings) of sshd's PAM stack under epilog:ssh_access
    (see epilog_node/pam.py)."""
    access = settings.get("ssh_access", "listfile")
    if access == "none":
        return [], []
    pam = _node.pam
    service = os.path.join(pam.PAM_DIR, "sshd")
    if not os.path.exists(service):
        if access == "adopt":
            why = "pam_slurm_adopt governs no ssh login"
        else:
            why = (f"libpam gives sshd the stack of {pam.PAM_DIR}/other, so the lines prolog 50 adds to "
                   "epilog:ssh_allow_file and part 39 removes govern no ssh login; lay the file down with the line "
                   f"'{pam.ALLOW_LINE % settings['ssh_allow_file']}' after its account lines, or set "
                   "epilog:ssh_access none where the site governs ssh itself")
        return [f"[pam-sshd-missing] epilog:ssh_access is {access}, but {service} is missing: {why}"], []
    lines, problems = pam.account_stack("sshd")
    judged, warnings = pam.judge(lines, access, settings["ssh_allow_file"], settings["localusers"])
    for line in lines:
        if line.module in (pam.ADOPT, pam.LISTFILE) and not _pam_module_found(line.path):
            judged.append(f"[pam-module-missing] {line!r}: {line.path} is not on this node: libpam fails a "
                          f"{line.control} line whose module is missing, and denies every login, root's too")
    return problems + judged, warnings


# where libpam looks for a module named without a directory
PAM_MODULE_DIRS = ("/lib/security", "/lib64/security", "/usr/lib/security", "/usr/lib64/security",
                   "/lib/x86_64-linux-gnu/security", "/usr/lib/x86_64-linux-gnu/security",
                   "/lib/aarch64-linux-gnu/security", "/usr/lib/aarch64-linux-gnu/security")


def _pam_module_found(path):
    if os.path.isabs(path):
        return os.path.isfile(path)
    name = path if path.endswith(".so") else path + ".so"
    return any(os.path.isfile(os.path.join(directory, name)) for directory in PAM_MODULE_DIRS)


def pam_file(manage=None):
    """
    The text /etc/pam.d/sshd gets from the state epilog.pam: with
    ``epilog:pam_manage`` on, the file with the formula's account lines after
    its last account line: a pam_listfile line that admits root and the
    operators from ``pam_operators_file``, then, under ``ssh_access`` adopt,
    ``pam_adopt_module``, or, under listfile, a pam_listfile line that
    admits every other login only while ``ssh_allow_file`` names it. Off,
    the file without them. The stack it would lay down is judged first, as
    epilog.verify judges the live one: any problem (an operator that would
    not be admitted, a line that admits logins past the formula's gate, a
    pam_slurm_adopt line of the site's own under adopt, a module missing)
    is an error, and the state, which renders this, fails before anything
    is written. None: off, and nothing there to take out.

    manage
        True or False in place of ``epilog:pam_manage`` (epilog.clean asks
        for the file without the formula's lines whatever the pillar says).

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-01' epilog.pam_file
    """
    settings, rules, _ = _config()
    pam = _node.pam
    service = os.path.join(pam.PAM_DIR, "sshd")
    manage = settings["pam_manage"] if manage is None else bool(manage)
    if os.path.islink(service):
        if not manage:
            return None
        raise CommandExecutionError(f"{service} is a symlink: the formula writes only a file of its own there; "
                                    "replace the link with the file it names, or leave epilog:pam_manage off")
    try:
        text = pam._read(service)  # pylint: disable=protected-access
    except FileNotFoundError:
        if not manage:
            return None
        raise CommandExecutionError(f"epilog:pam_manage is on, but {service} is missing (is openssh-server "
                                    "installed?): no account lines laid down") from None
    except (OSError, UnicodeDecodeError) as exc:
        if not manage:
            return None
        raise CommandExecutionError(f"{service} cannot be read: {exc}") from None
    if not manage and pam.BEGIN not in text and pam.END not in text:
        return text  # none of the formula's lines: nothing to take out
    if any(not (char.isprintable() or char in "\t\n") for char in text):
        raise CommandExecutionError(f"{service} holds a control or unprintable character: the formula would not "
                                    "write it back as it is; edit the file by hand first")
    access, allow = settings["ssh_access"], settings["ssh_allow_file"]
    try:
        if not manage:
            return pam.unplace(text)
        operators = settings["pam_operators_file"]
        _check_operators_file(operators, rules)
        if not _pam_module_found("pam_listfile.so"):
            raise CommandExecutionError("pam_listfile.so is not on this node (libpam-modules, pam on RHEL): a "
                                        "required PAM module that is missing denies every login, root's too")
        if access == "adopt":
            module = settings["pam_adopt_module"]
            # /lib is a symlink to usr/lib on merged-/usr systems: judged where it leads
            real = os.path.realpath(module)
            if not (_root_only(os.path.dirname(real)) and _root_file(real)):
                raise CommandExecutionError(
                    f"epilog:pam_adopt_module ({module!r}) is not a file of root's that only root can write: a "
                    "required PAM module that is missing denies every login, root's too (install pam_slurm_adopt: "
                    "libpam-slurm-adopt on Debian, slurm-pam_slurm on RHEL)")
            new = pam.place(text, pam.block(operators, adopt_module=module))
        else:
            new = pam.place(text, pam.block(operators, allow_file=allow))
    except pam.PlaceError as exc:
        raise CommandExecutionError(f"{service}: {exc}") from None
    lines, problems = pam.account_stack("sshd", text=new)
    listed = _pam_operators(settings["localusers"])
    judged, _ = pam.judge(lines, access, allow, settings["localusers"], lists={operators: listed})
    if access == "adopt":
        own = pam.LISTFILE, operators
        judged += [f"{line!r}, before pam_slurm_adopt, admits whom it accepts without adopting them into a job (on "
                   "a stack with pam_localuser, every local account): remove it, or leave epilog:pam_manage off"
                   for line in pam.bypasses(lines) if (line.module, line.arg("file")) != own]
    else:
        shut = pam.refused(lines, listed, lists={operators: listed})
        judged += [f"{line!r} would refuse {name}, a listed operator (or root), before the operators' list admits "
                   "them: take that line out, or leave epilog:pam_manage off" for name, line in sorted(shut.items())]
    if problems or judged:
        raise CommandExecutionError(f"{service} with the formula's lines would have problems, so it is left as it "
                                    "is: " + "; ".join(problems + judged))
    return new


def _pam_operators(localusers):
    """The names the operators' list holds (pam.sls lays down the same):
    root first (pam_slurm_adopt passes root over only while ignore_root is
    on), then LOCALUSERS."""
    return ["root"] + [name for name in localusers if name != "root"]


def _check_operators_file(path, rules):
    """PATH may become the operators' list: not a PAM configuration, and,
    when it exists, a regular file of account names alone (a list this
    formula laid down), so that no other file (/etc/shadow) is overwritten."""
    if os.path.dirname(path).rstrip("/") in (_node.pam.PAM_DIR, "/etc/pam.d"):
        raise CommandExecutionError(f"epilog:pam_operators_file ({path!r}) is in {_node.pam.PAM_DIR}: a list of "
                                    "names is no PAM configuration")
    if not _root_only(os.path.dirname(path)):
        raise CommandExecutionError(
            f"epilog:pam_operators_file ({path!r}): its directory is not one only root can write, and "
            "pam_listfile would read whatever another account put there")
    try:
        data = _node.pam._read(path)  # pylint: disable=protected-access
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandExecutionError(f"epilog:pam_operators_file ({path!r}) exists and is not a list this formula "
                                    f"laid down ({exc}): it is left alone") from None
    chars = re.compile("[" + rules["account_chars"] + "]+")
    if os.path.islink(path) or not all(chars.fullmatch(line) for line in data.split("\n") if line):
        raise CommandExecutionError(f"epilog:pam_operators_file ({path!r}) exists and is not a list of account "
                                    "names (a file of another use?): it is left alone; name another path")


def pam_clean():
    """
    What epilog.clean takes out of the PAM configuration, judged without
    changing anything: ``sshd``, the text of /etc/pam.d/sshd without the
    formula's account lines (None when it holds none; a block edited by
    hand is an error, and nothing is guessed at); ``operators_files``, the
    operators' lists epilog.pam laid down, each with the ``backup`` path in
    the minion's cache it is moved to (file.list_backups finds it there);
    and ``kept``, why a list found there stays. A list is the formula's when
    it holds exactly what epilog.pam lays down now (root, then
    ``localusers``), or is named by the formula's own lines; it stays when
    it is not a regular file of root's, or any PAM configuration outside
    the formula's lines names it.

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-01' epilog.pam_clean
    """
    settings, rules, _ = _config()
    pam = _node.pam
    service = os.path.join(pam.PAM_DIR, "sshd")
    try:
        text = pam._read(service)  # pylint: disable=protected-access
    except (OSError, UnicodeDecodeError):
        text = None
    marked = text is not None and not os.path.islink(service) and (pam.BEGIN in text or pam.END in text)
    sshd = pam_file(manage=False) if marked else None
    named = []
    if marked:
        block = text.split(pam.BEGIN, 1)[-1].split(pam.END, 1)[0]
        named = [line.arg("file") for line in pam.account_stack("sshd", text=block)[0] if line.module == pam.LISTFILE
                 and line.arg("file") and line.arg("file") != settings["ssh_allow_file"]]
    wanted = _pam_operators(settings["localusers"])
    chars = re.compile("[" + rules["account_chars"] + "]+")
    removed, kept = [], []
    for path in dict.fromkeys([settings["pam_operators_file"], *named]):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_uid != 0:
            kept.append(f"{path} is not a regular file of root's: not the formula's list, left alone")
            continue
        try:
            names = pam._read(path).splitlines()  # pylint: disable=protected-access
        except (OSError, UnicodeDecodeError) as exc:
            kept.append(f"{path} cannot be read ({exc}): left alone")
            continue
        ours = names == wanted or (path in named and names[:1] == ["root"]
                                   and all(chars.fullmatch(name) for name in names))
        if not ours:
            kept.append(f"{path} does not hold what epilog.pam lays down ({', '.join(wanted)}): the site's, left "
                        "alone")
            continue
        users = _pam_files_naming(path, sshd)
        if users:
            kept.append(f"{path} is named by {', '.join(users)} outside the formula's lines: left alone")
            continue
        # as file.managed's backup: minion names its copies (file.list_backups reads these names)
        now = time.time()
        stamp = time.strftime("%a_%b_%d_%H:%M:%S_", time.localtime(now)) + f"{int(now * 1000000) % 1000000:06d}_" \
            + time.strftime("%Y", time.localtime(now))
        backup = os.path.join(__opts__["cachedir"], "file_backup",  # noqa: F821 - a Salt dunder
                              os.path.dirname(path).lstrip("/"), f"{os.path.basename(path)}_{stamp}")
        removed.append({"path": path, "backup": backup})
    return {"sshd": sshd, "operators_files": removed, "kept": kept}


def _pam_files_naming(path, sshd):
    """The PAM configuration files that name PATH, /etc/pam.d/sshd as SSHD
    (without the formula's lines) when it is given."""
    pam = _node.pam
    out = []
    try:
        names = sorted(os.listdir(pam.PAM_DIR))
    except OSError:
        return out
    for name in names:
        full = os.path.join(pam.PAM_DIR, name)
        try:
            text = sshd if name == "sshd" and sshd is not None else pam._read(full)  # pylint: disable=W0212
        except (OSError, UnicodeDecodeError):
            continue
        if path in text:
            out.append(full)
    return out


def _ssh_sessions(settings, user, verdict):
    """What becomes of USER's ssh sessions at the end of their job here:
    pam_slurm_adopt (in sshd's PAM stack) adopts them into the job, and
    Slurm then ends them with it, whatever the chain decides."""
    pam = _node.pam
    if not os.path.exists(os.path.join(pam.PAM_DIR, "sshd")):
        return "no sshd PAM service here: no ssh session is adopted"
    lines, problems = pam.account_stack("sshd")
    adopted, why = pam.adoption(lines, user)
    if problems:
        return f"cannot tell: {'; '.join(problems)}"
    if adopted is None:
        return f"cannot tell whether pam_slurm_adopt adopts them: {why}"
    if not adopted:
        return f"not adopted ({why}): the chain's decision alone reaches them"
    spared = verdict is not None and verdict.answer == "spare"
    return (f"{why}: Slurm ends them with the job" + (", although the chain spares this user" if spared else "")
            + ("" if settings.get("ssh_access") == "adopt" else " (epilog:ssh_access is not adopt)"))


def _readlink(path):
    try:
        return os.readlink(path)
    except OSError:
        return None


def _release_tool(chain, *args, tool=None):
    """Run CHAIN's release tool (what the state laid down; or TOOL) with
    ARGS; its JSON report, or None when the node has no releases."""
    tool = tool or chain.tool
    if not os.path.isfile(tool):
        return None
    try:
        proc = subprocess.run([PYTHON, "-I", "-B", tool, "--root", chain.confdir, *args],
                              capture_output=True, text=True, check=False)
    except OSError as exc:
        raise CommandExecutionError(f"{PYTHON} {tool} cannot run: {exc.strerror}") from exc
    try:
        return json.loads(proc.stdout)
    except ValueError as exc:
        raise CommandExecutionError(f"{tool} {' '.join(args)} failed (rc={proc.returncode}): "
                                    f"{(proc.stderr or proc.stdout).strip()[-500:]}") from exc


def _release_tool_knowing(chain, *args):
    """_release_tool, and when the node's release tool predates ARGS (the
    first rollout of the version that brought checkpoints: the apply it
    guards updates the tool), the formula's, fetched from the master into
    root's cache, on the same releases."""
    try:
        return _release_tool(chain, *args)
    except CommandExecutionError as exc:
        if "invalid choice" not in str(exc) and "unrecognized arguments" not in str(exc):
            raise
        tool = __salt__["cp.cache_file"](chain.tool_source,  # noqa: F821 - a Salt dunder
                                         saltenv=__opts__.get("saltenv") or "base")  # noqa: F821
        if not tool:
            raise
        return _release_tool(chain, *args, tool=tool)


def rollback(test=None, checkpoint=None):
    """
    Switch this node's epilog chain back to exactly the release that was
    current before the current one, with one rename: a job end that has
    started keeps the release it started with, the next one runs the
    previous release, complete. The release must still match the sha256
    manifest recorded when it was last made current.

    Only releases of the chain count (epilog-releases/ under
    slurm_config_dir; ``epilog.clean`` removes them all). With no previous
    release it says so and changes nothing. A second rollback switches
    forward again. The next ``state.apply epilog`` makes the pillar's
    release current again: fix the pillar or the formula first.

    Use it when a deploy must be undone at once (the SOP's triggers: a health
    check fails, a checksum is not the expected one, slurmd logs ``epilog
    failed`` or a node drains, a live display is wrongly removed).

    Returns ``result``, ``release`` (current before), ``to``, ``switched``,
    ``switch_seconds`` (the rename itself) and a ``comment``.

    test
        Name the release it would switch to, and change nothing. Defaults to
        the minion's ``test`` option.

    checkpoint
        Switch back to exactly the release that was current when the
        checkpoint of this name was taken (``epilog.checkpoint``; the staged
        rollout takes one per node), and change nothing when it is current.

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-*' epilog.rollback test=True
        salt -b 1 'slurm-work-*' epilog.rollback
        salt 'slurm-work-*' epilog.rollback checkpoint=rollout-20261201T1000-1a2b3c
    """
    if test is None:
        test = __opts__.get("test", False)  # noqa: F821 - a Salt dunder
    _, chain = _recovery_settings()
    args = ["--test"] if test else []
    if checkpoint is not None:
        if not isinstance(checkpoint, str):
            raise CommandExecutionError(f"checkpoint name {checkpoint!r} is not a string; start it with a letter")
        args.append(f"--to-checkpoint={checkpoint}")
    report = _release_tool_knowing(chain, "rollback", *args)
    if report is None:
        return {"result": False, "test": bool(test), "switched": False, "release": None, "to": None,
                "comment": f"no releases under {chain.releases}: nothing to roll back"}
    return report


def checkpoint(name, test=None):
    """
    Record, under NAME, the release that is current on this node, so that
    ``epilog.rollback checkpoint=NAME`` can return to exactly it, however
    many switches happen in between. The first record of a name is kept:
    taking it again changes nothing. The staged rollout
    (``salt-run state.orchestrate epilog.rollout``) takes one on each node
    before it applies there.

    Returns ``result``, ``checkpoint``, ``release`` (what the name records;
    None when no release was current), ``recorded`` and a ``comment``.

    name
        A letter, then up to 63 letters, digits and ``. _ -``.

    test
        Say what it would record, and change nothing.

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-*' epilog.checkpoint before-upgrade
    """
    if test is None:
        test = __opts__.get("test", False)  # noqa: F821 - a Salt dunder
    if not isinstance(name, str):
        # the CLI reads 0123 as 123, 12:30 as 750, null as None: quote it
        raise CommandExecutionError(f"checkpoint name {name!r} is not a string; start it with a letter")
    _, chain = _recovery_settings()
    args = ["checkpoint", *(["--test"] if test else []), "--", name]
    report = _release_tool_knowing(chain, *args)
    if report is None:
        return {"result": True, "test": bool(test), "checkpoint": str(name), "release": None, "recorded": False,
                "comment": f"no releases under {chain.releases} yet: nothing to "
                           "record (a rollback to this checkpoint has nothing to go back to)"}
    return report


# What each of the formula's lastuserjob parts does when the runner starts it.
_ACTS = {
    "39-lastuserjob-ssh": "removes the line {user!r} from {allow}",
    "40-lastuserjob-processes": "kills every process of uid {uid}",
    "42-lastuserjob-cleanup": "removes the files of uid {uid} under /tmp and /dev/shm",
    "45-stale-x-display": "sweeps the residue no live process holds (at every job end, for every user)",
}
# The interpreter of every entry point, as each release's scripts name it.
PYTHON = "/usr/bin/python3"


def _release_program(chain, current):
    """The node program of release CURRENT, loaded from the release itself
    (what its job ends run), under a name of its own."""
    directory = os.path.join(chain.releases, current, PACKAGE)
    if not os.path.isdir(directory):
        raise CommandExecutionError(f"the current release {current} predates the node program (epilog_node/): "
                                    "apply the state epilog to explain with it")
    trust = _trust()
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.endswith(".py") and not trust.root_file(path):
            raise CommandExecutionError(f"{path} is not a file only root can write in a directory only root can "
                                        "write: not loaded (epilog.verify says more)")
    try:
        return _load_package(directory, f"_epilog_node_{current}")
    except Exception as exc:
        raise CommandExecutionError(f"cannot load {directory}: {type(exc).__name__}: {exc}") from exc


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
    return __grains__.get("host") or socket.gethostname().split(".")[0]  # noqa: F821 - a Salt dunder


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


def _current_release(chain):
    """The current release's directory and id, when only root can write it."""
    releases = chain.releases
    current = _readlink(chain.current)
    if not current or not re.fullmatch(r"[0-9a-f]{12}", current):
        raise CommandExecutionError(f"no current release under {releases}: state.apply epilog first")
    release_dir = os.path.join(releases, current)
    if not _root_only(release_dir):
        raise CommandExecutionError(f"{release_dir} is not a directory only root can write: not run "
                                    "(epilog.verify says more)")
    return release_dir, current


def strays(kill=False, test=None, **kwargs):
    """
    List the processes on this node of accounts that have no job here: what
    a skipped, failed or timed-out job end left, or a login that got in
    another way. Root, system accounts and the operators in the current
    release's localusers.backup are left out. Whether an account has a job
    here is the chain's own decision, from the node's own evidence (the job
    marks under the user's lock, the spool's step sockets, root's
    slurmstepds; the controller only where a job end would ask it); an
    account whose lock a job end or prolog holds, whose name does not
    resolve, or that cannot be told, is ``unknown`` and never killed.

    Returns ``users``: each account told, with ``answer`` (``stray``,
    ``job``: a job of theirs runs here, ``unknown``), ``why``, its number of
    ``processes`` and, for a stray, the first ones (``pid``, ``command``,
    ``age`` in seconds, ``job_cgroup``) and, with ``kill``, what the kill
    did; and ``counts``. Unless ``test``, the look is a record of the record
    file (``epilog.report`` counts it).

    Held back as a job end is: under ``epilog:mode: observe`` the kill
    decides and kills nothing (each stray's ``kill`` says ``outcome:
    would``, and ``would_signal``); while the brake holds
    (``epilog:stop_file``) each stray's kill is ``stopped by`` the file; a
    part turned off (``epilog:parts``: 39, 40, and 42 for the IPC objects)
    does not run. ``mode``, ``stopped`` and ``off`` say which.

    kill
        Kill each stray account's processes with the chain's own kill (part
        40, under the user's lock, as at their last job end).

    test
        Say what would be killed, and kill, lock and write nothing.
        Defaults to the minion's ``test`` option.

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-*' epilog.strays --out=json
        salt 'slurm-work-17' epilog.strays kill=True test=True
        salt 'slurm-work-17' epilog.strays kill=True
    """
    source = _source(kwargs)
    if test is None:
        test = __opts__.get("test", False)  # noqa: F821 - a Salt dunder
    for name, value in (("kill", kill), ("test", test)):
        if not isinstance(value, bool):
            raise CommandExecutionError(f"{name} must be True or False, got {value!r}")
    settings, chain = _settings()
    return _strays_program(settings, chain, {"kill": kill, "test": test, "source": source})


def _strays_program(settings, chain, args):
    """The report of the current release's strays program (ARGS: kill,
    test, source, ipc_only), run as its job ends run it."""
    release_dir, current = _current_release(chain)
    if not os.path.isfile(os.path.join(release_dir, PACKAGE, "strays.py")):
        raise CommandExecutionError(f"release {current} has no epilog.strays: state.apply epilog first")
    view, slurmd_pid = _slurmd_view(settings)
    args = dict(args, slurmd_pid=slurmd_pid, env=view)
    # The release's own node program, in the chain's interpreter, in a
    # process of its own: the kill changes its uids, never the minion's.
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from epilog_node import strays; "
            "sys.exit(strays.main(sys.argv[1:]))")
    try:
        proc = subprocess.run([PYTHON, "-ISB", "-c", code, release_dir, json.dumps(args)], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=settings["chain_timeout"] + 30, check=False,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CommandExecutionError(f"release {current} could not look for strays: {exc}") from exc
    try:
        report = json.loads(proc.stdout.decode("utf-8", "replace")) if proc.returncode == 0 else None
    except ValueError:
        report = None
    if not isinstance(report, dict):
        tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        raise CommandExecutionError(f"release {current} could not look for strays (exit {proc.returncode}): "
                                    + " / ".join(tail))
    return report


def explain(user, job=None):
    """
    Tell what the epilog would do for USER on this node if a job of USER
    ended now, and why, by asking the chain itself: the current release's
    own node program decides, in a dry run, everything a job end decides
    (the user's name and uid, whether USER has another job on this node and
    on what evidence, the localusers guard on the release's own list, each
    part's go or no-go) with the same code, and says what it decided instead
    of acting. Nothing is run, written, locked or logged. Answers "why was
    my session spared or killed". It gives the release's ``mode`` (under
    observe, each acting part ``would act``), the ``brake``, and a part the
    brake stops as ``stopped by`` its file.

    job
        The job whose end to explain: that job is not "another job" of
        USER. Without it, any job of USER on this node is one.

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-01' epilog.explain user=je.kim
        salt 'slurm-work-01' epilog.explain user=je.kim job=4711
    """
    import pwd  # pylint: disable=import-outside-toplevel
    if not isinstance(user, str) or not user:
        # Salt reads user=no as False and user=123 as a number: a name is a string.
        raise CommandExecutionError(f"user must be an account name, and Salt read this one as {user!r}: quote a "
                                    "name such as no, on or 123 twice, as in user='\"no\"'")
    if "\0" in user:
        raise CommandExecutionError(f"user must be an account name, got {user!r}: a NUL byte is in none")
    settings, chain = _settings()
    if job is not None and not re.fullmatch(r"[1-9][0-9]{0,9}", str(job)):
        raise CommandExecutionError(f"job must be a numeric Slurm job id, got {job!r}")
    release_dir, current = _current_release(chain)
    program = _release_program(chain, current)
    try:
        uid = pwd.getpwnam(user).pw_uid
    except (KeyError, ValueError):
        uid = None
    # What slurmd would give the job end: its own node name and slurm.conf
    # (a configless node's cache when it was started with neither).
    view, slurmd_pid = _slurmd_view(settings)
    env = {"PATH": program.system.PATH, "SLURM_JOB_USER": user, "SLURM_JOB_UID": "" if uid is None else str(uid),
           "SLURM_JOB_ID": "" if job is None else str(job), **view}
    try:
        decided = program.runner.explain(release_dir, env, slurmd_pid=slurmd_pid)
    except Exception as exc:
        raise CommandExecutionError(f"release {current} could not explain: {type(exc).__name__}: {exc}") from exc
    other, verdict = decided["other"], decided["guard"]
    acts = {name: text.format(user=user, uid=uid, allow=settings["ssh_allow_file"]) for name, text in _ACTS.items()}
    # the release's mode (a release made before epilog:mode acts)
    mode = decided.get("mode", "enforce")
    parts = {}
    for name, (kind, detail) in decided["parts"].items():
        if kind == "run" and name in acts and mode == "observe":
            parts[name] = f"would act (observe mode, epilog:mode: decided and recorded, not done): {acts[name]}"
        elif kind == "run":
            parts[name] = f"acts: {acts[name]}" if name in acts else "runs (a site part: what it does is its own)"
        elif kind == "guard":
            parts[name] = f"does nothing: {detail}"
        elif kind == "stopped":
            parts[name] = f"{detail} (the brake: rm the file to release it); it would otherwise run"
        else:
            parts[name] = f"skipped: {detail}"
    brake = program.parts.brake(decided.get("stop_file"), _trust()) if hasattr(program.parts, "brake") else None
    report = {
        "user": user, "uid": uid, "job": job, "release": current, "mode": mode,
        "brake": "off" if brake is None else f"on: {brake.why}" if brake.state == "on" else f"ignored: {brake.why}",
        "localusers": {"answer": verdict.listed if verdict else None,
                       "file": os.path.join(release_dir, chain.localusers), "why": verdict.why if verdict else ""},
        "system_account": bool(verdict and verdict.system),
        "other_jobs": {"answer": other.answer, "why": other.why},
        "parts": parts,
        "decisions": [f"{level}: {text}" for level, text in decided["lines"]],
        # the slurm.conf the explained job end reads: the running slurmd's
        "slurm_conf": {"file": view.get("SLURM_CONF") and _shown(view["SLURM_CONF"]), "slurmd": slurmd_pid or None},
    }
    report["ssh_sessions"] = _ssh_sessions(settings, user, verdict)
    if uid is not None and settings.get("ipc_cleanup", True):
        # what part 42 would do with their System V IPC objects, if it acts
        objects = {"remove": {}, "bytes": 0, "keep": {}}
        localusers = os.path.join(release_dir, chain.localusers)
        own = getattr(program, "ipc", None)
        # a release before the creator rule judges with the owners it spares
        spared = (program.parts.spared_uids(localusers),) if hasattr(program.parts, "spared_uids") else ()
        judged = own.judge_all(uid, *spared, deadline=time.monotonic() + 10)[0] if own else ()
        for item in judged:
            if item.action == "remove":
                objects["remove"][item.kind] = objects["remove"].get(item.kind, 0) + 1
                objects["bytes"] += item.bytes
            else:
                objects["keep"][item.reason] = objects["keep"].get(item.reason, 0) + 1
        report["ipc"] = objects if own else f"release {current} removes no System V IPC objects"
    if uid is None:
        report["account"] = f"no account {user!r} on this node: explained as a job end whose user does not resolve"
    records, _ = _node.reader.read(settings["record_file"])
    last = [rec for rec in records if rec.get("stage") == "epilog" and rec.get("user") == user]
    report["last_job_end"] = _node.reader.what_was_done(last[-1]) if last else \
        f"no job end of {user!r} recorded on this node (in {settings['record_file']} and its .1)"
    return report


def report(since=None, user=None, job=None):
    """
    Summarise what the epilog chain decided and did on this node, from the
    decision records the runner writes at every job end (``record_file``,
    and the ``.1`` before it):

    - ``job_ends`` (epilog) and ``prologs``; ``acted`` (job ends that ran the
      lastuserjob parts) and the ``users_acted_on``; ``spared`` and
      ``unknown`` job ends, each by reason; ``processes_signalled`` by part 40,
      and of them ``strays_signalled`` (outside any job: the chain's) and
      ``job_cgroup_processes_signalled`` (still in a Slurm job's cgroup under
      proctrack/cgroup: Slurm's to kill);
    - ``sweeps`` (part 45 runs) and the ``residue`` ``removed`` and ``kept``
      by kind (part 42's files as ``user_files``); ``warnings``;
    - the ``slowest`` chain (job, user, milliseconds, when);
    - ``would``: what observe mode (or, between jobs, the brake or a part
      turned off) would have done and did not, apart from what was done;
      ``stopped``: the job ends and looks the brake stopped; ``parts_off``;
      ``modes``;
    - only where not 0, what was left or done another way
      (``processes_left_saved_only``, ``kill_rounds_one_by_one``,
      ``parts_ran_in_runner``, ``parts_not_run_no_fork``, ``ipc_left``,
      ``ssh_lines_not_granted`` by why), each also a metric.

    since
        Only job ends since then: a duration back from now (30m, 12h, 1d,
        2w), an epoch, or a time (2026-12-01T10:00; the node's local time
        without a zone).

    user
        Only the job ends of this user.

    job
        The full records of this job on this node (its epilog and prolog).

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-*' epilog.report since=1d --out=json
        salt 'slurm-work-17' epilog.report since=12h user=je.kim
        salt 'slurm-work-17' epilog.report job=4711
    """
    settings, _ = _settings()
    try:
        start = None if since is None else _node.reader.epoch(since, time.time())
    except _node.reader.RecordError as exc:
        raise CommandExecutionError(str(exc)) from None
    if user is not None and (not isinstance(user, str) or not user):
        raise CommandExecutionError(f"user must be an account name, and Salt read this one as {user!r}: quote a "
                                    "name such as no, on or 123 twice, as in user='\"no\"'")
    if job is not None and not re.fullmatch(r"[1-9][0-9]{0,9}", str(job)):
        raise CommandExecutionError(f"job must be a numeric Slurm job id, got {job!r}")
    records, problems = _node.reader.read(settings["record_file"])
    chosen = _node.reader.choose(records, start, user, job)
    if job is not None:
        return {"job": int(job), "records": chosen, "problems": problems,
                "what_was_done": [_node.reader.what_was_done(rec) for rec in chosen if rec.get("stage") == "epilog"]}
    return {**_node.reader.summary(chosen, start), "problems": problems}
