"""The localusers guard's decision table (epilog_node/guard.py): identity()
and decide() called directly with their facts given as data: the account
database (a dict), the list's bytes or the error reading it failed with,
the job's name and uid, login.defs' range. Every row says act, spare or
unknown, and why. No root, no files: the node tier runs the same table
through real parts (tests/node/test_guard_matrix.py)."""
import errno

import pytest

from tests.unit.conftest import node

guard = node("guard")
RULES_CHARS = "A-Za-z0-9._@-"
# The account database the rows are judged against (name: uid).
ACCOUNTS = {"alice": 50101, "je.kim": 50103, "-v": 50106, "daemon": 1, "slurm": 64030, "nobody": 65534,
            "ldap.user": 70000, "root": 0, "joe": 50110, "jekim-alias": 50103, "jeXkim": 50120, "al.ce": 50121,
            "alice2": 50122, "xalice": 50123}
LIST = "/etc/slurm/epilog-releases/0123456789ab/localusers.backup"
DEFS = (1000, 60000)


def judge(user, uid, listing=b"root\njoe\n", accounts=ACCOUNTS, defs=DEFS):
    ident = guard.identity(user, None if uid is None else str(uid), accounts.get, RULES_CHARS)
    return ident, guard.decide(ident, user, listing, LIST, accounts.get, defs)


@pytest.mark.parametrize("user,uid,listing,answer,said", [
    ("alice", 50101, b"root\njoe\n", "act", f"not listed in {LIST}; acting for uid 50101"),
    ("je.kim", 50103, b"root\nje.kim\n", "spare", f"listed in {LIST}; doing nothing"),
    ("je.kim", 50103, b"root\r\nje.kim\r\n", "spare", f"listed in {LIST}; doing nothing"),
    ("je.kim", 50103, b"root\n\n\r\nje.kim", "spare", "listed in"),
    # a literal whole line: no regex, no substring, no prefix
    ("alice", 50101, b"root\njoe\nal.ce\nalice2\nxalice\n", "act", "acting for uid 50101"),
    ("je.kim", 50103, b"root\njeXkim\n", "act", "acting for uid 50103"),
    # the exemption covers the uid of every listed name: a second name at it is that operator
    ("jekim-alias", 50103, b"root\nje.kim\n", "spare", f"uid 50103 is the uid of je.kim, listed in {LIST}"),
    # a listed name that does not resolve might be at this uid: never a licence
    ("alice", 50101, b"root\nje.kim\nghost\n", "unknown", f"localusers lookup failed (ghost, listed in {LIST}"),
    ("alice", 50101, OSError(errno.ENOENT, "No such file or directory"), "unknown",
     f"localusers lookup failed (No such file or directory: {LIST}); doing nothing"),
    ("alice", 50101, OSError(errno.EACCES, "Permission denied"), "unknown",
     f"localusers lookup failed (Permission denied: {LIST}); doing nothing"),
    ("alice", 50101, OSError(errno.EINVAL, "not a regular file"), "unknown", "not a regular file"),
    # names are data: a user called -v is looked up and judged like any other
    ("-v", 50106, b"root\n", "act", "acting for uid 50106"),
    ("-v", 50106, b"root\n-v\n", "spare", f"listed in {LIST}; doing nothing"),
    ("daemon", 1, b"root\n", "spare", "is root or a system account (UID_MIN=1000, UID_MAX=60000)"),
    ("slurm", 64030, b"root\n", "spare", "is root or a system account"),
    ("nobody", 65534, b"root\n", "spare", "is root or a system account"),
    ("ldap.user", 70000, b"root\n", "act", "acting for uid 70000"),
    ("ghost", 50999, b"root\n", "unknown", "the name ghost does not resolve on this node to uid 50999 (no account"),
    ("alice", 50103, b"root\n", "unknown", "the name alice does not resolve on this node to uid 50103 (it resolves "
                                           "to uid 50101)"),
    ("12345", 12345, b"root\n", "unknown", "the job user name 12345 is digits only"),
    ("al ice", 50101, b"root\n", "unknown", "the job user name is empty or unusual"),
    ("a/b", 50101, b"root\n", "unknown", "the job user name is empty or unusual"),
    ("", 50101, b"root\n", "unknown", "the job user name is empty or unusual"),
    ("alice", 0, b"root\n", "unknown", "SLURM_JOB_UID (0) is not a uid from 1 to 4294967294"),
    ("alice", 4294967295, b"root\n", "unknown", "SLURM_JOB_UID (4294967295) is not a uid from 1 to 4294967294"),
    ("alice", "050101", b"root\n", "unknown", "SLURM_JOB_UID (050101) is not a uid"),
    ("alice", "+50101", b"root\n", "unknown", "SLURM_JOB_UID (+50101) is not a uid"),
    ("alice", "\u0665\u0660\u0661\u0660\u0661", b"root\n", "unknown", "is not a uid"),
    ("alice", None, b"root\n", "unknown", "SLURM_JOB_UID (unset) is not a uid"),
], ids=["not-listed", "listed", "listed-crlf", "listed-blank-lines", "no-regex-no-substring", "regex-wildcard",
        "second-name-at-an-operators-uid", "listed-name-unresolved", "list-absent", "list-unreadable",
        "list-a-directory", "user-dash-v", "dash-v-listed", "system-below-uid-min", "debian-static-range", "nobody",
        "directory-user-above-65535", "unknown-name", "name-of-another-uid", "digits-only", "whitespace", "slash",
        "empty", "uid-0", "uid-minus-1", "uid-leading-zero", "uid-plus", "uid-other-digits", "uid-unset"])
