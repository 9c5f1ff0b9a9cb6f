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
* a process in a Slurm job's cgroup of the user's (directories only root
  makes) is a job of theirs while root's slurmstepd runs in that cgroup
  too: one Slurm left behind tells no job; without marks in a directory
  only root can
  write (the prolog marks a new job there and waits for the lock), nobody
  is a stray;
* the kill: part 39 (the ssh line, unless epilog:ssh_access leaves it out)
  and part 40 themselves, each in a worker of the runner's, under the
  user's lock and never past the prolog's wait for it, as at a job end;
  then, still under the lock, the user's System V IPC objects part 42
  would remove (epilog:ipc_cleanup). A stray's listing says what those
  would be;
* an account that runs nothing here but created System V IPC
  objects (a crashed job's segments) is told the same way, with no
  processes: killed, it only has its objects removed. ipc_only (what
  epilog.sweep asks): only those accounts that hold objects, and, with
  kill, only their objects removed;
* held back as at a job end: in observe mode (epilog:mode) the kill runs
  parts 39 and 40 as observe mode runs them (deciding, under the lock,
  what they would do, and doing none of it) and judges the IPC objects
  without removing one; the brake (epilog:stop_file) stops the kill
  before it starts; a part turned off (epilog:parts) does not run, and
  the IPC objects are only judged while 42 is off. The report and the
  record say which.

judge() is the decision, a function of its facts; run() gathers them. Only
"stray" is ever killed; "unknown" never is.
"""
import os
import sys
import time

from . import evidence, guard, metrics, record, registry, runner, system, worker
from .kill import KILL_SLOTS, some

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


# a uid the guard calls root or a system account (its rule, without a lookup)
system_uid = guard.system_uid


def age_of(stat_text, boot, ticks, now):
    """Seconds PID has run, from its /proc/PID/stat text, the boot epoch and
    the clock's ticks per second; None when it cannot be read."""
    start = system.start_ticks(stat_text)
    if start is None:
        return None
    return max(0, int(now - boot - start / ticks))


def processes(me, now, live=None, stepd=None):
    """{uid: [Process]} of the live processes here by their real uid: not
    root's, not a kill slot's (a part 40 acting), not this one's. Each
    costs three small reads that never wait on the process (status, stat,
    cgroup), through one descriptor of its /proc/PID: its command line is
    never read (that read waits on the process's memory map, which a
    process stuck on a hung file system holds), so its command is its name. LIVE (a set, when given) gets the
    jobs (system.job_of_cgroup()) whose cgroup holds root's real
    slurmstepd: named so, and STEPD(pid, descriptor) says so
    (slurm.Slurm.real_stepd: root's, running the slurmstepd binary).
    Slurm's slurmstepd of each step sits in its job's (under cgroup/v2 in
    step_<n>/slurm). A name is not enough: a user names a process of
    root's by the link she execs it through (a setuid program that takes
    real uid 0, run as ~/slurmstepd), and an sshd session pam_slurm_adopt
    put in the job is root's too, and lives as long as she keeps it open.
    One whose executable cannot be read (not gone) counts: a job is the
    answer that acts on nobody."""
    boot, ticks = system.boot_time(), os.sysconf("SC_CLK_TCK")
    slots = set(system.UID_MAX_REAL - i for i in range(KILL_SLOTS))
    out = {}
    for pid in system.pids():
        if int(pid) == me:
            continue
        # status, stat and cgroup read through one /proc/PID descriptor: all
        # three are the same process's, whatever its pid names meanwhile (a
        # user's process that ends and a pid handed out again)
        proc = system.open_proc(pid)
        if proc is None:
            continue
        try:
            fields = system.status_in(proc)
            if not system.alive(fields):
                continue
            uids = system.uids_of(fields)
            if uids and uids[0] == 0 and live is not None and fields.get("Name") == "slurmstepd":
                job = system.job_cgroup(pid, proc=proc)
                if job is not None and job[0] != "unknown" and _real_stepd(stepd, pid, proc):
                    live.add(job)
            if not uids or uids[0] == 0 or uids[0] in slots:
                continue
            age = age_of(system.stat_text(pid, proc), boot, ticks, now) if boot is not None else None
            out.setdefault(uids[0], []).append(Process(int(pid), system.show(fields.get("Name", "?")), age,
                                                       system.job_cgroup(pid, uids[0], proc)))
        finally:
            os.close(proc)
    return out


def _real_stepd(stepd, pid, proc):
    """STEPD(PID, PROC) (processes()), or True: when there is no STEPD, or
    it cannot read the process (not gone)."""
    if stepd is None:
        return True
    try:
        return stepd(int(pid), proc)
    except OSError:
        return True


def account(uid):
    """The name of UID in the account database, or None."""
    import pwd  # pylint: disable=import-outside-toplevel

    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


def run(release_dir, env, kill=False, test=False, source="call", slurmd_pid=0, ipc_only=False):
    """The strays of this node now, by the rules of the release in
    RELEASE_DIR, as a report; with KILL (and not TEST) each stray account's
    ssh line is revoked (39) and its processes killed (40) under its lock,
    then its System V IPC objects removed. ENV: SLURMD_NODENAME and
    SLURM_CONF as slurmd would give a job end. IPC_ONLY: only the accounts
    that hold IPC objects, and KILL removes their objects alone. Unless
    TEST, the log gets a line per account killed or not told, and (but
    IPC_ONLY: the sweep's record says it) the record file one record."""
    now = time.time()
    run_ = runner.Run(release_dir, "epilog", dict(env, SLURM_JOB_USER="", SLURM_JOB_UID="", SLURM_JOB_ID=""),
                      explain=bool(test), slurmd_pid=slurmd_pid, source="epilog.strays")
    run_.prepare_marks()
    settings = run_.settings
    deadline = time.monotonic() + settings["chain_timeout"]
    defs = guard.login_defs()
    live = set()
    found = processes(os.getpid(), now, live, run_.slurm.real_stepd)
    ipc_on = settings.get("ipc_cleanup", True)
    holding = set()
    if ipc_on:
        from . import ipc  # pylint: disable=import-outside-toplevel

        slots = set(system.UID_MAX_REAL - i for i in range(KILL_SLOTS))
        holding = {uid for uid in ipc.holders() if uid != 0 and uid not in slots}
    # one set of node facts for the whole look (root's slurmstepds, and the
    # controller, asked once at most); the marks are read for each user
    # under their lock
    facts = evidence.NodeFacts(run_, False, int(now))
    users, nameless = [], []
    counts = dict.fromkeys(("stray", "job", "operator", "system", "unknown"), 0)
    killed = would_kill = 0
    # the IPC objects are judged and none removed: observe mode, or 42 off
    ipc_held = registry.observing(settings) or registry.not_run(registry.IPC_PART, settings) is not None
    ipc_counts = {"users": 0, "objects": 0, "bytes": 0, "removed": 0, "bytes_removed": 0}
    removed_ipc = {"removed": dict.fromkeys(("shm", "sem", "msg"), 0), "bytes": 0, "kept": {}, "left": 0}
    # the accounts with processes first: those with objects alone after them
    order = sorted(holding) if ipc_only else sorted(found) + sorted(holding - set(found))
    for uid in order:
        procs = found.get(uid, [])
        if system_uid(uid, defs):
            counts["system"] += 1
            continue
        name = account(uid) if time.monotonic() < deadline else None
        if name is None and time.monotonic() < deadline:
            # no account: a deleted user's, a container's subordinate uid;
            # summed up, never killed
            counts["unknown"] += 1
            nameless.append({"uid": uid, "processes": len(procs), "ipc_objects": uid in holding})
            continue
        entry = {"user": name, "uid": uid, "processes": len(procs)}
        held = None
        try:
            if time.monotonic() > deadline:
                answer, why = "unknown", "out of time (chain_timeout %d s)" % settings["chain_timeout"]
            else:
                answer, why, held = _decide(run_, facts, uid, name, procs, bool(test), live)
            counts[answer] += 1
            if answer in ("operator", "system"):
                continue
            entry.update(answer=answer, why=why)
            if answer == "stray":
                entry["strays"] = [{"pid": p.pid, "command": p.command, "age": p.age} for p in procs[:LIST_MAX]]
                entry["more"] = max(0, len(procs) - LIST_MAX)
                if uid in holding:
                    entry["ipc"] = ipc_objects(uid, min(deadline, time.monotonic() + 5))
                    objects = sum(entry["ipc"]["remove"].values())
                    ipc_counts["users"] += 1 if objects else 0
                    ipc_counts["objects"] += objects
                    ipc_counts["bytes"] += entry["ipc"]["bytes"]
                if kill:
                    # the brake, looked at before each account's kill
                    stop = run_.stopped_by()
                    if stop or test:
                        entry["kill"] = stop or "would kill"
                    else:
                        entry["kill"] = _kill(run_, uid, name, held, deadline, processes=bool(procs) and not ipc_only,
                                              ipc_test=ipc_held)
                        held = None
                    if isinstance(entry["kill"], dict):
                        if entry["kill"]["outcome"] == "would":
                            would_kill += entry["kill"]["would_signal"]
                        else:
                            killed += entry["kill"]["signalled"]
                        _add_ipc(removed_ipc, entry["kill"].get("ipc"))
            elif answer == "unknown" and not test:
                run_.log.warning("strays: uid %d (%s) not told: %s; left alone" % (uid, system.show(name or "?"),
                                                                                     why))
        except Exception as exc:  # noqa: BLE001 - one account's failure (a fork refused) is not the look's
            entry.update(answer="unknown", why="failed: %s: %s" % (type(exc).__name__, exc))
            counts["unknown"] += 1
            if not test:
                run_.log.warning("strays: uid %d (%s): %s" % (uid, system.show(name or "?"), entry["why"]))
        finally:
            if held is not None:
                os.close(held[0])
        users.append(entry)
    if nameless and not test:
        run_.log.warning("strays: %d uid(s) with no account on this node run processes (left alone): %s"
                         % (len(nameless), some(["%d(%d)" % (n["uid"], n["processes"]) for n in nameless])))
    # the strays first, in the report and the record
    users.sort(key=lambda u: (u["answer"] != "stray", u["uid"]))
    gone = "ipc_would_remove" if ipc_held else "ipc_removed"
    report = {
        "node": run_.env.get("SLURMD_NODENAME", ""), "release": run_.release, "test": bool(test), "kill": bool(kill),
        "source": source, "mode": settings.get("mode", "enforce"), "users": users, "no_account": nameless[:LIST_MAX],
        "counts": {"stray_users": counts["stray"], "stray_processes": sum(u["processes"] for u in users
                                                                           if u["answer"] == "stray"),
                   "killed": killed, "would_kill": would_kill, "job_users": counts["job"],
                   "unknown_users": counts["unknown"], "no_account_uids": len(nameless),
                   "operators": counts["operator"], "system_accounts": counts["system"],
                   "ipc_users": ipc_counts["users"], "ipc_objects": ipc_counts["objects"],
                   "ipc_bytes": ipc_counts["bytes"], "ipc_removed": 0, "ipc_bytes_removed": 0,
                   "ipc_would_remove": 0, "ipc_bytes_would_remove": 0},
        "ms": int((time.time() - now) * 1000),
    }
    report["counts"][gone] = sum(removed_ipc["removed"].values())
    report["counts"][gone.replace("ipc_", "ipc_bytes_")] = removed_ipc["bytes"]
    if ipc_held:
        removed_ipc["would"] = True
    # what held this look's acts back: the brake, the parts turned off
    if run_.stopped:
        report["stopped"] = run_.stopped
    if run_.stop_ignored:
        report["stop_ignored"] = run_.stop_ignored
    acting = (registry.IPC_PART,) if ipc_only else (*registry.KILL_PARTS, registry.IPC_PART)
    report["off"] = [name for name in acting if kill and not test and (settings.get("parts") or {}).get(name) is False]
    if ipc_only:
        report["ipc_fact"] = removed_ipc  # for the sweep's record
    elif not test:
        _record(run_, report, removed_ipc)
    run_.reap_workers()
    run_.log.close()
    return report


def ipc_objects(uid, deadline):
    """What part 42 would do with UID's System V IPC objects now: {remove:
    {kind: n}, bytes, keep: n}."""
    from . import ipc  # pylint: disable=import-outside-toplevel

    out = {"remove": dict.fromkeys(ipc.KINDS, 0), "bytes": 0, "keep": 0}
    verdicts, out["unjudged"] = ipc.judge_all(uid, deadline=deadline)
    for verdict in verdicts:
        if verdict.action == "remove":
            out["remove"][verdict.kind] += 1
            out["bytes"] += verdict.bytes
        else:
            out["keep"] += 1
    return out


def by_cgroup(procs, live):
    """(answer, why) of an account by its processes' cgroups (Process.job,
    system.job_of_cgroup()): a job where one is in the cgroup of a job of
    LIVE (processes(): root's slurmstepd runs in it), unknown
    where one is in a cgroup whose layout cannot be told; None otherwise.
    A job's directory with no slurmstepd of root's in it is one Slurm
    left behind (it could not empty it, or the step's slurmstepd is gone):
    a process of hers there tells no job, and the last-job evidence
    decides, as for one outside any job."""
    in_job = [p for p in procs if p.job is not None and p.job[0] != "unknown" and p.job in live]
    if in_job:
        return "job", "process %d is in the cgroup of Slurm job %s" % (in_job[0].pid, in_job[0].job[1])
    unread = [p for p in procs if p.job is not None and p.job[0] == "unknown"]
    if unread:
        return "unknown", "process %d is in a cgroup the chain cannot tell: %s" % (unread[0].pid, unread[0].job[1])
    return None


def _decide(run_, facts, uid, name, procs, test, live):
    """(answer, why, the user's lock or None) of one account: the guard on
    the release's list; a process in a Slurm job's cgroup of theirs (a
    directory only root makes) that root's slurmstepd runs in (LIVE,
    by_cgroup) is a job, one in a cgroup whose Slurm layout cannot be told
    is unknown; then, under the user's lock taken
    without waiting, the last-job evidence for no job at all. Only marks in
    a directory only root can write, under that lock, are a licence: the
    prolog marks a new job there and waits for the lock. The lock is kept
    only for a stray, with the time it was taken."""
    ident = guard.identity(name, str(uid), guard.resolve, run_.account_chars)
    verdict = guard.check(ident, name, run_.names["localusers"])
    answer, why = judge(ident, verdict, None)
    if answer != "unknown" or verdict.answer != "act":
        return answer, why, None
    told = by_cgroup(procs, live)
    if told is not None:
        return (*told, None)
    if not run_.marks_trusted:
        return "unknown", "%s is not a directory only root can write: no job marks to go by" % run_.run_dir, None
    lock = None
    if not test:
        lock = run_.lock_user(str(uid), 0)
        if lock is None:
            return "unknown", "a job end or prolog of the user holds %s/lock.%d" % (run_.run_dir, uid), None
    # the prolog's wait for the lock counts from here: the evidence's time
    # (squeue, up to squeue_timeout) is part of it
    taken = time.monotonic()
    facts.locked, facts.now = True, int(time.time())
    other = evidence.decide("", str(uid), facts, run_.settings["chain_timeout"])
    answer, why = judge(ident, verdict, other)
    if answer != "stray" and lock is not None:
        os.close(lock)
        lock = None
    return answer, why, (lock, taken) if lock is not None else None


def _add_ipc(total, fact):
    """ipc.clean's FACT added into TOTAL (unreadable: why the first look a
    process that could not be read stopped ended)."""
    if not isinstance(fact, dict):
        return
    for kind, n in fact.get("removed", {}).items():
        total["removed"][kind] = total["removed"].get(kind, 0) + n
    for why, n in fact.get("kept", {}).items():
        total["kept"][why] = total["kept"].get(why, 0) + n
    total["bytes"] += fact.get("bytes", 0)
    total["left"] += fact.get("left", 0)
    if fact.get("unreadable"):
        total.setdefault("unreadable", fact["unreadable"])


def _kill(run_, uid, name, held, deadline, processes=True, ipc_test=False):
    """Parts 39 and 40 for UID (each unless the settings leave it out;
    unless not PROCESSES: an account that runs nothing here), each in a
    worker of its own, then its System V IPC objects (those made meanwhile
    too; IPC_TEST: judged, none removed), with the user's lock HELD
    ((descriptor, when taken), closed here) throughout, and never past the
    prolog's wait for it (as a job end's lastuserjob parts), nor DEADLINE.
    What 40 reported: outcome (would, in observe mode), signalled (or
    would: what it would have signalled), saved_only (the processes it left
    alone whose saved uid alone is UID's: another account's run of her
    setuid program, which the look counts under its real owner), and the
    parts' exit status (or why a part did not run: "not run: no free pid"
    when the runner could fork no process for it, and could not run it
    itself)."""
    lock, taken = held if held is not None else (None, time.monotonic())
    until = min(deadline, taken + run_.lock_wait() - 3)
    done, facts = {}, {}
    try:
        run_.user = name
        run_.identity = guard.Identity(True, uid, "")
        for part in registry.KILL_PARTS if processes else ():
            off = registry.not_run(part, run_.settings)
            if off:
                done[part] = "not run: %s" % off.why
                continue
            seconds = min(run_.settings["part_timeout"], int(until - time.monotonic()))
            if seconds < 1:
                done[part] = "not run: a new job of the user may start now (its prolog waits %ds at most)" \
                    % run_.lock_wait()
                continue
            if run_.unfit:
                done[part] = "not run: %s" % run_.unfit
                continue
            try:
                rc, facts[part] = run_.run_own(part, seconds, uid, [lock] if lock is not None else [])
            except worker.NoFork as exc:
                done[part] = "not run: %s" % exc
                continue
            done[part] = rc
        run_.stop_worker()
        # the System V IPC objects part 42 would remove at their last job end
        if run_.settings.get("ipc_cleanup", True) and time.monotonic() < until:
            from . import ipc  # pylint: disable=import-outside-toplevel

            facts["ipc"] = ipc.clean(uid, until, test=ipc_test)
            removed = facts["ipc"]["removed"]
            if facts["ipc"].get("unreadable"):
                run_.log.warning("strays: the System V IPC objects of uid %d: %s" % (uid, facts["ipc"]["unreadable"]))
            if sum(removed.values()):
                run_.log.info("strays: %s the System V IPC objects of uid %d: %d segment(s) (%d bytes), %d "
                              "semaphore set(s), %d queue(s)" % ("would remove (not removed: observe mode, or "
                                                                 "42 off)" if ipc_test else "removed", uid,
                                                                 removed["shm"], facts["ipc"]["bytes"],
                                                                 removed["sem"], removed["msg"]))
    finally:
        if lock is not None:
            os.close(lock)
    kill = facts.get(registry.KILL_PART, {}).get("kill")
    kill = kill if isinstance(kill, dict) else {}
    signalled = kill.get("signalled")
    signalled = signalled if isinstance(signalled, int) and not isinstance(signalled, bool) else 0
    spared = kill.get("saved_only")
    out = {"parts": done, "outcome": kill.get("outcome", "not run"), "signalled": 0 if kill.get("would") else signalled,
           "ipc": facts.get("ipc"), "saved_only": spared if isinstance(spared, int) and not isinstance(spared, bool)
           else 0}
    if kill.get("would"):
        out["would_signal"] = signalled
    return out


def _record(run_, report, removed_ipc):
    """The record of this look: stage strays, the counts, the first
    accounts told (the strays first); the IPC objects the kill removed, as
    part 42's fact (the metrics and epilog.report count it)."""
    users = [{"user": record.text(u["user"] or "", 64), "uid": u["uid"], "answer": u["answer"],
              "processes": u["processes"], "kill": u["kill"].get("outcome") if isinstance(u.get("kill"), dict)
              else "stopped" if str(u.get("kill", "")).startswith("stopped by ") else None,
              "saved_only": u["kill"].get("saved_only", 0) if isinstance(u.get("kill"), dict) else 0}
             for u in report["users"][:RECORD_USERS]]
    ran = [record.part_ran("epilog.strays", 0, report["ms"], {"ipc": removed_ipc})] \
        if sum(removed_ipc["removed"].values()) or removed_ipc["kept"] or removed_ipc["left"] \
        or removed_ipc.get("unreadable") else []
    rec = record.build("strays", node=report["node"], release=run_.release, start=run_.start, ms=report["ms"],
                       warnings=run_.log.warnings, parts=ran, mode=report["mode"], stopped=report.get("stopped"),
                       stop_ignored=report.get("stop_ignored"), off=report["off"], source=report["source"],
                       kill=report["kill"], strays=dict(report["counts"], users=users,
                                                        users_more=max(0, len(report["users"]) - RECORD_USERS)))
    record.write(run_.trust, run_.settings["record_file"], run_.settings["record_max_kb"] * 1024, rec)
    if run_.settings.get("metrics_file"):
        metrics.update_metrics(run_.trust, run_.settings["metrics_file"], rec)


def main(argv):
    """python3 -m epilog_node.strays RELEASE_DIR JSON: the report as JSON on
    stdout. JSON: {kill, test, source, slurmd_pid, env, ipc_only}."""
    os.umask(0o022)
    args = system.loads(argv[1])
    report = run(argv[0], args.get("env") or {}, kill=bool(args.get("kill")), test=bool(args.get("test")),
                 source=args.get("source") or "call", slurmd_pid=int(args.get("slurmd_pid") or 0),
                 ipc_only=bool(args.get("ipc_only")))
    sys.stdout.write(system.dumps(report) + "\n")
    return 0
