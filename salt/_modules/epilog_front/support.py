"""What support asks of a node: epilog.explain (what the chain would do at
a user's job end now, the current release's own runner in a dry run) and
epilog.report (the decision records the job ends and sweeps wrote)."""

import os
import re
import time

from salt.exceptions import CommandExecutionError

from . import NODE as _node
from .common import _shown, _trust


def explain(salt, user, job=None):
    """epilog.explain's work (its docstring in epilog.py)."""
    import pwd  # pylint: disable=import-outside-toplevel

    # explain's rooms alone: report loads none of them
    from .pampolicy import _ssh_sessions  # pylint: disable=import-outside-toplevel
    from .releases import _current_release  # pylint: disable=import-outside-toplevel
    from .slurmd import _slurmd_view  # pylint: disable=import-outside-toplevel

    if not isinstance(user, str) or not user:
        # Salt reads user=no as False and user=123 as a number: a name is a string.
        raise CommandExecutionError(f"user must be an account name, and Salt read this one as {user!r}: quote a "
                                    "name such as no, on or 123 twice, as in user='\"no\"'")
    if "\0" in user:
        raise CommandExecutionError(f"user must be an account name, got {user!r}: a NUL byte is in none")
    settings, chain = salt.settings()
    if job is not None and not re.fullmatch(r"[1-9][0-9]{0,9}", str(job)):
        raise CommandExecutionError(f"job must be a numeric Slurm job id, got {job!r}")
    release_dir, current = _current_release(chain)
    program = salt.release_program(chain, current)
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
    # what each of the formula's parts does when the runner starts it (registry.DOES)
    acts = {name: text.format(user=user, uid=uid, allow=settings["ssh_allow_file"])
            for name, text in _node.registry.DOES.items()}
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


def report(salt, since=None, user=None, job=None):
    """epilog.report's work (its docstring in epilog.py)."""
    settings, _ = salt.settings()
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
    return {**_node.reader.summary(chosen, start, _node.reader.oldest(records)), "problems": problems}