def test_the_guard_acts_only_for_a_known_unlisted_ordinary_user(user, uid, listing, answer, said):
    _ident, verdict = judge(user, uid, listing)
    assert verdict.answer == answer, verdict
    assert said in verdict.why, verdict
    assert (verdict.uid is not None) == (answer == "act")
    assert verdict.level == ("warning" if answer == "unknown" else "info")


# uids at the edges of login.defs' ranges (DEFS) and of Debian's static system range
EDGES = {"sys.low": 999, "edge.min": 1000, "edge.max": 60000, "sys.high": 60001, "attacker": 60500,
         "sys.top": 65535, "dir.user": 65536}


@pytest.mark.parametrize("user,uid,listing,answer,why", [
    ("sys.low", 999, b"root\n", "spare", "system account"),
    ("daemon", 1, b"root\n", "spare", "system account"),
    ("edge.min", 1000, b"root\n", "act", None),
    ("alice", 50101, b"root\n", "act", None),
    ("edge.max", 60000, b"root\n", "act", None),
    ("sys.high", 60001, b"root\n", "spare", "system account"),
    ("attacker", 60500, b"root\n", "spare", "system account"),
    ("sys.top", 65535, b"root\n", "spare", "system account"),
    ("dir.user", 65536, b"root\n", "act", None),
    ("ldap.user", 70000, b"root\n", "act", None),
    ("je.kim", 50103, b"root\nje.kim\n", "spare", "listed"),
    ("jekim-alias", 50103, b"root\nje.kim\n", "spare", "listed"),
    ("alice", 50101, b"root\nghost\n", "unknown", "lookup error"),
    ("alice", 50101, None, "unknown", "lookup error"),
    ("ghost", 50999, b"root\n", "unknown", "unknown user"),
], ids=["below-uid-min", "daemon", "uid-min", "ordinary", "uid-max", "above-uid-max", "attackers-60500", "65535",
        "65536", "directory-user", "listed", "second-name-of-a-listed-uid", "listed-name-unresolved", "list-absent",
        "unknown-user"])
