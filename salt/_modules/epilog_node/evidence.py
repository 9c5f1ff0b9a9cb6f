"""The last-job evidence: does the job's user have another job on this node?

decide(job, uid, facts, chain_timeout) answers yes, no or unknown, with the
evidence, from facts only root can have made (a user who floods slurmctld
cannot turn a node-local answer into "unknown" and so dodge the cleanup):

1. the marks the prolog leaves in the root-only run directory, read under
   the user's lock: a job of the user that started here and whose epilog has
   not begun ("running <epoch>"; only "done" means ended: an empty or torn
   mark is running) means yes, a job still in its prolog included. A mark
   older than chain_timeout + 60 s whose job has no slurmstepd here is a job
   of several nodes between its steps, or one whose epilog never ran: only
   the controller can tell, and one it no longer has is set aside;
2. no step socket (<node>_<job>.<step>) of another job in SlurmdSpoolDir,
   when it is slurmd's live spool (its cred_state is there) and only root
   can write it (Debian's belongs to the slurm user, who could plant or
   remove sockets): no;
3. root's real slurmstepd (the binary beside the running slurmd, or on PATH,
   in a directory only root can write) of another job running a process of
   the user: yes; no slurmstepd of root at all: no;
4. with marks that cover every job on the node, nothing above is a "no";
   otherwise only then the controller: squeue, under a timeout.

A user can name a process anything and parent it to anything of theirs, and
can write nothing the evidence reads. The facts come from NodeFacts, each
gathered when decide() first asks for it; the unit tests hand decide() facts
of their own.
"""
import os
import stat

from . import system

# answer: yes, no or unknown; why: the evidence; set_aside: jobs whose old
# marks the controller no longer has (they become "done"); complete: the
# marks now cover every job on the node (the run directory gets its stamp).
Answer = system.fields("Answer", "answer why set_aside complete")

