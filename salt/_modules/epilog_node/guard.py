"""The localusers guard: may the chain act for the job's user? One rule for
both ends of a job: the epilog's lastuserjob parts (39 revokes the ssh line,
40 kills, 42 cleans) run only when check() says act, and prolog 50 grants
the ssh line only by grant(): check() says act, for the account's own name
(own_name), so the chain never grants what it would never revoke (a
listed operator's line, root's, a system account's, a line for a user
whose lookup failed, an alias). The runner's gate, a part run on its own
and the looks between jobs ask check(); verify judges the allow file's
lines by the same rule as grant() (judge_names).

Two decisions, each a function of its facts:

identity(user, uid, lookup, account_chars): the name slurmd passes
    (SLURM_JOB_USER) must resolve on this node, through NSS, to exactly the
    uid it passes (SLURM_JOB_UID), an ordinary uid from 1 to 4294967294
    ((uid_t)-1 means "unchanged" to setresuid: a process "dropped" to it stays
    root). Otherwise the user is unknown (Slurm 22.05 passes "nobody" when its
    own lookup fails), and nothing destructive happens. A name of digits only
    is unknown too: it cannot be told from a uid.

decide(identity, listing, resolve, login_defs): act only when the user is
    known, the list (localusers.backup) is read whole, the name is on no line
    of it (a literal whole-line match, a CR at the end ignored), the uid is
    the uid of no listed name (a second account name at an operator's uid is
    that operator: the kill and the cleanup go by uid), every listed name
    resolves (one that does not might be at this uid), and the account is an
    ordinary one (not root, not a system account). Anything else spares the
    user, and a lookup that failed is "unknown", never a licence to act.

The verdict carries the sentence the log says, the record keeps and
epilog.explain shows.
"""
import os

from . import system

# ok: the name resolves to the uid; uid: that uid (an int) when ok; why: the
# reason when not.
Identity = system.fields("Identity", "ok uid why")
# answer: act, spare or unknown; uid: the uid to act for (act only); why: the
# log's sentence; level: info or warning; listed: what the list says (listed,
# not listed, lookup error, unknown user); system: a system account.
Verdict = system.fields("Verdict", "answer uid why level listed system")


def spared_as(verdict):
    """Why VERDICT (one that is not act) leaves the user alone, in a word or
    two: listed, system account, lookup error or unknown user."""
    return "system account" if verdict.system else verdict.listed


def name_chars(account_chars):
    """The characters of ACCOUNT_CHARS (rules.yaml's: the inside of a
    bracket expression, a-z a range, a - at either end itself)."""
    chars, i = set(), 0
    while i < len(account_chars):
        if i + 2 < len(account_chars) and account_chars[i + 1] == "-":
            chars.update(chr(c) for c in range(ord(account_chars[i]), ord(account_chars[i + 2]) + 1))
            i += 3
        else:
            chars.add(account_chars[i])
            i += 1
    return frozenset(chars)


def identity(user, uid, lookup, account_chars):
    """USER and UID as slurmd passes them (strings; None when unset);
    LOOKUP: name -> the uid it resolves to on this node, or None (asked only
    for a name that passes the checks before it); ACCOUNT_CHARS: rules.yaml's
    account_chars."""
    user = user or ""
    allowed = name_chars(account_chars)
    if not user or not all(char in allowed for char in user):
        return Identity(False, None, "the job user name is empty or unusual")
    if system.digits(user):
        return Identity(False, None, "the job user name %s is digits only, which cannot be told from a uid" % user)
    if not system.digits(uid or "") or uid.startswith("0") or len(uid) > 10 or int(uid) > system.UID_MAX_REAL:
        return Identity(False, None, "SLURM_JOB_UID (%s) is not a uid from 1 to 4294967294" % system.show(uid or "unset"))
    resolved = lookup(user)
    if resolved != int(uid):
        found = "no account of that name" if resolved is None else "it resolves to uid %d" % resolved
        return Identity(False, None, "the name %s does not resolve on this node to uid %s (%s)" % (user, uid, found))
    return Identity(True, int(uid), "")


