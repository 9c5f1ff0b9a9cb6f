"""
The residue sweep: part 45 (45-stale-x-display) runs it at every job end,
and the execution module's ``epilog.sweep`` runs the very same code (it loads
this package from beside itself), so the two cannot drift.

The sweep removes what crashed X/VNC servers and Cadence clients leave in
/tmp, and the ending job's scratch, but only what no live process holds:

=================================================  =========================
residue                                            action
=================================================  =========================
orphan socket /tmp/.X11-unix/X<N>: no live socket  remove
  is bound to it, and a connect is refused
socket held: a live socket is bound to it (the     keep
  kernel's socket diagnostics, every netns)
orphan socket whose lock names a live process of   keep both
  the lock's owner
stale lock /tmp/.X<N>-lock: its pid is dead or     remove
  not the owner's, no socket
/tmp/clsbd.<user>.<pid>, pid a live process of     keep
  the file's owner
/tmp/clsbd.<user>.<pid>, otherwise                 remove
malformed lock content or name                     keep, and report it
unknown: the diagnostics cannot be read            keep
an entry that cannot be judged (EACCES, ...)       keep, report, go on
/tmp entry matching scratch_patterns for the job   remove what the job's
                                                   uid owns, at every depth
=================================================  =========================

Nothing a user can write or print is evidence: a pid in a file counts only
as the file owner's own process, and names in /proc/net/unix count for
nothing. judge_display() is the table's display rows as a function of their
facts.

Safety as root in a world-writable /tmp: /tmp/.X11-unix must be a real
directory owned by root; every entry is checked with lstat and never followed;
removal is relative to an open directory handle and re-checks the inode; it
never leaves /tmp, never opens a FIFO, and stops when its time budget runs out.

This file gathers each entry's facts, judges them and acts; the rest of the
sweep is in the modules beside it, each one question:

  sweep_names.py    where the residue lies, the names and patterns of each
                    kind, part 45's first look (has_residue)
  sweep_holders.py  who holds it: the kernel's socket diagnostics in every
                    network namespace, a listener's answer, the processes
  sweep_remove.py   the removal: re-checked, relative to a directory handle,
                    a job's scratch walked at every depth, an owner's lock
  sweep_report.py   the report and its log, the budget and the SIGTERM that
                    end a sweep, the fact for the job end's record
"""

import os
import re
import stat
import sys
import time

from . import sweep_holders, sweep_names, sweep_report, system
from .sweep_remove import Removal
from .sweep_report import Budget, Unjudged


class SweepError(Exception):
    """The sweep itself could not run (the module reports it as a
    CommandExecutionError)."""


# The budget when --budget is not given (part 45 always gives the pillar's).
DEFAULT_BUDGET = 10

# sweep_names' patterns, compiled (the sweep's alone: part 45's look needs no re)
X_SOCKET_NAME = re.compile(sweep_names.X_SOCKET_NAME)
X_LOCK_NAME = re.compile(sweep_names.X_LOCK_NAME)
X_LOCK_LIKE = re.compile(sweep_names.X_LOCK_LIKE, re.S)
CLSBD_NAME = re.compile(sweep_names.CLSBD_NAME, re.S)
LOCK_CONTENT = re.compile(sweep_names.LOCK_CONTENT)
PATTERN_OK = re.compile(sweep_names.SCRATCH_PATTERN)


# One X display's facts: its number; whether its socket file is there; bound
# (a live socket is bound to that file: True, False, or None when the
# kernel's diagnostics cannot be read); holder ((pid, comm) of who holds it,
# for the report); listening() (does a connect to it get an answer: asked
# only when nothing is bound); whether its lock file is there, its path as
# shown, what is wrong with its content (None: a well-formed pid), that pid,
# whether it is a live process of the lock's owner; comm(pid): its name.
Display = system.fields("Display", "display socket bound holder listening lock lock_path lock_problem lock_pid "
                                "lock_alive comm")


