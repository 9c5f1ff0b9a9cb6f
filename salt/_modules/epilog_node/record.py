"""The decision record: one JSON line per job end (and per prolog), what the
chain decided and did and why, written by the runner in one write(2), and
read back for epilog.report and epilog.explain; and the metrics, a
node_exporter textfile of counters the runner rewrites after each job end.

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
  the parts turned off that held its acts back).
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
import stat
import time

from . import log as logs
from . import system

SCHEMA = 1
# a record stays below this many bytes, its newline included
RECORD_BYTES = 3980
# since=: a duration back from now
_DURATION = r"([0-9]{1,9})\s*([smhdw])\Z"
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# the residue kinds a report counts: part 45's, and part 42's files
RESIDUE_KINDS = ("x_socket", "x_lock", "clsbd", "scratch", "user_files")
# epilog:mode's values
MODES = ("enforce", "observe")


class RecordError(ValueError):
    """An argument the records cannot be chosen by (the message says why)."""


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


def build(stage, node, job, user, uid, release, start, ms, other, guard, warnings, parts, mode="enforce",
          stopped=None, stop_ignored=None, off=()):
    """One job end's record (a dict of the schema). OTHER: the last-job
    answer (an evidence.Answer) or None (a prolog); GUARD: the guard's
    verdict (a guard.Verdict) or None (not asked); MODE: epilog:mode;
    STOPPED: the stop file whose brake stopped a part or act; STOP_IGNORED:
    why a stop file was ignored; OFF: the parts turned off that held a look
    between jobs back."""
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


# -- the metrics -----------------------------------------------------------------
_HELP = (
    ("epilog_acts_total", "Job ends that ran the lastuserjob parts for the user."),
    ("epilog_spares_total", "Job ends that spared the user (another job of theirs here, listed, or a system "
                            "account)."),
    ("epilog_unknowns_total", "Job ends that could not tell whether the user has another job here, and did "
                              "nothing."),
    ("epilog_warnings_total", "Warnings the chain logged."),
)
RESIDUE_METRIC = 'epilog_residue_removed_total{kind="%s"}'
# Part 40's processes by where they ran: outside any job (the chain's to
# kill), or still in a Slurm job's cgroup (Slurm's, under proctrack/cgroup).
KILLED_KINDS = (("strays", "stray"), ("in_job_cgroup", "job_cgroup"), ("in_other_job_cgroup", "other_job_cgroup"),
                ("unclassified", "unclassified"))
KILLED_METRIC = 'epilog_processes_signalled_total{where="%s"}'
# Part 42's System V IPC objects: removed by kind, their bytes, and kept by
# why (attached, in_use: a live process of another uid used it last,
# other_owner: a record of a release that kept what an operator or a system
# account owns, whoever created it; other).
IPC_KINDS = ("shm", "sem", "msg")
IPC_METRIC = 'epilog_ipc_removed_total{kind="%s"}'
IPC_BYTES_METRIC = "epilog_ipc_bytes_removed_total"
IPC_KEPT = ("attached", "in_use", "other_owner", "other")
IPC_KEPT_METRIC = 'epilog_ipc_kept_total{reason="%s"}'


def ipc_kept_reason(reason):
    text = str(reason)
    return ("attached" if text.startswith("attached") else "in_use" if text.startswith("last used")
            else "other_owner" if text.startswith("owned by") else "other")


def ipc(record, would=False):
    """{removed: {kind: n}, bytes, kept: {why: n}} of a record's part 42
    (WOULD: of what it would have removed)."""
    out = {"removed": dict.fromkeys(IPC_KINDS, 0), "bytes": 0, "kept": dict.fromkeys(IPC_KEPT, 0)}
    for fact in facts_of(record, "ipc", would):
        for kind, n in (fact.get("removed") or {}).items():
            if kind in out["removed"] and isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 31:
                out["removed"][kind] += n
        if isinstance(fact.get("bytes"), int) and not isinstance(fact["bytes"], bool) and 0 <= fact["bytes"] < 1 << 62:
            out["bytes"] += fact["bytes"]
        for reason, n in (fact.get("kept") or {}).items() if isinstance(fact.get("kept"), dict) else ():
            if isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 31:
                out["kept"][ipc_kept_reason(reason)] += n
    return out


# Looks between jobs (epilog.sweep, epilog.strays, by hand or scheduled):
# records of their own stage, with a source.
BETWEEN_JOBS = ("sweep", "strays")
SOURCES = ("call", "schedule")
BETWEEN_METRIC = 'epilog_between_jobs_runs_total{what="%s",source="%s"}'
STRAYS_METRIC = 'epilog_stray_processes_total{action="%s"}'


def outcome(record):
    """acts, stopped (it would have acted: the brake stopped it), spares,
    unknowns or None: what a record's job end decided."""
    other, guard = record.get("other") or {}, record.get("guard") or {}
    if other.get("answer") == "no" and guard.get("answer") == "act":
        return "stopped" if stopped_parts(record) else "acts"
    if other.get("answer") == "yes" or (other.get("answer") == "no" and guard.get("answer") == "spare"):
        return "spares"
    if other.get("answer") == "unknown":
        return "unknowns"
    return None