def resolve(name):
    """The uid NAME resolves to through NSS (as slurmd and sshd resolve it),
    or None."""
    import pwd  # pylint: disable=import-outside-toplevel

    try:
        return pwd.getpwnam(name).pw_uid
    except (KeyError, ValueError, OverflowError):
        return None


def read_list(path):
    """The list's bytes, or the OSError that kept it from being read whole."""
    try:
        return system.read_file(path, limit=4 << 20)
    except OSError as exc:
        return exc


def listed_names(listing):
    """The names on the list's lines (a CR at a line's end ignored), as bytes."""
    names = []
    for line in listing.split(b"\n"):
        name = line[:-1] if line.endswith(b"\r") else line
        if name:
            names.append(name)
    return names


def system_uid(uid, defs):
    """Root or a system account, by the login.defs DEFS (UID_MIN, UID_MAX):
    uid below UID_MIN, and UID_MAX < uid <= 65535 (Debian's static system
    range, e.g. slurm 64030, and nobody 65534). Directory users above 65535
    stay ordinary. The one rule of the guard (decide()) and of the looks
    between jobs (which leave such accounts out before any lookup)."""
    uid_min, uid_max = defs
    return uid < uid_min or uid_max < uid <= 65535


def decide(ident, user, listing, list_path, resolve_name, defs):
    """IDENT: identity()'s verdict; USER: the job's user name; LISTING: the
    list's bytes, or the OSError reading it failed with; LIST_PATH: its path
    (for the sentence); RESOLVE_NAME: name -> uid or None (NSS); DEFS:
    (UID_MIN, UID_MAX), or the OSError reading login.defs failed with."""
    if not ident.ok:
        return Verdict("unknown", None, "%s; the user is unknown, doing nothing" % ident.why, "warning",
                       "unknown user", False)
    if isinstance(listing, Exception):
        why = getattr(listing, "strerror", None) or str(listing)
        return Verdict("unknown", None, "localusers lookup failed (%s: %s); doing nothing" % (why, list_path),
                       "warning", "lookup error", False)
    names = listed_names(listing)
    if os.fsencode(user) in names:
        return Verdict("spare", None, "listed in %s; doing nothing" % list_path, "info", "listed", False)
    for raw in names:
        name = os.fsdecode(raw)
        uid = resolve_name(name)
        if uid is None:
            return Verdict("unknown", None, "localusers lookup failed (%s, listed in %s, does not resolve on this "
                           "node: uid %d may be theirs); doing nothing" % (system.show(name), list_path, ident.uid),
                           "warning", "lookup error", False)
        if uid == ident.uid:
            return Verdict("spare", None, "uid %d is the uid of %s, listed in %s; doing nothing"
                           % (ident.uid, system.show(name), list_path), "info", "listed", False)
    if isinstance(defs, Exception):
        return Verdict("unknown", None, "login.defs cannot be read (%s): whether uid %d is a system account is "
                       "unknown; doing nothing" % (getattr(defs, "strerror", None) or defs, ident.uid), "warning",
                       "lookup error", False)
    uid_min, uid_max = defs
    if system_uid(ident.uid, defs):
        return Verdict("spare", None, "not listed, but uid %d is root or a system account (UID_MIN=%d, UID_MAX=%d); "
                       "doing nothing" % (ident.uid, uid_min, uid_max), "info", "not listed", True)
    return Verdict("act", ident.uid, "not listed in %s; acting for uid %d" % (list_path, ident.uid), "info",
                   "not listed", False)


def check(ident, user, list_path):
    """decide() on this node's facts: the list as it is now, the account
    database and login.defs. What the revoke, kill and cleanup (the
    lastuserjob parts) go by, and the grant (prolog 50) too (grant())."""
    if not ident.ok:
        return decide(ident, user or "", b"", list_path, resolve, (0, 0))
    return decide(ident, user, read_list(list_path), list_path, resolve, read_defs())


