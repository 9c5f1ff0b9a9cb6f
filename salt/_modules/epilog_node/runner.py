"""The chain: what epilog.sh and prolog.sh (Slurm's Epilog= and Prolog=) run.

It runs the formula's parts of its own release (<release>/epilog.d/) and the
site's executable parts in <slurm_config_dir>/epilog.d/, together in
ascending name order (Slurm's own Epilog=dir/* runs them in reverse), each
under a timeout and all within one deadline for the whole chain. Parts named
*-lastuserjob-* run only when the job's user has no other job on this node
(evidence.decide) and the localusers guard says act (guard.decide); when
either is unknown they are skipped. It always exits 0: a non-zero epilog
drains the node.

The formula's parts run in a worker, a process of the runner's own (a
fork: no exec, no interpreter start), one after another, in a process group
of its own that a part's timeout ends as a whole (the next part then gets a
new worker); each hands its log lines and its facts back on a pipe. A site's
part is exec'd in a group of its own, with nothing of the runner's open. When
no process can be forked (the user's processes hold every pid), the parts
that need none (IN_PROCESS: 39's revoke, 40's kill, the prolog's 50) run in
the runner itself, the fork is tried again once the kill has freed pids, and
each part that still gets no process is recorded as not run ("no free
pid"). The runner writes the log, the decision record and the metrics, all from the same
decisions. In explain mode (epilog.explain) it decides everything a job end
with these facts would decide, from the same code, and runs, writes, locks
and logs nothing.
"""
import errno
import os
import select
import struct
import sys
import time

from . import evidence, guard, parts, record, system
from . import log as logs
from .system import signal

SETTINGS = "settings.json"
# a part's own lines and facts, at most, on its pipe
PIPE_BYTES = 1 << 20
# how long a fork is tried again after a kill in the runner freed pids (the
# killed are reaped by their parents, or init, meanwhile), at most
FORK_PATIENCE = 1.0


class NoFork(Exception):
    """A part that needs a process of its own could not have one: the
    message says why (no free pid)."""


def fork_failure(exc):
    """Why a fork (or the pipes before it) failed, in words: EAGAIN is the
    node's pids used up (pid_max, threads-max, a pids cgroup's limit)."""
    if getattr(exc, "errno", None) == errno.EAGAIN:
        return "no free pid"
    return "cannot fork: %s" % (getattr(exc, "strerror", None) or exc)


# sched_setattr and sched_getattr, by machine (no python has them)
SCHED_ATTR_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275), "riscv64": (274, 275),
                       "loongarch64": (274, 275), "i686": (351, 352), "armv7l": (380, 381), "ppc64le": (355, 356),
                       "ppc64": (355, 356), "s390x": (345, 346)}
# struct sched_attr up to its utilization clamp (SCHED_ATTR_SIZE_VER1):
# size, policy, flags, nice, priority, runtime, deadline, period, util_min,
# util_max
SCHED_ATTR = "=IIQiIQQQII"
SCHED_ATTR_SIZE = struct.calcsize(SCHED_ATTR)
# SCHED_FLAG_KEEP_POLICY | KEEP_PARAMS | UTIL_CLAMP_MIN | UTIL_CLAMP_MAX:
# the clamp alone, the policy and nice value as they are
CLAMP_ONLY = 0x08 | 0x10 | 0x20 | 0x40
# what a kernel without CONFIG_UCLAMP_TASK (or sched_setattr) answers
NO_CLAMP = (errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)


def clamp_attr(clamp):
    """The struct sched_attr that sets a task's utilization clamp to CLAMP
    (util_min, util_max), and nothing else."""
    return struct.pack(SCHED_ATTR, SCHED_ATTR_SIZE, 0, CLAMP_ONLY, 0, 0, 0, 0, 0, clamp[0], clamp[1])


def clamp_of(raw):
    """(util_min, util_max) of a struct sched_attr that sched_getattr
    filled (zeros where the kernel has no clamp), or None when it is not
    one."""
    if len(raw) < SCHED_ATTR_SIZE:
        return None
    fields = struct.unpack(SCHED_ATTR, raw[:SCHED_ATTR_SIZE])
    return fields[8], fields[9]