def judge_display(f):
    """The decision table's display rows: ([(kind, "keep" or "remove",
    reason)], (level, line) for the log, or (None, None))."""
    out, line = [], (None, None)
    if f.socket:
        if f.bound is None:
            reason = "unknown: the kernel's socket diagnostics cannot be read, cannot tell whether held"
            out.append(("x_socket", "keep", reason))
            if f.lock:
                out.append(("x_lock", "keep", reason))
            return out, line
        if f.bound or f.listening():
            reason = (f"held by pid {f.holder[0]} ({f.holder[1]})" if f.holder else
                      "held: a live socket is bound to it" if f.bound else "held: a listener answers on it")
            out.append(("x_socket", "keep", reason))
            if f.lock:
                out.append(("x_lock", "keep", f"its socket is {reason}"))
            return out, line
        if f.lock and f.lock_problem:
            out.append(("x_socket", "keep", f"its lock is {f.lock_problem}; cannot tell whether the display is in use"))
            out.append(("x_lock", "keep", f.lock_problem))
            return out, ("warning", f"kept display :{f.display}: lock {f.lock_path} is {f.lock_problem}")
        if f.lock_alive:
            reason = f"lock pid {f.lock_pid} alive ({f.comm(f.lock_pid)})"
            out.append(("x_socket", "keep", f"orphan socket, but {reason}"))
            out.append(("x_lock", "keep", reason))
            return out, line
        out.append(("x_socket", "remove", "orphan: no live socket is bound to it, and a connect is refused"))
        if f.lock:
            out.append(("x_lock", "remove", "stale: its display's socket is an orphan"))
        return out, line
    if f.lock:
        if f.lock_problem:
            out.append(("x_lock", "keep", f.lock_problem))
            return out, ("warning", f"kept {f.lock_path}: {f.lock_problem}")
        if f.lock_alive:
            out.append(("x_lock", "keep", f"lock pid {f.lock_pid} alive ({f.comm(f.lock_pid)})"))
            return out, line
        out.append(("x_lock", "remove", "stale: its pid is no live process of its owner, and no socket"))
    return out, line


