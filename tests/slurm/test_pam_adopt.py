"""pam_slurm_adopt for real: Debian's module, a real Slurm 22.05 under
proctrack/cgroup with PrologFlags=Contain, and a real sshd whose PAM files
(/etc/pam.d, /etc/security) are a copy of the node's on tmpfs in a mount
namespace of their own, where salt-call applies the state epilog.pam. After
each step of it, root and the listed operator log in; once the lines are
down, a user with no job is denied, a user with a job is adopted into it,
and the operator is admitted outside any job and outlives their own job."""
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.helpers import SaltCall, kill_all_of, mount_namespace, require, require_tools, uid_of, wait_for
from tests.salt.conftest import Minion
from tests.slurm.conftest import OPERATOR, Sshd, port_free
from tests.slurm.test_slurm_job_end import assert_not_drained
from tests.unit.conftest import node

pam = node("pam")
system = node("system")
ADOPT_SSHD_PORT = 2224
MODULE = Path("/lib/security/pam_slurm_adopt.so")


@pytest.fixture(scope="module")
def pam_namespace():
    """The command prefix that enters a mount namespace whose /etc/pam.d and
    /etc/security are tmpfs copies of the node's (the node's own are never
    written)."""
    require(MODULE.is_file(), f"{MODULE} (package libpam-slurm-adopt)")
    with mount_namespace(copied=("/etc/pam.d", "/etc/security")) as prefix:
        yield prefix


@pytest.fixture(scope="module")
def adopt_sshd(tmp_path_factory, accounts, cgroup_slurm, pam_namespace):
    """A real sshd in that namespace, with the Slurm's SLURM_CONF (where
    pam_slurm_adopt reads it) and a key login for root too."""
    require_tools("/usr/sbin/sshd", "ssh", "ssh-keygen")
    require(port_free(ADOPT_SSHD_PORT), f"port {ADOPT_SSHD_PORT} free for the test sshd")
    Path("/run/sshd").mkdir(exist_ok=True)
    base = tmp_path_factory.mktemp("adopt-sshd")
    server = Sshd(base, ADOPT_SSHD_PORT, prefix=pam_namespace, env={**os.environ, "SLURM_CONF": str(cgroup_slurm.conf)},
                  keys_dir=Path(f"/run/epilog-test-sshd-{ADOPT_SSHD_PORT}"))
    yield server
    server.stop()


def running(slurm, job):
    return slurm.cmd("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip() == "RUNNING"


def test_epilog_pam_lays_down_adoption_step_by_step_and_takes_it_out_again(
        cgroup_slurm, pam_namespace, adopt_sshd, salt_factories, tmp_path, rsyslog):
    slurm, ns, ssh = cgroup_slurm, pam_namespace, adopt_sshd
    minion = Minion(salt_factories, tmp_path / "minion")
    call = SaltCall(minion.config_dir)
    pillar = slurm.chain.pillar(localusers=["root", OPERATOR], ssh_access="adopt", pam_manage=True)
    minion.set_pillar(pillar)
    operators = Path("/etc/security/slurm-operators")  # the default

    def in_ns(*argv):
        return subprocess.run([*ns, *argv], capture_output=True, text=True, check=True).stdout

    original = in_ns("cat", "/etc/pam.d/sshd")
    assert ssh.logs_in("root") and ssh.logs_in(OPERATOR) and ssh.logs_in("alice"), "the node's own stack"

    preview = call("state.apply", "epilog.pam", "test=True", prefix=ns)
    assert preview.returncode == 0 and all(s["result"] is None for s in preview.data.values()), preview
    assert in_ns("cat", "/etc/pam.d/sshd") == original and not in_ns("ls", "/etc/security").count(operators.name)

    # Step 1, the operators' list alone: nobody's login changes.
    step = call("state.sls_id", "epilog-pam-operators-file-managed", "epilog.pam", prefix=ns)
    assert step.returncode == 0, step
    mode, owner, text = in_ns("stat", "-c", "%f %u", str(operators)).split(), None, in_ns("cat", str(operators))
    mode, owner = int(mode[0], 16), int(mode[1])
    assert stat.S_ISREG(mode) and stat.S_IMODE(mode) == 0o600 and owner == 0 and text == f"root\n{OPERATOR}\n"
    assert ssh.logs_in("root") and ssh.logs_in(OPERATOR) and ssh.logs_in("alice")

    # Step 2, the account lines: root and the operator in, alice (no job) out.
    applied = call("state.apply", "epilog.pam", prefix=ns)
    assert applied.returncode == 0 and applied.states["epilog-pam-sshd-file-managed"]["changes"], applied
    placed = in_ns("cat", "/etc/pam.d/sshd")
    assert pam.BEGIN in placed and pam.unplace(placed) == original
    assert list(Path(minion.config_dir).parent.rglob("file_backup/etc/pam.d/sshd_*")), "no backup of the old file"
    again = call("state.apply", "epilog.pam", prefix=ns)
    assert again.returncode == 0 and not any(s["changes"] for s in again.data.values()), again
    assert ssh.logs_in("root") and ssh.logs_in(OPERATOR)
    status, _, _ = ssh.login("alice")
    assert status != 0, "pam_slurm_adopt let in a user with no job on the node"

    verified = call("epilog.verify", prefix=ns)
    assert not [p for p in verified.data["problems"] if "pam" in p.lower()], verified.data
    explained = {user: call("epilog.explain", f"user={user}", prefix=ns).data["ssh_sessions"]
                 for user in (OPERATOR, "alice")}
    assert explained[OPERATOR].startswith("not adopted (admitted before pam_slurm_adopt"), explained
    assert "Slurm ends them with the job" in explained["alice"], explained

    # alice with a job: adopted into it.
    job = slurm.submit("alice", "sleep 300")
    try:
        wait_for(lambda: running(slurm, job), 60, what=f"job {job} to run")
        found = wait_for(lambda: (lambda r: r[1] if r[0] == 0 else None)(ssh.login("alice", "cat /proc/self/cgroup")),
                         30, what="alice's login to be adopted")
        assert system.job_of_cgroup(found, uid_of("alice")) == ("id", job), found
    finally:
        slurm.cmd("scancel", job)
    slurm.wait_epilog_end(job)

    # The operator with a job: admitted outside it, and outlives its end.
    job = slurm.submit(OPERATOR, "sleep 300")
    session = None
    try:
        wait_for(lambda: running(slurm, job), 60, what=f"job {job} to run")
        session = ssh(OPERATOR, "cat /proc/self/cgroup; echo ready; exec sleep 600")
        lines = []
        while not lines or lines[-1] != "ready\n":
            line = session.stdout.readline()
            assert line, session.stderr.read()
            lines.append(line)
        assert system.job_of_cgroup("".join(lines[:-1]), uid_of(OPERATOR)) is None, lines
        slurm.cmd("scancel", job)
        slurm.wait_epilog_end(job)
        slurm.wait_idle()
        assert session.poll() is None, "the operator's session ended with their job"
    finally:
        if session is not None:
            session.kill()
            session.wait()
        slurm.cmd("scancel", job, check=False)
        kill_all_of(OPERATOR)  # her session's shell on the server outlives the client
    assert_not_drained(slurm)

    # Off again: the formula's lines come out, byte for byte.
    minion.set_pillar({"epilog": {**pillar["epilog"], "pam_manage": False}})
    removed = call("state.apply", "epilog.pam", prefix=ns)
    assert removed.returncode == 0, removed
    assert in_ns("cat", "/etc/pam.d/sshd") == original
    assert ssh.logs_in("root") and ssh.logs_in(OPERATOR) and ssh.logs_in("alice")