def would_fact(fact):
    """A part's FACT says what it would have done, and did not."""
    return isinstance(fact, dict) and fact.get("would") is True


def facts_of(record, key, would=False):
    """The facts KEY (dicts) of RECORD's parts that say what was done, or
    (WOULD) what would have been done and was not (None: either)."""
    out = []
    for part in record["parts"]:
        facts = part.get("facts") if isinstance(part, dict) and isinstance(part.get("facts"), dict) else {}
        fact = facts.get(key)
        if isinstance(fact, dict) and would in (None, would_fact(fact)):
            out.append(fact)
    return out


def _count(value):
    """VALUE when it is a count a record may hold, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 62 else 0


def removed(record, would=False):
    """{kind: entries removed} of a record's parts (part 42's as
    user_files); WOULD: those that would have been."""
    out = {}
    for sweep in facts_of(record, "sweep", would):
        for kind, counts in (sweep.get("counts") or {}).items() if isinstance(sweep.get("counts"), dict) else ():
            if isinstance(counts, dict):
                out[kind] = out.get(kind, 0) + _count(counts.get("removed"))
    for cleanup in facts_of(record, "cleanup", would):
        out["user_files"] = out.get("user_files", 0) + _count(cleanup.get("removed"))
    return out


def signalled(record, would=False):
    """{where: processes part 40 signalled} of a record (KILLED_KINDS);
    WOULD: those it would have signalled."""
    out = {}
    for kill in facts_of(record, "kill", would):
        for key, where in KILLED_KINDS:
            if isinstance(kill.get(key), int):
                out[where] = out.get(where, 0) + _count(kill[key])
    return out


def ssh_lines(record, would=False):
    """The ssh allow lines part 39 removed (WOULD: would have removed)."""
    return sum(1 for allow in facts_of(record, "allow", would)
               if allow.get("op") == "remove" and allow.get("change") in ("removed", "would remove"))


# What a record says the chain left, or did another way, in either mode:
# (epilog.report's key, when not 0; the counter; its HELP).
SHORTFALLS = (
    ("processes_left_saved_only", "epilog_processes_left_saved_only_total", "Processes part 40 left alone whose "
     "saved uid alone was the user's (another account's run of a program she made setuid to herself)."),
    ("kill_rounds_one_by_one", "epilog_kill_rounds_one_by_one_total", "Rounds of part 40 that sent no kill(-1) "
     "while such a process lived: the user's process groups signalled whole, her other processes one by one."),
    ("parts_ran_in_runner", "epilog_parts_ran_in_runner_total", "Parts the runner ran itself: it could fork no "
     "process for them (no free pid)."),
    ("parts_not_run_no_fork", "epilog_parts_not_run_no_fork_total", "Parts not run: they need a process of their "
     "own, and the runner could fork none (no free pid)."),
    ("ipc_left", "epilog_ipc_left_total", "System V IPC objects part 42 (or a look between jobs) left for want of "
     "time, judged again later."),
)
SHORTFALL_METRIC = {key: metric for key, metric, _ in SHORTFALLS}
# prolog 50's facts change: not granted, by why (guard.spared_as, _ for a space)
NOT_GRANTED = ("listed", "system_account", "lookup_error", "unknown_user")
NOT_GRANTED_METRIC = 'epilog_ssh_not_granted_total{why="%s"}'


def shortfalls(record):
    """{SHORTFALLS' report key: n, ssh_lines_not_granted: {why: n}} of
    RECORD, none at 0."""
    out, granted = {}, {}
    for kill in facts_of(record, "kill", None):
        out["processes_left_saved_only"] = out.get("processes_left_saved_only", 0) + _count(kill.get("saved_only"))
        out["kill_rounds_one_by_one"] = out.get("kill_rounds_one_by_one", 0) + _count(kill.get("one_by_one"))
    out["ipc_left"] = sum(_count(fact.get("left")) for fact in facts_of(record, "ipc", None))
    parts = [part for part in record["parts"] if isinstance(part, dict)]
    out["parts_ran_in_runner"] = sum(1 for part in parts if part.get("ran") and isinstance(part.get("facts"), dict)
                                     and part["facts"].get("ran_in_runner"))
    out["parts_not_run_no_fork"] = sum(1 for part in parts if not part.get("ran") and (
        part.get("why") == "no free pid" or str(part.get("why")).startswith("cannot fork: ")))
    for allow in facts_of(record, "allow"):
        why = str(allow.get("why")).replace(" ", "_")
        if allow.get("op") == "add" and allow.get("change") == "not granted" and why in NOT_GRANTED:
            granted[why] = granted.get(why, 0) + 1
    out = {key: n for key, n in out.items() if n}
    if granted:
        out["ssh_lines_not_granted"] = granted
    return out


def stopped_parts(record):
    """The lastuserjob parts of RECORD the brake stopped."""
    return [part["part"] for part in record["parts"] if isinstance(part, dict) and not part.get("ran")
            and "-lastuserjob-" in str(part.get("part")) and str(part.get("why", "")).startswith("stopped by ")]


def acts(record, would=False):
    """{counter: n}: what RECORD's job end or look between jobs did to
    users' things (WOULD False), or what it would have done and did not
    (observe mode; between jobs, the brake or a part turned off). The
    counters epilog_<x> and epilog_would_<x> are one rule: would_metric()."""
    out = {}

    def add(key, n):
        if n:
            out[key] = out.get(key, 0) + n
    if outcome(record) == "acts" and (record.get("mode") == "observe") == would:
        add("epilog_acts_total", 1)
    for kind, n in removed(record, would).items():
        if kind in RESIDUE_KINDS:
            add(RESIDUE_METRIC % kind, n)
    for where, n in signalled(record, would).items():
        add(KILLED_METRIC % where, n)
    objects = ipc(record, would)
    for kind, n in objects["removed"].items():
        add(IPC_METRIC % kind, n)
    add(IPC_BYTES_METRIC, objects["bytes"])
    add(STRAYS_METRIC % "killed", stray_counts(record).get("would_kill" if would else "killed", 0))
    return out


# The counters acts() counts, each also as epilog_would_<x>.
ACT_COUNTERS = ("epilog_acts_total", *(RESIDUE_METRIC % kind for kind in RESIDUE_KINDS),
                *(KILLED_METRIC % where for _, where in KILLED_KINDS), *(IPC_METRIC % kind for kind in IPC_KINDS),
                IPC_BYTES_METRIC, STRAYS_METRIC % "killed")


def would_metric(key):
    """The would counter of the act counter KEY: epilog_would_<x> of epilog_<x>."""
    return "epilog_would_" + key[len("epilog_"):]


def source(record):
    """call or schedule: who ran a look between jobs."""
    return record.get("source") if record.get("source") in SOURCES else "call"


def stray_counts(record):
    """{found, killed, would_kill: processes} of a strays record."""
    strays = record.get("strays") if isinstance(record.get("strays"), dict) else {}
    out = {}
    for key, action in (("stray_processes", "found"), ("killed", "killed"), ("would_kill", "would_kill")):
        value = strays.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31:
            out[action] = value
    return out


# gauges of seconds with milliseconds: the stages' last durations, when the
# last job end was
SECONDS_GAUGES = ("epilog_last_chain_seconds", "epilog_last_job_end_timestamp_seconds")
RELEASE_INFO = 'epilog_release_info{release="%s"}'
MODE_METRIC = 'epilog_mode{mode="%s"}'


def read_metrics(data):
    """{name: value} of a textfile this code wrote: whole counters and
    gauges, and the gauges of seconds with milliseconds; any other line is
    dropped."""
    out = {}
    for raw in data.decode("ascii", "replace").split("\n"):
        name, _, value = raw.partition(" ")
        if not name or name.startswith("#") or len(value) > 15:
            continue
        if name.split("{", 1)[0] in SECONDS_GAUGES:
            whole, dot, frac = value.partition(".")
            if system.digits(whole) and dot and len(frac) == 3 and system.digits(frac):
                out[name] = value
        elif system.digits(value):
            out[name] = int(value)
    return out


def render_metrics(metric):
    out = ["# HELP epilog_job_ends_total Job ends (epilog) and job starts (prolog) the chain ran.",
           "# TYPE epilog_job_ends_total counter"]
    for stage in ("epilog", "prolog"):
        key = 'epilog_job_ends_total{stage="%s"}' % stage
        out.append("%s %d" % (key, metric.get(key, 0)))
    for key, words in _HELP + tuple(shortfall[1:] for shortfall in SHORTFALLS):
        out += ["# HELP %s %s" % (key, words), "# TYPE %s counter" % key, "%s %d" % (key, metric.get(key, 0))]
    out += ["# HELP epilog_ssh_not_granted_total Job starts at which prolog 50 granted no ssh line, as part 39 "
            "would never remove it (the localusers guard does not act for the user), by why.",
            "# TYPE epilog_ssh_not_granted_total counter"]
    out += ["%s %d" % (NOT_GRANTED_METRIC % why, metric.get(NOT_GRANTED_METRIC % why, 0)) for why in NOT_GRANTED]
    out += ["# HELP epilog_residue_removed_total Entries the chain removed, by kind (user_files: part 42).",
            "# TYPE epilog_residue_removed_total counter"]
    for kind in RESIDUE_KINDS:
        out.append("%s %d" % (RESIDUE_METRIC % kind, metric.get(RESIDUE_METRIC % kind, 0)))
    out += ["# HELP epilog_processes_signalled_total Processes part 40 killed, by where they ran (stray: outside "
            "any job; job_cgroup: in the ending job's Slurm cgroup; other_job_cgroup: in another job's; "
            "unclassified: past the first 1000, or in a cgroup layout not read).",
            "# TYPE epilog_processes_signalled_total counter"]
    for _, where in KILLED_KINDS:
        out.append("%s %d" % (KILLED_METRIC % where, metric.get(KILLED_METRIC % where, 0)))
    out += ["# HELP epilog_ipc_removed_total System V IPC objects of users removed by part 42 at their last job "
            "end, or between jobs when asked (epilog.strays kill, epilog.sweep remove_ipc), by kind.",
            "# TYPE epilog_ipc_removed_total counter"]
    out += ["%s %d" % (IPC_METRIC % kind, metric.get(IPC_METRIC % kind, 0)) for kind in IPC_KINDS]
    out += ["# HELP %s Bytes of the shared memory segments and queues removed (part 42, and between "
            "jobs)." % IPC_BYTES_METRIC,
            "# TYPE %s counter" % IPC_BYTES_METRIC, "%s %d" % (IPC_BYTES_METRIC, metric.get(IPC_BYTES_METRIC, 0))]
    out += ["# HELP epilog_ipc_kept_total System V IPC objects of users kept where they could have gone, by why.",
            "# TYPE epilog_ipc_kept_total counter"]
    out += ["%s %d" % (IPC_KEPT_METRIC % reason, metric.get(IPC_KEPT_METRIC % reason, 0)) for reason in IPC_KEPT]
    out += ["# HELP epilog_between_jobs_runs_total Looks between jobs (epilog.sweep, epilog.strays), by what "
            "and who ran them (call: by hand; schedule: the minion's scheduler).",
            "# TYPE epilog_between_jobs_runs_total counter"]
    for what in BETWEEN_JOBS:
        for source in SOURCES:
            out.append("%s %d" % (BETWEEN_METRIC % (what, source), metric.get(BETWEEN_METRIC % (what, source), 0)))
    out += ["# HELP epilog_stray_processes_total Processes of accounts with no job on the node, found and killed "
            "between jobs (epilog.strays).",
            "# TYPE epilog_stray_processes_total counter"]
    for action in ("found", "killed"):
        out.append("%s %d" % (STRAYS_METRIC % action, metric.get(STRAYS_METRIC % action, 0)))
    # what the chain would have done and did not, each act counter's twin
    family = None
    for key in ACT_COUNTERS:
        name = would_metric(key)
        if name.split("{", 1)[0] != family:
            family = name.split("{", 1)[0]
            out += ["# HELP %s What %s counts, not done: observe mode (epilog:mode) decided it, or between jobs "
                    "the brake (epilog:stop_file) or a part turned off (epilog:parts) held it back."
                    % (family, key.split("{", 1)[0]), "# TYPE %s counter" % family]
        out.append("%s %d" % (name, metric.get(name, 0)))
    out += ["# HELP epilog_stopped_total Job ends and looks between jobs at which the brake (epilog:stop_file) "
            "stopped an acting part or act.", "# TYPE epilog_stopped_total counter",
            "epilog_stopped_total %d" % metric.get("epilog_stopped_total", 0)]
    out += ["# HELP epilog_last_chain_seconds How long the last chain of the stage ran.",
            "# TYPE epilog_last_chain_seconds gauge"]
    for stage in ("epilog", "prolog"):
        key = 'epilog_last_chain_seconds{stage="%s"}' % stage
        if key in metric:
            out.append("%s %s" % (key, metric[key]))
    if "epilog_last_job_end_timestamp_seconds" in metric:
        out += ["# HELP epilog_last_job_end_timestamp_seconds When the last job end's chain ended.",
                "# TYPE epilog_last_job_end_timestamp_seconds gauge",
                "epilog_last_job_end_timestamp_seconds %s" % metric["epilog_last_job_end_timestamp_seconds"]]
    releases = sorted(key for key in metric if key.startswith(RELEASE_INFO.split("%", 1)[0]))
    if releases:
        out += ["# HELP epilog_release_info The release the last job end or start ran (epilog-releases/<id>).",
                "# TYPE epilog_release_info gauge"] + ["%s %d" % (key, metric[key]) for key in releases]
    if any(MODE_METRIC % mode in metric for mode in MODES):
        out += ["# HELP epilog_mode The mode (epilog:mode) the last job end or start ran in: 1 for it.",
                "# TYPE epilog_mode gauge"] + ["%s %d" % (MODE_METRIC % mode, metric.get(MODE_METRIC % mode, 0))
                                               for mode in MODES]
    return "\n".join(out) + "\n"


def update_metrics(trust, path, record):
    """Add RECORD's job end to the counters of the textfile PATH and rewrite
    it whole: a new file beside it, renamed over it, so node_exporter never
    reads half a file. Only in a directory only root can write, under a lock
    beside the file (a job end that cannot have it within 2 s leaves the
    counters as they are). The counters live in the file itself: they
    restart from 0 when it is removed, which Prometheus reads as a reset.
    Never fails the job end."""
    directory, name = os.path.dirname(path) or "/", os.path.basename(path)
    if not trust.root_only(directory):
        return False
    lock = os.path.join(directory, ".%s.lock" % name)
    for each in (path, lock):
        try:
            if not stat.S_ISREG(os.lstat(each).st_mode):
                return False
        except FileNotFoundError:
            pass
        except OSError:
            return False
    fd = logs.open_append(trust, lock, 0o600)
    if fd is None:
        return False
    try:
        if not system.wait_lock(fd, 2):
            return False
        try:
            metric = read_metrics(system.read_file(path, 1 << 20))
        except FileNotFoundError:
            metric = {}
        except OSError:
            return False

        def add(key, n):
            metric[key] = int(metric.get(key, 0)) + n

        # what was done, and (its twin, one rule) what would have been
        for would in (False, True):
            for key, n in acts(record, would).items():
                add(would_metric(key) if would else key, n)
            # the IPC objects kept are decisions, whatever was done
            for reason, n in ipc(record, would)["kept"].items():
                add(IPC_KEPT_METRIC % reason, n)
        if record.get("stopped"):
            add("epilog_stopped_total", 1)
        for key, n in shortfalls(record).items():
            for why, m in n.items() if isinstance(n, dict) else ():
                add(NOT_GRANTED_METRIC % why, m)
            if key in SHORTFALL_METRIC:
                add(SHORTFALL_METRIC[key], n)
        add("epilog_warnings_total", record["warnings"])
        if record["stage"] in BETWEEN_JOBS:
            # a look between jobs: no job end, and no chain's duration
            add(BETWEEN_METRIC % (record["stage"], source(record)), 1)
            add(STRAYS_METRIC % "found", stray_counts(record).get("found", 0))
            system.replace_file(path, render_metrics(metric).encode("ascii"))
            return True
        add('epilog_job_ends_total{stage="%s"}' % record["stage"], 1)
        if outcome(record) in ("spares", "unknowns"):
            add("epilog_%s_total" % outcome(record), 1)
        metric['epilog_last_chain_seconds{stage="%s"}' % record["stage"]] = "%d.%03d" % divmod(record["ms"], 1000)
        # what the node runs: the release and the mode of the last chain,
        # when the last job end ended
        for key in [key for key in metric if key.startswith(RELEASE_INFO.split("%", 1)[0])]:
            del metric[key]
        if system.plain(str(record.get("release") or ""), "._-"):
            metric[RELEASE_INFO % record["release"]] = 1
        for mode in MODES:
            metric[MODE_METRIC % mode] = 1 if record.get("mode", "enforce") == mode else 0
        if record["stage"] == "epilog":
            metric["epilog_last_job_end_timestamp_seconds"] = "%d.%03d" % divmod(
                round(record["start"] * 1000) + record["ms"], 1000)
        system.replace_file(path, render_metrics(metric).encode("ascii"))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


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


def summary(chosen, start=None):
    """The counts of epilog.report over the CHOSEN records (since START)."""
    out = {
        "nodes": sorted({str(rec.get("node")) for rec in chosen if rec.get("node")}),
        "since": when(start), "records": len(chosen),
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
                    if kind in out["residue"]["kept"] and isinstance(counts, dict) and _count(counts.get("kept")):
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
