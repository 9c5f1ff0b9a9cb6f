"""The worker: how the chain runs a part, apart from which parts it runs
(the runner's rules).

The formula's parts run in a worker, a process of the runner's own (a
fork: no exec, no interpreter start), one after another, in a process group
of its own that a part's timeout ends as a whole (the next part then gets a
new worker); each hands its log lines and its facts back on a pipe. A site's
part is exec'd in a group of its own, with nothing of the runner's open. When
no process can be forked (the user's processes hold every pid), the parts
that need none (IN_PROCESS: 39's revoke, 40's kill, the prolog's 50) run in
the runner itself, with its scheduling put back after (scheduling()), the
fork is tried again once the kill has freed pids, and each part that still
gets no process is NoFork ("no free pid").
"""
import errno
import os
import select
import time

from . import guard, parts, registry, system
from .context import Context
from .system import signal

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
# (struct.calcsize of it, 56: struct is imported only by a part run in the
# runner, not by every job end)
SCHED_ATTR = "=IIQiIQQQII"
SCHED_ATTR_SIZE = 56
# SCHED_FLAG_KEEP_POLICY | KEEP_PARAMS | UTIL_CLAMP_MIN | UTIL_CLAMP_MAX:
# the clamp alone, the policy and nice value as they are
CLAMP_ONLY = 0x08 | 0x10 | 0x20 | 0x40
# what a kernel without CONFIG_UCLAMP_TASK (or sched_setattr) answers
NO_CLAMP = (errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)


def clamp_attr(clamp):
    """The struct sched_attr that sets a task's utilization clamp to CLAMP
    (util_min, util_max), and nothing else."""
    import struct  # pylint: disable=import-outside-toplevel - only a part run in the runner needs it

    return struct.pack(SCHED_ATTR, SCHED_ATTR_SIZE, 0, CLAMP_ONLY, 0, 0, 0, 0, 0, clamp[0], clamp[1])


def clamp_of(raw):
    """(util_min, util_max) of a struct sched_attr that sched_getattr
    filled (zeros where the kernel has no clamp), or None when it is not
    one."""
    import struct  # pylint: disable=import-outside-toplevel - only a part run in the runner needs it

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


