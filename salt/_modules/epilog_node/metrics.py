"""The metrics: a node_exporter textfile of counters the runner rewrites
after each job end (and each look between jobs), and the rules that count
a decision record (record.py): what it did, what it would have done, what
it left. The reader (reader.py) counts with the same rules.

The file lives only in a directory only root can write, is never opened
through a symlink or into a FIFO, and never fails a job end.
"""

import os
import stat

from . import log as logs
from . import registry, system
from .record import MODES
from .sweep_names import KINDS

# the residue kinds a report counts: part 45's, and part 42's files
RESIDUE_KINDS = (*KINDS, "user_files")
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
# why (attached, in_use: a live process waits on a set, or one of another
# uid used a queue last,
# other_owner: a record of a release that kept what an operator or a system
# account owns, whoever created it; other).
IPC_KINDS = ("shm", "sem", "msg")
IPC_METRIC = 'epilog_ipc_removed_total{kind="%s"}'
IPC_BYTES_METRIC = "epilog_ipc_bytes_removed_total"
IPC_KEPT = ("attached", "in_use", "other_owner", "other")
IPC_KEPT_METRIC = 'epilog_ipc_kept_total{reason="%s"}'


def ipc_kept_reason(reason):
    text = str(reason)
    return ("attached" if text.startswith("attached") else "in_use" if text.startswith(("last used", "waited on"))
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


def whole_count(value):
    """VALUE when it is a count a record may hold, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 62 else 0


def removed(record, would=False):
    """{kind: entries removed} of a record's parts (part 42's as
    user_files); WOULD: those that would have been."""
    out = {}
    for sweep in facts_of(record, "sweep", would):
        for kind, counts in (sweep.get("counts") or {}).items() if isinstance(sweep.get("counts"), dict) else ():
            if isinstance(counts, dict):
                out[kind] = out.get(kind, 0) + whole_count(counts.get("removed"))
    for cleanup in facts_of(record, "cleanup", would):
        out["user_files"] = out.get("user_files", 0) + whole_count(cleanup.get("removed"))
    return out


def signalled(record, would=False):
    """{where: processes part 40 signalled} of a record (KILLED_KINDS);
    WOULD: those it would have signalled."""
    out = {}
    for kill in facts_of(record, "kill", would):
        for key, where in KILLED_KINDS:
            if isinstance(kill.get(key), int):
                out[where] = out.get(where, 0) + whole_count(kill[key])
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
# prolog 50's facts change: not granted, by why (guard.spared_as, _ for a space,
# no apostrophe)
NOT_GRANTED = ("listed", "system_account", "lookup_error", "unknown_user", "not_the_accounts_name", "name_too_long")
NOT_GRANTED_METRIC = 'epilog_ssh_not_granted_total{why="%s"}'


def shortfalls(record):
    """{SHORTFALLS' report key: n, ssh_lines_not_granted: {why: n}} of
    RECORD, none at 0."""
    out, granted = {}, {}
    for kill in facts_of(record, "kill", None):
        out["processes_left_saved_only"] = out.get("processes_left_saved_only", 0) + whole_count(kill.get("saved_only"))
        out["kill_rounds_one_by_one"] = out.get("kill_rounds_one_by_one", 0) + whole_count(kill.get("one_by_one"))
    out["ipc_left"] = sum(whole_count(fact.get("left")) for fact in facts_of(record, "ipc", None))
    parts = [part for part in record["parts"] if isinstance(part, dict)]
    out["parts_ran_in_runner"] = sum(1 for part in parts if part.get("ran") and isinstance(part.get("facts"), dict)
                                     and part["facts"].get("ran_in_runner"))
    out["parts_not_run_no_fork"] = sum(1 for part in parts if not part.get("ran") and (
        part.get("why") == "no free pid" or str(part.get("why")).startswith("cannot fork: ")))
    for allow in facts_of(record, "allow"):
        why = str(allow.get("why")).replace(" ", "_").replace("'", "")
        if allow.get("op") == "add" and allow.get("change") == "not granted" and why in NOT_GRANTED:
            granted[why] = granted.get(why, 0) + 1
    out = {key: n for key, n in out.items() if n}
    if granted:
        out["ssh_lines_not_granted"] = granted
    return out


def stopped_parts(record):
    """The lastuserjob parts of RECORD the brake stopped."""
    return [part["part"] for part in record["parts"] if isinstance(part, dict) and not part.get("ran")
            and registry.lastuserjob(part.get("part")) and str(part.get("why", "")).startswith("stopped by ")]


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