def _sched_attr_calls():
    """(setattr, getattr) numbers and libc's syscall(), or None."""
    numbers = SCHED_ATTR_SYSCALLS.get(os.uname().machine)
    if not numbers:
        return None
    try:
        import ctypes  # pylint: disable=import-outside-toplevel - only a part run in the runner needs it

        syscall = ctypes.CDLL(None, use_errno=True).syscall
        syscall.restype = ctypes.c_long
    except (ImportError, OSError, AttributeError):
        return None
    return numbers, syscall, ctypes


def utilization_clamp():
    """This process's utilization clamp (util_min, util_max), as
    sched_getattr reads it, or None where it cannot be read."""
    calls = _sched_attr_calls()
    if calls is None:
        return None
    numbers, syscall, ctypes = calls
    buf = ctypes.create_string_buffer(SCHED_ATTR_SIZE)
    if syscall(ctypes.c_long(numbers[1]), ctypes.c_int(0), buf, ctypes.c_uint(SCHED_ATTR_SIZE), ctypes.c_uint(0)):
        return None
    return clamp_of(buf.raw)


def set_utilization_clamp(clamp):
    """This process's utilization clamp set to CLAMP (sched_setattr, its
    policy and nice value kept): None, or the errno it was refused with."""
    calls = _sched_attr_calls()
    if calls is None:
        return errno.ENOSYS
    numbers, syscall, ctypes = calls
    attr = ctypes.create_string_buffer(clamp_attr(clamp), SCHED_ATTR_SIZE)
    if syscall(ctypes.c_long(numbers[0]), ctypes.c_int(0), attr, ctypes.c_uint(0)):
        return ctypes.get_errno()
    return None


def scheduling():
    """What another uid's process may change of this one while it acts as
    that uid (sched_setaffinity, setpriority, sched_setscheduler and
    sched_setattr need only its effective uid): its nice value, scheduling
    policy, CPU mask and utilization clamp (uclamp_min, uclamp_max), as a
    call that puts them back (as root), or None when they cannot be read.
    The call returns None, or a note that the clamp, changed, could not be
    put back because the kernel sets none (no CONFIG_UCLAMP_TASK: no
    process could have changed it either); any other refusal raises."""
    try:
        nice = os.getpriority(os.PRIO_PROCESS, 0)
        policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return None
    clamp = utilization_clamp()

    def restore():
        os.sched_setscheduler(0, policy, param)
        os.setpriority(os.PRIO_PROCESS, 0, nice)
        os.sched_setaffinity(0, cpus)
        if clamp is None or utilization_clamp() == clamp:
            return None
        code = set_utilization_clamp(clamp)
        if code in NO_CLAMP:
            return "the kernel sets no utilization clamp (%s): not put back" % errno.errorcode.get(code, code)
        if code:
            raise OSError(code, "sched_setattr (utilization clamp): %s" % os.strerror(code))
        return None
    return restore


def load(release_dir):
    """(settings, rules, layout) of the release: settings.json, which the
    state renders from map.jinja's merge, and nothing else."""
    data = system.loads(system.read_file(os.path.join(release_dir, SETTINGS), 4 << 20).decode("utf-8"))
    return data["settings"], data["rules"], data["layout"]


class Context:
    """What a part's action is handed: the settings and the names of what it
    edits, the job, the user's identity, the uid to act for (a lastuserjob
    part the runner started), its deadline, log(level, line) and
    fact(key, value) for the record."""

    def __init__(self, run, name, act_uid, deadline, log, fact):
        self.settings, self.names, self.trust, self.env = run.settings, run.names, run.trust, run.env
        self.job, self.user, self.identity = run.job, run.user, run.identity
        self.name, self.act_uid, self.deadline, self.log, self.fact = name, act_uid, deadline, log, fact


