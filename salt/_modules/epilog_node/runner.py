"""The chain: what epilog.sh and prolog.sh (Slurm's Epilog= and Prolog=) run.

It runs the formula's parts of its own release (<release>/epilog.d/) and the
site's executable parts in <slurm_config_dir>/epilog.d/, together in
ascending name order (Slurm's own Epilog=dir/* runs them in reverse), each
under a timeout and all within one deadline for the whole chain. Parts named
*-lastuserjob-* run only when the job's user has no other job on this node
(evidence.decide) and the localusers guard says act (guard.decide); when
either is unknown they are skipped. It always exits 0: a non-zero epilog
drains the node.

Which parts run, and why not, is decided here (the chain's rules: the
marks, the user's lock, the evidence and the guard asked, the deadlines,
the brake); how a part runs is the worker's (worker.py: the fork, the
pipes, the reaping, a site's part exec'd, a part run in the runner itself
when no pid is free). The running Slurm (slurmstepd, squeue) is asked by the
evidence (slurm.py), and a part's action gets a Context (context.py). The
runner writes the log, the decision record and the metrics, all from the
same decisions. In explain mode (epilog.explain) it decides everything a
job end with these facts would decide, from the same code, and runs,
writes, locks and logs nothing.
"""
import os
import stat
import sys
import time

from . import budget, evidence, guard, parts, record, registry, slurm, system, worker
from . import log as logs
from .context import Context

SETTINGS = "settings.json"


def load(release_dir):
    """(settings, rules, layout) of the release: settings.json, which the
    state renders from map.jinja's merge, and nothing else."""
    data = system.loads(system.read_file(os.path.join(release_dir, SETTINGS), 4 << 20).decode("utf-8"))
    return data["settings"], data["rules"], data["layout"]


def listed(directory):
    """The names in DIRECTORY; none when it cannot be listed."""
    try:
        return os.listdir(directory)
    except OSError:
        return []


def run_parts_name(name):
    """NAME is a part's as run-parts takes it (two digits, a dash, then
    letters, digits, _ and -): an editor's or a package's leftover is not."""
    return len(name) > 3 and system.digits(name[:2]) and name[2] == "-" and system.plain(name[3:], "_-")


# Whether the chain runs a file in a site's part directory: RUNS, and when
# it does not, what of it KIND is ("symlink", "owner": its owner or mode,
# "directory": the one it sits in) and WHY (the runner's log line and
# epilog.verify's problem say it in these words)
Admission = system.fields("Admission", "runs kind why")


def admit_site_part(path, st, runnable, dir_ok, taken):
    """The rule for a site part PATH (<slurm_config_dir>/<stage>.d/NAME),
    which runs as root: from its lstat ST (None when it is gone), whether
    it is a file the chain could run (RUNNABLE: a regular file, through a
    symlink too, that can be executed), whether its directory is one only
    root can write (DIR_OK, system.Trust.root_only), and TAKEN, the names
    of the formula's parts of its stage, now and in earlier versions.
    None when the chain does not take it for a part at all: a name that is
    not run-parts' (an editor's or a package's leftover), one of TAKEN (the
    release's copy is the one that runs; an old copy laid down in place is
    never the site's), gone, or no executable file. Else an Admission: it
    runs only when it is a regular file (not a symlink: what a link points
    to may sit where another account can write), root's, that nobody else
    can write, in a directory only root can write; nobody else can then
    change it between this check and its run."""
    name = os.path.basename(path)
    if not run_parts_name(name) or name in taken or st is None or not runnable:
        return None
    if stat.S_ISLNK(st.st_mode):
        return Admission(False, "symlink",
                         "%s is a symlink: the chain runs only regular files of root's as site parts (what a link "
                         "points to may sit where another account can write)" % path)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        return Admission(False, "owner",
                         "%s is owned by uid %d or writable by group or others (mode %04o): that account could run "
                         "code as root at every job end" % (path, st.st_uid, stat.S_IMODE(st.st_mode)))
    if not dir_ok:
        return Admission(False, "directory",
                         "%s is not a directory only root can write (it, or a directory above it, is a symlink, "
                         "another account's or writable by one and not sticky): that account could change the "
                         "part before it runs" % os.path.dirname(path))
    return Admission(True, None, None)


