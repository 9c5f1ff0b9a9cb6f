"""pam_slurm_adopt on cgroup v2: the release's module (Debian's for 22.05,
the build's in <prefix>/lib/security for 26.05, made by .ci/slurm-build;
Debian's 22.05 module does not speak 26.05's protocol) and a real sshd
whose account stack ends in the lines the state epilog.pam lays down
(pam.block placed by pam.place, as epilog.pam_file builds them; the state
itself is applied on v1 by test_pam_adopt.py), over a real Slurm under
proctrack/cgroup on cgroup v2 with PrologFlags=Contain (the v2_slurm
fixture; 26.05 in its default naming, the job's directory its SLUID).
sshd runs in a mount namespace made inside slurmd's, so it has the same
cgroup2 hierarchy at /sys/fs/cgroup, with tmpfs copies of /etc/pam.d and
/etc/security on top, and the Slurm's slurm.conf by SLURM_CONF in its
environment (the built module finds its libslurm by its rpath). The
module asks the job's extern step (slurmstepd) to take the login in, and
slurmstepd moves it into the job's v2 cgroup; slurmstepd reads
/proc/PID/cgroup through the preloaded tests/c/cgroup2_only.c, which
stands in for a pure-v2 node (this machine's kernel lists its v1
hierarchies there too, which Slurm refuses). sshd and the ssh session
read the file as it is."""
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import mount_namespace, require, require_tools, uid_of, wait_for
from tests.slurm.conftest import OPERATOR, SLURMS, Sshd, port_free
from tests.slurm.test_cgroup_v2_job_end import SLEEP_300, job_dir, processes_in, running_in, scope
from tests.slurm.test_pam_adopt import MODULE
from tests.slurm.test_slurm_job_end import alive_as, assert_not_drained, record_of, ssh_session
from tests.unit.conftest import node

pam = node("pam")
system = node("system")
V2_ONLY_CASES = ("22.05", "26.05-sluid")
V2_ADOPT_SSHD_PORT = 2225
OPERATORS = "/etc/security/slurm-operators"  # epilog:pam_operators_file's default


def adopt_module(release):
    """The pam_slurm_adopt.so that speaks to Slurm RELEASE, and where it comes from."""
    if release == "22.05":
        return MODULE, "package libpam-slurm-adopt"
    return SLURMS[release]["prefix"] / "lib/security/pam_slurm_adopt.so", f"bash .ci/slurm-build {release}"


@pytest.fixture(scope="module")
def v2_adopt_sshd(tmp_path_factory, accounts, v2_slurm):
    """A real sshd in a mount namespace made inside v2_slurm's, its
    /etc/pam.d/sshd the node's with the formula's adopt lines and the
    operators' list (root, the operator) laid down as epilog.pam would."""
    module, how = adopt_module(v2_slurm.release)
    require(module.is_file(), f"{module} ({how})")
    require_tools("/usr/sbin/sshd", "ssh", "ssh-keygen")
    require(port_free(V2_ADOPT_SSHD_PORT), f"port {V2_ADOPT_SSHD_PORT} free for the test sshd")
    Path("/run/sshd").mkdir(exist_ok=True)
    with mount_namespace(copied=("/etc/pam.d", "/etc/security"), within=v2_slurm.ns.prefix) as prefix:
        sshd_file = pam.place(Path("/etc/pam.d/sshd").read_text(), pam.block(OPERATORS, adopt_module=str(module)))
        script = f"umask 077 && printf 'root\\n{OPERATOR}\\n' > {OPERATORS} && cat > /etc/pam.d/sshd"
        subprocess.run([*prefix, "sh", "-c", script], input=sshd_file, text=True, check=True)
        base = tmp_path_factory.mktemp("v2-adopt-sshd")
        os.chmod(base, 0o755)
        server = Sshd(base, V2_ADOPT_SSHD_PORT, prefix=prefix, env={**os.environ, "SLURM_CONF": str(v2_slurm.conf)})
        try:
            yield server
        finally:
            server.stop()


def test_an_ssh_login_is_adopted_into_the_jobs_v2_cgroup_and_ends_with_the_job(v2_slurm, v2_adopt_sshd, rsyslog):
    """alice, with a batch job running, logs in by ssh: pam_slurm_adopt
    puts her session into the job's extern step, in the job's directory of
    the v2 tree. At the job's end Slurm ends the session with the job, and
    part 40's record counts no stray of hers."""
    slurm, uid = v2_slurm, uid_of("alice")
    job = session = None
    try:
        job = slurm.submit("alice", "sleep 300")
        batch = running_in(slurm, job, uid, SLEEP_300)
        session = ssh_session(v2_adopt_sshd, "alice")  # its shell execs sleep 600

        def adopted():
            return {pid: cgroup for pid, cgroup in processes_in(slurm, job, uid).items()
                    if pid not in batch and Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\0" b"600\0"}
        found = wait_for(adopted, 30, what="alice's ssh session in her job's cgroup")
        (pid, cgroup), = found.items()
        kind, name = where = job_dir(slurm, job)
        assert f"0::/system.slice/{scope(slurm)}/{'job_' if kind == 'id' else ''}{name}/step_extern/" in cgroup, cgroup
        assert system.job_of_cgroup(cgroup, uid) == where, cgroup

        slurm.cmd("scancel", job)
        record = record_of(slurm.chain, job)
        assert session.wait(timeout=30) != 0 and not alive_as(pid, "alice"), "the session outlived the job"
        assert record["other"]["answer"] == "no" and record["guard"]["answer"] == "act", record
        part = {p["part"]: p for p in record["parts"]}["40-lastuserjob-processes"]
        assert part["facts"]["kill"]["strays"] == 0, part
        assert_not_drained(slurm)
    finally:
        if session is not None and session.poll() is None:
            session.kill()
            session.wait()
        if job is not None:
            slurm.cmd("scancel", job, check=False)
        slurm.wait_idle()