class _Sweep(Removal):
    """One sweep of /tmp: its entries gathered by kind, each judged on its
    facts (judge_display for the displays) and acted on, within its budget.
    PATTERNS: the job's scratch patterns; the rest is Removal's."""

    def __init__(self, test, job, patterns, budget, log, uid=None, locks=None, would=False):
        super().__init__(test, job, budget, log, uid=uid, locks=locks, would=would)
        self.job = job
        self.patterns = patterns
        self.procs = sweep_holders.Processes(self.deadline)
        self._left = 0  # the entries found and not yet judged
        self._holders = {}
        self._listing = None  # [the directory being listed, the names read so far]
        self._tmp_dev = None

    def lstat_at(self, dir_fd, name):
        """lstat NAME in DIR_FD; None when it is gone; Unjudged when the
        kernel refuses (a FUSE mount of another user answers EACCES)."""
        try:
            return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise Unjudged(f"lstat failed ({exc.strerror})") from exc

    # -- the decision table ------------------------------------------------
    def read_lock(self, tmp_fd, name, st):
        """(pid, None) for a well-formed lock, (None, why) otherwise. Opens
        only a regular file, non-blocking and without following a symlink."""
        if not stat.S_ISREG(st.st_mode):
            return None, f"not a regular file ({kind_of(st)})"
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=tmp_fd)
        except OSError as exc:
            return None, f"unreadable ({exc.strerror})"
        try:
            if not os.path.samestat(st, os.fstat(fd)):
                return None, "changed while the sweep ran"
            data = os.read(fd, 64)
        except OSError as exc:
            return None, f"unreadable ({exc.strerror})"
        finally:
            os.close(fd)
        match = LOCK_CONTENT.match(data) if len(data) == sweep_names.LOCK_BYTES else None
        if not match:
            return None, f"malformed content {data[:16]!r} ({len(data)} bytes)"
        pid = int(match.group(1))
        if pid < 1 or pid > self.procs.pid_max():
            return None, f"malformed content: pid {pid} out of range"
        return pid, None

    def run(self):
        try:
            tmp_fd = os.open(sweep_names.TMP, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise SweepError(f"cannot open {sweep_names.TMP}: {exc.strerror}") from exc
        started = time.monotonic()
        try:
            self._tmp_dev = os.fstat(tmp_fd).st_dev
            self._sweep(tmp_fd, self._names(tmp_fd, sweep_names.TMP))
        except Budget:
            self.report["budget_exhausted"] = True
            self.report["left"] = self._left
            where, some = "", ""
            if self._listing:
                # what the listing had found: the rest of the names are unread
                where, some = f" while listing {self._listing[0]} ({self._listing[1]} names read)", "at least "
                self.report["listing_cut"] = {"path": self._listing[0], "names_read": self._listing[1]}
            self.log("warning", f"sweep budget of {self.budget}s exhausted{where}; "
                                f"{some}{self.report['left']} entries left for the next job end")
        finally:
            os.close(tmp_fd)
            self.flush_notes()
        self.report["elapsed_ms"] = round((time.monotonic() - started) * 1000, 1)
        return self.report

    def _names(self, fd, path):
        """The names in the directory FD (PATH), read in batches (os.scandir
        on the descriptor where this python takes one), the budget and the
        runner's SIGTERM checked every sweep_report.CHECK_EVERY names: a directory a
        user filled with names holds the sweep no longer than its budget
        (_listing: where it was, and how many names it had read). A
        listing that fails is SweepError for /tmp, OSError otherwise."""
        listing = None
        try:
            where = fd if os.scandir in os.supports_fd else _fd_path(fd)
            if where is None:
                names = os.listdir(fd)  # python 3.6 without /proc: read whole
            else:
                listing = names = os.scandir(where)
        except OSError as exc:
            if path == sweep_names.TMP:
                raise SweepError(f"cannot list {path}: {exc.strerror}") from exc
            raise
        self._listing = [path, 0]
        try:
            for read, entry in enumerate(names, 1):
                if read % sweep_report.CHECK_EVERY == 0:
                    self._listing[1] = read
                    self.check_budget()
                yield entry if listing is None else entry.name
        except OSError as exc:
            self._listing = None
            if path == sweep_names.TMP:
                raise SweepError(f"cannot list {path}: {exc.strerror}") from exc
            raise
        finally:
            if listing is not None:
                listing.close()
        self._listing = None

    def _sweep(self, tmp_fd, names):
        locks, clsbd, scratch = {}, [], []
        scratch_res = [_scratch_regex(p, self.job) for p in self.patterns] if self.job else []
        for name in names:
            if X_LOCK_LIKE.match(name):
                match = X_LOCK_NAME.match(name)
                if match:
                    self._left += int(match.group(1)) not in locks
                    locks[int(match.group(1))] = name
                else:
                    self.keep("x_lock", f"{sweep_names.TMP}/{name}", "malformed lock name", candidate=False)
            elif name.startswith(sweep_names.CLSBD_START):
                clsbd.append(name)
                self._left += 1
            elif not name.startswith(".") and any(regex.match(name) for regex in scratch_res):
                scratch.append(name)
                self._left += 1
        # The displays last: listing /tmp/.X11-unix (which anybody can fill
        # with names) and asking every network namespace (a user can make
        # one per process) are the steps a user can make slow, and they must
        # not use up the budget of the clsbd files and the scratch.
        for name in clsbd:
            self._one("clsbd", f"{sweep_names.TMP}/{name}", self._clsbd, tmp_fd, name)
            self._left -= 1
        for name in scratch:
            self.check_budget()
            self._one("scratch", f"{sweep_names.TMP}/{name}", self._scratch, tmp_fd, name)
            self._left -= 1
        sockets, x_fd = self._x11_entries(tmp_fd)
        try:
            self._displays(tmp_fd, x_fd, sockets, locks)
        finally:
            if x_fd is not None:
                os.close(x_fd)

    def _one(self, kind, path, judge, *args):
        """Judge one entry; whatever goes wrong with it stays with it."""
        try:
            judge(*args)
        except Unjudged as exc:
            self.unjudged(kind, path, str(exc))
        except (OSError, ValueError) as exc:
            self.unjudged(kind, path, f"{type(exc).__name__}: {exc}")

    def _scratch(self, tmp_fd, name):
        path = f"{sweep_names.TMP}/{name}"
        st = self.lstat_at(tmp_fd, name)
        if st is None:
            return
        if st.st_uid != self.uid:
            # Only the job's user's own entries are its scratch.
            self.keep("scratch", path, f"owned by uid {st.st_uid}, not the job's uid {self.uid}")
            return
        if st.st_dev != self._tmp_dev:
            # a mount point: the sweep never enters another file system
            self.keep("scratch", path, f"another file system is mounted there ({kind_of(st)})")
            return
        if self.remove("scratch", tmp_fd, name, path, st):
            self.note("info", f"job scratch {self.purged}", f"job scratch {self.purged}: {system.show(path)}",
                      system.show(path))

    def _x11_entries(self, tmp_fd):
        """{display: (name, lstat)} of the sockets in /tmp/.X11-unix, and an
        open handle on it; ({}, None) when it is absent or not safe. An entry
        that cannot be looked at is reported and kept; the others go on."""
        path = f"{sweep_names.TMP}/{sweep_names.X11_DIR}"
        try:
            st = os.stat(sweep_names.X11_DIR, dir_fd=tmp_fd, follow_symlinks=False)
        except FileNotFoundError:
            return {}, None
        except OSError as exc:
            self.report["skipped"].append(f"{path}: cannot look at it ({exc.strerror}); its entries are left alone")
            return {}, None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != sweep_names.X11_DIR_OWNER:
            why = (f"not a real directory ({kind_of(st)})" if not stat.S_ISDIR(st.st_mode)
                   else f"owned by uid {st.st_uid}, not root")
            self.report["skipped"].append(f"{path}: {why}; its entries are left alone")
            self.log("warning", f"sweep skipped {path}: {why}")
            return {}, None
        try:
            x_fd = os.open(sweep_names.X11_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=tmp_fd)
        except OSError as exc:
            self.report["skipped"].append(f"{path}: cannot open ({exc.strerror})")
            return {}, None
        sockets = {}
        try:
            if not os.path.samestat(st, os.fstat(x_fd)):
                raise OSError("changed while the sweep ran")
            for name in self._names(x_fd, path):
                self._x11_entry(x_fd, path, name, sockets)
        except OSError as exc:
            os.close(x_fd)
            self.report["skipped"].append(f"{path}: {exc}")
            return {}, None
        except BaseException:
            os.close(x_fd)  # the budget, SIGTERM: the caller never gets it
            raise
        return sockets, x_fd

    def _x11_entry(self, x_fd, path, name, sockets):
        """One name in /tmp/.X11-unix (PATH, open as X_FD): a display's
        socket into SOCKETS ({display: (name, lstat)}), else kept."""
        entry_path = f"{path}/{name}"
        match = X_SOCKET_NAME.match(name)
        if not match:
            self.keep("x_socket", entry_path, "malformed name", candidate=False)
            return
        try:
            entry = self.lstat_at(x_fd, name)
        except Unjudged as exc:
            self.unjudged("x_socket", entry_path, str(exc))
            return
        if entry is None:
            return
        if not stat.S_ISSOCK(entry.st_mode):
            self.keep("x_socket", entry_path, f"not a socket ({kind_of(entry)})")
            return
        self._left += int(match.group(1)) not in sockets
        sockets[int(match.group(1))] = (name, entry)

    def _displays(self, tmp_fd, x_fd, sockets, locks):
        bound = sweep_holders.bound_socket_files(self.deadline) if sockets else {}
        held = [bound[(st.st_dev, st.st_ino & 0xFFFFFFFF)] for _, st in sockets.values()
                if bound and (st.st_dev, st.st_ino & 0xFFFFFFFF) in bound]
        self._holders = self.procs.holders(held) if held else {}
        for display in sorted(set(sockets) | set(locks)):
            self.check_budget()
            sock_path = f"{sweep_names.TMP}/{sweep_names.X11_DIR}/X{display}"
            lock_path = f"{sweep_names.TMP}/{locks[display]}" if display in locks else None
            try:
                self._display(tmp_fd, x_fd, display, sockets.get(display), locks.get(display), bound)
            except (Unjudged, OSError, ValueError) as exc:
                why = str(exc) if isinstance(exc, Unjudged) else f"{type(exc).__name__}: {exc}"
                for kind, path in (("x_socket", sock_path if display in sockets else None), ("x_lock", lock_path)):
                    if path and path not in self._decided:
                        self.unjudged(kind, path, why)
            self._left -= (display in sockets) + (display in locks)

    def _display(self, tmp_fd, x_fd, display, sock, lock_name, bound):
        """Gather display :DISPLAY's facts, judge them (judge_display) and
        act on the verdict."""
        sock_path = f"{sweep_names.TMP}/{sweep_names.X11_DIR}/X{display}"
        lock_pid, lock_problem, lock_st, lock_path, lock_alive = None, None, None, None, False
        if lock_name:
            lock_path = f"{sweep_names.TMP}/{lock_name}"
            lock_st = self.lstat_at(tmp_fd, lock_name)
            if lock_st is None:
                lock_name = None
            else:
                lock_pid, lock_problem = self.read_lock(tmp_fd, lock_name, lock_st)
                lock_alive = not lock_problem and self.procs.alive_as(lock_pid, lock_st.st_uid)
        held, holder = None, None
        if sock and bound is not None:
            sock_ino = bound.get((sock[1].st_dev, sock[1].st_ino & 0xFFFFFFFF))
            held = sock_ino is not None
            holder = self._holders.get(sock_ino)
        facts = Display(
            display=display, socket=bool(sock), bound=held, holder=holder,
            listening=(lambda: self.procs.listener_answers(x_fd, sock[0], sock[1])) if sock else None,
            lock=bool(lock_name), lock_path=system.show(lock_path) if lock_path else None, lock_problem=lock_problem,
            lock_pid=lock_pid, lock_alive=lock_alive, comm=self.procs.comm)
        verdict, (level, line) = judge_display(facts)
        purged = False
        for kind, action, reason in verdict:
            path = sock_path if kind == "x_socket" else lock_path
            if action == "keep":
                self.keep(kind, path, reason)
            elif kind == "x_socket":
                purged = self.remove(kind, x_fd, sock[0], path, sock[1]) or purged
            else:
                purged = self.remove(kind, tmp_fd, lock_name, path, lock_st) or purged
        if line:
            self.note(level, "kept X displays and locks whose lock is malformed or unreadable", line,
                      lock_path and system.show(lock_path))
        if purged:
            self.note("info", f"stale X displays {self.purged}", f"stale X display {self.purged}: :{display}",
                      f":{display}")

    def _clsbd(self, tmp_fd, name):
        self.check_budget()
        path = f"{sweep_names.TMP}/{name}"
        match = CLSBD_NAME.match(name)
        if not match:
            self.keep("clsbd", path, "malformed name (expected clsbd.<user>.<pid>)")
            return
        st = self.lstat_at(tmp_fd, name)
        if st is None:
            return
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISSOCK(st.st_mode)):
            self.keep("clsbd", path, f"not a regular file or socket ({kind_of(st)})")
            return
        pid = int(match.group(2)) if len(match.group(2)) <= 10 else 0
        if pid < 1 or pid > self.procs.pid_max():
            self.keep("clsbd", path, f"malformed name: pid {match.group(2)[:12]} out of range")
            return
        if self.procs.alive_as(pid, st.st_uid):
            self.keep("clsbd", path, f"pid {pid} alive ({self.procs.comm(pid)})")
            return
        if self.remove("clsbd", tmp_fd, name, path, st):
            self.note("info", f"stale clsbd {self.purged}", f"stale clsbd {self.purged}: {system.show(path)}",
                      system.show(path))