# squeue's states that hold nothing on the node any more; any other
# (STOPPED, SUSPENDED, COMPLETING, RESIZING, a later Slurm's) counts as holding
ENDED = frozenset(("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                   "PREEMPTED", "TIMEOUT", "REVOKED"))


def _answer(answer, why, set_aside=(), complete=False):
    return Answer(answer, why, tuple(set_aside), complete)


def squeue_fields(line):
    """One line of squeue's "%A %T %S %U" as (job, state, start, uid), each
    checked: a field that fails its check reads as a job in an unknown state
    of an unknown user, started at 0 (the cautious reading)."""
    fields = line.split()
    fields += [""] * (4 - len(fields))
    job, state, start, uid = fields[:4]
    job = job if system.digits(job) else "unknown"
    state = state if state and all("A" <= c <= "Z" or c == "_" for c in state) else "UNKNOWN"
    start = int(start) if system.digits(start) and len(start) < 16 else 0
    uid = uid if system.digits(uid) else "unknown"
    return job, state, start, uid


def squeue_other(job, uid, facts):
    """The controller's answer: a job of UID on this node other than JOB that
    has not ended (one whose epilog has begun here, marked done, has). A line
    it cannot read could be one: yes."""
    lines, why = facts.squeue()
    if lines is None:
        return _answer("unknown", why)
    for line in lines:
        sjob, state, _, suid = squeue_fields(line)
        if suid != str(uid) and suid != "unknown":
            continue
        if sjob == job or state in ENDED:
            continue
        if sjob != "unknown" and facts.mark_state(uid, sjob) == "done":
            continue
        return _answer("yes", "squeue: job %s of uid %s on %s (%s)" % (sjob, suid, facts.node, state))
    return _answer("no", "squeue: no other job of uid %s on %s" % (uid, facts.node))


def marks_complete(facts):
    """Do the marks cover every job on this node? Once the controller has
    shown that no job on it started before the run directory (or each such
    job has a mark), a "complete" stamp says so for as long as the directory
    lives. Until then (a node where this formula was deployed under running
    jobs, or the directory was wiped) the marks are not enough for a no.
    (stamped, known): known is False when it cannot be told."""
    if facts.stamped_complete():
        return True, True
    since = facts.since()
    if since is None:
        return False, False
    lines, _ = facts.squeue()
    if lines is None:
        return False, False
    for line in lines:
        sjob, state, start, _ = squeue_fields(line)
        if state in ENDED or state == "PENDING":
            continue
        if sjob == "unknown":
            return False, False
        # the controller's clock, not this node's: a minute's slack
        if start >= since + 60:
            continue
        if not facts.marked(sjob):
            return False, False
    return False, True


def decide(job, uid, facts, chain_timeout):
    """Does UID have a job on this node other than JOB (strings of digits;
    JOB may be empty)? FACTS: a NodeFacts, or the unit tests' own."""
    if facts.marks_trusted:
        if not facts.locked:
            return _answer("unknown", "cannot lock %s/lock.%s (a prolog or epilog of the user holds it)"
                           % (facts.run_dir, uid))
        old = []
        for jid, state, started in facts.marks(uid, job):
            if state == "done":
                continue
            age = facts.now - started
            if age <= chain_timeout + 60:
                return _answer("yes", "node-local: job %s of uid %s started here %d s ago and has not ended"
                               % (jid, uid, age))
            old.append(jid)
        if old:
            stepd_jobs = set(facts.stepds(job)[1].values())
            for jid in old:
                if jid in stepd_jobs:
                    return _answer("yes", "node-local: job %s of uid %s runs here (root's slurmstepd of it)" % (jid, uid))
            other = squeue_other(job, uid, facts)
            if other.answer == "unknown":
                return _answer("unknown", "job(s) %s of uid %s marked as started here long ago, with no slurmstepd; "
                               "the controller cannot confirm they ended: %s" % (" ".join(old), uid, other.why))
            if other.answer == "yes":
                return other
            return _answer("no", other.why, set_aside=old)
    others = None
    if facts.spool_trusted:
        others = [jid for jid in facts.spool_jobs() if jid != job]
        if not others:
            return _answer("no", "node-local: no step of another job in %s" % facts.spool_dir)
    found, stepds = facts.stepds(job)
    if found == 1 and not others:
        return _answer("no", "node-local: no slurmstepd of root on this node")
    if stepds:
        held = facts.held_by_stepd(sorted(stepds), uid)
        if held is not None:
            return _answer("yes", "node-local: root's slurmstepd %d of another job runs process %d of uid %s"
                           % (held[1], held[0], uid))
    if facts.marks_trusted and found <= 1:
        stamped, complete = marks_complete(facts)
        if complete:
            return _answer("no", "node-local: no other job of uid %s marked here, and no slurmstepd of another "
                           "job runs a process of uid %s" % (uid, uid), complete=not stamped)
    return squeue_other(job, uid, facts)


def read_mark(path):
    """(state, start) of a mark: "done", or "running" (any other content,
    an empty or unreadable mark included), and its start (0 when unknown)."""
    try:
        fields = system.read_file(path, 256).split(b"\n", 1)[0].split()
    except OSError:
        fields = []
    state = "done" if fields[:1] == [b"done"] else "running"
    start = int(fields[1]) if len(fields) > 1 and system.digits(fields[1].decode("ascii", "replace")) else 0
    return state, start


class NodeFacts:
    """The facts of this node, each gathered when first asked for: RUN
    gives the settings, slurmd's environment, the trust, whether the marks
    count, and the running Slurm (slurm.Slurm) slurmstepd and squeue are
    asked of; nothing is asked back of the runner."""

    def __init__(self, run, locked, now):
        settings = run.settings
        self.slurm = run.slurm  # the running Slurm (slurm.Slurm): slurmstepd and squeue
        self.run_dir = settings["run_dir"]
        self.node = run.env.get("SLURMD_NODENAME", "")
        # %n and %h as slurmd expands them; with no node name to put for
        # %n, no spool is trusted (the marks, slurmstepd or squeue answer)
        self.spool_dir = system.slurmd_path(settings["slurmd_spool_dir"], self.node or None) or ""
        self.marks_trusted = run.marks_trusted
        self.locked = locked
        self.now = now
        self._stepds = {}
        self._squeue = None
        self.spool_trusted = bool(self.spool_dir) and run.trust.root_only(self.spool_dir) and \
            self._root_file(os.path.join(self.spool_dir, "cred_state"))

    @staticmethod
    def _root_file(path):
        try:
            st = os.lstat(path)
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and st.st_uid == 0

    def marks(self, uid, job):
        """[(job, state, start)] of UID's marks of other jobs than JOB, in
        name order."""
        prefix = "%s." % uid
        out = []
        try:
            names = sorted(name for name in os.listdir(self.run_dir) if name.startswith(prefix))
        except OSError:
            return out
        for name in names:
            jid = name[len(prefix):]
            path = os.path.join(self.run_dir, name)
            if not system.digits(jid) or jid == job or not os.path.isfile(path) or os.path.islink(path):
                continue
            state, start = read_mark(path)
            out.append((jid, state, start))
        return out

    def mark_state(self, uid, jid):
        path = os.path.join(self.run_dir, "%s.%s" % (uid, jid))
        if not self.marks_trusted or not os.path.isfile(path) or os.path.islink(path):
            return None
        return read_mark(path)[0]

    def marked(self, jid):
        """Does any mark name job JID?"""
        suffix = "." + jid
        try:
            names = os.listdir(self.run_dir)
        except OSError:
            return False
        for name in names:
            head = name[:-len(suffix)] if name.endswith(suffix) else ""
            if system.digits(head) and os.path.isfile(os.path.join(self.run_dir, name)):
                return True
        return False

    def stamped_complete(self):
        return os.path.isfile(os.path.join(self.run_dir, "complete"))

    def since(self):
        try:
            fields = system.read_file(os.path.join(self.run_dir, "since"), 256).split()
        except OSError:
            return None
        if len(fields) >= 2 and system.digits(fields[1].decode("ascii", "replace")):
            return int(fields[1])
        return None

    def spool_jobs(self):
        """The job ids of the step sockets in the spool (step_jobs)."""
        try:
            fd = os.open(self.spool_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return []
        try:
            return step_jobs(system.entries_in(fd, step_name))
        except OSError:
            return []
        finally:
            os.close(fd)

    def stepds(self, job):
        """(found, {pid: job}): found is 0 when root runs any process named
        slurmstepd, 1 when none, 2 when /proc, or a process named
        slurmstepd there, cannot be read (not gone: unreadable); then root's
        real slurmstepd processes of other jobs than JOB, each with its job
        id as its title says ("slurmstepd: [123.extern]")."""
        if job in self._stepds:
            return self._stepds[job]
        found, out = 1, {}
        try:
            pids = system.pids()
        except OSError:
            pids, found = [], 2
        for pid in pids:
            try:
                if system.read_in(None, "/proc/%s/comm" % pid, 64).rstrip(b"\n") != b"slurmstepd":
                    continue
                # one named so: its status, title and executable read through
                # one descriptor of its /proc/PID, all three that process's
                proc = system.open_proc(pid)
            except OSError as exc:
                if exc.errno in system.GONE:
                    continue
                found = 2  # a look that could not be taken: never "no slurmstepd"
                continue
            if proc is None:
                continue
            try:
                uids = system.uids_of(system.status_in(proc))
                if not uids or uids[0] != 0:
                    continue
                if found != 2:
                    found = 0
                title = system.read_in(proc, "cmdline", 256).replace(b"\0", b" ").decode("ascii", "replace")
                jid = title.split("[", 1)[1].split(".", 1)[0] if "[" in title else title
                if jid != job and self.slurm.real_stepd(int(pid), proc):
                    out[int(pid)] = jid
            except OSError as exc:
                if exc.errno not in system.GONE:
                    found = 2
            finally:
                os.close(proc)
        self._stepds[job] = (found, out)
        return found, out

    def held_by_stepd(self, stepd_pids, uid):
        """(pid, parent) of a process of UID (its real uid) whose parent is
        one of STEPD_PIDS and, read again now, still root's real slurmstepd
        (not a process of the user's that took over a slurmstepd's pid since);
        None when there is none."""
        wanted = set(stepd_pids)
        for pid in system.pids():
            parent = system.ppid(pid)
            if parent not in wanted:
                continue
            uids = system.uids_of(system.status(pid))
            if not uids or uids[0] != int(uid):
                continue
            parent = system.ppid(pid)
            if parent is not None and self.slurm.real_stepd(parent):
                return int(pid), parent
        return None

    def squeue(self):
        """(lines, None) of the controller's jobs on this node, of every
        user and in every state, "jobid STATE start-epoch uid", asked once
        per job end under squeue_timeout; or (None, why)."""
        if self._squeue is None:
            self._squeue = self.slurm.squeue()
        return self._squeue


def step_name(name):
    """NAME may be a step socket's in slurmd's spool: <node>_<job>.<step>."""
    return "_" in name and "." in name


def step_jobs(entries):
    """The job ids of the step sockets among ENTRIES, [(name, lstat mode)]
    of slurmd's spool: each socket of a step_name, <node>_<job>.<step>
    (slurmstepd's, one per step while it runs), gives its <job>."""
    return [name.rsplit("_", 1)[1].split(".", 1)[0] for name, mode in entries
            if step_name(name) and stat.S_ISSOCK(mode)]


def stale_job_dirs(base, node, entries, running):
    """job_container/tmpfs (namespace/tmpfs) keeps each job's /tmp and
    /dev/shm in a directory named by its job id, under BASE or BASE/NODE
    (ENTRIES: {directory: [names in it]}). Those of no job in RUNNING (the
    job ids of the spool's step sockets) are stale: a failed launch or
    teardown left them, and no job end removes them. Returns their paths."""
    stale = []
    for top in (base, base.rstrip("/") + "/" + node):
        for name in sorted(entries.get(top) or ()):
            if system.digits(name) and name not in running:
                stale.append(top.rstrip("/") + "/" + name)
    return stale
