"""Whose a process is, to part 40's kill (kill.py), and where it runs:
read from /proc and the kernel, never from a name a process can give
itself.

owner_of(uids, uid, x, ns_owners) is the rule: the user's (her real uid,
or a user namespace she owns), the sender's slot's (x), another account's
run of her setuid program (saved), or nobody's the kill may reach.
scan() reads every process by it once per round; thawable() and hers()
judge a process a freeze stopped; in_jobs() and job_cgroups() say which
Slurm job's cgroup each process the kill saw was in (for the record).
"""
import os

from . import system

# The processes whose cgroup the record reads before the first round: the
# read costs as much as the scan's own, and a fork loop gains that time.
CLASSIFY_MAX = 1000


def owner_of(uids, uid, x=None, ns_owners=()):
    """Whose a process whose uids are UIDS (real, effective, saved) is, to a
    kill of UID's processes sent from a process of real uid X, effective
    UID: "x" when its real or saved uid is X; "user" when its real uid is
    UID (the user's, as epilog.strays tells processes apart), or when UID is
    in NS_OWNERS (userns_owners(): the owners of its user namespace and of
    each above it), whatever its uids: she owns that namespace, so she holds
    every capability in it (CAP_KILL: kill(-1) from her reaches it; a
    subordinate uid of hers through newuidmap, or root of the host who
    entered it, is hers to end there); "saved" when
    its saved uid is UID and its real uid another's (another account, an
    operator or root running a program the user made setuid to herself):
    kill(-1) from the sender would reach it (the kernel lets a signal reach
    every process whose real or saved uid is the sender's real or
    effective uid), and it is not the user's; None otherwise (an effective
    uid of UID alone is out of the sender's reach)."""
    real, _, saved = uids
    if x is not None and x in (real, saved):
        return "x"
    if real == uid or uid in ns_owners:
        return "user"
    if saved == uid:
        return "saved"
    return None


# ioctl(2) on a /proc/PID/ns/user descriptor (linux/nsfs.h): the uid that
# owns it (writes a uid_t), and its parent's descriptor (EPERM at the top)
NS_GET_PARENT, NS_GET_OWNER_UID = 0xb702, 0xb704
# user namespaces nest at most 32 deep
NS_DEPTH = 33
_init_ns = []  # [(st_dev, st_ino)] of PID 1's user namespace, once read