def site_parts(site_dir, taken, trust):
    """[(name, path, Admission)] of the site's parts in SITE_DIR, in no
    particular order: admit_site_part of each file there the chain takes
    for a part (TAKEN: the formula's names of its stage, TRUST: a
    system.Trust). The runner runs those it admits; epilog.verify names
    those it does not."""
    dir_ok = trust.root_only(site_dir)
    out = []
    for name in listed(site_dir):
        if not run_parts_name(name) or name in taken:
            continue
        path = os.path.join(site_dir, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        admitted = admit_site_part(path, st, os.path.isfile(path) and os.access(path, os.X_OK), dir_ok, taken)
        if admitted is not None:
            out.append((name, path, admitted))
    return out


def chain_parts(own_dir, own, site_dir, taken, trust):
    """The parts a chain runs: the release's own in OWN_DIR and the site's
    in SITE_DIR, merged in name order (bytewise): the release's executable
    files of its parts' names (OWN), and the site's as admit_site_part
    admits them (TAKEN: the formula's names, TRUST: system.Trust).
    [(name, path, own, why not)], WHY NOT the words admit_site_part says
    (None: it runs). Run.parts and verify's count of the chain's parts."""
    found = {name: (os.path.join(own_dir, name), True, None) for name in listed(own_dir) if name in own}
    for name, path, admitted in site_parts(site_dir, taken, trust):
        found[name] = (path, False, admitted)
    out = []
    for name in sorted(found, key=os.fsencode):
        path, mine, admitted = found[name]
        if not mine:
            out.append((name, path, False, admitted.why))
        elif run_parts_name(name) and os.path.isfile(path) and os.access(path, os.X_OK):
            out.append((name, path, True, None))
    return out


class Run(worker.Worker):
    """One run of the chain, or of a part on its own, on one release: its
    rules here, the running of its parts in worker.Worker."""

    def __init__(self, release_dir, stage, env, explain=False, slurmd_pid=None, source=None):
        worker.Worker.__init__(self)
        self.release_dir = release_dir
        self.release = os.path.basename(release_dir)
        self.stage = stage
        self.env = env
        self.explain = explain
        self.start = time.time()
        self.t0 = time.monotonic()
        self.settings, rules, layout = load(release_dir)
        settings = self.settings
        self.account_chars = rules["account_chars"]
        confdir = settings["slurm_config_dir"]
        named = {item["id"]: item["path"] for item in layout["data"] + layout["release_data"]}
        self.names = {
            "allow_file": settings["ssh_allow_file"],
            "allow_lock": os.path.join(confdir, named["config-ssh-allow-lock"]),
            "localusers": os.path.join(release_dir, named["localusers-backup"]),
        }
        runner = next(script["path"] for script in layout["scripts"] if script["id"] == "runner-" + stage)
        self.source = source or runner
        self.own = registry.part_names(layout["scripts"], stage)
        self.retired = registry.part_names(layout["retired"], stage)
        self.site_dir = os.path.join(confdir, stage + ".d")
        self.own_dir = os.path.join(release_dir, stage + ".d")
        self.job, self.user = env.get("SLURM_JOB_ID") or None, env.get("SLURM_JOB_USER")
        self.trust = system.Trust()
        self.log = logs.Log(settings["log_file"], self.trust, job=self.job, user=self.user, release=self.release,
                            max_bytes=settings["log_max_kb"] * 1024, explain=explain, source=self.source)
        self.identity = None
        self.slurmd_pid = os.getppid() if slurmd_pid is None else slurmd_pid
        self.slurm = slurm.Slurm(self.slurmd_pid, env, self.trust, settings)
        self.run_dir = settings["run_dir"]
        self.marks_trusted = False
        self.other = None
        self.guard = None
        self.stopped = None  # the stop file, once the brake stopped a part
        self.stop_ignored = None  # why a stop file there was ignored
        self.outcomes = {}
        self.records = []

    # -- the job's marks and the user's lock -----------------------------------------
    def marker(self):
        """The job's own mark, <uid>.<jobid>, when both are plain numbers."""
        uid = self.env.get("SLURM_JOB_UID") or ""
        if system.digits(self.job or "") and system.digits(uid) and not uid.startswith("0"):
            return os.path.join(self.run_dir, "%s.%s" % (uid, self.job))
        return None

    def write_mark(self, path, content):
        """Write a mark whole, by a rename: a chain reading it at that moment
        sees the old mark or the new one, never an empty file (which reads as
        a job started at time 0)."""
        if self.explain:
            return True
        try:
            system.replace_file(path, content.encode("ascii"))
            return True
        except OSError:
            return False

    def lock_user(self, uid, seconds):
        """Take UID's lock (lock.<uid>), which a prolog of UID's (once its job
        is marked, before its parts) and the epilog's decision and lastuserjob
        parts for UID share, waiting at most SECONDS: the open descriptor, or
        None. The run directory is root's alone: nobody else can open the
        lock, and only the chains of UID's own jobs hold it, each for a
        bounded time."""
        try:
            fd = os.open(os.path.join(self.run_dir, "lock.%s" % uid),
                         os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        if system.wait_lock(fd, seconds):
            return fd
        os.close(fd)
        return None

    def prepare_marks(self):
        if not os.path.isdir(self.run_dir) and not self.explain:
            try:
                os.mkdir(self.run_dir, 0o700)
            except OSError:
                pass
        # The marks count only in a run directory only root can write. Its
        # birth ("since <epoch>"): the marks cover every job whose prolog ran
        # after it (a tmpfs /run is new at every boot, when no job runs).
        self.marks_trusted = self.trust.root_only(self.run_dir)
        since = os.path.join(self.run_dir, "since")
        if self.marks_trusted and not os.path.lexists(since):
            self.write_mark(since, "since %d\n" % int(time.time()))

    # -- the decision (epilog) ---------------------------------------------------
    def decide(self):
        """Who the user is and whether they have another job here: this job's
        mark says its epilog has begun, before anything waits (of several
        jobs of the user ending at once, the last to decide sees all the
        others so); then, under the user's lock, the evidence; only a "no"
        keeps the lock, through the lastuserjob parts. Returns the lock's
        descriptor and when it was taken."""
        self.identity = guard.identity(self.user, self.env.get("SLURM_JOB_UID"), guard.resolve, self.account_chars)
        lock, locked_at = None, None
        if not self.identity.ok:
            self.other = evidence.Answer("unknown", self.identity.why, (), False)
        else:
            uid = str(self.identity.uid)
            marker = self.marker()
            if self.marks_trusted and marker == os.path.join(self.run_dir, "%s.%s" % (uid, self.job)):
                self.write_mark(marker, "done\n")
            locked = False
            if self.marks_trusted:
                if self.explain:
                    self.log.info("explain mode: the user's lock is not taken (a job end waits up to 10 s for it, "
                                  "then says unknown)")
                    locked = True
                else:
                    lock = self.lock_user(uid, 10)
                    locked = lock is not None
                locked_at = time.monotonic()
            facts = evidence.NodeFacts(self, locked, int(time.time()))
            self.other = evidence.decide(self.job or "", uid, facts, self.settings["chain_timeout"])
            for jid in self.other.set_aside:
                self.log.warning("job %s of uid %s was marked as started here long ago, has no slurmstepd and the "
                                 "controller no longer has it here: its epilog never ran; the mark is set aside"
                                 % (jid, uid))
                self.write_mark(os.path.join(self.run_dir, "%s.%s" % (uid, jid)), "done\n")
            if self.other.complete:
                self.write_mark(os.path.join(self.run_dir, "complete"), "complete %d\n" % int(time.time()))
                self.log.info("the job marks in %s now cover every job on this node" % self.run_dir)
            if self.other.answer != "no" and lock is not None:
                os.close(lock)
                lock = None
            if self.other.answer == "no":
                self.warm(self.worker_parts())
        if self.other.answer == "unknown":
            self.log.warning("start; other jobs of this user on this node: unknown (%s); skipping the lastuserjob "
                             "parts" % self.other.why)
        else:
            self.log.info("start; other jobs of this user on this node: %s (%s)" % (self.other.answer,
                                                                                     self.other.why))
        return lock, locked_at

    def worker_parts(self):
        """The formula's lastuserjob parts of this stage these settings run,
        in order, up to the first of them that ends its worker: what the
        worker, forked first, runs once the job was the user's last."""
        names = []
        for part in registry.PARTS:
            if part.stage == self.stage and registry.lastuserjob(part.name) and not registry.not_run(part.name,
                                                                                                     self.settings):
                names.append(part.name)
                if part.ends_worker:
                    break
        return names

    def ask_guard(self):
        """The localusers guard, once per job end: every lastuserjob part
        gets the same answer, and a listed user costs no part at all."""
        if self.guard is None:
            self.guard = guard.check(self.identity, self.user, self.names["localusers"])
            self.log.line(self.guard.level, self.guard.why)
        return self.guard

    # -- the prolog's mark ------------------------------------------------------------
    def mark_start(self):
        """Mark the job as started on this node before anything else happens
        for it: an epilog of another job of the same user that decides after
        this sees the mark. Then wait for the user's lock: an epilog that
        decided before holds it through its lastuserjob parts, and runs none
        of them past this wait (half the prolog's deadline). Then, still
        under the lock, tidy up the user's marks of jobs that have ended."""
        marker = self.marker()
        if self.explain:
            self.log.info("explain mode: the job is not marked")
            return
        if marker and not self.marks_trusted:
            self.log.warning("%s is not a directory only root can write; the job is not marked" % self.run_dir)
            return
        if not marker:
            return
        if not self.write_mark(marker, "running %d\n" % int(time.time())):
            self.log.warning("cannot mark the job in %s" % self.run_dir)
        uid = self.env["SLURM_JOB_UID"]
        lock = self.lock_user(uid, self.lock_wait())
        if lock is None:
            self.log.warning("cannot lock %s/lock.%s within %ds; the job starts all the same"
                             % (self.run_dir, uid, self.lock_wait()))
        try:
            prefix = uid + "."
            for name in os.listdir(self.run_dir):
                path = os.path.join(self.run_dir, name)
                if name.startswith(prefix) and path != marker and os.path.isfile(path) and not os.path.islink(path):
                    if evidence.read_mark(path)[0] == "done":
                        os.unlink(path)
        except OSError:
            pass
        finally:
            if lock is not None:
                os.close(lock)

    def lock_wait(self):
        """How long a prolog waits for the user's lock before its job starts
        all the same; the epilog's lastuserjob parts never run past that,
        counted from when the epilog took the lock."""
        timeout = self.settings["chain_timeout"]
        return timeout // 2 if timeout > 20 else 10

    # -- the parts ----------------------------------------------------------------------
    def parts(self):
        """chain_parts() of this run's release and site."""
        return chain_parts(self.own_dir, self.own, self.site_dir, self.own + self.retired, self.trust)

    def elapsed(self):
        return time.monotonic() - self.t0

    def chain(self):
        """The parts, each under its deadline (and, epilog, the lastuserjob
        gate). Returns the record's parts."""
        if self.stage == "epilog":
            lock, locked_at = self.decide()
        else:
            self.identity = guard.identity(self.user, self.env.get("SLURM_JOB_UID"), guard.resolve,
                                           self.account_chars)
            self.mark_start()
            lock, locked_at = None, None
        found = self.parts()
        # the formula's parts these settings leave out (epilog:parts, epilog:ssh_access)
        off = {name: registry.not_run(name, self.settings) for name, _, own, _ in found if own}
        own_after = sum(1 for name, _, own, why in found if own and not off[name])
        lastuserjob = sum(1 for name, _, _, why in found if registry.lastuserjob(name) and why is None
                          and not off.get(name))
        entries = []
        for name, path, own, why in found:
            # The user's lock goes once the last lastuserjob part is done.
            if lastuserjob == 0 and lock is not None:
                os.close(lock)
                lock = None
            if off.get(name):
                entries.append(self.skip(name, "info", off[name].why, off[name].recorded))
                continue
            if registry.lastuserjob(name) and why is None:
                lastuserjob -= 1
            if own:
                own_after -= 1
            if why:
                entries.append(self.skip(name, "warning", why, "not root's alone"))
                continue
            # The chain's own deadline (budget.room): a part gets at most
            # part_timeout, and never eats the time the formula's own parts
            # still to come need.
            left = self.room(own_after)
            if left < 1:
                entries.append(self.past_deadline(name))
                continue
            act_uid = None
            if self.stage == "epilog" and registry.lastuserjob(name):
                if self.other.answer != "no":
                    entries.append(self.skip(name, "info", "other jobs of this user on this node: %s"
                                             % self.other.answer, "other jobs: " + self.other.answer,
                                             failed=self.other.answer == "unknown"))
                    continue
                verdict = self.ask_guard()
                if verdict.answer != "act":
                    entries.append(self.skip(name, "info", "the localusers guard says do nothing",
                                             "the localusers guard", outcome=("guard", verdict.why),
                                             failed=verdict.answer == "unknown"))
                    continue
                act_uid = verdict.uid
                left = self.room(own_after)  # the guard's account lookups took their time
                if left < 1:
                    entries.append(self.past_deadline(name))
                    continue
                # A new job of the user may start once its prolog's wait for
                # the lock is over: no lastuserjob part runs past that.
                if locked_at is not None:
                    until = int(locked_at + self.lock_wait() - 3 - time.monotonic())
                    if until < 1:
                        entries.append(self.skip(name, "warning", "a new job of the user may start now (its prolog "
                                                 "waits %ds at most)" % self.lock_wait(),
                                                 "a new job of the user may start"))
                        continue
                    left = min(left, until)
            # The brake, after the decisions (the marks, the evidence and
            # the guard: later job ends depend on them), before each acting
            # part: one set mid-chain stops the parts still to come.
            if own and name in registry.ACTING:
                stop = self.stopped_by()
                if stop:
                    entries.append(self.skip(name, "info", stop, stop, outcome=("stopped", stop)))
                    continue
            if self.explain:
                self.log.info("running %s%s" % (name, " for uid %d" % act_uid if act_uid else ""))
                self.outcomes[name] = ("run", act_uid)
                continue
            if self.unfit:
                entries.append(self.skip(name, "warning", self.unfit, self.unfit))
                continue
            started = time.monotonic()
            try:
                if own:
                    rc, facts = self.run_own(name, left, act_uid, [lock] if lock is not None else [],
                                             more=own_after > 0, last=own_after == 0)
                else:
                    rc, facts = self.run_site(path, left), {}
            except worker.NoFork as exc:
                entries.append(self.skip(name, "warning", "it needs a process of its own, and the runner could "
                                         "not fork one (%s)" % exc, str(exc)))
                continue
            entries.append(record.part_ran(name, rc, (time.monotonic() - started) * 1000, facts))
            if rc != 0:
                self.log.warning("%s exited %d (124: timed out after %ds); carrying on" % (name, rc, left))
        self.stop_worker()
        if lock is not None:
            os.close(lock)
        if self.explain and self.stage == "epilog" and self.guard is None:
            # the guard's answer even where this job end would not ask it
            self.log.info("the localusers guard, not asked at this job end, would say:")
            self.ask_guard()
        return entries

    def room(self, own_after):
        """The seconds a part may have now, with the formula's OWN_AFTER
        parts still to come (budget.room)."""
        return budget.room(self.settings["part_timeout"], self.settings["chain_timeout"], self.elapsed(), own_after)

    def past_deadline(self, name):
        return self.skip(name, "warning", "the chain's deadline of %ds is reached" % self.settings["chain_timeout"],
                         "the chain's deadline")

    def stopped_by(self):
        """The brake (epilog:stop_file, parts.brake), looked at before each
        acting part: "stopped by PATH" while it holds, else None. The first
        time it holds in this run, a warning says so; a file there that
        fails the trust rules is warned about once, and changes nothing."""
        found = parts.brake(self.settings.get("stop_file"), self.trust)
        if found is None:
            return None
        if found.state == "on":
            if self.stopped is None:
                self.stopped = found.path
                self.log.warning("the brake is on: %s exists (since %s): parts %s do not run; rm %s releases it"
                                 % (found.path, time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(found.since)),
                                    ", ".join(name[:2] for name in registry.ACTING), found.path))
            return found.why
        if self.stop_ignored is None:
            self.stop_ignored = found.why
            self.log.warning("stop file %s" % found.why)
        return None

    def skip(self, name, level, logged, why, outcome=None, failed=False):
        """Part NAME does not run: the log says LOGGED, the record WHY; for
        part 39 where a lookup FAILED, both say how long the line stays."""
        if failed and name == registry.REVOKE:
            stays = registry.LINE_STAYS % self.names["allow_file"]
            logged, why = "%s; %s" % (logged, stays), "%s; %s" % (why, stays)
        self.log.line(level, "skipping %s: %s" % (name, logged))
        self.outcomes[name] = outcome or ("skip", logged)
        return record.part_skipped(name, why)

    def finish(self, entries):
        """The end: the log's last line, then the record and the metrics."""
        self.log.info("end")
        if self.explain:
            return
        settings = self.settings
        job_end = {"other": self.other, "guard": self.guard} if self.stage == "epilog" else {}
        rec = record.build(self.stage, node=self.env.get("SLURMD_NODENAME"), release=self.release, start=self.start,
                           ms=self.elapsed() * 1000, warnings=self.log.warnings, parts=entries,
                           mode=settings.get("mode", "enforce"), stopped=self.stopped, stop_ignored=self.stop_ignored,
                           job=self.job, user=self.user, uid=self.env.get("SLURM_JOB_UID"), **job_end)
        record.write(self.trust, settings["record_file"], settings["record_max_kb"] * 1024, rec)
        if settings.get("metrics_file") and self.elapsed() < settings["chain_timeout"] - 3:
            from . import metrics  # pylint: disable=import-outside-toplevel - a node without the textfile never needs it

            metrics.update_metrics(self.trust, settings["metrics_file"], rec)
        self.records.append(rec)


def main(stage, argv0):
    """Epilog= / Prolog=: the chain of the release ARGV0 (the entry point
    Slurm ran, through slurm_config_dir's symlink to the current release) is
    in. Always 0."""
    os.umask(0o022)
    run = None
    try:
        release_dir = os.path.dirname(os.path.realpath(argv0))
        run = Run(release_dir, stage, dict(os.environ))
        run._listen_for_children()
        try:
            run.start_worker()
        except OSError:
            pass  # each part that needs it tries again, and says so
        run.prepare_marks()
        run.finish(run.chain())
    except Exception as exc:  # noqa: BLE001 - a non-zero epilog drains the node
        if run is not None:
            run.log.warning("the chain failed: %s: %s" % (type(exc).__name__, exc))
            run.stop_worker()
        else:
            logs.Log(None, system.Trust(), source=os.path.basename(argv0)).line(
                "warning", "cannot start: %s: %s" % (type(exc).__name__, exc))
    finally:
        if run is not None:
            _quietly(run.log.close, run.reap_workers)
    return 0


def _quietly(*calls):
    """Each of CALLS, whatever it raises: the end of a chain or a part (the
    log's close reports a deferred write error of its file system, EIO or
    ENOSPC) never makes the exit status non-zero, which drains the node."""
    for call in calls:
        try:
            call()
        except BaseException:  # noqa: BLE001 - nothing here may fail the job end
            pass


def part(argv0):
    """One of the formula's parts run on its own (by hand, or by a Slurm
    pointed at it): a lastuserjob part asks the guard itself and acts only
    on "act"; it never decides whether the user has another job. Always 0."""
    os.umask(0o022)
    run = None
    try:
        path = os.path.realpath(argv0)
        name, stage_dir = os.path.basename(path), os.path.dirname(path)
        stage = os.path.basename(stage_dir)[:-len(".d")]
        run = Run(os.path.dirname(stage_dir), stage, dict(os.environ), source=name)
        off = registry.not_run(name, run.settings)
        if off:
            run.log.info("not run: %s" % off.why)
            return 0
        if name in registry.ACTING:
            stop = run.stopped_by()
            if stop:
                run.log.info("not run: %s" % stop)
                return 0
        run.identity = guard.identity(run.user, run.env.get("SLURM_JOB_UID"), guard.resolve, run.account_chars)
        act_uid = None
        if registry.lastuserjob(name):
            verdict = guard.check(run.identity, run.user, run.names["localusers"])
            run.log.line(verdict.level, verdict.why)
            if verdict.answer == "unknown" and name == registry.REVOKE:
                run.log.line(verdict.level, registry.LINE_STAYS % run.names["allow_file"])
            if verdict.answer != "act":
                return 0
            act_uid = verdict.uid
        ctx = Context(run, name, act_uid, time.monotonic() + run.settings["part_timeout"], run.log.line,
                      lambda key, value: None)
        parts.action(name)(ctx)
    except Exception as exc:  # noqa: BLE001 - a non-zero epilog drains the node
        if run is not None:
            run.log.warning("failed: %s: %s" % (type(exc).__name__, exc))
    finally:
        if run is not None:
            _quietly(run.log.close)
    return 0


def leave(code):
    """Exit with CODE at once: what the entry points end with. Nothing is
    left to write (the log, the record and the metrics are closed), and
    python's own exit would spend milliseconds of every job end taking its
    modules apart."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(code)


def explain(release_dir, env, slurmd_pid=None):
    """What an epilog of the job ENV describes (SLURM_JOB_USER, _UID, _ID,
    SLURMD_NODENAME, SLURM_CONF) would decide on this node now, from the
    same code, with nothing run, written, locked or logged: the lines it
    would log [(level, line)], the last-job answer, the guard's verdict and
    each part's outcome {name: ("run", uid) or ("skip", why)}."""
    run = Run(release_dir, "epilog", env, explain=True, slurmd_pid=slurmd_pid)
    run.prepare_marks()
    run.finish(run.chain())
    return {"lines": run.log.captured, "other": run.other, "guard": run.guard, "parts": run.outcomes,
            "identity": run.identity, "mode": run.settings.get("mode", "enforce"),
            "stop_file": run.settings.get("stop_file"), "stopped": run.stopped, "stop_ignored": run.stop_ignored}


if __name__ == "__main__":  # pragma: no cover - the entry points call main() and part()
    sys.exit(main(sys.argv[1], sys.argv[0]))
