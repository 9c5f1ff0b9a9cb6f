"""The ssh allow file's edit (epilog_node/allow.py): allow_lines reads the
file's lines as a shell's mapfile does, and allow_change decides, for an
add (prolog 50) or a remove (part 39), what changes: exact whole lines, a CR
at a line's end ignored, every other line kept as it is, never a duplicate;
and in_place_writes, the edit made in the file itself on a full file
system, whose every torn state names nobody new. No files: the node tier
edits real ones (tests/node/test_runner.py, and a full file system in
tests/node/test_hostile_chain.py)."""
import itertools

import pytest

from tests.unit.conftest import node

allow = node("allow")


@pytest.mark.parametrize("data,lines", [
    (b"", []), (b"\n", [b""]), (b"bob\nalice\n", [b"bob", b"alice"]), (b"bob\nalice", [b"bob", b"alice"]),
    (b"bob\r\n\nalice\n\n", [b"bob\r", b"", b"alice", b""]),
])
def test_the_lines_of_the_allow_file(data, lines):
    assert allow.allow_lines(data) == lines


@pytest.mark.parametrize("op,user,lines,change,after", [
    ("add", b"alice", [b"bob"], "added", [b"bob", b"alice"]),
    ("add", b"alice", [b"bob", b"alice"], "present", None),
    ("add", b"alice", [b"bob", b"alice\r"], "present", None),
    ("add", b"alice", [b"alice-admin", b"alicex", b" alice", b"al.ce"], "added",
     [b"alice-admin", b"alicex", b" alice", b"al.ce", b"alice"]),
    ("remove", b"alice", [b"bob", b"alice", b"alicex"], "removed", [b"bob", b"alicex"]),
    ("remove", b"alice", [b"bob\r", b"alice\r", b"alicex\r"], "removed", [b"bob\r", b"alicex\r"]),
    ("remove", b"alice", [b"alice", b"", b"alice"], "removed", [b""]),
    ("remove", b"alice", [b"alicex", b"alice.b", b"xalice"], "absent", None),
    ("remove", b"-v", [b"bob", b"-v"], "removed", [b"bob"]),
    ("remove", b"alice", [], "absent", None),
    ("remove", b"alice", [b"bob", b"#####", b"alice", b"##\r", b"#x"], "removed", [b"bob", b"#x"]),
    ("add", b"alice", [b"#####", b"bob", b""], "added", [b"bob", b"", b"alice"]),
], ids=["add", "add-present", "add-present-crlf", "add-no-regex-no-substring", "remove", "remove-crlf",
        "remove-every-copy", "remove-absent", "remove-dash-v", "remove-empty", "remove-drops-fillers",
        "add-drops-fillers"])
def test_the_allow_change(op, user, lines, change, after):
    assert allow.allow_change(op, user, lines) == (change, after)


def names(data):
    """The lines of DATA that could name an account (no #: no account is
    named with one; an empty line names nobody)."""
    return {allow._name(line) for line in allow.allow_lines(data)} - {b""} - {
        allow._name(line) for line in allow.allow_lines(data) if b"#" in line}


def torn_states(data, writes):
    """Every state of the file while WRITES are made, one after another, each
    of them cut short or with any of its bytes landed and not the others
    (a reader in the middle of one): the file never shrinks."""
    states, current = [], bytearray(data)
    for offset, chunk in writes:
        for landed in itertools.product((False, True), repeat=len(chunk)):
            state = bytearray(current)
            for i, byte in enumerate(chunk):
                if landed[i]:
                    if offset + i < len(state):
                        state[offset + i] = byte
                    elif offset + i == len(state):
                        state.append(byte)
                    else:  # an appended byte lands only after those before it
                        break
            states.append(bytes(state))
        current[offset:offset + len(chunk)] = chunk
    return states, bytes(current)


