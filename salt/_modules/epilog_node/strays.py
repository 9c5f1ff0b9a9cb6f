"""Strays: the processes on this node of accounts that have no job here,
found between job ends (epilog.strays, and the scheduled sweep), and killed
when asked.

A job end kills its user's processes at their last job here. What outlives
that (a job end that was skipped, failed or timed out, a login that got in
another way) stays until somebody looks. This looks with the chain's own
rules and nothing else:

* who: every account that runs a live process here (its real uid), but
  root, system accounts (login.defs, as the guard reads it), the chain's
  own kill slots, and the operators the guard spares (the release's
  localusers.backup, an exact line, a lookup error never a licence);
* whether they have a job here: evidence.decide, the job end's own rule
  (the marks under the user's lock, the spool's step sockets, root's
  slurmstepds, the controller only where a job end would ask it). The lock
  is taken without waiting: a job end or a prolog of the user holds it, and
  the user is left to them (unknown);
* the kill: part 40 itself, in a worker of the runner's, under the user's
  lock, exactly as at a job end.

judge() is the decision, a function of its facts; run() gathers them. Only
"stray" is ever killed; "unknown" never is.
"""
import os
import sys
import time

from . import evidence, guard, parts, record, runner, system

KILL_PART = "40-lastuserjob-processes"
# the processes listed per user (the count is whole)
LIST_MAX = 20
# the users a record names (its counts are whole)
RECORD_USERS = 10

Process = system.fields("Process", "pid command age job")


def judge(ident, verdict, other):
    """(answer, why) for one account that runs processes here: IDENT its
    identity (guard.identity of its name and uid), VERDICT the localusers
    guard's (guard.decide), OTHER the last-job evidence (evidence.decide,
    None when not asked). answer: stray (no job here: the chain would kill
    at a job end), job (a job of theirs runs here), operator, system (left
    out), unknown (never killed)."""
    if not ident.ok:
        return "unknown", "%s: a failed lookup is never a licence to kill" % ident.why
    if verdict.answer == "spare":
        return ("system" if verdict.system else "operator"), verdict.why
    if verdict.answer != "act":
        return "unknown", verdict.why
    if other is None:
        return "unknown", "not asked whether the user has a job here"
    if other.answer == "yes":
        return "job", other.why
    if other.answer == "no":
        return "stray", other.why
    return "unknown", other.why


def system_uid(uid, defs):
    """A uid the guard calls root or a system account (its rule, without a
    lookup): below UID_MIN, or above UID_MAX up to 65535."""
    uid_min, uid_max = defs
    return uid < uid_min or uid_max < uid <= 65535


