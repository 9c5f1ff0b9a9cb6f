"""What each of the formula's parts does, once it runs: registry.py names
each part and its action; the actions live by audience:

  39-lastuserjob-ssh        allow.py: revoke, remove the user's line from
                            the ssh allow file (before 40 kills: no new
                            login after it)
  40-lastuserjob-processes  kill.py (whose a process is: reach.py): kill
                            every process of the job's uid
  42-lastuserjob-cleanup    here: remove the uid's files under /tmp and
                            /dev/shm (and its System V IPC: ipc.py)
  45-stale-x-display        here: sweep the residue no live process holds
                            (sweep.py)
  50-exclusive-ssh          allow.py: grant, add the user's line (a prolog
                            part), only for a user the guard says act for,
                            as 39-42 (guard.grant)

The runner decides whether a part runs (the guard, the last-job evidence,
the deadlines, the brake: brake() here) and runs it in a process of its
own, through action(); a part run on its own (by hand) asks the guard
itself. Each part's action reports what it changed as facts for the job
end's record (ctx.fact).
"""
import os
import stat
import time

from . import registry, system, walk
from .registry import observing
from .system import signal

# -- 42: the user's files ---------------------------------------------------------
CLEANED = ("/tmp", "/dev/shm")


class _Late(Exception):
    """Part 42's deadline came before its walk was done."""


class _Clear(walk.Rules):
    """Part 42's rules for the walk of TOP (walk.py: never a symlink
    followed, never TOP's file system or tree left, descriptors bounded at
    any depth): what UID owns goes, at every depth; another account's entry
    stays, and so do the directories on the path to it (a directory of
    UID's kept so counts as an error, as rmdir would find it not empty);
    another account's directory is walked into, never removed; a mount
    point stays. TEST (observe mode): the same walk, with nothing unlinked
    or removed; what would go is counted as removed. Counts what went and
    the errors: what could not be looked at or removed, a branch moved out
    of the walk, the deadline."""

    def __init__(self, uid, deadline, test=False):
        self.uid = uid
        self.deadline = deadline
        self.test = test
        self.removed_count = self.errors = 0

    def check(self):
        if time.monotonic() > self.deadline:
            raise _Late()

    def judge(self, tree, name, st):
        if st.st_dev != tree.device:
            return walk.KEEP  # another file system, mounted here: never entered
        if stat.S_ISDIR(st.st_mode):
            return walk.ENTER
        return walk.REMOVE if st.st_uid == self.uid else walk.KEEP

    def leave(self, tree, name, st, whole):
        if st.st_uid != self.uid:
            return walk.KEEP
        if not whole:
            self.errors += 1
            return walk.KEEP
        return walk.REMOVE

    def removed(self, tree, name, st):
        self.removed_count += 1

    def failed(self, tree, name, exc, doing):
        self.errors += 1

    def run(self, top):
        """(removed, errors) under TOP."""
        try:
            top_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return 0, 0
        except OSError:
            return 0, 1
        try:
            walk.Walk(top_fd, self, top).run()
        except _Late:
            self.errors += 1
        finally:
            os.close(top_fd)
        return self.removed_count, self.errors


def _clear(top, uid, deadline, test=False):
    """Remove what UID owns under TOP by _Clear's rules: (removed, errors)."""
    return _Clear(uid, deadline, test).run(top)


# part 42's time, shared: /tmp's walk, then /dev/shm's, then System V IPC,
# each until its share of what is left (time one leaves unused goes to the
# next), so that a tree no walk gets through in time (a user's millions of
# entries, which every user's part 42 walks: another's entry may lie in it)
# leaves /dev/shm and IPC their time
SHARES = (2, 1, 1)


def share_until(deadline, shares, now=None):
    """When a step whose share is SHARES[0], of the steps SHARES still to
    run, is to stop, of the time left until DEADLINE."""
    now = time.monotonic() if now is None else now
    return now + max(0.0, deadline - now) * shares[0] / float(sum(shares))


def cleanup(ctx):
    uid = ctx.act_uid
    removed = errors = 0
    would = observing(ctx.settings)
    shares = SHARES if ctx.settings.get("ipc_cleanup", True) else SHARES[:-1]
    for i, top in enumerate(CLEANED):
        done, failed = _clear(top, uid, share_until(ctx.deadline, shares[i:]), test=would)
        removed += done
        errors += failed
    fact = {"removed": removed, "rc": 1 if errors else 0}
    said = "removed"
    if would:
        fact["would"] = True
        said = "would remove (observe mode, epilog:mode: nothing removed)"
    ctx.fact("cleanup", fact)
    if errors:
        ctx.log("warning", "%s %d entries of uid %d under /tmp and /dev/shm; %d could not be removed or looked at"
                % (said, removed, uid, errors))
    else:
        ctx.log("info", "%s %d entries of uid %d under /tmp and /dev/shm" % (said, removed, uid))
    if ctx.settings.get("ipc_cleanup", True):
        clean_ipc(ctx, uid)