def read_defs():
    """login_defs(), or the OSError reading it failed with (decide():
    unknown)."""
    try:
        return login_defs()
    except OSError as exc:
        return exc



def judge_names(list_path, account_chars):
    """name -> check()'s verdict at a job end of the account NAME as slurmd
    would pass it (the uid NAME resolves to here as SLURM_JOB_UID; none when
    it does not), for many names: the list and login.defs read once, each
    name looked up once. What epilog.verify judges the allow file's lines by."""
    listing, defs, uids = read_list(list_path), read_defs(), {}

    def lookup(name):
        if name not in uids:
            uids[name] = resolve(name)
        return uids[name]

    def verdict_of(name):
        uid = lookup(name)
        ident = identity(name, None if uid is None else str(uid), lookup, account_chars)
        return own_name(decide(ident, name, listing, list_path, lookup, defs), name)
    return verdict_of


def own_name(verdict, name):
    """VERDICT on a line NAME of the allow file, as it is, unless it says
    act and NAME is not the account's own name (name_of its uid): an alias
    (another case, name@REALM) that NSS resolves. slurmd passes the
    account's own name, and that is the only line part 39 removes, so an
    alias is unknown: never granted, and named by verify."""
    if verdict.answer == "act" and name_of(verdict.uid) != name:
        return Verdict("unknown", None, "%s is not the name of uid %d" % (system.show(name), verdict.uid),
                       "warning", "not the account's name", False)
    return verdict


# The longest line pam_listfile reads as one name: up to Linux-PAM 1.5 it
# reads the file with fgets into 256 bytes, so a longer line is read as two
# or more names, any of them maybe another account's (TOO_LONG: the grant's
# why).
LINE_MAX, TOO_LONG = 255, "name too long"


def grant(ident, user, list_path):
    """Prolog 50's rule, who gets a line in the allow file: the line USER
    only where check() says act and USER is the account's own name
    (own_name): exactly the lines part 39 removes at the user's last job
    end, and the lines verify judges the file by (judge_names); and only a
    name pam_listfile reads as one line (LINE_MAX bytes at most)."""
    verdict = own_name(check(ident, user, list_path), user)
    if verdict.answer == "act" and len(os.fsencode(user)) > LINE_MAX:
        return Verdict("unknown", None, "%s is longer than the %d bytes pam_listfile reads as one name"
                       % (system.show(user), LINE_MAX), "warning", TOO_LONG, False)
    return verdict


def name_of(uid):
    """The account name of UID through NSS (as slurmd names a job's user),
    or None."""
    import pwd  # pylint: disable=import-outside-toplevel

    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, ValueError, OverflowError):
        return None


def login_defs(path="/etc/login.defs"):
    """(UID_MIN, UID_MAX) of the account database: Debian's 1000 and 60000
    unless login.defs says otherwise (the first line of each counts), or
    where there is no login.defs. OSError when it is there and cannot be
    read: a site's own values (UID_MIN 5000: its service accounts below)
    are never taken for Debian's. Only the lines that hold a key are split:
    every job end's guard reads it."""
    found, text = {}, b""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            text = os.read(fd, 1 << 20)
        finally:
            os.close(fd)
    except FileNotFoundError:
        pass
    for key in (b"UID_MIN", b"UID_MAX"):
        at = text.find(key)
        while at >= 0 and key not in found:
            end = text.find(b"\n", at) % (len(text) + 1)  # -1: the last line, unended
            fields = text[text.rfind(b"\n", 0, at) + 1:end].split()
            if len(fields) >= 2 and fields[0] == key and system.digits(fields[1].decode("ascii", "replace")):
                found[key] = int(fields[1])
            at = text.find(key, end)
    return found.get(b"UID_MIN", 1000), found.get(b"UID_MAX", 60000)