def _fd_path(fd):
    """/proc/self/fd/FD: the directory FD itself, opened again without a
    look up of its path (for a python without os.scandir on a descriptor,
    3.6); None where /proc cannot give it."""
    path = f"/proc/self/fd/{fd}"
    return path if os.path.isdir(path) else None


def kind_of(st):
    mode = st.st_mode
    for test, word in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device")):
        if test(mode):
            return word
    return "unknown type"


def _scratch_regex(pattern, job):
    """slurm{jobid}* for job 12 matches slurm12.x but not slurm123 (another job)."""
    head, tail = pattern.split(sweep_names.JOBID, 1)

    def glob(chunk):
        return re.escape(chunk).replace(r"\*", ".*").replace(r"\?", ".")

    return re.compile(glob(head) + r"(?<![0-9])" + re.escape(job) + r"(?![0-9])" + glob(tail) + r"\Z", re.S)


def _check_args(job, patterns, budget, uid):
    if job is not None:
        job = str(job)
        if not system.digits(job):
            raise SweepError(f"job must be a numeric Slurm job id, got {job!r}")
        if uid is None or not system.digits(str(uid)) or not 1 <= int(uid) <= system.UID_MAX_REAL:
            raise SweepError("a job's scratch is removed only with the job's user (its uid): give user=")
        uid = int(uid)
    for pattern in patterns:
        if not isinstance(pattern, str) or not PATTERN_OK.match(pattern):
            raise SweepError(
                f"scratch pattern {pattern!r} must hold {{jobid}} once and only letters, digits and . _ - * ?, "
                "and may not start with a wildcard or a dot")
    # Only what a deadline needs: a finite time ahead. The range a site may
    # set is rules.yaml's (seconds), checked by map.jinja for the pillar and
    # by epilog.sweep for budget=; main(), by hand, takes any time ahead.
    try:
        budget = float(budget)
    except (TypeError, ValueError) as exc:
        raise SweepError(f"budget must be a number of seconds, got {budget!r}") from exc
    if not 0 < budget < float("inf"):
        raise SweepError(f"budget must be a positive number of seconds, got {budget}")
    return job, list(patterns), budget, uid


