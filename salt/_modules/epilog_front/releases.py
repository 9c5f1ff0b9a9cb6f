"""The releases as the Salt side runs them: the release tool (rollback,
checkpoint, verify's status) and the current release."""

import json
import os
import re
import subprocess

from salt.exceptions import CommandExecutionError

from .common import _readlink, _root_only


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


def _release_tool_knowing(salt, chain, *args):
    """_release_tool, and when the node's release tool predates ARGS (the
    first rollout of the version that brought checkpoints: the apply it
    guards updates the tool), the formula's, fetched from the master into
    root's cache, on the same releases."""
    try:
        return _release_tool(chain, *args)
    except CommandExecutionError as exc:
        if "invalid choice" not in str(exc) and "unrecognized arguments" not in str(exc):
            raise
        tool = salt.functions["cp.cache_file"](chain.tool_source, saltenv=salt.opts.get("saltenv") or "base")
        if not tool:
            raise
        return _release_tool(chain, *args, tool=tool)


# The interpreter of every entry point, as each release's scripts name it.
PYTHON = "/usr/bin/python3"


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


def rollback(salt, test=None, checkpoint=None):
    """epilog.rollback's work (its docstring in epilog.py)."""
    if test is None:
        test = salt.opts.get("test", False)
    _, chain = salt.recovery_settings()
    args = ["--test"] if test else []
    if checkpoint is not None:
        if not isinstance(checkpoint, str):
            raise CommandExecutionError(f"checkpoint name {checkpoint!r} is not a string; start it with a letter")
        args.append(f"--to-checkpoint={checkpoint}")
    report = _release_tool_knowing(salt, chain, "rollback", *args)
    if report is None:
        return {"result": False, "test": bool(test), "switched": False, "release": None, "to": None,
                "comment": f"no releases under {chain.releases}: nothing to roll back"}
    return report


def checkpoint(salt, name, test=None):
    """epilog.checkpoint's work (its docstring in epilog.py)."""
    if test is None:
        test = salt.opts.get("test", False)
    if not isinstance(name, str):
        # the CLI reads 0123 as 123, 12:30 as 750, null as None: quote it
        raise CommandExecutionError(f"checkpoint name {name!r} is not a string; start it with a letter")
    _, chain = salt.recovery_settings()
    args = ["checkpoint", *(["--test"] if test else []), "--", name]
    report = _release_tool_knowing(salt, chain, *args)
    if report is None:
        return {"result": True, "test": bool(test), "checkpoint": str(name), "release": None, "recorded": False,
                "comment": f"no releases under {chain.releases} yet: nothing to "
                           "record (a rollback to this checkpoint has nothing to go back to)"}
    return report