def age_of(stat_text, boot, ticks, now):
    """Seconds PID has run, from its /proc/PID/stat text (the name in it may
    hold anything: the fields after its last ") " count), the boot epoch and
    the clock's ticks per second; None when it cannot be read."""
    try:
        start = int(stat_text.rsplit(b") ", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None
    return max(0, int(now - boot - start / ticks))


def boot_time():
    try:
        for row in system.read_file("/proc/stat", 1 << 16).split(b"\n"):
            if row.startswith(b"btime "):
                return int(row.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return None


def processes(me, now):
    """{uid: [Process]} of the live processes here by their real uid: not
    root's, not a kill slot's (a part 40 acting), not this one's."""
    boot, ticks = boot_time(), os.sysconf("SC_CLK_TCK")
    slots = set(system.UID_MAX_REAL - i for i in range(parts.KILL_SLOTS))
    out = {}
    for pid in system.pids():
        if int(pid) == me:
            continue
        fields = system.status(pid)
        if not system.alive(fields):
            continue
        uids = system.uids_of(fields)
        if not uids or uids[0] == 0 or uids[0] in slots:
            continue
        title = system.cmdline(pid, 256).rstrip(b"\0").replace(b"\0", b" ")
        command = system.show(os.fsdecode(title)) if title else "[%s]" % system.show(fields.get("Name", "?"))
        try:
            stat_text = system.read_file("/proc/%s/stat" % pid, 4096)
        except OSError:
            stat_text = b""
        age = age_of(stat_text, boot, ticks, now) if boot is not None else None
        out.setdefault(uids[0], []).append(Process(int(pid), command, age, system.job_cgroup(pid, uids[0])))
    return out


def account(uid):
    """The name of UID in the account database, or None."""
    import pwd  # pylint: disable=import-outside-toplevel

    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


def run(release_dir, env, kill=False, test=False, source="call", slurmd_pid=0):
    """The strays of this node now, by the rules of the release in
    RELEASE_DIR, as a report; with KILL (and not TEST) each stray account's
    processes are killed by part 40 under its lock. ENV: SLURMD_NODENAME
    and SLURM_CONF as slurmd would give a job end. Unless TEST, the log
    gets a line per account killed or not told, and the record file one
    record."""
    now = time.time()
    run_ = runner.Run(release_dir, "epilog", dict(env, SLURM_JOB_USER="", SLURM_JOB_UID="", SLURM_JOB_ID=""),
                      explain=bool(test), slurmd_pid=slurmd_pid, source="epilog.strays")
    run_.prepare_marks()
    settings = run_.settings
    deadline = time.monotonic() + settings["chain_timeout"]
    defs = system.login_defs()
    found = processes(os.getpid(), now)
    users, counts = [], dict.fromkeys(("stray", "job", "operator", "system", "unknown"), 0)
    killed = 0
    for uid in sorted(found):
        procs = found[uid]
        if system_uid(uid, defs):
            counts["system"] += 1
            continue
        name = account(uid)
        entry = {"user": name, "uid": uid, "processes": len(procs)}
        if time.monotonic() > deadline:
            answer, why = "unknown", "out of time (chain_timeout %d s)" % settings["chain_timeout"]
            lock = None
        else:
            answer, why, lock = _decide(run_, uid, name, bool(test))
        counts[answer] += 1
        if answer in ("operator", "system"):
            if lock is not None:
                os.close(lock)
            continue
        entry.update(answer=answer, why=why)
        if answer == "stray":
            entry["strays"] = [{"pid": p.pid, "command": p.command, "age": p.age, "job_cgroup": p.job}
                               for p in procs[:LIST_MAX]]
            entry["more"] = max(0, len(procs) - LIST_MAX)
        if answer == "stray" and kill:
            if test:
                entry["kill"] = "would kill"
            else:
                entry["kill"] = _kill(run_, uid, name, lock, deadline)
                killed += entry["kill"].get("signalled", 0)
                lock = None
        if lock is not None:
            os.close(lock)
        if answer == "unknown" and not test:
            run_.log.warning("strays: uid %d (%s) not told: %s; left alone" % (uid, system.show(name or "?"), why))
        users.append(entry)
    report = {
        "node": run_.env.get("SLURMD_NODENAME", ""), "release": run_.release, "test": bool(test), "kill": bool(kill),
        "source": source, "users": users,
        "counts": {"stray_users": counts["stray"], "stray_processes": sum(u["processes"] for u in users
                                                                           if u["answer"] == "stray"),
                   "killed": killed, "job_users": counts["job"], "unknown_users": counts["unknown"],
                   "operators": counts["operator"], "system_accounts": counts["system"]},
        "ms": int((time.time() - now) * 1000),
    }
    if not test:
        _record(run_, report)
    run_.reap_workers()
    run_.log.close()
    return report


def _decide(run_, uid, name, test):
    """(answer, why, the user's lock or None) of one account: the guard on
    the release's list, then, under the user's lock taken without waiting,
    the last-job evidence for no job at all. The lock is held only for a
    stray."""
    ident = guard.identity(name, str(uid), guard.resolve, run_.account_chars) if name else \
        guard.Identity(False, None, "uid %d has no account on this node" % uid)
    verdict = guard.check(ident, name or "", run_.names["localusers"])
    answer, why = judge(ident, verdict, None)
    if answer != "unknown" or verdict.answer != "act":
        return answer, why, None
    lock, locked = None, True
    if run_.marks_trusted and not test:
        lock = run_.lock_user(str(uid), 0)
        locked = lock is not None
    run_.user = name
    facts = evidence.NodeFacts(run_, locked, int(time.time()))
    other = evidence.decide("", str(uid), facts, run_.settings["chain_timeout"])
    if other.answer == "unknown" and not locked:
        other = evidence.Answer("unknown", "a job end or prolog of the user holds %s/lock.%d" % (run_.run_dir, uid),
                                (), False)
    answer, why = judge(ident, verdict, other)
    if answer != "stray" and lock is not None:
        os.close(lock)
        lock = None
    return answer, why, lock


def _kill(run_, uid, name, lock, deadline):
    """Part 40 for UID, in a worker of its own, with LOCK (closed here)
    held throughout. What it reported: outcome and signalled."""
    try:
        run_.user = name
        run_.identity = guard.Identity(True, uid, "")
        seconds = max(1, min(run_.settings["part_timeout"], int(deadline - time.monotonic())))
        rc, facts = run_.run_own(KILL_PART, seconds, uid, [lock] if lock is not None else [])
        run_.stop_worker()
    finally:
        if lock is not None:
            os.close(lock)
    kill = facts.get("kill") if isinstance(facts.get("kill"), dict) else {}
    return {"rc": rc, "outcome": kill.get("outcome", "failed"), "signalled": int(kill.get("signalled") or 0)}


def _record(run_, report):
    """The record of this look: stage strays, the counts, the first
    accounts told."""
    users = [{"user": record.text(u["user"] or "", 64), "uid": u["uid"], "answer": u["answer"],
              "processes": u["processes"], "kill": (u.get("kill") or {}).get("outcome") if isinstance(u.get("kill"), dict)
              else None} for u in report["users"][:RECORD_USERS]]
    rec = record.build("strays", report["node"], None, None, None, run_.release, run_.start, report["ms"], None,
                       None, run_.log.warnings, [])
    rec.update(source=report["source"], kill=report["kill"], strays=dict(report["counts"], users=users,
                                                                          users_more=max(0, len(report["users"])
                                                                                         - RECORD_USERS)))
    record.write(run_.trust, run_.settings["record_file"], run_.settings["record_max_kb"] * 1024, rec)
    if run_.settings.get("metrics_file"):
        record.update_metrics(run_.trust, run_.settings["metrics_file"], rec)


def main(argv):
    """python3 -m epilog_node.strays RELEASE_DIR JSON: the report as JSON on
    stdout. JSON: {kill, test, source, slurmd_pid, env}."""
    os.umask(0o022)
    args = system.loads(argv[1])
    report = run(argv[0], args.get("env") or {}, kill=bool(args.get("kill")), test=bool(args.get("test")),
                 source=args.get("source") or "call", slurmd_pid=int(args.get("slurmd_pid") or 0))
    sys.stdout.write(system.dumps(report) + "\n")
    return 0