def run_sweep(test=False, job=None, patterns=(), budget=10, log=None, uid=None, locks=None, would=False):
    """The sweep, as part 45 and epilog.sweep run it. With JOB, that job's
    scratch goes too, and only the entries owned by UID. LOG(level, line)
    gets what the sweep did (a preview, test=True, logs nothing). LOCKS:
    the run directory, between jobs (epilog.sweep): an entry goes only
    while its owner's lock there is free, and is kept while a job end or
    prolog of theirs holds it (a directory only root can write; else
    None). WOULD: decide as a sweep that removes, locks included, log what
    would go, and remove nothing (observe mode; between jobs, the brake or
    part 45 turned off): a report like test's. Returns the report dict;
    raises SweepError when the sweep itself cannot run."""
    job, patterns, budget, uid = _check_args(job, patterns, budget, uid)
    if (test and not would) or log is None:
        log = _quiet
    return _Sweep(bool(test), job, patterns, budget, log, uid=uid, locks=locks, would=bool(would)).run()


def run_with(settings, test=False, job=None, budget=None, log=None, uid=None, locks=None, would=False):
    """run_sweep with the settings' scratch patterns and budget (BUDGET, when
    given, in its place): part 45 at a job end, epilog.sweep between jobs."""
    return run_sweep(test=test, job=job, patterns=settings["scratch_patterns"],
                     budget=settings["sweep_budget"] if budget is None else budget, log=log, uid=uid, locks=locks,
                     would=would)


