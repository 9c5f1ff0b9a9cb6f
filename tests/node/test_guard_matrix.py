"""The seed's decision matrix, one test per row, run against the parts 39, 40
and 42 of a laid-down chain, each run on its own, with real accounts, real
stray processes and real files, in the bare environment slurmd gives an
epilog.

Each row arranges the same residue for the job user: a stray process, a file
in /tmp and a line in the ssh allow file between other users' lines. Then it
runs 39, 40 and 42. "act" means all three clean up; "spare" means all three
leave everything as it was (the guard's one answer holds for every part)."""
import os
import shutil
import subprocess

import pytest

from tests.helpers import CURRENT, RELEASES, end, killed, owned_file, require_tools, slurmd_env, still_running, stray

PARTS = ["39-lastuserjob-ssh", "40-lastuserjob-processes", "42-lastuserjob-cleanup"]
OTHERS = ["bob", "alicex", "alice-admin", "alice.b", "-v-other"]


def run_row(chain, user, expect, prefix=(), log_has=(), env=None):
    """Arrange residue for USER, run the three parts, check EXPECT."""
    others = [o for o in OTHERS if o != user]
    allow_before = "\n".join([others[0], user, *others[1:]]) + "\n"
    chain.view(chain.allow_file).write_text(allow_before)
    log_before = chain.log_text()
    proc = stray(user)
    residue = owned_file(user)
    try:
        for part in PARTS:
            ret = chain.run_part(part, {**slurmd_env(user), **(env or {})}, prefix=prefix)
            assert ret.returncode == 0, (part, ret.stdout, ret.stderr)
        allow_after = chain.view(chain.allow_file).read_text()
        log = chain.log_text()[len(log_before):]
        if expect == "act":
            assert killed(proc), "40 did not kill the stray process"
            assert not residue.exists(), "42 did not remove the /tmp file"
            assert allow_after.splitlines() == others, "39 did not remove exactly the user's line"
        else:
            assert still_running(proc), "the stray process was killed"
            assert residue.exists(), "the /tmp file was removed"
            assert allow_after == allow_before, "the allow file changed"
        for needle in log_has:
            for part in PARTS:
                assert any(part in line and needle in line for line in log.splitlines()), (part, needle, log)
        return log
    finally:
        end(proc)
        residue.unlink(missing_ok=True)


def write_list(chain, content):
    chain.localusers.unlink(missing_ok=True)
    chain.localusers.write_bytes(content)
    os.chmod(chain.localusers, 0o600)


@pytest.fixture
def restore_list(chain):
    """Rows that change localusers.backup put the state's rendering back."""
    saved = chain.localusers.read_bytes()
    yield
    if chain.localusers.is_dir():
        shutil.rmtree(chain.localusers)
    write_list(chain, saved)


def test_listed_user_default_path_is_spared_by_every_part(default_chain):
    assert default_chain.conf_dir.as_posix() == "/etc/slurm"
    assert "je.kim" in default_chain.localusers.read_text().splitlines()
    # the parts read the list of their own release, under slurm_config_dir;
    # /etc/slurm/localusers.backup is the symlink to the current one
    listed = default_chain.localusers
    assert str(default_chain.release).startswith(f"/etc/slurm/{RELEASES}/")
    assert os.readlink(default_chain.view("/etc/slurm/localusers.backup")) == f"{CURRENT}/localusers.backup"
    run_row(default_chain, "je.kim", "spare", log_has=[f"listed in {default_chain.release}/localusers.backup"])
    assert listed.read_text() == default_chain.view("/etc/slurm/localusers.backup").read_text()


def test_listed_user_custom_path_is_spared_by_every_part(chain):
    listed = f"listed in {chain.release}/localusers.backup"
    run_row(chain, "je.kim", "spare", log_has=[listed])


def test_definite_nonmatch_is_cleaned_up_by_every_part(chain):
    run_row(chain, "alice", "act", log_has=["not listed"])