def test_prolog_50_grants_exactly_where_the_epilog_acts(tmp_path, monkeypatch, user, uid, listing, answer, why):
    """Grant and revoke follow one rule (guard.check): over the uid ranges,
    prolog 50 adds the line exactly when the runner's lastuserjob gate
    (and a part run on its own) would let 39 remove it; otherwise it edits
    nothing and says why in one line and the record's fact. The node's
    facts (the account database, login.defs) are the table's; the edit of
    the file itself is the node tier's (it is recorded here, not made)."""
    allow = node("allow")
    accounts = dict(ACCOUNTS, **EDGES)
    monkeypatch.setattr(guard, "resolve", accounts.get)
    monkeypatch.setattr(guard, "name_of", own_names(accounts).get)
    monkeypatch.setattr(guard, "login_defs", lambda: DEFS)
    path = tmp_path / "localusers.backup"
    if listing is not None:
        path.write_bytes(listing)
    ident = guard.identity(user, str(uid), accounts.get, RULES_CHARS)
    gate = guard.check(ident, user, str(path))
    edits, facts, lines = [], {}, []
    monkeypatch.setattr(allow, "allow_edit", lambda ctx, op, name: edits.append((op, name)))
    ctx = type("Ctx", (), {"identity": ident, "user": user, "names": {"localusers": str(path),
                                                                        "allow_file": "/etc/localusers"},
                           "log": lambda self, level, line: lines.append((level, line)),
                           "fact": lambda self, key, value: facts.__setitem__(key, value)})()
    allow.grant_ssh(ctx)
    assert gate.answer == answer, gate
    if answer == "act":
        assert edits == [("add", user)] and not lines
        return
    assert edits == [] and facts == {"allow": {"op": "add", "change": "not granted", "why": why}}
    assert lines == [(gate.level, f"{gate.why}; not added to /etc/localusers ({why}: part 39 would never remove "
                                  f"the line)")], lines


def own_names(accounts):
    """uid -> the account's own name (the first name of ACCOUNTS at it), as
    getpwuid answers."""
    names = {}
    for name, uid in accounts.items():
        names.setdefault(uid, name)
    return names


def test_prolog_50_grants_no_alias_the_guard_acts_for(tmp_path, monkeypatch):
    """The grant is the guard's rule (guard.grant): a name NSS resolves to
    an account whose own name is another (sssd's case-insensitive or
    name@REALM look-ups) is acted for by check(), but is not the line part
    39 removes at a job end (slurmd passes the account's own name), nor one
    verify takes for the account's (guard.judge_names): never granted."""
    allow = node("allow")
    accounts = {"root": 0, "alice": 50101, "Alice": 50101, "alice@REALM": 50101}
    monkeypatch.setattr(guard, "resolve", accounts.get)
    monkeypatch.setattr(guard, "name_of", {50101: "alice"}.get)
    monkeypatch.setattr(guard, "login_defs", lambda: DEFS)
    path = tmp_path / "localusers.backup"
    path.write_bytes(b"root\n")
    verdict_of = guard.judge_names(str(path), RULES_CHARS)
    for user in ("Alice", "alice@REALM", "alice"):
        ident = guard.identity(user, "50101", accounts.get, RULES_CHARS)
        assert guard.check(ident, user, str(path)).answer == "act"
        granted = guard.grant(ident, user, str(path))
        assert granted == verdict_of(user)
        edits, facts, lines = [], {}, []
        monkeypatch.setattr(allow, "allow_edit", lambda ctx, op, name, edits=edits: edits.append((op, name)))
        ctx = type("Ctx", (), {"identity": ident, "user": user, "names": {"localusers": str(path),
                                                                            "allow_file": "/etc/localusers"},
                               "log": lambda self, level, line, lines=lines: lines.append((level, line)),
                               "fact": lambda self, key, value, facts=facts: facts.__setitem__(key, value)})()
        allow.grant_ssh(ctx)
        if user == "alice":
            assert granted.answer == "act" and edits == [("add", "alice")] and not lines
            continue
        assert granted.answer == "unknown" and edits == []
        assert facts == {"allow": {"op": "add", "change": "not granted", "why": "not the account's name"}}
        assert lines == [("warning", f"{user} is not the name of uid 50101; not added to /etc/localusers (not the "
                                     "account's name: part 39 would never remove the line)")]