class Run:
    """One run of the chain, or of a part on its own, on one release."""

    def __init__(self, release_dir, stage, env, explain=False, slurmd_pid=None, source=None):
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
        prefix = stage + ".d/"
        self.own = [os.path.basename(s["path"]) for s in layout["scripts"] if s["path"].startswith(prefix)]
        self.retired = [os.path.basename(r["path"]) for r in layout["retired"] if r["path"].startswith(prefix)]
        self.site_dir = os.path.join(confdir, stage + ".d")
        self.own_dir = os.path.join(release_dir, stage + ".d")
        self.job, self.user = env.get("SLURM_JOB_ID") or None, env.get("SLURM_JOB_USER")
        self.trust = system.Trust()
        self.log = logs.Log(settings["log_file"], self.trust, job=self.job, user=self.user, release=self.release,
                            max_bytes=settings["log_max_kb"] * 1024, explain=explain, source=self.source)
        self.identity = None
        self.slurmd_pid = os.getppid() if slurmd_pid is None else slurmd_pid
        self._slurm_dirs = None
        self._tools = {}
        self.run_dir = settings["run_dir"]
        self.marks_trusted = False
        self.other = None
        self.guard = None
        self.stopped = None  # the stop file, once the brake stopped a part
        self.stop_ignored = None  # why a stop file there was ignored
        self.outcomes = {}
        self.records = []
        self._ending = []  # workers that ended, to reap
        self._worker_fds = set()  # the runner's ends of the worker's pipes
        self._groups = os.getgroups()  # a worker's, and the runner's after a part in it, to be checked

    # -- the running Slurm ----------------------------------------------------------
    def slurm_dirs(self):
        """Where a Slurm tool may come from: beside the running slurmd (the
        runner's parent; Debian names the binary slurmd-wlm) and the bin
        beside its sbin, before PATH. A node may carry more than one Slurm
        (a distro package beside a site's build under /opt): only the running
        slurmd's own slurmstepd and squeue speak for it."""
        if self._slurm_dirs is None:
            dirs = []
            try:
                if self.slurmd_pid and os.lstat("/proc/%d" % self.slurmd_pid).st_uid == 0:
                    exe = os.readlink("/proc/%d/exe" % self.slurmd_pid)
                    if exe.endswith(" (deleted)"):
                        exe = exe[:-len(" (deleted)")]
                    plain = exe.startswith("/") and system.plain(exe, "._+@/-")
                    if plain and os.path.basename(exe) in ("slurmd", "slurmd-wlm", "slurmstepd", "slurmstepd-wlm"):
                        dirs.append(os.path.dirname(exe))
                        if dirs[0].endswith("/sbin"):
                            dirs.append(dirs[0][:-len("/sbin")] + "/bin")
            except (OSError, ValueError):
                pass
            self._slurm_dirs = dirs + system.PATH.split(":")
        return self._slurm_dirs

    def slurm_tool(self, name):
        """The first NAME in slurm_dirs() that only root can have put there:
        in a directory only root can write, a regular executable file of
        root's that group and others cannot write (a symlink counts by what
        it resolves to, which must pass the same test)."""
        if name not in self._tools:
            found = None
            for directory in self.slurm_dirs():
                if not self.trust.root_only(directory) or not os.path.lexists(os.path.join(directory, name)):
                    continue
                found = self.trust.root_tool(os.path.join(directory, name))
                if found:
                    break
            self._tools[name] = found
        return self._tools[name]

    def real_stepd(self, pid):
        """Is PID root's real slurmstepd? A user can name a process anything
        and parent their own processes to it; only root's own process running
        the slurmstepd binary counts (a zombie has no executable, and never
        counts)."""
        stepd = self.slurm_tool("slurmstepd")
        if not stepd:
            return False
        try:
            if os.lstat("/proc/%d" % pid).st_uid != 0:
                return False
            return os.path.samestat(os.stat("/proc/%d/exe" % pid), os.stat(stepd))
        except OSError:
            return False

    def squeue(self):
        """(lines, None): the controller's jobs on this node, of every user
        and in every state, "jobid STATE start-epoch uid", asked under
        squeue_timeout; or (None, why). Users choose none of these fields."""
        node = self.env.get("SLURMD_NODENAME")
        if not node:
            return None, "SLURMD_NODENAME is unset"
        # squeue's answer is only as good as the slurm.conf it reads: one
        # another account can rewrite (configless mode caches it in the
        # spool, the slurm user's on Debian) could point it at a controller
        # of theirs.
        conf = self.env.get("SLURM_CONF") or ""
        conf_dir = os.path.dirname(conf) if conf.startswith("/") and conf.count("/") > 1 else ""
        if conf_dir and not self.conf_dir_root_only(conf_dir):
            return None, "SLURM_CONF is in %s, which another account can write; squeue not asked" % system.show(conf_dir)
        tool = self.slurm_tool("squeue")
        if not tool:
            return None, "no squeue only root can have put beside slurmd or on PATH"
        import subprocess  # only when the controller is asked  # pylint: disable=import-outside-toplevel

        env = dict(self.child_env(), SLURM_TIME_FORMAT="%s")
        try:
            proc = subprocess.run([tool, "--noheader", "--nodelist=" + node, "--states=all", "--format=%A %T %S %U"],
                                  env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, timeout=self.settings["squeue_timeout"], check=False)
        except subprocess.TimeoutExpired:
            return None, "squeue failed or timed out (rc=124)"
        except OSError as exc:
            return None, "squeue failed or timed out (%s)" % exc.strerror
        if proc.returncode != 0:
            return None, "squeue failed or timed out (rc=%d)" % proc.returncode
        return [line for line in proc.stdout.decode("ascii", "replace").split("\n") if line.strip()], None

    @staticmethod
    def conf_dir_root_only(conf_dir):
        """Whether only root can write CONF_DIR, the directory of the
        SLURM_CONF squeue is given, or it is not there and only root can
        make it (its deepest directory that is there is one only root can
        write: squeue then finds no slurm.conf and fails; under a directory
        another account writes it could be made, or be a dangling symlink
        made real, between this look and squeue's): judged as roots.Root
        judges a slurmd's paths, on the descriptor of each directory its
        resolution goes through; a /proc/PID/root/... directory (a slurmd's
        own, in its mount namespace) resolved in that root, never through
        the magic link."""
        from . import roots  # pylint: disable=import-outside-toplevel

        pid, inner = roots.split(conf_dir)
        try:
            root = roots.Root(pid)
        except OSError:
            return False
        try:
            while not root.exists(inner) and inner not in ("/", ""):
                inner = os.path.dirname(inner)
            return root.root_only(inner or "/")
        finally:
            root.close()

    def child_env(self):
        env = dict(self.env)
        env.update(PATH=system.PATH, LC_ALL="C")
        return env

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
        if self.other.answer == "unknown":
            self.log.warning("start; other jobs of this user on this node: unknown (%s); skipping the lastuserjob "
                             "parts" % self.other.why)
        else:
            self.log.info("start; other jobs of this user on this node: %s (%s)" % (self.other.answer,
                                                                                     self.other.why))
        return lock, locked_at

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
        """The release's own parts and the site's, merged in name order
        (bytewise). A site part named as one of the formula's (or as one an
        earlier version laid down) is never run: the release's copy is the
        one. Only run-parts names count (this skips editor and package
        leftovers). A site part runs as root: only a regular file (not a
        symlink: what it points to may sit where another account can
        write), root's, that nobody else can write, in a directory only root
        can write; nobody else can then change it between this check and its
        run. [(name, path, own, why not)]."""
        def names(directory):
            try:
                return os.listdir(directory)
            except OSError:
                return []

        def run_parts_name(name):
            return len(name) > 3 and system.digits(name[:2]) and name[2] == "-" and system.plain(name[3:], "_-")

        found = {}
        for name in names(self.own_dir):
            if name in self.own:
                found[name] = (os.path.join(self.own_dir, name), True)
        site_ok = self.trust.root_only(self.site_dir)
        for name in names(self.site_dir):
            if name in self.own or name in self.retired or not run_parts_name(name):
                continue
            found.setdefault(name, (os.path.join(self.site_dir, name), False))
        out = []
        for name in sorted(found, key=os.fsencode):
            path, own = found[name]
            if not run_parts_name(name):
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if own:
                if os.path.isfile(path) and os.access(path, os.X_OK):
                    out.append((name, path, True, None))
                continue
            if not os.path.isfile(path) or not os.access(path, os.X_OK):
                continue
            if not (site_ok and (st.st_mode & 0o170000) == 0o100000 and st.st_uid == 0 and not st.st_mode & 0o022):
                out.append((name, path, False, "not root's alone"))
            else:
                out.append((name, path, False, None))
        return out

    def run_own(self, name, seconds, act_uid, close, more=False):
        """Run the formula's part NAME in the worker (started for it when
        there is none), for at most SECONDS: then the worker's group gets
        SIGTERM, and SIGKILL 2 s later, and the next part gets a new worker.
        Its log lines and facts come back on a pipe, as they happen (a part
        stopped at its timeout has logged what it did). A worker that ended
        before it began the part (killed while it waited) is replaced, once.
        MORE: the formula has parts after this one; when NAME ends its
        worker (40), the next worker is forked while NAME runs, not after.
        When no worker can be forked, NAME runs in the runner itself if it
        can (run_here), else NoFork is raised.
        (exit status, 124 when it timed out; facts)."""
        deadline = time.monotonic() + seconds
        identity = None if self.identity is None else list(self.identity)
        command = (system.dumps([name, deadline - 1, act_uid, identity]) + "\n").encode("ascii")
        for _ in range(2):
            if self._worker is None:
                # the patience a kill in the runner earned is spent on the next fork alone
                patience, self._fork_patience = min(self._fork_patience, seconds / 2), 0.0
                try:
                    self.start_worker(close, patience=patience)
                except OSError as exc:
                    why = fork_failure(exc)
                    if name not in parts.IN_PROCESS:
                        raise NoFork(why) from exc
                    return self.run_here(name, deadline, act_uid, why)
            try:
                os.write(self._worker[1], command)
            except OSError:  # its end of the pipe is closed: it is gone
                self._end_worker(reap=True)
                continue
            if more and name in parts.ENDS_WORKER and self._spare is None:
                # ready on another CPU by the time NAME is done (it is
                # root's alone, in a group of its own: NAME's kill, sent
                # as the user, cannot reach it); only a head start: a fork
                # refused now (the user's processes still hold the node's
                # pids or memory) leaves the next part to fork its own
                try:
                    self._spare = self._start_worker(close, warm=True)
                except OSError:
                    self._spare = None
            result = self._follow(name, deadline)
            if result is not None:
                return result
        return 1, {}

    def _follow(self, name, deadline):
        """The worker's replies for part NAME, until it is done or past its
        DEADLINE. (exit status, facts), or None when the worker ended before
        it began the part."""
        pid, _, replies = self._worker
        facts, pending, size, timed_out, code, last, began = {}, b"", 0, False, None, False, False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                if timed_out:
                    break
                self._signal_group(pid, signal.SIGTERM)
                timed_out, deadline = True, time.monotonic() + 2
                continue
            if not select.select([replies], [], [], left)[0]:
                continue
            data = os.read(replies, 1 << 16)
            if not data:
                break  # the worker is gone
            size += len(data)
            pending += data
            *lines, pending = pending.split(b"\n")
            if len(pending) > PIPE_BYTES:
                pending = b""  # a line without an end: dropped
            for raw in lines:
                # past PIPE_BYTES a part's lines and facts are dropped, never its end
                said = self._message(name, raw, facts, keep=size <= PIPE_BYTES)
                if said == "begin":
                    began = True
                elif said is not None:
                    code, last = said
            if code is not None and not timed_out and not last:
                return code, facts
            if code is not None:
                break
        # This worker runs no other part: the part ended it, or ran past its
        # timeout, or it is gone.
        rc = self._end_worker(kill=timed_out, reap=timed_out or code is None)
        if not began and code is None and not timed_out:
            return None
        return (124 if timed_out else code if code is not None else rc or 1), facts

    _worker = None
    _spare = None  # the next worker, started ahead (run_own's MORE)
    _fork_patience = 0.0  # FORK_PATIENCE once a kill in the runner freed pids
    unfit = None  # why the runner runs no part more (its own credentials)
    _said_clamp = False  # the log said the kernel sets no utilization clamp

    def run_here(self, name, deadline, act_uid, why):
        """Part NAME (one of parts.IN_PROCESS) in the runner itself, when no
        worker could be forked (WHY), until DEADLINE, which nothing but the
        part's own bounds enforces (39's lock wait, 40's rounds): its log
        lines go to the log, its facts to the record, with ran_in_runner:
        WHY. 40's kill acts as the user for a moment: its uids, groups and
        anything the user could change meanwhile (scheduling()) are put
        back, and the next fork is tried again for FORK_PATIENCE (the killed
        free their pids once reaped; the forks after it are not). Were its
        credentials not wholly root's again, no part runs after it. (exit
        status, facts)."""
        self.log.warning("no process of its own for %s (%s): it runs in the runner itself" % (name, why))
        facts = {}
        restore = scheduling()
        ctx = Context(self, name, act_uid, deadline - 1, lambda level, text: self.log.line(level, text, source=name),
                      facts.__setitem__)
        code = 1
        try:
            parts.ACTIONS[name](ctx)
            code = 0
        except Exception as exc:  # noqa: BLE001 - the chain goes on, and the log says why
            self.log.line("warning", "failed: %s: %s" % (type(exc).__name__, exc), source=name)
        finally:
            if name in parts.ENDS_WORKER:
                try:
                    note = restore() if restore is not None else None
                    if note and not self._said_clamp:
                        self._said_clamp = True
                        self.log.line("info", note, source=name)
                except OSError as exc:
                    self.log.warning("cannot put the runner's scheduling back after %s: %s" % (name, exc))
                if os.getresuid() != (0, 0, 0) or os.getresgid() != (0, 0, 0) or os.getgroups() != self._groups:
                    self.unfit = "the runner's credentials are not root's alone after %s" % name
                    self.log.warning(self.unfit)
                self._fork_patience = FORK_PATIENCE
        facts["ran_in_runner"] = why
        return code, facts

    def _end_worker(self, kill=False, reap=False):
        """The end of the worker: its pipes closed (it reads the end of its
        commands and exits), its group killed first (KILL), and reaped now
        (REAP: its exit status) or by reap_workers, once the record is
        written."""
        pid, commands, replies = self._worker
        self._worker, self._spare = self._spare, None
        for fd in (commands, replies):
            os.close(fd)
            self._worker_fds.discard(fd)
        if kill:
            self._signal_group(pid, signal.SIGKILL)
        if reap:
            return self._reap(pid)
        self._ending.append(pid)
        return None

    def stop_worker(self):
        """The end of the worker (and of a spare no part took), once the
        chain's parts are done."""
        while self._worker is not None:
            self._end_worker()

    def reap_workers(self):
        """The workers that were told to end (their pipes closed), reaped:
        all together get 1 s to exit, then SIGKILL and at most 1 s more."""
        until = time.monotonic() + 1
        for pid in self._ending:
            if self._reap(pid, max(0.0, until - time.monotonic())) is None:
                self._signal_group(pid, signal.SIGKILL)
                self._reap(pid, max(0.0, until + 1 - time.monotonic()))
        self._ending = []

    def start_worker(self, close=(), patience=0.0):
        """The worker, started before it is needed (main starts it first
        thing: it gets ready on another CPU while the runner decides). A
        fork refused for want of a pid is tried again for PATIENCE seconds;
        then the OSError is raised."""
        until, pause = time.monotonic() + patience, 0.001
        while True:
            try:
                self._worker = self._start_worker(close)
                return
            except OSError as exc:
                if exc.errno != errno.EAGAIN or time.monotonic() + pause > until:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _start_worker(self, close, warm=False):
        """The process the formula's parts run in, one after another (a
        fork: no exec, no interpreter start): in a process group of its own
        (a timeout ends it as a whole), with nothing of the runner's open but
        its two pipes (CLOSE: the user's lock). It runs no part after one
        that changed its credentials (ENDS_WORKER: 40's kill acts as the
        user, who may renice it meanwhile) or left it anything but wholly
        root. WARM: it imports what the later parts import only when they
        run, before it waits for its first command. (pid, the command pipe's
        write end, the reply pipe's read end)."""
        command_read, command_write = os.pipe()
        reply_read, reply_write = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            for fd in (command_read, command_write, reply_read, reply_write):
                os.close(fd)
            raise
        if pid == 0:  # the worker
            code = 1
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in {command_write, reply_read, *close, *self._wakeup_fds, *self._worker_fds}:
                    os.close(fd)
                os.setpgid(0, 0)
                null = os.open("/dev/null", os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                if warm:
                    parts.warm(self.settings)
                self._serve(command_read, reply_write)
                code = 0
            finally:
                os._exit(code)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        os.close(command_read)
        os.close(reply_write)
        self._worker_fds.update((command_write, reply_read))
        return pid, command_write, reply_read

    def _serve(self, commands, replies):
        """The worker's loop: a part per command line, [name, deadline,
        uid, the job's identity], until the runner closes the pipe, or a
        part leaves it unfit for another."""
        def send(*message):
            try:
                os.write(replies, (system.dumps(message) + "\n").encode("ascii"))
            except OSError:
                pass

        pending = b""
        while True:
            while b"\n" not in pending:
                data = os.read(commands, 4096)
                if not data:
                    return
                pending += data
            raw, pending = pending.split(b"\n", 1)
            name, deadline, act_uid, identity = system.loads(raw.decode("ascii"))
            send("begin", "", name)
            self.identity = None if identity is None else guard.Identity(*identity)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            # the part's own sense of its deadline is a second before the
            # runner's SIGTERM: time to say what it did
            ctx = Context(self, name, act_uid, deadline, lambda level, text: send("log", level, text),
                          lambda key, value: send("fact", key, value))
            code = 1
            try:
                parts.ACTIONS[name](ctx)
                code = 0
            except Exception as exc:  # noqa: BLE001 - the chain goes on, and the log says why
                send("log", "warning", "failed: %s: %s" % (type(exc).__name__, exc))
            fit = name not in parts.ENDS_WORKER and os.getresuid() == (0, 0, 0) and os.getresgid() == (0, 0, 0) \
                and os.getgroups() == self._groups
            send("done", "" if fit else "last", code)
            if not fit:
                return

    def _message(self, name, raw, facts, keep=True):
        """One line from the worker: "begin" (it took part NAME's command),
        (exit status, its last part?) when the part is done, else None (a
        log line or a fact of the part, taken when KEEP)."""
        try:
            kind, key, value = system.loads(raw.decode("ascii"))
        except (ValueError, TypeError, UnicodeDecodeError):
            return None
        if kind == "begin":
            return "begin"
        if kind == "done" and isinstance(value, int) and not isinstance(value, bool):
            return value, key == "last"
        if not keep:
            return None
        if kind == "log" and key in ("info", "warning") and isinstance(value, str):
            self.log.line(key, value, source=name)
        elif kind == "fact" and isinstance(key, str) and key and all("a" <= c <= "z" or c == "_" for c in key):
            facts[key] = value
        return None

    @staticmethod
    def _signal_group(pid, sig):
        try:
            os.killpg(pid, sig)
        except OSError:
            pass

    @staticmethod
    def _reap(pid, seconds=1.0):
        """PID's exit status once it has gone, waited for at most SECONDS
        (it was sent SIGKILL): a process that SIGKILL cannot end (one in an
        uninterruptible wait, on a FUSE daemon that never answers or a hung
        NFS or Lustre server) is left behind, None, never waited on past
        the chain's deadline; the runner's os._exit leaves it to init."""
        until, pause = time.monotonic() + seconds, 0.0005
        while True:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return 0
            if done:
                return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
            if time.monotonic() >= until:
                return None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def run_site(self, path, seconds):
        """Exec the site's part PATH in a process group of its own, with
        nothing of the runner's open (stdin, stdout and stderr /dev/null:
        what it leaves running cannot hold the runner up), for at most
        SECONDS: then SIGTERM to its group, SIGKILL 2 s later, as timeout(1)
        does; and with the signals python ignores (SIGPIPE, SIGXFSZ) back to
        their defaults and none blocked (whatever the runner was started
        with), as a shell would start it. Its exit status, 124 when it timed
        out."""
        env = self.child_env()
        pid = self._fork()
        if pid == 0:
            try:
                os.setpgid(0, 0)
                for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ):
                    signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_SETMASK, [])
                null = os.open("/dev/null", os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.execve(path, [path], env)
            finally:
                os._exit(126)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        return self._wait(pid, seconds)

    def _fork(self):
        """os.fork(), tried again for _fork_patience (once) when refused for
        want of a pid; NoFork when it still is."""
        until, pause = time.monotonic() + self._fork_patience, 0.001
        self._fork_patience = 0.0
        while True:
            try:
                return os.fork()
            except OSError as exc:
                if exc.errno != errno.EAGAIN or time.monotonic() + pause > until:
                    raise NoFork(fork_failure(exc)) from exc
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _wait(self, pid, seconds):
        deadline, timed_out, pause = time.monotonic() + seconds, False, 0.0005
        while True:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return 124 if timed_out else 0
            if done:
                if timed_out:
                    return 124
                return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
            left = deadline - time.monotonic()
            if left <= 0:
                if timed_out:
                    self._signal_group(pid, signal.SIGKILL)
                    self._reap(pid)
                    return 124
                self._signal_group(pid, signal.SIGTERM)
                timed_out, deadline, pause = True, time.monotonic() + 2, 0.0005
                continue
            # woken by SIGCHLD (set_wakeup_fd), or at the next pause
            if self._wakeup is not None:
                if select.select([self._wakeup], [], [], min(left, 0.05))[0]:
                    try:
                        os.read(self._wakeup, 512)
                    except OSError:
                        pass
            else:
                time.sleep(min(left, pause))
                pause = min(pause * 2, 0.02)

    _wakeup = None
    _wakeup_fds = ()

    def _listen_for_children(self):
        """SIGCHLD wakes the waits for site parts at once."""
        try:
            read_end, write_end = os.pipe()
            os.set_blocking(write_end, False)
            signal.signal(signal.SIGCHLD, lambda signum, frame: None)
            signal.set_wakeup_fd(write_end)
            self._wakeup, self._wakeup_fds = read_end, (read_end, write_end)
        except (OSError, ValueError):
            self._wakeup = None

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
        off = {name: parts.not_run(name, self.settings) for name, _, own, _ in found if own}
        own_after = sum(1 for name, _, own, why in found if own and not off[name])
        lastuserjob = sum(1 for name, _, _, why in found if "-lastuserjob-" in name and why is None
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
            if "-lastuserjob-" in name and why is None:
                lastuserjob -= 1
            if own:
                own_after -= 1
            if why:
                entries.append(self.skip(name, "warning", "%s is not a directory only root can write, or the part "
                                         "is a symlink, not root's or writable by group or others" % self.site_dir, why))
                continue
            # The chain's own deadline: a part gets at most part_timeout, and
            # never more than what is left of chain_timeout once the formula's
            # own parts still to come have their part_timeout + 2 each (a site
            # part cannot eat the time 39 and 40 need), less 5 s: 2 to kill a
            # part, 1 for the whole seconds, 2 for the syslog and the exit.
            left = self.room(own_after)
            if left < 1:
                entries.append(self.past_deadline(name))
                continue
            act_uid = None
            if self.stage == "epilog" and "-lastuserjob-" in name:
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
            if own and name in parts.ACTING:
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
                                             more=own_after > 0)
                else:
                    rc, facts = self.run_site(path, left), {}
            except NoFork as exc:
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
        """The seconds a part may have now: at most part_timeout, and never
        more than what is left of chain_timeout once the formula's OWN_AFTER
        parts still to come have their part_timeout + 2 each, less 5."""
        part_timeout, chain_timeout = self.settings["part_timeout"], self.settings["chain_timeout"]
        return min(part_timeout, int(chain_timeout - self.elapsed() - 5 - own_after * (part_timeout + 2)))

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
                                    ", ".join(name[:2] for name in parts.ACTING), found.path))
            return found.why
        if self.stop_ignored is None:
            self.stop_ignored = found.why
            self.log.warning("stop file %s" % found.why)
        return None

    def skip(self, name, level, logged, why, outcome=None, failed=False):
        """Part NAME does not run: the log says LOGGED, the record WHY; for
        part 39 where a lookup FAILED, both say how long the line stays."""
        if failed and name == parts.REVOKE:
            stays = parts.LINE_STAYS % self.names["allow_file"]
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
        rec = record.build(self.stage, self.env.get("SLURMD_NODENAME"), self.job, self.user,
                           self.env.get("SLURM_JOB_UID"), self.release, self.start, self.elapsed() * 1000,
                           self.other if self.stage == "epilog" else None, self.guard, self.log.warnings, entries,
                           mode=settings.get("mode", "enforce"), stopped=self.stopped, stop_ignored=self.stop_ignored)
        record.write(self.trust, settings["record_file"], settings["record_max_kb"] * 1024, rec)
        if settings.get("metrics_file") and self.elapsed() < settings["chain_timeout"] - 3:
            record.update_metrics(self.trust, settings["metrics_file"], rec)
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
        off = parts.not_run(name, run.settings)
        if off:
            run.log.info("not run: %s" % off.why)
            return 0
        if name in parts.ACTING:
            stop = run.stopped_by()
            if stop:
                run.log.info("not run: %s" % stop)
                return 0
        run.identity = guard.identity(run.user, run.env.get("SLURM_JOB_UID"), guard.resolve, run.account_chars)
        act_uid = None
        if "-lastuserjob-" in name:
            verdict = guard.check(run.identity, run.user, run.names["localusers"])
            run.log.line(verdict.level, verdict.why)
            if verdict.answer == "unknown" and name == parts.REVOKE:
                run.log.line(verdict.level, parts.LINE_STAYS % run.names["allow_file"])
            if verdict.answer != "act":
                return 0
            act_uid = verdict.uid
        ctx = Context(run, name, act_uid, time.monotonic() + run.settings["part_timeout"], run.log.line,
                      lambda key, value: None)
        parts.ACTIONS[name](ctx)
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