def test_lookup_failed_file_absent_spares_and_warns(chain, restore_list):
    chain.localusers.unlink()
    log = run_row(chain, "alice", "spare",
                  log_has=[f"localusers lookup failed (No such file or directory: {chain.localusers})"])
    # her line stays, and part 39 says until when
    stays = f"the user's line in {chain.allow_file}, if any, stays until a job end of theirs here at which the lookups"
    assert any("39-lastuserjob-ssh" in line and stays in line for line in log.splitlines()), log


def test_lookup_failed_directory_spares_and_warns(chain, restore_list):
    chain.localusers.unlink()
    chain.localusers.mkdir()
    run_row(chain, "alice", "spare", log_has=[f"localusers lookup failed (not a regular file: {chain.localusers})"])


def test_lookup_failed_unreadable_spares_and_warns(chain, restore_list):
    """Mode 000 stops root only without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH,
    so the parts run with those two capabilities dropped (kill and unlink
    rights stay): a real EACCES from the kernel, not a stub."""
    require_tools("setpriv")
    os.chmod(chain.localusers, 0o000)
    drop = ["setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]
    probe = subprocess.run([*drop, "cat", str(chain.localusers)], capture_output=True)
    assert probe.returncode != 0, "precondition: the file must be unreadable without DAC capabilities"
    run_row(chain, "alice", "spare", prefix=drop,
            log_has=[f"localusers lookup failed (Permission denied: {chain.localusers})"])


def test_regex_wildcard_does_not_exempt_je_kim(chain, restore_list):
    """jeXkim is an account of its own (it resolves): a regex would match
    je.kim to it, the exact line does not."""
    write_list(chain, b"root\njeXkim\n")
    run_row(chain, "je.kim", "act", log_has=["not listed"])


def test_user_named_dash_v_is_data_not_an_option_when_listed(chain, restore_list, directory_users):
    """-v is a directory account (the test NSS module, as LDAP would serve it)."""
    write_list(chain, b"root\n-v\n")
    run_row(chain, "-v", "spare", log_has=[f"listed in {chain.localusers}"], prefix=directory_users.prefix,
            env=directory_users.env)


def test_user_named_dash_v_is_data_not_an_option_when_not_listed(chain, restore_list, directory_users):
    write_list(chain, b"root\nje.kim\n")
    run_row(chain, "-v", "act", log_has=["not listed"], prefix=directory_users.prefix, env=directory_users.env)


def test_alice_is_not_exempted_by_alice_admin_or_alice_b(chain, restore_list):
    write_list(chain, b"root\nalice-admin\nalice.b\n")
    run_row(chain, "alice", "act", log_has=["not listed"])


def test_crlf_and_blank_lines_in_the_list_still_match_exactly(chain, restore_list):
    write_list(chain, b"root\r\n\r\nje.kim\r\n\n\ns.shin")
    run_row(chain, "je.kim", "spare", log_has=["listed in"])
    run_row(chain, "s.shin", "spare", log_has=["listed in"])
    run_row(chain, "alice", "act", log_has=["not listed"])


def test_a_second_name_at_a_listed_operators_uid_is_that_operator(chain, restore_list, directory_users):
    """The exemption is by name, the kill and the cleanup by uid: a second
    account name at a listed operator's uid (useradd -o, or a directory user
    whose uid collides with a local operator's; here jekim-alias, served by
    the test NSS module at je.kim's uid) is je.kim, and is spared."""
    write_list(chain, b"root\nje.kim\n")
    run_row(chain, "jekim-alias", "spare", log_has=[f"is the uid of je.kim, listed in {chain.localusers}"],
            prefix=directory_users.prefix, env=directory_users.env)


def test_a_listed_name_that_does_not_resolve_makes_the_answer_unknown(chain, restore_list):
    """A listed name that does not resolve on this node (a directory that
    is down, an account not made here) might be at the job's uid: the
    answer is unknown, never a licence to act."""
    write_list(chain, b"root\nje.kim\nnobody-of-this-name\n")
    run_row(chain, "alice", "spare", log_has=["localusers lookup failed (nobody-of-this-name, listed in"])
