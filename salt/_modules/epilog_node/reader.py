"""The reader of the decision records (record.py): which lines it trusts,
how it chooses them (since, user, job) and what they say, for
epilog.report and epilog.explain. Only the Salt side reads: a job end
never imports this.
"""

import os
import stat
import time

from . import system
from .metrics import (
    BETWEEN_JOBS,
    IPC_KEPT,
    IPC_KINDS,
    RESIDUE_KINDS,
    SOURCES,
    ipc,
    removed,
    shortfalls,
    signalled,
    source,
    ssh_lines,
    stopped_parts,
    stray_counts,
    whole_count,
    would_fact,
)
from .record import MODES, SCHEMA

# since=: a duration back from now
_DURATION = r"([0-9]{1,9})\s*([smhdw])\Z"
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class RecordError(ValueError):
    """An argument the records cannot be chosen by (the message says why)."""



# -- reading -------------------------------------------------------------------
def _open_record(path, problems):
    """An O_RDONLY handle on PATH, a regular file only root can write, opened
    without following a symlink; None (and why, in PROBLEMS) otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        problems.append(f"{path}: not read ({exc.strerror})")
        return None
    handle = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        handle.close()
        problems.append(f"{path} is not a regular file only root can write: not read")
        return None
    return handle


def _lock_current(path, problems):
    """The current record file, opened and share-locked while it is still the
    one at PATH: the runner rotates it (renames it to .1) only under an
    exclusive lock on it, so the two generations read under this lock are
    the two of one moment, none lost or counted twice. A rotation waits for
    the lock at most 1 s and is then left to the next job end. None when
    there is no current file (or it cannot be read)."""
    for _ in range(20):
        handle = _open_record(path, problems)
        if handle is None:
            return None
        locked = system.wait_lock(handle.fileno(), 5, exclusive=False)
        try:
            now = os.lstat(path)
        except OSError:
            now = None
        if now is not None and os.path.samestat(now, os.fstat(handle.fileno())):
            if not locked:
                problems.append(f"{path}: read without its lock (held for 5 s, or not to be had)")
            return handle
        handle.close()  # rotated between the open and the lock: the new one
    problems.append(f"{path}: rotated 20 times while the report read it: not read")
    return None


def read(record_file):
    """The node's decision records, oldest first (RECORD_FILE.1, then
    RECORD_FILE), and what could not be read. Only regular files of root's
    are read, never through a symlink, both under a shared lock on the
    current one (_lock_current), which is held only while their bytes are
    read; a line that is not a record of this schema is counted, not
    trusted, and a last line without its newline is one still being
    written."""
    problems, texts = [], []
    current = _lock_current(record_file, problems)
    try:
        older = _open_record(record_file + ".1", problems)
        if older is not None and current is not None \
                and os.path.samestat(os.fstat(older.fileno()), os.fstat(current.fileno())):
            older.close()  # read without the lock, the current file was renamed: once
            older = None
        for path, handle in ((record_file + ".1", older), (record_file, current)):
            if handle is not None:
                with handle:
                    texts.append((path, handle.read()))
    finally:
        if current is not None:
            current.close()
    records = []
    for path, data in texts:
        bad = 0
        for line in data.split(b"\n")[:-1]:
            try:
                record = system.loads(line.decode("utf-8", "replace"))
            except (ValueError, RecursionError):
                record = None
            if record_ok(record):
                records.append(record)
            else:
                bad += 1
        if bad:
            problems.append(f"{path}: {bad} line(s) that are not decision records, skipped")
    return records, problems


def _finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < 1e13


def record_ok(record):
    """RECORD has the schema the runner writes (v 1), in the types the
    report reads: anything else is a line not to trust, not a crash."""
    if not isinstance(record, dict) or record.get("v") != SCHEMA or not isinstance(record.get("parts"), list):
        return False
    if any(record.get(key) is not None and not isinstance(record[key], dict) for key in ("other", "guard")):
        return False
    if any(record.get(key) is not None and not _finite(record[key]) for key in ("start", "ms", "warnings", "job", "uid")):
        return False
    for part in record["parts"]:
        if not isinstance(part, dict) or not isinstance(part.get("part"), str):
            return False
        if part.get("facts") is not None and not isinstance(part["facts"], dict):
            return False
    return True


# -- choosing ------------------------------------------------------------------
def epoch(value, now):
    """since= as seconds since the epoch: a duration back from NOW (90s, 30m,
    12h, 1d, 2w), an epoch, or a time (2026-12-01, 2026-12-01T10:00, with or
    without a zone; without one, the node's local time). RecordError when
    it is none of these."""
    import datetime  # the reader's alone: a job end never reads  # pylint: disable=import-outside-toplevel
    import re  # pylint: disable=import-outside-toplevel
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    if isinstance(value, datetime.date):  # the CLI reads 2026-12-01 as a date
        return datetime.datetime(value.year, value.month, value.day).timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # the CLI reads 10:00 as 600: a number is an epoch only from 2001 on
        if not 1e9 <= value < 1e11:
            raise RecordError(f"since={value!r} is not an epoch (seconds since 1970, from 2001 on): "
                              "give a duration (12h), or a date and time (2026-12-01T10:00)")
        return float(value)
    text = str(value).strip()
    found = re.match(_DURATION, text)
    if found:
        return now - int(found.group(1)) * _UNIT_SECONDS[found.group(2)]
    try:
        return _iso(text).timestamp()
    except ValueError:
        raise RecordError(f"since must be a duration (90s, 30m, 12h, 1d, 2w), an epoch or a time "
                          f"(2026-12-01T10:00), got {value!r}") from None


def _iso(text):
    """A date, or a date and time (to minutes or seconds), with a zone (Z,
    +HH:MM, +HHMM) or without (the local time), as Python 3.6 parses it."""
    import datetime  # pylint: disable=import-outside-toplevel
    import re  # pylint: disable=import-outside-toplevel
    zone = None
    found = re.match(r"(.*?)(Z|[+-][0-9]{2}:?[0-9]{2})\Z", text) if "T" in text else None
    if found:
        text, zone = found.group(1), found.group(2)
    for form in ("%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"):
        try:
            value = datetime.datetime.strptime(text, form)
            break
        except ValueError:
            continue
    else:
        raise ValueError(text)
    if zone:
        offset = 0 if zone == "Z" else (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 60 + int(zone[-2:]))
        value = value.replace(tzinfo=datetime.timezone(datetime.timedelta(minutes=offset)))
    return value


def choose(records, start=None, user=None, job=None):
    """The RECORDS since START (an epoch), of USER, of JOB (None: any)."""
    return [rec for rec in records
            if (start is None or (isinstance(rec.get("start"), (int, float)) and rec["start"] >= start))
            and (user is None or rec.get("user") == user) and (job is None or str(rec.get("job")) == str(job))]


def when(seconds):
    """An epoch as the node's local time, or None."""
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds)) if _finite(seconds) else None
    except (OverflowError, OSError, ValueError):
        return None