def test_prolog_50_grants_no_name_pam_listfile_would_read_as_several(tmp_path, monkeypatch):
    """pam_listfile (Linux-PAM up to 1.5) reads the allow file 255 bytes a
    line at most: a name of 256 bytes would be read as two names, the
    second maybe another account's (253 a's and "bob" admit "b"). Such a
    name, acted for by the guard, is never granted; one of 255 bytes is."""
    longest, longer = "a" * 252 + "bob", "a" * 253 + "bob"
    accounts = {"root": 0, longest: 50101, longer: 50102}
    monkeypatch.setattr(guard, "resolve", accounts.get)
    monkeypatch.setattr(guard, "name_of", own_names(accounts).get)
    monkeypatch.setattr(guard, "login_defs", lambda: DEFS)
    path = tmp_path / "localusers.backup"
    path.write_bytes(b"root\n")
    chars = RULES_CHARS
    ok = guard.grant(guard.identity(longest, "50101", accounts.get, chars), longest, str(path))
    assert ok.answer == "act", ok
    ident = guard.identity(longer, "50102", accounts.get, chars)
    assert guard.check(ident, longer, str(path)).answer == "act"
    refused = guard.grant(ident, longer, str(path))
    assert (refused.answer, refused.listed) == ("unknown", "name too long"), refused
    assert guard.spared_as(refused) == "name too long"


def test_the_database_is_asked_only_for_a_name_that_passes_every_check():
    asked = []

    def lookup(name):
        asked.append(name)
        return ACCOUNTS.get(name)

    for user, uid in (("a/b", 1), ("12345", 12345), ("alice", 0), ("alice", "x")):
        assert not guard.identity(user, str(uid), lookup, RULES_CHARS).ok
    assert asked == []
    assert guard.identity("alice", "50101", lookup, RULES_CHARS).ok and asked == ["alice"]


def test_the_verdict_says_what_explain_and_the_record_show():
    _, acted = judge("alice", 50101)
    _, listed = judge("je.kim", 50103, b"je.kim\n")
    _, system = judge("daemon", 1)
    _, unknown = judge("ghost", 1)
    assert (acted.listed, acted.system) == ("not listed", False)
    assert (listed.listed, listed.system) == ("listed", False)
    assert (system.listed, system.system) == ("not listed", True)
    assert (unknown.listed, unknown.system) == ("unknown user", False)


@pytest.mark.parametrize("text,defs", [
    (b"UID_MIN 2000\nUID_MAX 3000\n", (2000, 3000)),
    (b"# UID_MIN 1\n  UID_MIN\t500\nUID_MIN 700\n", (500, 60000)),
    (b"UID_MINX 5\nUID_MIN x\n", (1000, 60000)),
    (b"", (1000, 60000)),
    (b"UID_MAX 5000", (1000, 5000)),  # the last line, unended
    (b"# UID_MIN 1 UID_MIN 2\nUID_MIN\nUID_MIN 3 UID_MAX 9\r\nUID_MAX\t7", (3, 7)),
])
def test_login_defs_first_value_of_each_counts(tmp_path, text, defs):
    path = tmp_path / "login.defs"
    path.write_bytes(text)
    assert node("guard").login_defs(str(path)) == defs


def test_a_login_defs_that_cannot_be_read_is_a_lookup_error_and_none_is_debians(tmp_path):
    """login.defs absent: Debian's values (shadow's own defaults). There and
    unreadable (here a directory: EISDIR, as EMFILE or EIO would be): never
    Debian's values, which would take a site's service accounts (UID_MIN
    5000, say) for users to act for; the guard says unknown and does
    nothing, and a listed user is still spared."""
    assert guard.login_defs(str(tmp_path / "absent")) == (1000, 60000)
    with pytest.raises(OSError):
        guard.login_defs(str(tmp_path))
    ident = guard.identity("alice", "50101", {"alice": 50101}.get, RULES_CHARS)
    error = IsADirectoryError(errno.EISDIR, "Is a directory")
    verdict = guard.decide(ident, "alice", b"root\n", "/etc/slurm/localusers.backup", {"root": 0}.get, error)
    assert (verdict.answer, verdict.listed) == ("unknown", "lookup error") and "login.defs" in verdict.why
    listed = guard.decide(ident, "alice", b"alice\n", "/etc/slurm/localusers.backup", {"alice": 50101}.get, error)
    assert listed.answer == "spare"
