"""What runs between jobs: epilog.sweep (the residue sweep, and the IPC
objects no job holds), epilog.strays (the processes of accounts with no job
here, the node program's own strays.py in the current release) and the
scheduler's entries for them (schedule_held); the record each leaves."""

import json
import os
import re
import socket
import subprocess
import time

from salt.exceptions import CommandExecutionError

from . import NODE as _node
from . import PACKAGE
from .common import SCHEDULE_ENTRIES, _Chain, _root_only, _trust


def sweep(salt, test=None, job=None, user=None, budget=None, remove_ipc=False, **kwargs):
    """epilog.sweep's work (its docstring in epilog.py)."""
    source = _source(kwargs)
    if test is None:
        test = salt.opts.get("test", False)
    if not isinstance(remove_ipc, bool):
        raise CommandExecutionError(f"remove_ipc must be True or False, got {remove_ipc!r}")
    settings, rules, layout = salt.config()
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
    held, brake, off = _held_back(settings, _node.registry.SWEEP_PART)
    try:
        if brake and brake.state == "ignored" and not test:
            log.warning(f"stop file {brake.why}")
        report = _node.sweep.run_with(settings, test=test, job=job, budget=budget, log=log.line, uid=uid,
                                      locks=locks, would=bool(held) and not test)
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
        facts = {"sweep": _node.sweep_report.fact(report)}
        if ipc_fact:
            facts["ipc"] = ipc_fact
        _between_jobs_record(salt, settings, "sweep", start, source, parts=[_node.record.part_ran(
            "epilog.sweep", 0, report.get("elapsed_ms", 0), facts)],
            stopped=brake.path if brake and brake.state == "on" else ipc_held.get("stopped"),
            stop_ignored=brake.why if brake and brake.state == "ignored" else ipc_held.get("stop_ignored"),
            off=sorted({*off, *ipc_held.get("off", ())}))
    return report


def schedule_held(salt):
    """epilog.schedule_held's work (its docstring in epilog.py)."""
    held = dict(salt.opts.get("schedule") or {})
    saved = salt.functions["schedule.list"](show_all=True, return_yaml=False, offline=True)
    if isinstance(saved, dict):
        held.update(saved)
    entries = sorted(name for name, function in SCHEDULE_ENTRIES.items()
                     if isinstance(held.get(name), dict) and held[name].get("function") == function)
    return {"entries": entries}


def strays(salt, kill=False, test=None, **kwargs):
    """epilog.strays's work (its docstring in epilog.py)."""
    source = _source(kwargs)
    if test is None:
        test = salt.opts.get("test", False)
    for name, value in (("kill", kill), ("test", test)):
        if not isinstance(value, bool):
            raise CommandExecutionError(f"{name} must be True or False, got {value!r}")
    settings, chain = salt.settings()
    return _strays_program(settings, chain, {"kill": kill, "test": test, "source": source})


def _held_back(settings, part):
    """Why a look between jobs does not do PART's act now: ([reasons], the
    brake (parts.brake: None, on or ignored), [the parts turned off]):
    observe mode, the brake, the part turned off (epilog:parts)."""
    brake = _node.parts.brake(settings.get("stop_file"), _trust())
    off = _node.registry.not_run(part, settings)
    held = [why for why in (brake.why if brake and brake.state == "on" else None, off and off.why,
                            "observe mode (epilog:mode): decided and recorded, not done"
                            if _node.registry.observing(settings) else None) if why]
    return held, brake, [part] if off and (settings.get("parts") or {}).get(part) is False else []


def _between_jobs_ipc(settings, chain, test, remove, source):
    """The sweep's look at System V IPC: (what the current release's strays
    program says of the accounts that hold objects and have no job here,
    the objects it removed as a record fact or None). Nothing to look at
    (no object but root's and the system accounts') costs no program; a
    look that cannot be made says why, and the sweep goes on."""
    if not settings.get("ipc_cleanup", True):
        return "epilog:ipc_cleanup is off: IPC objects are neither looked at nor removed", None, {}
    defs = _node.guard.read_defs()  # unreadable: the strays program says why
    if not isinstance(defs, OSError) and all(_node.guard.system_uid(uid, defs) for uid in _node.ipc.holders()):
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


def _between_jobs_record(salt, settings, stage, start, source, parts, stopped=None, stop_ignored=None, off=()):
    """The record of a sweep run between jobs, in the job ends' record file
    (and its counters in the metrics), for epilog.report: its mode, and
    what held its acts back (the brake's STOPPED file, the parts turned
    OFF; STOP_IGNORED: a stop file that was ignored)."""
    record = _node.record
    rec = record.build(stage, node=salt.grains.get("host", socket.gethostname().split(".")[0]),
                       release=None, start=start, ms=(time.time() - start) * 1000, warnings=1 if stop_ignored else 0,
                       parts=parts, mode=settings.get("mode", "enforce"), stopped=stopped,
                       stop_ignored=stop_ignored, off=off, source=source)
    record.write(_trust(), settings["record_file"], settings["record_max_kb"] * 1024, rec)
    if settings.get("metrics_file"):
        _node.metrics.update_metrics(_trust(), settings["metrics_file"], rec)


def _strays_program(settings, chain, args):
    """The report of the current release's strays program (ARGS: kill,
    test, source, ipc_only), run as its job ends run it."""
    # the rooms of the release and of the running slurmds: loaded only by a
    # look that runs the program (a sweep with no IPC objects to look at runs none)
    from .releases import PYTHON, _current_release  # pylint: disable=import-outside-toplevel
    from .slurmd import _slurmd_view  # pylint: disable=import-outside-toplevel

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