class Worker:
    """The worker's side of a run of the chain (runner.Run is one): it
    forks, feeds, follows and reaps the worker, execs the site's parts and
    runs a part in the runner itself when no worker can be had. It reads
    the run's log and settings, and what a part's Context carries (the
    names, trust, env, job, user and identity), and nothing of its rules."""

    _worker = None
    _spare = None  # the next worker, started ahead (run_own's MORE)
    _fork_patience = 0.0  # FORK_PATIENCE once a kill in the runner freed pids
    unfit = None  # why the runner runs no part more (its own credentials)
    _said_clamp = False  # the log said the kernel sets no utilization clamp
    _wakeup = None  # SIGCHLD's wakeup pipe (_listen_for_children)
    _wakeup_fds = ()

    def __init__(self):
        self._ending = []  # workers that ended, to reap
        self._worker_fds = set()  # the runner's ends of the worker's pipes
        self._groups = os.getgroups()  # a worker's, and the runner's after a part in it, to be checked

    def run_own(self, name, seconds, act_uid, close, more=False, last=False):
        """Run the formula's part NAME in the worker (started for it when
        there is none), for at most SECONDS: then the worker's group gets
        SIGTERM, and SIGKILL 2 s later, and the next part gets a new worker.
        Its log lines and facts come back on a pipe, as they happen (a part
        stopped at its timeout has logged what it did). A worker that ended
        before it began the part (killed while it waited) is replaced, once.
        MORE: the formula has parts after this one; when NAME ends its
        worker (40), the next worker is forked while NAME runs, not after.
        LAST: no part of the formula's runs after NAME; the worker is told
        so, and ends with it.
        When no worker can be forked, NAME runs in the runner itself if it
        can (run_here), else NoFork is raised.
        (exit status, 124 when it timed out; facts)."""
        deadline = time.monotonic() + seconds
        identity = None if self.identity is None else list(self.identity)
        command = (system.dumps([name, deadline - 1, act_uid, identity]) + "\n").encode("ascii")
        for _ in range(2):
            if self._worker is not None and self._worker[1] is None:
                self._end_worker()  # it was told it had its last part
            if self._worker is None:
                # the patience a kill in the runner earned is spent on the next fork alone
                patience, self._fork_patience = min(self._fork_patience, seconds / 2), 0.0
                try:
                    self.start_worker(close, patience=patience)
                except OSError as exc:
                    why = fork_failure(exc)
                    if name not in registry.IN_PROCESS:
                        raise NoFork(why) from exc
                    return self.run_here(name, deadline, act_uid, why)
            try:
                os.write(self._worker[1], command)
            except OSError:  # its end of the pipe is closed: it is gone
                self._end_worker(reap=True)
                continue
            if last:
                self._no_more_commands()
            if more and name in registry.ENDS_WORKER and self._spare is None:
                # ready on another CPU by the time NAME is done (it is
                # root's alone, in a group of its own: NAME's kill, sent
                # as the user, cannot reach it); only a head start: a fork
                # refused now (the user's processes still hold the node's
                # pids or memory) leaves the next part to fork its own
                try:
                    later = [part.name for part in registry.PARTS[registry.NAMES.index(name) + 1:]
                             if part.stage == registry.BY_NAME[name].stage]
                    self._spare = self._start_worker(close, warm=later)
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

    def run_here(self, name, deadline, act_uid, why):
        """Part NAME (one of registry.IN_PROCESS) in the runner itself, when no
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
            parts.action(name)(ctx)
            code = 0
        except Exception as exc:  # noqa: BLE001 - the chain goes on, and the log says why
            self.log.line("warning", "failed: %s: %s" % (type(exc).__name__, exc), source=name)
        finally:
            if name in registry.ENDS_WORKER:
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
            if fd is not None:
                os.close(fd)
                self._worker_fds.discard(fd)
        if kill:
            self._signal_group(pid, signal.SIGKILL)
        if reap:
            return self._reap(pid)
        self._ending.append(pid)
        return None

    def warm(self, names):
        """The worker, while it waits, imports what the parts NAMES import
        only when they run (parts.warm); no answer, and nothing when there
        is no worker (the part that needs one forks it)."""
        if self._worker is not None and self._worker[1] is not None and names:
            try:
                os.write(self._worker[1], (system.dumps(["warm", list(names)]) + "\n").encode("ascii"))
            except OSError:
                pass  # it is gone: the next part finds out

    def _no_more_commands(self):
        """The worker's command pipe closed once it has its last part (no
        part of the formula's comes after it): it ends as soon as that part
        is done, while the runner writes the record, not after."""
        pid, commands, replies = self._worker
        os.close(commands)
        self._worker_fds.discard(commands)
        self._worker = (pid, None, replies)

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

    def _start_worker(self, close, warm=()):
        """The process the formula's parts run in, one after another (a
        fork: no exec, no interpreter start): in a process group of its own
        (a timeout ends it as a whole), with nothing of the runner's open but
        its two pipes (CLOSE: the user's lock). It runs no part after one
        that changed its credentials (ENDS_WORKER: 40's kill acts as the
        user, who may renice it meanwhile) or left it anything but wholly
        root. WARM: the parts whose imports it makes before it waits for
        its first command (parts.warm). (pid, the command pipe's write end,
        the reply pipe's read end)."""
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
                self._wakeup, self._wakeup_fds = None, ()  # the runner's: a worker waits on no child's SIGCHLD
                os.setpgid(0, 0)
                null = os.open("/dev/null", os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                parts.warm(self.settings, warm)
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
        uid, the job's identity] (or ["warm", names]: warm()), until the
        runner closes the pipe, or a part leaves it unfit for another."""
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
            command = system.loads(raw.decode("ascii"))
            if command[0] == "warm":
                parts.warm(self.settings, command[1])
                continue
            name, deadline, act_uid, identity = command
            send("begin", "", name)
            self.identity = None if identity is None else guard.Identity(*identity)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            # the part's own sense of its deadline is a second before the
            # runner's SIGTERM: time to say what it did
            ctx = Context(self, name, act_uid, deadline, lambda level, text: send("log", level, text),
                          lambda key, value: send("fact", key, value))
            code = 1
            try:
                parts.action(name)(ctx)
                code = 0
            except Exception as exc:  # noqa: BLE001 - the chain goes on, and the log says why
                send("log", "warning", "failed: %s: %s" % (type(exc).__name__, exc))
            fit = name not in registry.ENDS_WORKER and os.getresuid() == (0, 0, 0) and os.getresgid() == (0, 0, 0) \
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

    def _reap(self, pid, seconds=1.0):
        """PID's exit status once it has gone, waited for at most SECONDS
        (it was sent SIGKILL): a process that SIGKILL cannot end (one in an
        uninterruptible wait, on a FUSE daemon that never answers or a hung
        NFS or Lustre server) is left behind, None, never waited on past
        the chain's deadline; the runner's os._exit leaves it to init."""
        until, pause = time.monotonic() + seconds, 0.0001  # a worker told to end is gone in a fraction of a ms
        while True:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return 0
            if done:
                return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
            left = until - time.monotonic()
            if left <= 0:
                return None
            self._nap(left, pause)
            pause = min(pause * 2, 0.05)

    def _nap(self, left, pause):
        """Wait for a child's end: until SIGCHLD (set_wakeup_fd:
        _listen_for_children) or 50 ms, or without it PAUSE; LEFT at most."""
        if self._wakeup is not None:
            if select.select([self._wakeup], [], [], min(left, 0.05))[0]:
                try:
                    os.read(self._wakeup, 1 << 16)
                except OSError:
                    pass
        else:
            time.sleep(min(left, pause))

    def run_site(self, path, seconds):
        """Exec the site's part PATH in a process group of its own, with
        nothing of the runner's open (stdin, stdout and stderr /dev/null:
        what it leaves running cannot hold the runner up), for at most
        SECONDS: then SIGTERM to its group, SIGKILL 2 s later, as timeout(1)
        does; and with the signals python ignores (SIGPIPE, SIGXFSZ) back to
        their defaults and none blocked (whatever the runner was started
        with), as a shell would start it. Its exit status, 124 when it timed
        out."""
        env = system.child_env(self.env)
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
            self._nap(left, pause)
            pause = min(pause * 2, 0.02)

    def _listen_for_children(self):
        """SIGCHLD wakes the waits for site parts and workers at once (one
        blocked by whoever started the runner is unblocked)."""
        try:
            read_end, write_end = os.pipe()
            os.set_blocking(write_end, False)
            signal.signal(signal.SIGCHLD, lambda signum, frame: None)
            signal.set_wakeup_fd(write_end)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
            self._wakeup, self._wakeup_fds = read_end, (read_end, write_end)
        except (OSError, ValueError):
            self._wakeup = None
