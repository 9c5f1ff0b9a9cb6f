"""The localusers guard's decision table (epilog_guard and epilog_identity,
_checks.sh.jinja), as the state renders them, with their inputs stubbed: the
account database (id), the list's content, a failing read (grep), the job's
name and uid. Every row says act or do nothing, and why. No root: the
functions run in a bash of the test's own, and say what they decide on
stdout (the runner's explain mode), writing nothing."""
import re
import subprocess
from pathlib import Path

import pytest

from tests.unit.test_settings import render, render_text

# The account database the stub `id` answers from (name: uid).
ACCOUNTS = {"alice": 50101, "je.kim": 50103, "-v": 50106, "daemon": 1, "slurm": 64030, "nobody": 65534,
            "ldap.user": 70000}


def login_defs():
    """This machine's UID_MIN and UID_MAX, as the guard reads them."""
    try:
        text = Path("/etc/login.defs").read_text()
    except OSError:
        text = ""
    found = {key: int(value) for key, value in re.findall(r"(?m)^\s*(UID_MIN|UID_MAX)\s+([0-9]+)", text)}
    return found.get("UID_MIN", 1000), found.get("UID_MAX", 60000)


@pytest.fixture(scope="module")
def guard(tmp_path_factory):
    """A bash with the rendered shared code and checks, and a runner for
    one decision: guard(user, uid, listing, grep_rc) -> (rc, the last line)."""
    tmp = tmp_path_factory.mktemp("guard")
    settings = render(tmp, {})["settings"]
    code = render_text(tmp, "{% include 'epilog/files/_core.sh.jinja' %}\n{% include 'epilog/files/_checks.sh.jinja' %}\n",
                       {}, epilog=settings, release="0123456789ab")
    stubs = "\n".join([
        "id() { case $3 in " + " ".join(f"{name!r}) echo {uid} ;;" for name, uid in ACCOUNTS.items())
        + " *) echo \"id: $3: no such user\" >&2; return 1 ;; esac; }",
        'if [ -n "$GREP_RC" ]; then grep() { return "$GREP_RC"; }; fi',
        'EPILOG_LOCALUSERS=$LIST',
        "EPILOG_EXPLAIN=yes",  # epilog_log says it on stdout, and writes nothing
        'epilog_guard; echo "rc=$?"',
    ])
    script = tmp / "guard.sh"
    script.write_text(code + "\n" + stubs + "\n")

    def decide(user, uid, listing=b"root\njoe\n", grep_rc=None, list_path=None):
        listed = tmp / "localusers.backup"
        if listing is None:
            listed.unlink(missing_ok=True)
        else:
            listed.write_bytes(listing)
        env = {"SLURM_JOB_USER": user, "SLURM_JOB_UID": "" if uid is None else str(uid), "SLURM_JOB_ID": "7",
               "LIST": str(list_path or listed), "GREP_RC": "" if grep_rc is None else str(grep_rc)}
        out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30).stdout
        lines = out.splitlines()
        return int(lines[-1].split("=")[1]), lines[-2] if len(lines) > 1 else ""
    decide.tmp = tmp
    return decide


UID_MIN, UID_MAX = login_defs()


@pytest.mark.parametrize("user,uid,listing,grep_rc,acts,said", [
    ("alice", 50101, b"root\njoe\n", None, True, "not listed in {list}; acting for uid 50101"),
    ("je.kim", 50103, b"root\nje.kim\n", None, False, "listed in {list}; doing nothing"),
    ("je.kim", 50103, b"root\r\nje.kim\r\n", None, False, "listed in {list}; doing nothing"),
    # a literal whole line: no regex, no substring, no prefix
    ("alice", 50101, b"al.ce\n.*\nalice2\n alice\n", None, True, "acting for uid 50101"),
    ("alice", 50101, None, None, False, "localusers lookup failed (not a readable regular file: {list}); doing nothing"),
    ("alice", 50101, b"root\n", 2, False, "localusers lookup failed (grep rc=2, file={list}); doing nothing"),
    # names are data: a user called -v is looked up and judged like any other
    ("-v", 50106, b"root\n", None, True, "acting for uid 50106"),
    ("-v", 50106, b"root\n-v\n", None, False, "listed in {list}; doing nothing"),
    ("daemon", 1, b"root\n", None, False, "is root or a system account"),
    ("slurm", 64030, b"root\n", None, UID_MAX >= 64030, "acting for uid 64030" if UID_MAX >= 64030 else
     "is root or a system account"),
    ("nobody", 65534, b"root\n", None, False, "is root or a system account"),
    ("ldap.user", 70000, b"root\n", None, True, "acting for uid 70000"),
    ("ghost", 50999, b"root\n", None, False, "the name ghost does not resolve on this node to uid 50999"),
    ("alice", 50103, b"root\n", None, False, "the name alice does not resolve on this node to uid 50103 (id rc=0, uid 50101)"),
    ("12345", 12345, b"root\n", None, False, "the job user name 12345 is digits only"),
    ("al ice", 50101, b"root\n", None, False, "the job user name is empty or unusual"),
    ("a/b", 50101, b"root\n", None, False, "the job user name is empty or unusual"),
    ("alice", 0, b"root\n", None, False, "SLURM_JOB_UID (0) is not a uid from 1 to 4294967294"),
    ("alice", 4294967295, b"root\n", None, False, "SLURM_JOB_UID (4294967295) is not a uid from 1 to 4294967294"),
    ("alice", None, b"root\n", None, False, "SLURM_JOB_UID (unset) is not a uid"),
], ids=["not-listed", "listed", "listed-crlf", "no-regex-no-substring", "list-absent", "list-unreadable", "user-dash-v",
        "dash-v-listed", "system-below-uid-min", "debian-static-range", "nobody", "directory-user-above-65535",
        "unknown-name", "name-of-another-uid", "digits-only", "whitespace", "slash", "uid-0", "uid-minus-1",
        "uid-unset"])
def test_the_guard_acts_only_for_a_known_unlisted_ordinary_user(guard, user, uid, listing, grep_rc, acts, said):
    rc, line = guard(user, uid, listing, grep_rc)
    assert (rc == 0) == acts, line
    assert said.format(list=guard.tmp / "localusers.backup") in line, line
    assert line.startswith(("info ", "warning ")) and "release=0123456789ab" in line, line


def test_a_list_that_is_a_directory_is_a_lookup_failure(guard):
    directory = guard.tmp / "a-directory"
    directory.mkdir(exist_ok=True)
    rc, line = guard("alice", 50101, list_path=directory)
    assert rc == 1 and f"not a readable regular file: {directory}" in line, line
