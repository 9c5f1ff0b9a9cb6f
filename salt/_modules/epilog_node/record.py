"""The decision record: one JSON line per job end (and per prolog, and per
look between jobs), what the chain decided and did and why, written by the
runner in one write(2). The metrics (metrics.py) count it; the reader
(reader.py: epilog.report and epilog.explain, on the Salt side only) reads
it back. A job end imports this and the metrics, never the reader.

The record (schema v 1):
  v, stage (epilog or prolog; sweep or strays for a look between jobs,
  with its source, call or schedule), node, job, user, uid, release, start (epoch
  with milliseconds), ms (the chain's time), other ({answer, why}: the
  last-job evidence), guard ({answer, why, listed, system}: the localusers
  guard; answer "not asked" when no lastuserjob part asked it), warnings
  (the lines logged as warnings, the parts' included), parts ([{part, ran,
  rc, ms, facts} or {part, ran: false, why}]), mode (enforce or observe:
  epilog:mode; a record without one is enforce's); when they apply,
  stopped (the stop file whose brake stopped an acting part or act),
  stop_ignored (why a stop file there was ignored), off (between jobs:
  the parts turned off that held its acts back); a look between jobs's
  source, and the strays' kill and strays (their counts). KINDS declares
  which fields each kind of record has.
A part's fact with would: true says what it would have done and did not
(observe mode; between jobs, the brake or its part turned off): the report
and the metrics count it apart, as would (the counters epilog_would_*).
Strings are cut at 256 characters and shown as printable ASCII; a record is
kept below 4000 bytes (one write(2), whole even with job ends writing at
once): a longer one loses its parts' facts (facts_dropped), then its parts
(parts_dropped).

Both files live only in a directory only root can write, are never opened
through a symlink or into a FIFO, and never fail a job end.
"""

import os

from . import log as logs
from . import system

SCHEMA = 1
# a record stays below this many bytes, its newline included
RECORD_BYTES = 3980
# epilog:mode's values
MODES = ("enforce", "observe")
# The fields of each kind of record (its stage) beyond those every record
# has (node, release, start, ms, warnings, parts, mode, stopped,
# stop_ignored): build() takes no field its kind does not declare. A job
# end's job, user, uid, other and guard are null in a look between jobs.
KINDS = {
    "epilog": ("job", "user", "uid", "other", "guard"),
    "prolog": ("job", "user", "uid"),
    "sweep": ("source", "off"),
    "strays": ("source", "off", "kill", "strays"),
}


def text(value, limit=256):
    """VALUE's first LIMIT bytes as printable ASCII: any other byte is ? (a
    name as a node's C locale sees it)."""
    data = str(value).encode("utf-8", "surrogateescape")[:limit]
    return "".join(chr(b) if 0x20 <= b <= 0x7E else "?" for b in data)



# -- writing ---------------------------------------------------------------------
def part_ran(name, rc, ms, facts):
    return {"part": name, "ran": True, "rc": rc, "ms": max(int(ms), 0), "facts": facts}


def part_skipped(name, why):
    return {"part": name, "ran": False, "why": text(why)}



def build(stage, *, node, release, start, ms, warnings=0, parts=(), mode="enforce", stopped=None,
          stop_ignored=None, job=None, user=None, uid=None, other=None, guard=None, source=None, off=(), kill=None,
          strays=None):
    """One record of STAGE (a dict of the schema), whole, from named fields:
    those of every record and those KINDS declares for STAGE (a field of
    another kind given a value is a ValueError). OTHER: the last-job
    answer (an evidence.Answer; a job end's); GUARD: the guard's verdict (a
    guard.Verdict) or None (not asked); MODE: epilog:mode; STOPPED: the
    stop file whose brake stopped a part or act; STOP_IGNORED: why a stop
    file was ignored; OFF: the parts turned off that held a look between
    jobs back; SOURCE: call or schedule (a look between jobs); KILL and
    STRAYS: a strays look's kill and its counts."""
    given = {"job": job, "user": user, "uid": uid, "other": other, "guard": guard, "source": source, "off": off,
             "kill": kill, "strays": strays}
    stray = sorted(key for key, value in given.items() if value not in (None, (), []) and key not in KINDS[stage])
    if stray:
        raise ValueError("a %s record has no %s" % (stage, ", ".join(stray)))
    record = {"v": SCHEMA, "stage": stage, "node": text(node or ""),
              "job": int(job) if system.digits(job or "") and len(job) < 16 else None,
              "user": None if user is None else text(user),
              "uid": int(uid) if system.digits(uid or "") and len(uid) < 16 else None,
              "release": release, "mode": mode if mode in MODES else "enforce", "start": round(start, 3),
              "ms": max(int(ms), 0), "other": None, "guard": None, "warnings": warnings, "parts": list(parts)}
    if stopped:
        record["stopped"] = text(stopped)
    if stop_ignored:
        record["stop_ignored"] = text(stop_ignored)
    if off:
        record["off"] = [text(name, 64) for name in off]
    if other is not None:
        record["other"] = {"answer": other.answer, "why": text(other.why)}
        record["guard"] = {"answer": "not asked", "why": ""} if guard is None else {
            "answer": "act" if guard.answer == "act" else "spare", "why": text(guard.why), "listed": guard.listed,
            "system": guard.system}
    if source is not None:
        record["source"] = source
    if kill is not None:
        record["kill"] = kill
    if strays is not None:
        record["strays"] = strays
    return record


def line(record):
    """RECORD as one line of JSON below RECORD_BYTES: with its parts' facts,
    or without them, or without its parts."""
    out = system.dumps(record)
    if len(out) < RECORD_BYTES:
        return out
    bare = dict(record, parts=[{key: value for key, value in part.items() if key != "facts"}
                               for part in record["parts"]], facts_dropped=True)
    out = system.dumps(bare)
    if len(out) < RECORD_BYTES:
        return out
    return system.dumps(dict(record, parts=[], parts_dropped=True))


def write(trust, path, max_bytes, record):
    """Append RECORD to PATH, root's alone (0600); past MAX_BYTES the file
    becomes PATH.1 (replacing the one before), and the next record starts a
    new one: the newest are kept. Of job ends that pass the bound together,
    only one renames it. Never fails the job end."""
    fd = logs.open_append(trust, path, 0o600)
    if fd is None:
        return False
    try:
        os.write(fd, (line(record) + "\n").encode("ascii"))
        logs.rotate(fd, path, max_bytes)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)

