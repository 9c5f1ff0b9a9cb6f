"""The ssh allow file's parts: 39 revokes the user's line at her last job
end (before 40 kills: no new login after it), 50 grants it at a prolog,
only for a user the localusers guard acts for (guard.grant: the line 39
would remove). The edit itself is a decision of its own:
allow_change(op, user, lines); allow_edit makes it under ssh_allow.lock.
never_revoked is verify's look at the lines 39 would never remove.
"""
import errno
import os
import stat
import time

from . import guard, registry, system

# how long an edit waits for ssh_allow.lock at most (within its part's deadline)
LOCK_WAIT = 10
# the most of the allow file an edit reads: a larger one is left alone (its
# rewrite would drop the lines past it)
ALLOW_MAX = 16 << 20

def not_roots_alone(path, st):
    """Why the allow file PATH, of lstat ST, is not root's alone (its owner
    or group can change who logs in; pam_listfile admits nobody through a
    file others can write), or None: what part 39 and 50 warn of at each
    edit, and verify across a fleet."""
    if st.st_uid == 0 and not st.st_mode & 0o022:
        return None
    return ("%s is owned by uid %d, group %d, mode %04o: not root's alone, so another account can change who gets ssh "
            "access here; chown root and chmod go-w it" % (path, st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)))


def allow_lines(data):
    """The allow file's lines as a shell's mapfile reads them: without their
    newline, a last line without one still a line."""
    if not data:
        return []
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return lines


def _name(line):
    return line[:-1] if line.endswith(b"\r") else line


def _filler(line):
    """A line an in-place edit left: #s only, which no account is named."""
    return bool(line) and not _name(line).strip(b"#")


def allow_change(op, user, lines):
    """(change, new lines or None) of adding (op "add") or removing
    ("remove") the line USER (bytes) among LINES: whole-line equality, a CR
    at the end of a line ignored; every other line, blank ones too, kept as
    it is, but for the lines of #s an in-place edit left (in_place_writes);
    never a duplicate. change: added, removed, present (add: already there)
    or absent (remove: not there)."""
    present = any(_name(line) == user for line in lines)
    if op == "add":
        return ("present", None) if present else ("added", [line for line in lines if not _filler(line)] + [user])
    if not present:
        return "absent", None
    return "removed", [line for line in lines if _name(line) != user and not _filler(line)]


def in_place_writes(op, user, data):
    """The writes [(offset, bytes)], in order, that make the change of
    allow_change in the file DATA itself, when the file system has no room
    for a new file: nothing moves and the file never gets shorter, so no
    torn state (a part stopped between two writes, a write cut short, a
    reader in the middle of one) holds a name that is neither in the file
    before nor after. A revoke overwrites each of USER's lines with as many
    #s (no account is named with a #; a half-written one is a name with #s
    in it); a grant appends a line of #s, then writes USER over it."""
    if op == "remove":
        writes, offset = [], 0
        for line in data.split(b"\n"):
            if _name(line) == user:
                writes.append((offset, b"#" * len(user)))
            offset += len(line) + 1
        return writes
    lead = b"\n" if data and not data.endswith(b"\n") else b""
    return [(len(data), lead + b"#" * len(user) + b"\n"), (len(data) + len(lead), user)]


