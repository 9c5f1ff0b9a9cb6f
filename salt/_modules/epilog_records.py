"""
The decision records the runner writes at every job end (one JSON line each,
runner.sh.jinja's epilog_record), read and summed up for ``epilog.report``
and ``epilog.explain``.

Standard library only, no Salt: the epilog module loads this file from
beside itself (synced with it from ``_modules/``), and the unit tests load it
on its own. Nothing in it is laid down on a node.
"""

import datetime
import fcntl
import json
import os
import re
import stat
import time

SCHEMA = 1
# since=: a duration back from now
_DURATION = re.compile(r"([0-9]{1,9})\s*([smhdw])\Z")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# the residue kinds a report counts: part 45's, and part 42's files
RESIDUE_KINDS = ("x_socket", "x_lock", "clsbd", "scratch", "user_files")


def __virtual__():
    # Synced beside the epilog module, which loads it: not a module of its own.
    return (False, "epilog_records is the decision-record reader the epilog module loads, not an execution module")


class RecordError(ValueError):
    """An argument the records cannot be chosen by (the message says why)."""


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


def _share_lock(handle, seconds):
    """A shared lock on HANDLE within SECONDS: True, or False when it was not
    to be had (held that long, or a file system without locks)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        except OSError:
            return False


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
        locked = _share_lock(handle, 5)
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
                record = json.loads(line.decode("utf-8", "replace"))
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
    found = _DURATION.match(text)
    if found:
        return now - int(found.group(1)) * _UNIT_SECONDS[found.group(2)]
    try:
        return datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text).timestamp()
    except ValueError:
        raise RecordError(f"since must be a duration (90s, 30m, 12h, 1d, 2w), an epoch or a time "
                          f"(2026-12-01T10:00), got {value!r}") from None


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


# -- what they say -------------------------------------------------------------
def decision(record):
    """(decision, reason) of one epilog record: acted, spared or unknown,
    or (None, None) when no lastuserjob part was at stake."""
    other, guard = record.get("other") or {}, record.get("guard") or {}
    if other.get("answer") == "unknown":
        # the reason without its numbers (a lock's uid, squeue's rc), to count alike ones together
        return "unknown", re.sub(r"[0-9]+", "N", str(other.get("why") or "no reason given"))
    if other.get("answer") == "yes":
        return "spared", "another job of the user on this node"
    if guard.get("answer") == "act":
        return "acted", None
    if guard.get("answer") == "spare":
        answer, system = guard_answer(str(guard.get("why") or ""))
        return "spared", "root or a system account" if system else {
            "listed": "listed in localusers", "lookup error": "localusers lookup failed",
            "unknown user": "the user is unknown"}.get(answer, str(guard.get("why") or "the localusers guard"))
    return None, None


def part_facts(record):
    """{part name: its entry (ran, rc, ms and facts, or why)} of one record."""
    return {part.get("part"): part for part in record["parts"] if isinstance(part, dict)}


def what_was_done(record):
    """One job end, in words: what each part did, and why."""
    done = {}
    for name, part in part_facts(record).items():
        if not part.get("ran"):
            done[name] = f"skipped: {part.get('why')}"
        else:
            facts = part.get("facts") or {}
            done[name] = f"ran, exit {part.get('rc')}, {part.get('ms')} ms" + (f": {json.dumps(facts, sort_keys=True)}"
                                                                              if facts else "")
    decided, reason = decision(record)
    return {
        "job": record.get("job"), "at": when(record.get("start")), "release": record.get("release"),
        "decision": decided or "no lastuserjob part at stake", "reason": reason,
        "other_jobs": record.get("other"), "localusers": record.get("guard"),
        "parts": done, "warnings": record.get("warnings"), "ms": record.get("ms"),
    }


def summary(chosen, start=None):
    """The counts of epilog.report over the CHOSEN records (since START)."""
    out = {
        "nodes": sorted({str(rec.get("node")) for rec in chosen if rec.get("node")}),
        "since": when(start), "records": len(chosen),
        "job_ends": 0, "prologs": 0, "acted": 0, "users_acted_on": [], "spared": {}, "unknown": {},
        "processes_signalled": 0, "sweeps": 0,
        "residue": {"removed": dict.fromkeys(RESIDUE_KINDS, 0), "kept": dict.fromkeys(RESIDUE_KINDS, 0)},
        "warnings": 0, "slowest": None,
    }
    acted_on = set()
    for rec in chosen:
        out["warnings"] += rec.get("warnings") if isinstance(rec.get("warnings"), int) else 0
        if rec.get("stage") != "epilog":
            out["prologs"] += 1
            continue
        out["job_ends"] += 1
        decided, reason = decision(rec)
        if decided == "acted":
            out["acted"] += 1
            acted_on.add(str(rec.get("user")))
        elif decided:
            out[decided][reason] = out[decided].get(reason, 0) + 1
        if isinstance(rec.get("ms"), int) and (out["slowest"] is None or rec["ms"] > out["slowest"]["ms"]):
            out["slowest"] = {"job": rec.get("job"), "user": rec.get("user"), "ms": rec["ms"],
                              "at": when(rec.get("start"))}
        for part in part_facts(rec).values():
            facts = part.get("facts") if isinstance(part.get("facts"), dict) else {}
            kill, cleanup, sweep = facts.get("kill"), facts.get("cleanup"), facts.get("sweep")
            if isinstance(kill, dict) and isinstance(kill.get("signalled"), int):
                out["processes_signalled"] += kill["signalled"]
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
    return out
