"""The residue sweep of the node program, run by hand as root on residue from
real X servers, in a private mount namespace with its own tmpfs /tmp (the
host's /tmp is never swept by these tests): the very code part 45 runs at
every job end and epilog.sweep runs for salt-call. The same scenario table
runs at a real Slurm job end in tests/slurm/test_sweep_job_end.py."""
import os
import subprocess

import pytest

from tests import sweep_scenarios as sc
from tests.helpers import as_user, ids_of, uid_of


@pytest.mark.parametrize("scenario", sc.SCENARIOS, ids=[f.__name__ for f in sc.SCENARIOS])
def test_sweep_follows_the_decision_table(sweeper, accounts, site, scenario):
    expect = scenario(site)
    log_before = sweeper.log_text()
    preview = sweeper(site, "--test")
    assert preview["test"] is True and preview["removed"] == []
    assert sweeper.log_text() == log_before, "a preview must not log"
    assert set(preview["would_remove"]) == expect.removed, preview
    for path in expect.removed:
        assert os.path.lexists(site.path(path)), f"the preview removed {path}"
    report = sweeper(site)
    assert set(report["removed"]) == set(preview["would_remove"]), "the preview must predict the real run"
    sc.check(site, expect, report, log_text=sweeper.log_text() if expect.logged else None)


def test_sweep_removes_only_the_ending_jobs_scratch(sweeper, accounts, site):
    expect, others = sc.scratch_of_the_ending_job(site, "4711")
    site.write("/tmp/slurm4711.je.kim", b"x", user="je.kim")  # the job's pattern, another user's file
    report = sweeper(site, "--job=4711", f"--uid={uid_of('alice')}")
    sc.check(site, expect, report)
    assert report["counts"]["scratch"]["removed"] == 2
    for path in others:
        assert site.path(path).exists(), f"{path} belongs to another job"
    assert site.path("/tmp/slurm4711.je.kim").exists()
    reason = next(k["reason"] for k in report["kept"] if k["path"] == "/tmp/slurm4711.je.kim")
    assert reason.startswith("owned by uid") and "not the job's uid" in reason


def test_the_jobs_scratch_that_is_a_mount_point_is_kept_and_never_entered(sweeper, accounts, site):
    """The job's user's directory /tmp/slurm4711.mnt with a file system
    mounted on it (a tmpfs of hers here, as her FUSE mount with
    allow_other would be): the sweep never enters another file system, so
    it keeps the entry, says why, and what is in it stays."""
    mount_point = site.path("/tmp/slurm4711.mnt")
    mount_point.mkdir()
    os.chown(mount_point, *ids_of("alice"))
    uid, gid = ids_of("alice")
    subprocess.run([*site.prefix, "mount", "-t", "tmpfs", "-o", f"uid={uid},gid={gid},mode=0700", "her-fs",
                    "/tmp/slurm4711.mnt"], check=True)
    try:
        subprocess.run([*site.prefix, *as_user("alice"), "sh", "-c", "echo x > /tmp/slurm4711.mnt/inside"], check=True)
        report = sweeper(site, "--job=4711", f"--uid={uid_of('alice')}")
        inside = subprocess.run([*site.prefix, "cat", "/tmp/slurm4711.mnt/inside"], capture_output=True, text=True)
        assert inside.stdout == "x\n", (inside, report)
        reason = next((k["reason"] for k in report["kept"] if k["path"] == "/tmp/slurm4711.mnt"), None)
        assert reason and reason.startswith("another file system is mounted there"), report
    finally:
        subprocess.run([*site.prefix, "umount", "/tmp/slurm4711.mnt"], check=False)


def test_scratch_needs_the_jobs_user(sweeper, accounts, site):
    ret = sweeper(site, "--job=4711", check=False)
    assert ret.returncode != 0
    assert "give user=" in ret.stderr


def test_all_rows_at_once_with_counts_per_kind(sweeper, accounts, site):
    expects = [scenario(site) for scenario in sc.SCENARIOS]
    report = sweeper(site)
    for expect in expects:
        sc.check(site, expect, report)
    counts = report["counts"]
    assert counts["x_socket"] == {"removed": 2, "kept": 3}
    assert counts["x_lock"] == {"removed": 2, "kept": 3}
    assert counts["clsbd"] == {"removed": 2, "kept": 1}
    assert report["errors"] == [] and report["budget_exhausted"] is False