def guard_answer(line):
    """(answer, system account?) of one line the localusers guard printed."""
    if line.startswith("listed in "):
        return "listed", False
    if line.startswith("not listed, but uid"):
        return "not listed", True
    if line.startswith("not listed in "):
        return "not listed", False
    if line.startswith("localusers lookup failed"):
        return "lookup error", False
    if line.endswith("the user is unknown, doing nothing"):
        return "unknown user", False
    return None, False


# -- what they say -------------------------------------------------------------
def decision(record):
    """(decision, reason) of one epilog record: acted, spared or unknown,
    or (None, None) when no lastuserjob part was at stake."""
    other, guard = record.get("other") or {}, record.get("guard") or {}
    if other.get("answer") == "unknown":
        # the reason without its numbers (a lock's uid, squeue's rc), to count alike ones together
        import re  # pylint: disable=import-outside-toplevel
        return "unknown", re.sub(r"[0-9]+", "N", str(other.get("why") or "no reason given"))
    if other.get("answer") == "yes":
        return "spared", "another job of the user on this node"
    if guard.get("answer") == "act":
        if stopped_parts(record):
            return "stopped", "the brake: %s" % record.get("stopped")
        if record.get("mode") == "observe":
            return "would have acted", "observe mode (epilog:mode): nothing was done"
        return "acted", None
    if guard.get("answer") == "spare":
        answer, system_account = guard.get("listed"), guard.get("system")
        if answer is None:  # a record of a release before the structured guard
            answer, system_account = guard_answer(str(guard.get("why") or ""))
        return "spared", "root or a system account" if system_account else {
            "listed": "listed in localusers", "lookup error": "localusers lookup failed",
            "unknown user": "the user is unknown"}.get(answer, str(guard.get("why") or "the localusers guard"))
    return None, None


def part_facts(record):
    """{part name: its entry (ran, rc, ms and facts, or why)} of one record."""
    return {part.get("part"): part for part in record["parts"] if isinstance(part, dict)}