def clean_ipc(ctx, uid):
    """42, System V IPC: the user's shared memory segments, semaphore sets
    and message queues that ipc.decide() lets go (epilog:ipc_cleanup), one
    line per job end, whatever their number."""
    from . import ipc  # pylint: disable=import-outside-toplevel

    fact = ipc.clean(uid, ctx.deadline - 0.5, test=observing(ctx.settings))
    ctx.fact("ipc", fact)
    removed = fact["removed"]
    kept = sum(fact["kept"].values())
    if sum(removed.values()) or kept or fact["left"] or fact.get("unreadable"):
        ctx.log("warning" if fact["left"] or fact.get("unreadable") else "info",
                "System V IPC of uid %d: %s %d segment(s) (%d bytes), %d semaphore set(s), %d queue(s); kept "
                "%d%s%s%s" % (uid, "would remove (observe mode)" if fact.get("would") else "removed", removed["shm"],
                              fact["bytes"], removed["sem"], removed["msg"], kept,
                              " (%s)" % "; ".join("%s: %d" % item for item in sorted(fact["kept"].items())) if kept
                              else "", "; %d left for want of time" % fact["left"] if fact["left"] else "",
                              "; stopped: %s" % fact["unreadable"] if fact.get("unreadable") else ""))


# -- 45: the residue sweep --------------------------------------------------------
def sweep(ctx):
    from . import sweep_names  # pylint: disable=import-outside-toplevel

    settings = ctx.settings
    job = ctx.job if system.digits(ctx.job or "") and system.digits(ctx.env.get("SLURM_JOB_UID") or "") else None
    if not sweep_names.has_residue(job):
        return  # on a node without residue the sweep is never imported
    from . import sweep as residue  # pylint: disable=import-outside-toplevel
    from . import sweep_report  # pylint: disable=import-outside-toplevel

    uid = ctx.env.get("SLURM_JOB_UID")
    if not (job and system.digits(uid or "") and 1 <= int(uid) <= system.UID_MAX_REAL):
        job = uid = None  # no scratch without a plain job id and uid
    # the runner's SIGTERM (the part's time is up) stops the sweep at the next
    # entry, and what it did is logged
    signal.signal(signal.SIGTERM, sweep_report.terminated)
    try:
        # its budget, at most the part's own time left (earlier parts, a
        # site's among them, may have used the chain's)
        budget = min(settings["sweep_budget"], max(0.1, ctx.deadline - time.monotonic()))
        report = residue.run_with(settings, job=job, budget=budget, log=ctx.log, uid=uid, would=observing(settings))
    except residue.SweepError as exc:
        ctx.log("warning", "sweep could not run: %s" % exc)
        return
    except sweep_report.Terminated as exc:
        ctx.log("warning", "sweep %s; what is left waits for the next job end" % exc)
        return
    ctx.fact("sweep", sweep_report.fact(report))



def action(name):
    """The function that runs the formula's part NAME (registry.PARTS: its
    module and function), that module imported the first time it runs a
    part: a job end imports only the parts it runs (a prolog never the
    kill, a job end that leaves the user alone neither the kill nor the
    allow file's edit)."""
    room, function = registry.BY_NAME[name].action
    if room == "parts":
        return globals()[function]
    return getattr(getattr(__import__("", globals(), None, (room,), 1), room), function)


def warm(settings, names):
    """What the parts NAMES that SETTINGS run (registry.not_run) import
    only when they run (the room of each one's action; 42's System V IPC
    while epilog:ipc_cleanup is on), imported ahead by a worker that waits
    for them: the runner's first worker once the evidence says the job was
    the user's last (39's and 40's, while the runner asks the guard), the
    one forked while 40 runs (the parts after it)."""
    # pylint: disable=import-outside-toplevel,unused-import
    for name in names:
        if registry.not_run(name, settings):
            continue
        try:
            room = registry.BY_NAME[name].action[0]
            if room != "parts":
                __import__("", globals(), None, (room,), 1)
            if name == registry.IPC_PART and settings.get("ipc_cleanup", True):
                from . import ipc  # noqa: F401
        except (ImportError, KeyError):
            pass  # the part says why when it runs


# -- the brake -----------------------------------------------------------------------
# on: the brake holds (since: the file's mtime); ignored: a file is there
# that fails the trust rules (why says how)
Brake = system.fields("Brake", "state path why since")


def brake(path, trust):
    """The brake, epilog:stop_file at PATH: None while no file is there (an
    ordinary job end's whole cost: the directory's trust, kept by TRUST,
    and one lstat); on while it is a regular file of root's in a directory
    only root can write (TRUST: system.Trust); any other file there is
    ignored, and says why: a user who could plant one must not be able to
    stop the cleanup of their own processes. The directory is judged first,
    and nothing in one another account can write is looked at (a mount
    there could hold the lstat past the chain's deadline): that brake is
    ignored, file or none. Looked at again before each acting part, so a
    brake set mid-chain stops the parts still to come."""
    if not path:
        return None
    directory = os.path.dirname(path) or "/"
    if not trust.root_only(directory):
        return Brake("ignored", path, "%s is in %s, which another account can write (or it, or an ancestor, is "
                     "missing, a symlink or not root's): not looked at; ignored, the brake cannot be put on there"
                     % (path, directory), None)
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return Brake("ignored", path, "%s cannot be looked at (%s)" % (path, exc.strerror), None)
    if not stat.S_ISREG(st.st_mode):
        why = "%s is not a regular file (%s)" % (path, "a symlink" if stat.S_ISLNK(st.st_mode) else
                                                   "a directory" if stat.S_ISDIR(st.st_mode) else "not a file")
    elif st.st_uid != 0:
        why = "%s is owned by uid %d, not root" % (path, st.st_uid)
    else:
        return Brake("on", path, "stopped by %s" % path, st.st_mtime)
    return Brake("ignored", path, why + ": ignored, the brake is not on", None)