@pytest.mark.parametrize("op,user,data,final", [
    ("remove", b"alice", b"bob\nalice\nmaria.kim\n", b"bob\n#####\nmaria.kim\n"),
    ("remove", b"bob", b"bob\nalice\nmaria.kim\n", b"###\nalice\nmaria.kim\n"),
    ("remove", b"kim", b"kim\r\nmaria.kim\nkim", b"###\r\nmaria.kim\n###"),
    ("add", b"alicex", b"bob\nalice\n", b"bob\nalice\nalicex\n"),
    ("add", b"kim", b"bob\nmaria.", b"bob\nmaria.\nkim\n"),
    ("add", b"-v", b"", b"-v\n"),
], ids=["remove", "remove-first", "remove-crlf-and-unterminated", "add", "add-after-unterminated", "add-empty"])
def test_an_edit_in_place_never_names_anyone_new_even_torn(op, user, data, final):
    """Defect 1 of issue 22: on a file system with no room for a new file,
    part 39 edits the allow file itself. Whatever moment a reader (sshd's
    pam_listfile) sees, or where the part is stopped, the file names no one
    it did not name before or after: no byte moves, the file never gets
    shorter, a revoked line becomes #s, a grant is a line of #s first."""
    writes = allow.in_place_writes(op, user, data)
    states, after = torn_states(data, writes)
    assert after == final
    change, lines = allow.allow_change(op, user, allow.allow_lines(data))
    assert change == ("removed" if op == "remove" else "added")
    assert names(after) == {allow._name(line) for line in lines} - {b""}
    allowed = names(data) | names(final)
    for state in states:
        assert names(state) <= allowed, state
    assert all(len(state) >= len(data) for state in states)


guard = node("guard")


def verdict(answer, listed, system=False):
    return guard.Verdict(answer, 50101 if answer == "act" else None, "why", "info", listed, system)


VERDICTS = {"alice": verdict("act", "not listed"), "je.kim": verdict("spare", "listed"),
            "slurm60500": verdict("spare", "not listed", system=True), "ghost": verdict("unknown", "unknown user"),
            "bob": verdict("unknown", "lookup error")}


def test_the_lines_part_39_never_removes():
    """Of the allow file's lines, those whose account the guard would not act
    for at a job end of theirs, each once, with why: a listed operator's, a
    system account's (uid 60001-65535 above UID_MAX), a name that does not
    resolve. A line the guard acts for goes at its last job end; one whose
    lookup failed (lookup error) goes at a job end where it succeeds: neither
    is reported. Blank lines and an in-place edit's #s name nobody."""
    data = b"alice\nje.kim\r\n\n#####\nslurm60500\nghost\nbob\nje.kim\n"
    asked = []

    def verdict_of(name):
        asked.append(name)
        return VERDICTS[name]

    assert allow.never_revoked(allow.allow_lines(data), verdict_of) == [
        ("je.kim", "listed"), ("slurm60500", "system account"), ("ghost", "unknown user")]
    assert sorted(asked) == sorted(VERDICTS)  # each name judged once


def test_the_guard_judges_an_allow_file_line_as_a_job_end_of_its_account(tmp_path):
    """judge_names: the name's own uid as SLURM_JOB_UID, the list read once:
    root (uid 0 is no job uid) and a name that does not resolve are unknown
    users; a listed name is listed."""
    listing = tmp_path / "localusers.backup"
    listing.write_text("root\n")
    verdict_of = guard.judge_names(str(listing), "a-z0-9._-")
    assert guard.spared_as(verdict_of("root")) == "unknown user"
    assert guard.spared_as(verdict_of("no-such-account-here")) == "unknown user"
    listing.write_text("nobody\n")
    assert guard.spared_as(guard.judge_names(str(listing), "a-z0-9._-")("nobody")) == "listed"


def test_an_alias_nss_resolves_is_not_the_line_part_39_removes(tmp_path, monkeypatch):
    """A name that resolves to an account whose own name is another (sssd's
    case-insensitive or name@REALM look-ups: this machine's files NSS has
    none, so the look-ups are given) is a line part 39, which removes the
    name slurmd passes, never removes."""
    listing = tmp_path / "localusers.backup"
    listing.write_text("opal\n")
    names = {"opal": 50102, "alice": 50101, "Alice": 50101, "alice@REALM": 50101}
    monkeypatch.setattr(guard, "resolve", names.get)
    monkeypatch.setattr(guard, "name_of", {50101: "alice"}.get)
    verdict_of = guard.judge_names(str(listing), "a-zA-Z0-9._@-")
    assert verdict_of("alice").answer == "act"
    assert allow.never_revoked([b"alice", b"Alice", b"alice@REALM"], verdict_of) == [
        ("Alice", "not the account's name"), ("alice@REALM", "not the account's name")]