def userns_owners(pid):
    """The uids that own PID's user namespace and each one above it, asked
    of the kernel (NS_GET_OWNER_UID, then NS_GET_PARENT up to where it
    answers EPERM), as root; () for a process in PID 1's (a stat alone; the
    chain's own where PID 1's cannot be read) or one that cannot be read
    (gone)."""
    if not _init_ns:
        for where in ("/proc/1/ns/user", "/proc/self/ns/user"):
            try:
                st = os.stat(where)  # PID 1's, or (not readable: a sandbox) the chain's own
                _init_ns.append((st.st_dev, st.st_ino))
                break
            except OSError:
                continue
        else:
            _init_ns.append(None)
    # PID 1's, the common case, told by a stat of the namespace's file
    # alone (the same inode its descriptor's fstat gives); the walk up
    # opens it
    try:
        st = os.stat("/proc/%s/ns/user" % pid)
    except OSError:
        return ()
    if (st.st_dev, st.st_ino) == _init_ns[0]:
        return ()
    import fcntl  # pylint: disable=import-outside-toplevel - only a process in a namespace of its own needs it
    import struct  # pylint: disable=import-outside-toplevel

    try:
        fd = os.open("/proc/%s/ns/user" % pid, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return ()
    owners = []
    try:
        for _ in range(NS_DEPTH):
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == _init_ns[0]:
                break
            raw = bytearray(4)
            fcntl.ioctl(fd, NS_GET_OWNER_UID, raw, True)
            owners.append(struct.unpack("=I", bytes(raw))[0])
            parent = fcntl.ioctl(fd, NS_GET_PARENT)
            os.close(fd)
            fd = parent
    except OSError:
        pass
    finally:
        os.close(fd)
    return tuple(owners)


def whole_groups(mine, others):
    """The process groups a round may signal whole when kill(-1) may not
    be sent: the pgids of MINE ([(pgid, sid)] of the user's processes)
    whose session holds no process of OTHERS (the sessions of every other
    live process the scan read). Only a process of that session can join
    one of its groups (setpgid), and a child is born in its parent's: a
    process of another real uid can come into it only by one of hers
    exec'ing another account's setuid program that moves its real uid
    away. A signal to the group reaches each of its members at once, a
    fork loop's children too (as kill(-1) does), and no other process; a
    pgid or sid not known (0, before Linux 4.1) is no group."""
    return {pgid for pgid, sid in mine if pgid > 0 and sid > 0 and sid not in others}


def ids(fields):
    """(pgid, sid) of a status, as this pid namespace numbers them; 0 when
    not told."""
    out = []
    for key in ("NSpgid", "NSsid"):
        value = (fields.get(key) or "").split()
        out.append(int(value[0]) if value and system.digits(value[0]) else 0)
    return tuple(out)


def live(pid, uid, user, x=None, fields=None):
    """(1, name) when PID is a live process of UID (owner_of's "user": its
    real uid, or a user namespace of UID's); (5,
    name, R) when its saved uid is UID and its real uid R another's
    (owner_of's "saved"); (2, title) when it is root's sshd monitor of a
    login of USER still in progress; (3, title) when that login is still
    at its password prompt; (4, name) when its real or saved uid is X;
    else None. A zombie is dead, unless its other threads still run. Names
    are as system.show() writes them. FIELDS: its status, when read."""
    if fields is None:
        fields = system.status(pid)
    if not system.alive(fields):
        return None
    uids = system.uids_of(fields)
    if uids is None:
        return None
    real, effective, _ = uids
    name = system.show(fields.get("Name", "?"))
    owner = owner_of(uids, uid, x)
    if owner not in ("x", "user"):
        owner = owner_of(uids, uid, x, userns_owners(pid))
    if owner == "x":
        return 4, name
    if owner == "user":
        return 1, name
    if owner == "saved":
        return 5, name, real
    if real == 0 and effective == 0 and name.startswith("sshd"):
        title = system.cmdline(pid, 256)
        for head in (b"sshd: ", b"sshd-session: "):
            if title.startswith(head + os.fsencode(user) + b" [priv]"):
                break
        else:
            return None
        # sshd titles its monitor so as soon as the user name is known,
        # before authentication: a login still at its password prompt has a
        # child of the privilege separation user. Anybody can hold one open,
        # so it is waited for only briefly, and never reported.
        try:
            with open("/proc/%s/task/%s/children" % (pid, pid), "rb") as handle:
                kids = handle.read(4096).split()
        except OSError:
            kids = []
        for kid in kids:
            try:
                owner = os.lstat(b"/proc/" + kid).st_uid
            except OSError:
                continue
            if owner not in (0, uid):
                return 3, "sshd: %s [pre-auth]" % user
        return 2, "sshd: %s [priv]" % user
    return None


def scan(uid, user, x):
    """(whether X runs any process, "pid(name)" of the live processes of UID
    (real uid) and the sshd monitors of USER's logins, those of the
    monitors alone: told by what live() found, root's sshd, never by a
    name, which a process of UID can give itself; "pid(name) uid R" of the
    processes whose saved uid is UID and real uid R another's; {"pid(name)":
    pgid} of the processes of UID whose group whole_groups() lets a round
    signal whole; the pids of the other processes that were stopped, state
    T or t, when read). Every process costs a read of its status (its saved uid
    is nowhere else, and a process running the user's setuid program may
    have given its effective uid, which names /proc/PID, back to its real
    owner), but root's without an executable (kernel threads)."""
    xs, found, monitors, others, stopped, me = False, [], [], [], set(), os.getpid()
    mine, sessions = {}, {ids(system.status(me) or {})[1]}
    for pid in system.pids():
        if int(pid) == me:
            continue
        try:
            owner = os.lstat("/proc/" + pid).st_uid
        except OSError:
            continue
        if owner == x:
            # a zombie of X holds nothing (a PID 1 that never reaps keeps one)
            if system.alive(system.status(pid)):
                xs = True
            continue
        if owner == 0:
            try:
                os.readlink("/proc/%s/exe" % pid)
            except OSError:
                continue
        fields = system.status(pid)
        seen = live(pid, uid, user, x, fields)
        if seen and seen[0] == 1:
            found.append("%s(%s)" % (pid, seen[1]))
            mine[found[-1]] = ids(fields)
            continue
        if system.alive(fields):
            sessions.add(ids(fields)[1])
            if fields.get("State", "")[:1] in ("T", "t"):
                stopped.add(pid)
        if seen and seen[0] == 4:
            xs = True
        elif seen and seen[0] == 5:
            others.append("%s(%s) uid %d" % (pid, seen[1], seen[2]))
        elif seen:
            found.append("%s(%s)" % (pid, seen[1]))
            monitors.append(found[-1])
    whole = whole_groups(mine.values(), sessions)
    return xs, found, monitors, others, {entry: ids[0] for entry, ids in mine.items() if ids[0] in whole}, stopped



def thawable(fields, uid, pid, before, saved):
    """Whether a freeze's SIGSTOP is to be undone for the process PID whose
    status is FIELDS (read while its pidfd pins it): it is stopped (state
    T: a traced one, t, is its tracer's to resume), was not when the scan
    before the freeze read it (BEFORE: the pids it found stopped; one the
    user or its owner stopped stays so), its real uid is not UID (hers are
    killed) and, when SAVED (a process the freeze reached), its saved uid
    is UID; else (a parent of one, which stopped itself because its child
    stopped: util-linux su and runuser do) any uid's."""
    if not fields or pid in before or fields.get("State", "")[:1] != "T":
        return False
    uids = system.uids_of(fields)
    if not uids or uids[0] == uid:
        return False
    return uids[2] == uid or not saved


def hers(pid, fields, uid):
    """Whether the process PID, whose status is FIELDS, is UID's to kill
    (owner_of's "user": its real uid, or a user namespace of UID's)."""
    uids = system.uids_of(fields)
    if not uids:
        return False
    return uids[0] == uid or owner_of(uids, uid, None, userns_owners(pid)) == "user"


def in_jobs(seen, uid):
    """{"pid(name)": job} (system.job_of_cgroup()) of the first CLASSIFY_MAX
    of SEEN that are in a Slurm job's cgroup (proctrack/cgroup: the job's,
    which Slurm kills) or in one whose layout cannot be told; the others
    run outside any job. For the record alone: kill(-1) reaches
    both alike."""
    jobs = {}
    for entry in seen[:CLASSIFY_MAX]:
        job = system.job_cgroup(entry.split("(", 1)[0], uid)
        if job is not None:
            jobs[entry] = job
    return jobs


def job_cgroups(jobs, job, sluid=None):
    """(own, other, unknown) of JOBS ({"pid(name)": system.job_of_cgroup()}):
    the entries in the cgroup of the ending JOB (its id, or its SLUID, which
    26.05's slurmd gives the epilog as SLURM_JOB_SLUID and its cgroup/v2
    names job directories by), "pid(name) job J" of those in another job's,
    "pid(name): why" of those whose layout cannot be told."""
    own, other, unknown = [], [], []
    for entry, found in jobs.items():
        if found[0] == "unknown":
            unknown.append("%s: %s" % (entry, found[1]))
        elif found == ("id", job) or (sluid and found == ("sluid", sluid)):
            own.append(entry)
        else:
            other.append("%s job %s" % (entry, found[1]))
    return own, sorted(other), sorted(unknown)