def what_was_done(record):
    """One job end, in words: what each part did, and why."""
    import json  # pylint: disable=import-outside-toplevel
    done = {}
    for name, part in part_facts(record).items():
        if not part.get("ran"):
            done[name] = f"skipped: {part.get('why')}"
        else:
            facts = part.get("facts") or {}
            done[name] = f"ran, exit {part.get('rc')}, {part.get('ms')} ms" + (f": {json.dumps(facts, sort_keys=True)}"
                                                                              if facts else "")
    decided, reason = decision(record)
    out = {
        "job": record.get("job"), "at": when(record.get("start")), "release": record.get("release"),
        "mode": record.get("mode", "enforce"),
        "decision": decided or "no lastuserjob part at stake", "reason": reason,
        "other_jobs": record.get("other"), "localusers": record.get("guard"),
        "parts": done, "warnings": record.get("warnings"), "ms": record.get("ms"),
    }
    for key in ("stopped", "stop_ignored"):
        if record.get(key):
            out[key] = record[key]
    return out


def oldest(records):
    """The start of the oldest of RECORDS (an epoch), or None."""
    starts = [rec["start"] for rec in records if _finite(rec.get("start"))]
    return min(starts) if starts else None


def summary(chosen, start=None, first=None):
    """The counts of epilog.report over the CHOSEN records (since START).
    FIRST, the start of the oldest record the node still holds, says how far
    back the counts can reach: reaches_since is false where the records begin
    after START (rotated away, or none written before), so counts over a
    fleet are not read as a week's when a node holds two days."""
    out = {
        "nodes": sorted({str(rec.get("node")) for rec in chosen if rec.get("node")}),
        "since": when(start), "records": len(chosen),
        "oldest_record": when(first),
        "reaches_since": None if start is None else first is not None and first <= start,
        "job_ends": 0, "prologs": 0, "acted": 0, "users_acted_on": [], "spared": {}, "unknown": {},
        "processes_signalled": 0, "strays_signalled": 0, "job_cgroup_processes_signalled": 0,
        "other_job_cgroup_processes_signalled": 0, "sweeps": 0,
        "residue": {"removed": dict.fromkeys(RESIDUE_KINDS, 0), "kept": dict.fromkeys(RESIDUE_KINDS, 0)},
        "warnings": 0, "slowest": None,
        "ipc": {"removed": dict.fromkeys(IPC_KINDS, 0), "bytes": 0, "kept": dict.fromkeys(IPC_KEPT, 0)},
        "between_jobs": {"sweeps": {source: 0 for source in SOURCES}, "strays_looks": {source: 0 for source in SOURCES},
                         "stray_users_found": 0, "stray_processes_found": 0, "stray_processes_killed": 0,
                         "removed": dict.fromkeys(RESIDUE_KINDS[:-1], 0),
                         "ipc_removed": dict.fromkeys(IPC_KINDS, 0), "ipc_bytes_removed": 0},
        "ssh_lines_removed": 0,
        # observe mode, the brake, the parts turned off
        "modes": dict.fromkeys(MODES, 0),
        "would": {"acted": 0, "users": [], "processes_signalled": 0, "ssh_lines_removed": 0,
                  "residue": dict.fromkeys(RESIDUE_KINDS, 0),
                  "ipc": {"removed": dict.fromkeys(IPC_KINDS, 0), "bytes": 0},
                  "between_jobs": {"removed": dict.fromkeys(RESIDUE_KINDS[:-1], 0), "stray_processes_killed": 0,
                                   "ipc_removed": dict.fromkeys(IPC_KINDS, 0), "ipc_bytes_removed": 0}},
        "stopped": {"job_ends": 0, "acts": 0, "looks": 0, "files": []},
        "stop_file_ignored": 0,
        "parts_off": {},
    }
    acted_on, would_act_on, stop_files = set(), set(), set()
    between, would = out["between_jobs"], out["would"]
    for rec in chosen:
        out["warnings"] += rec.get("warnings") if isinstance(rec.get("warnings"), int) else 0
        # what was left or done another way: a key only where it is not 0
        for key, n in shortfalls(rec).items():
            if isinstance(n, dict):
                into = out.setdefault(key, {})
                for why, m in n.items():
                    into[why] = into.get(why, 0) + m
            else:
                out[key] = out.get(key, 0) + n
        if rec.get("stopped"):
            stop_files.add(str(rec["stopped"]))
            out["stopped"]["looks" if rec.get("stage") in BETWEEN_JOBS else "job_ends"] += 1
        if rec.get("stop_ignored"):
            out["stop_file_ignored"] += 1
        for name in [str(part.get("part")) for part in rec["parts"] if isinstance(part, dict) and not part.get("ran")
                     and str(part.get("why", "")).startswith("off: ")] + [str(name) for name in rec.get("off") or ()]:
            out["parts_off"][name] = out["parts_off"].get(name, 0) + 1
        if rec.get("stage") in BETWEEN_JOBS:
            between["sweeps" if rec["stage"] == "sweep" else "strays_looks"][source(rec)] += 1
            counts = stray_counts(rec)
            between["stray_processes_found"] += counts.get("found", 0)
            between["stray_processes_killed"] += counts.get("killed", 0)
            would["between_jobs"]["stray_processes_killed"] += counts.get("would_kill", 0)
            users = (rec.get("strays") or {}).get("stray_users") if isinstance(rec.get("strays"), dict) else None
            between["stray_users_found"] += users if isinstance(users, int) and not isinstance(users, bool) else 0
            for into, was in ((between, False), (would["between_jobs"], True)):
                for kind, n in removed(rec, was).items():
                    if kind in into["removed"]:
                        into["removed"][kind] += n
                objects = ipc(rec, was)
                for kind, n in objects["removed"].items():
                    into["ipc_removed"][kind] += n
                into["ipc_bytes_removed"] += objects["bytes"]
            continue
        if rec.get("stage") != "epilog":
            out["prologs"] += 1
            continue
        out["job_ends"] += 1
        out["modes"]["observe" if rec.get("mode") == "observe" else "enforce"] += 1
        decided, reason = decision(rec)
        if decided == "acted":
            out["acted"] += 1
            acted_on.add(str(rec.get("user")))
        elif decided == "would have acted":
            would["acted"] += 1
            would_act_on.add(str(rec.get("user")))
        elif decided == "stopped":
            out["stopped"]["acts"] += 1
        elif decided:
            out[decided][reason] = out[decided].get(reason, 0) + 1
        out["ssh_lines_removed"] += ssh_lines(rec)
        would["ssh_lines_removed"] += ssh_lines(rec, True)
        would["processes_signalled"] += sum(signalled(rec, True).values())
        for kind, n in removed(rec, True).items():
            if kind in would["residue"]:
                would["residue"][kind] += n
        objects = ipc(rec, True)
        for kind, n in objects["removed"].items():
            would["ipc"]["removed"][kind] += n
        would["ipc"]["bytes"] += objects["bytes"]
        for what, n in objects["kept"].items():  # kept is a decision, in either mode
            out["ipc"]["kept"][what] += n
        objects = ipc(rec)
        for key in ("removed", "kept"):
            for what, n in objects[key].items():
                out["ipc"][key][what] += n
        out["ipc"]["bytes"] += objects["bytes"]
        if isinstance(rec.get("ms"), int) and (out["slowest"] is None or rec["ms"] > out["slowest"]["ms"]):
            out["slowest"] = {"job": rec.get("job"), "user": rec.get("user"), "ms": rec["ms"],
                              "at": when(rec.get("start"))}
        for part in part_facts(rec).values():
            facts = part.get("facts") if isinstance(part.get("facts"), dict) else {}
            # what would have been done is the would section's; the residue
            # kept is a decision, in either mode
            kill, cleanup, sweep = [None if would_fact(fact) else fact for fact in
                                    (facts.get("kill"), facts.get("cleanup"), facts.get("sweep"))]
            if isinstance(facts.get("sweep"), dict) and would_fact(facts["sweep"]):
                out["sweeps"] += 1
                for kind, counts in (facts["sweep"].get("counts") or {}).items():
                    if kind in out["residue"]["kept"] and isinstance(counts, dict) and whole_count(counts.get("kept")):
                        out["residue"]["kept"][kind] += counts["kept"]
            if isinstance(kill, dict) and isinstance(kill.get("signalled"), int):
                out["processes_signalled"] += kill["signalled"]
                # of them, those outside any job (the chain's to kill) and
                # those still in a Slurm job's cgroup (Slurm's)
                for key, total in (("strays", "strays_signalled"), ("in_job_cgroup", "job_cgroup_processes_signalled"),
                                   ("in_other_job_cgroup", "other_job_cgroup_processes_signalled")):
                    if isinstance(kill.get(key), int):
                        out[total] += kill[key]
            if isinstance(cleanup, dict) and isinstance(cleanup.get("removed"), int):
                out["residue"]["removed"]["user_files"] += cleanup["removed"]
            if isinstance(sweep, dict) and isinstance(sweep.get("counts"), dict):
                out["sweeps"] += 1
                for kind, counts in sweep["counts"].items():
                    for what in ("removed", "kept"):
                        if kind in out["residue"][what] and isinstance(counts, dict) \
                                and isinstance(counts.get(what), int):
                            out["residue"][what][kind] += counts[what]
    out["users_acted_on"] = sorted(acted_on)
    would["users"] = sorted(would_act_on)
    out["stopped"]["files"] = sorted(stop_files)
    return out