def _quiet(level, line):
    pass


# -- by hand: python3 -m epilog_node.sweep sweep ... (from a release's directory) --
def main(argv=None):
    import argparse  # only by hand: a job end never needs it  # pylint: disable=import-outside-toplevel

    from . import log as logs  # pylint: disable=import-outside-toplevel

    parser = argparse.ArgumentParser(prog="epilog_node.sweep", description="The epilog formula's residue sweep.")
    # (required= needs Python 3.7: the file runs on RHEL 8's and SLES 15's 3.6)
    sub = parser.add_subparsers(dest="command")
    cmd = sub.add_parser("sweep", help="sweep /tmp for X display, clsbd and job scratch residue")
    cmd.add_argument("--test", action="store_true", help="report, remove nothing")
    cmd.add_argument("--job", help="the ending job's id: also remove its scratch")
    cmd.add_argument("--uid", default=None, help="the job's uid: only its entries are the job's scratch")
    cmd.add_argument("--pattern", action="append", default=[], help="a scratch pattern holding {jobid}")
    cmd.add_argument("--budget", default=DEFAULT_BUDGET, help="seconds the sweep may take")
    cmd.add_argument("--log-file", default=None)
    cmd.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if args.command != "sweep":
        parser.error("a command is required: sweep")
    log = logs.Log(args.log_file, system.Trust(), job=args.job, source="epilog_node.sweep") if args.log_file else None
    try:
        report = run_sweep(test=args.test, job=args.job or None, patterns=args.pattern, budget=args.budget,
                           log=log.line if log else None, uid=args.uid)
    except SweepError as exc:
        print(f"epilog_node.sweep: {exc}", file=sys.stderr)
        return 1
    finally:
        if log:
            log.close()
    if args.json:
        import json  # only for --json: a job end never needs it  # pylint: disable=import-outside-toplevel

        print(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