def _in_place(path, writes, old, size, done):
    """Make WRITES (in_place_writes) in the very file PATH, which must still
    be the one of OLD (its lstat) and SIZE bytes long; DONE[0] counts the
    writes made whole. OSError when one cannot be."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not os.path.samestat(old, st) or st.st_size != size:
            raise OSError(errno.ESTALE, "changed while it was edited")
        for offset, data in writes:
            view = memoryview(data)
            while view:
                view = view[os.pwrite(fd, view, offset + len(data) - len(view)):]
            done[0] += 1
        os.fsync(fd)
    finally:
        os.close(fd)


def allow_edit(ctx, op, user):
    """Add or remove USER's exact line in the ssh allow file, under the lock
    of ssh_allow.lock (root's, 0600: no other account can open it, so none
    can hold the lock). The file is replaced whole by a rename; when the
    file system has no room for a new file (no free inode: any user can use
    them up where /var/tmp and /etc share one), it is edited in place
    (in_place_writes), so that a revoke never fails open there. The record
    gets what changed: added, removed, present, absent, or left alone (the
    log says why); in observe mode a revoke decides under the lock and
    writes nothing: would remove."""
    change = allow_change_here(ctx, op, user)
    fact = {"op": op, "change": change}
    if change.startswith("would "):
        fact["would"] = True
    ctx.fact("allow", fact)


def allow_change_here(ctx, op, user):
    path, lock = ctx.names["allow_file"], ctx.names["allow_lock"]
    directory = os.path.dirname(path) or "/"
    if not ctx.trust.root_only(directory):
        ctx.log("warning", "%s is not a directory only root can write; %s left alone" % (directory, path))
        return "left alone"
    lock_fd = None
    try:
        lock_fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        lock_st = os.fstat(lock_fd)
        if not stat.S_ISREG(lock_st.st_mode) or lock_st.st_uid != 0:
            raise OSError(errno.EPERM, "not root's regular file")
        if lock_st.st_mode & 0o077:
            # another account could open it, and hold it for ever: root's
            # alone again (a descriptor opened meanwhile stays; verify
            # names the mode the state lays down)
            os.fchmod(lock_fd, 0o600)
            ctx.log("warning", "%s was mode %04o; made 0600" % (lock, stat.S_IMODE(lock_st.st_mode)))
    except OSError:
        if lock_fd is not None:
            os.close(lock_fd)
        ctx.log("warning", "cannot lock %s to edit %s; left alone" % (lock, path))
        return "left alone"
    try:
        # within the part's own deadline: a part stopped at its timeout says nothing
        if not system.wait_lock(lock_fd, max(0, min(LOCK_WAIT, ctx.deadline - time.monotonic() - 0.5))):
            ctx.log("warning", "cannot lock %s to edit %s; left alone" % (lock, path))
            return "left alone"
        try:  # only under the lock: what another edit did before it is kept
            old = os.lstat(path)
        except FileNotFoundError:
            old = None
        except OSError:
            old = False
        if old is False or (old is not None and not stat.S_ISREG(old.st_mode)):
            ctx.log("warning", "ssh allow file %s is not a regular file; left alone" % path)
            return "left alone"
        try:
            data = system.read_file(path, ALLOW_MAX) if old is not None else b""
        except OSError:
            ctx.log("warning", "cannot read %s; left alone" % path)
            return "left alone"
        shared = not_roots_alone(path, old) if old is not None else None
        if shared:
            ctx.log("warning", shared)  # the edit goes on (her line still goes), and says so at every edit
        if old is not None and len(data) != old.st_size:
            # (the chain's own edits, a line a user, never make one so large)
            ctx.log("warning", "%s is %d bytes and %d were read (an edit reads %d at most, or it changed meanwhile); "
                    "left alone, a revoke too" % (path, old.st_size, len(data), ALLOW_MAX))
            return "left alone"
        name = os.fsencode(user)
        change, lines = allow_change(op, name, allow_lines(data))
        if lines is None:
            ctx.log("info", ("already in %s" if change == "present" else "not in %s; nothing to remove") % path)
            return change
        if op == "remove" and registry.observing(ctx.settings):
            ctx.log("info", "would remove the line from %s (observe mode, epilog:mode: nothing written)" % path)
            return "would " + op
        new = b"".join(line + b"\n" for line in lines)
        where = ""
        try:
            system.replace_file(path, new, old)
        except OSError as exc:
            if old is None:
                ctx.log("warning", "could not %s the line in %s (%s); left as it was" % (op, path, exc.strerror))
                return "left alone"
            writes = in_place_writes(op, name, data)
            done = [0]
            try:
                _in_place(path, writes, old, len(data), done)
            except OSError as again:
                said = "%s, then in place: %s" % (exc.strerror, again.strerror or again)
                if op == "remove":
                    ctx.log("warning", "could not remove the line from %s (%s); %d of the user's %d line(s) overwritten "
                            "with #s" % (path, said, done[0], len(writes)))
                else:
                    ctx.log("warning", "could not add the line to %s (%s); at most a line of #s added" % (path, said))
                return "left alone"
            where = " (in place: no room for a new file, %s)" % exc.strerror
        ctx.log("info", ("added to %s%s" if op == "add" else "removed from %s%s") % (path, where))
        return change
    finally:
        os.close(lock_fd)


def revoke_ssh(ctx):
    allow_edit(ctx, "remove", ctx.user)


def never_revoked(lines, verdict_of):
    """[(name, why)] of the allow file's LINES (allow_lines) that part 39
    would never remove: each name once, as it reads it (a CR at the end
    ignored; blank lines and the #s of an in-place edit are no name).
    VERDICT_OF: name (str) -> the guard's verdict at a job end of that
    account (guard.judge_names). A name the guard acts for goes at its last
    job end, one it cannot judge for a lookup error at a job end where the
    lookup succeeds; any other (listed, system account, unknown user) never:
    WHY is guard.spared_as."""
    out, seen = [], set()
    for line in lines:
        name = _name(line)
        if not name or _filler(line) or name in seen:
            continue
        seen.add(name)
        verdict = verdict_of(os.fsdecode(name))
        if verdict.answer != "act" and verdict.listed != "lookup error":
            out.append((os.fsdecode(name), guard.spared_as(verdict)))
    return out


def grant_ssh(ctx):
    """50: the user's line, only by the guard's grant rule (guard.grant:
    the lastuserjob parts act for the user, and the line is the account's
    own name): a line part 39 would never remove (a listed operator's,
    root's, a system account's, one for a user whose lookup failed, an
    alias) is never granted. One line says why not; the record's fact is
    allow: {op: add, change: not granted, why}."""
    verdict = guard.grant(ctx.identity, ctx.user, ctx.names["localusers"])
    if verdict.answer == "act":
        allow_edit(ctx, "add", ctx.user)
        return
    why = guard.spared_as(verdict)
    ctx.fact("allow", {"op": "add", "change": "not granted", "why": why})
    ctx.log(verdict.level, "%s; not added to %s (%s: %s)"
            % (verdict.why, ctx.names["allow_file"], why, "pam_listfile would read the line as several names"
               if why == guard.TOO_LONG else "part 39 would never remove the line"))

