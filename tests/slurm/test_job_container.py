"""job_container/tmpfs on a real Slurm 22.05: a job's /tmp is its own
(BasePath/<node>/<job>), which the chain's parts never see and Slurm removes
at the job's end; epilog.verify says so, and names a BasePath job directory
that no running job owns."""
from pathlib import Path

from tests.helpers import HOST, wait_for
from tests.salt.conftest import Minion
from tests.slurm.conftest import OPERATOR
from tests.slurm.test_slurm_job_end import assert_not_drained


def test_a_jobs_own_tmp_is_slurms_and_verify_names_a_stale_job_directory(tmpfs_slurm, salt_factories, tmp_path,
                                                                          rsyslog):
    slurm = tmpfs_slurm
    base = slurm.base / "job-tmp"
    job, out = slurm.run_job("alice", "echo in-job > /tmp/alice-tmpfs-residue; grep ' /tmp ' /proc/self/mountinfo")
    assert f"{base}/{HOST}/{job}/.{job} /tmp " in out, out
    slurm.wait_epilog_end(job)
    assert not Path("/tmp/alice-tmpfs-residue").exists(), "the job's /tmp was the node's"
    wait_for(lambda: not (base / HOST / job).exists(), 30, what=f"Slurm to remove job {job}'s directory")
    assert_not_drained(slurm)

    # a directory a failed launch left, and a running job's own
    stale = base / HOST / "999999"
    stale.mkdir(parents=True)
    running = slurm.submit("alice", "sleep 300")
    try:
        wait_for((base / HOST / running).is_dir, 60, what=f"job {running}'s directory")
        minion = Minion(salt_factories, tmp_path / "minion")
        minion.set_pillar(slurm.chain.pillar(localusers=["root", OPERATOR]))
        report = minion("epilog.verify", verbose=True)
        info, warnings = "\n".join(report["info"]), "\n".join(report["warnings"])
        assert "has job_container/tmpfs: each job's /tmp and /dev/shm are its own" in info, info
        assert f"[job-container-stale-dirs] 1 job directory under BasePath {base} that no running job owns" \
            in warnings, warnings
        assert str(stale) in warnings and f"{base / HOST / running}" not in warnings, warnings
    finally:
        slurm.cmd("scancel", running)
        slurm.wait_epilog_end(running)
        stale.rmdir()
