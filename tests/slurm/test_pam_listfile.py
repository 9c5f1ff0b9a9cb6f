"""ssh_access listfile for real, without Slurm: a real sshd whose PAM files
(/etc/pam.d) are a copy of the node's on tmpfs in a mount namespace of their
own, where salt-call applies the state epilog.pam with pam_manage on, and
the chain's own parts edit the allow file as a job's start and last end do
(prolog part 50, epilog part 39, run by hand as slurmd would run them, with
the job's environment). The operators' logins never depend on the allow
file: missing, it refuses every other user; a user is let in once part 50
grants her line and refused once part 39 revokes it."""
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import Chain, SaltCall, live_spool, mount_namespace, require, require_tools, slurmd_env
from tests.salt.conftest import Minion
from tests.slurm.conftest import OPERATOR, Sshd, port_free
from tests.unit.conftest import node

pam = node("pam")
LISTFILE_PAM_SSHD_PORT = 2225


@pytest.fixture(scope="module")
def pam_copy():
    """The command prefix that enters a mount namespace whose /etc/pam.d is
    a tmpfs copy of the node's (the node's own is never written)."""
    require(any(Path(d, "security/pam_listfile.so").exists() for d in ("/lib/x86_64-linux-gnu", "/usr/lib64")),
            "pam_listfile (libpam-modules)")
    with mount_namespace(copied=("/etc/pam.d",)) as prefix:
        yield prefix


@pytest.fixture(scope="module")
def listfile_pam_sshd(tmp_path_factory, accounts, pam_copy):
    """A real sshd in that namespace (the tier's Sshd), with a key login for
    root too."""
    require_tools("/usr/sbin/sshd", "ssh", "ssh-keygen")
    require(port_free(LISTFILE_PAM_SSHD_PORT), f"port {LISTFILE_PAM_SSHD_PORT} free for the test sshd")
    Path("/run/sshd").mkdir(exist_ok=True)
    base = tmp_path_factory.mktemp("listfile-pam-sshd")
    os.chmod(base, 0o755)
    server = Sshd(base, LISTFILE_PAM_SSHD_PORT, prefix=pam_copy,
                  keys_dir=Path(f"/run/epilog-test-sshd-{LISTFILE_PAM_SSHD_PORT}"))
    yield server
    server.stop()


def refused(ssh, user):
    """USER's login is refused (the key is the one the others log in with:
    what refuses it is sshd's account stack)."""
    status, out, _ = ssh.login(user)
    return status != 0 and out == ""


def test_the_state_laid_listfile_line_refuses_a_revoked_user_and_never_an_operator(
        pam_copy, listfile_pam_sshd, salt_factories, tmp_path):
    ns, ssh = pam_copy, listfile_pam_sshd
    live_spool(tmp_path / "spool")
    chain = Chain(tmp_path / "slurm", tmp_path / "localusers", tmp_path / "epilog.log", tmp_path / "spool")
    chain.lay_down(localusers=["root", OPERATOR])
    operators = tmp_path / "slurm-operators"
    pillar = chain.pillar(localusers=["root", OPERATOR], pam_manage=True, pam_operators_file=operators)
    minion = Minion(salt_factories, tmp_path / "minion")
    minion.set_pillar(pillar)
    call = SaltCall(minion.config_dir)

    def sshd_file():
        return subprocess.run([*ns, "cat", "/etc/pam.d/sshd"], capture_output=True, text=True, check=True).stdout

    def allowed():
        return chain.allow_file.read_text().split() if chain.allow_file.exists() else []

    original = sshd_file()
    assert ssh.logs_in("alice"), "the node's own stack admits her: nothing of the chain's governs ssh yet"

    applied = call("state.apply", "epilog.pam", prefix=ns)
    assert applied.returncode == 0 and applied.states["epilog-pam-sshd-file-managed"]["changes"], applied
    placed = sshd_file()
    assert f"account required pam_listfile.so item=user sense=allow onerr=fail file={chain.allow_file}" in placed
    assert pam.unplace(placed) == original

    # No job has started here: no allow file. Every user is refused, root and the operator are not.
    assert not chain.allow_file.exists()
    assert ssh.logs_in("root") and ssh.logs_in(OPERATOR) and refused(ssh, "alice")

    # The operator's job starts: part 50 grants no line (39 would never remove an operator's); their list lets them
    # in. Her job starts: part 50 grants her line, and she is let in.
    chain.run_part("50-exclusive-ssh", slurmd_env(OPERATOR))
    chain.run_part("50-exclusive-ssh", slurmd_env("alice"))
    assert allowed() == ["alice"], chain.log_text()
    assert ssh.logs_in("alice")

    # Her last job here ends: part 39 revokes it, and she is refused; the operator and root still log in.
    chain.run_part("39-lastuserjob-ssh", slurmd_env("alice"))
    assert allowed() == [], chain.log_text()
    assert refused(ssh, "alice") and ssh.logs_in(OPERATOR) and ssh.logs_in("root")

    verified = call("epilog.verify", prefix=ns)
    assert not [p for p in verified.data["problems"] if "pam" in p.lower()], verified.data

    # Off again: the formula's lines come out, byte for byte, and the node's own stack admits her.
    minion.set_pillar({"epilog": {**pillar["epilog"], "pam_manage": False}})
    removed = call("state.apply", "epilog.pam", prefix=ns)
    assert removed.returncode == 0, removed
    assert sshd_file() == original
    assert ssh.logs_in("alice") and ssh.logs_in(OPERATOR)
