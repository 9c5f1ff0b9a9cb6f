"""Which Slurm job's cgroup a process is in, from its /proc/PID/cgroup:
what part 40 tells the record (a process of the job, Slurm's to kill under
proctrack/cgroup, or a stray outside any job, the chain's). The real lines
of both Slurms are tests/slurm/test_cgroup_job_end.py's."""
import pytest

from tests.unit.conftest import node

system = node("system")
records = node("record")

# Debian's 22.05 (v1, root slurm_<host>), 24.11 (v1, root slurm), v2.
V1_2205 = ("9:name=systemd:/\n6:freezer:/slurm_vm/uid_50101/job_12/step_0\n"
           "4:memory:/slurm_vm/uid_50101/job_12/step_0/task_0\n0::/\n")
V1_2411 = "6:freezer:/slurm/uid_50101/job_7/step_extern\n"
V2 = "0::/system.slice/slurmstepd.scope/job_31/step_batch/user/task_0\n"


@pytest.mark.parametrize("text, uid, job", [
    (V1_2205, 50101, "12"),
    (V1_2205, None, "12"),
    (V1_2411, 50101, "7"),
    (V2, 50101, "31"),
    ("0::/slurmstepd.scope/job_4/step_0\n", None, "4"),
    ("0::/a.slice/b.slice/slurmstepd.scope/job_4\n", None, "4"),
    # outside any job
    ("9:name=systemd:/user.slice/user-50101.slice/session-3.scope\n0::/\n", 50101, None),
    ("", 50101, None),
    ("6:freezer:/\n", 50101, None),
    # another uid's job in a v1 path is not this user's
    (V1_2205, 50102, None),
    # not from the root of the hierarchy: a directory the user could make
    ("6:freezer:/user.slice/slurm_vm/uid_50101/job_12\n", 50101, None),
    ("0::/user.slice/user-50101.slice/user@50101.service/slurmstepd.scope/job_9\n", 50101, None),
    ("0::/user.slice/user-50101.slice/user@50101.service/x.slice/slurmstepd.scope/job_9\n", 50101, None),
    ("0::/.slice/slurmstepd.scope/job_9\n", 50101, None),
    # the v2 form only in the v2 line; malformed ids and names
    ("6:freezer:/system.slice/slurmstepd.scope/job_9\n", 50101, None),
    ("6:freezer:/slurm_vm/uid_50101/job_\n", 50101, None),
    ("6:freezer:/slurm_vm/uid_50101/job_1x\n", 50101, None),
    ("6:freezer:/slurm_vm/uid_/job_1\n", 50101, None),
    ("6:freezer:/slurm_vm/uid_50101/job_\u0661\n", 50101, None),
    ("6:freezer:/slurmx/uid_50101/job_1\n", 50101, None),
    ("0::/system.slice/slurmstepd.scope/step_0/job_9\n", 50101, None),
    ("6:freezer:/slurm_vm/uid_50101/job_12/step_0\nnot a line\n", 50101, "12"),
    ("garbage\n\n::\n", 50101, None),
])
def test_a_process_is_in_the_job_cgroup_that_starts_at_the_root(text, uid, job):
    assert system.job_of_cgroup(text, uid) == job


def test_the_report_and_metrics_tell_strays_from_a_jobs_processes():
    kill = {"outcome": "done", "signalled": 6, "strays": 3, "in_job_cgroup": 2, "in_other_job_cgroup": 1,
            "unclassified": 0}
    rec = {"v": 1, "stage": "epilog", "node": "n1", "job": 7, "user": "alice", "uid": 50101, "start": 1.8e9,
           "ms": 40, "other": {"answer": "no", "why": ""}, "guard": {"answer": "act", "why": ""}, "warnings": 0,
           "parts": [{"part": "40-lastuserjob-processes", "ran": True, "rc": 0, "ms": 5, "facts": {"kill": kill}}]}
    old = {**rec, "job": 6, "parts": [{"part": "40-lastuserjob-processes", "ran": True, "rc": 0, "ms": 5,
                                       "facts": {"kill": {"outcome": "done", "signalled": 4}}}]}
    out = records.summary([rec, old])
    assert (out["processes_signalled"], out["strays_signalled"], out["job_cgroup_processes_signalled"],
            out["other_job_cgroup_processes_signalled"]) == (10, 3, 2, 1)
    assert records.signalled(rec) == {"stray": 3, "job_cgroup": 2, "other_job_cgroup": 1, "unclassified": 0}
    assert records.signalled(old) == {}
    text = records.render_metrics({records.KILLED_METRIC % "stray": 3})
    back = records.read_metrics(text.encode())
    assert back['epilog_processes_signalled_total{where="stray"}'] == 3
    assert back['epilog_processes_signalled_total{where="job_cgroup"}'] == 0


evidence = node("evidence")


def test_a_basepath_job_directory_of_no_running_job_is_stale():
    entries = {"/jc": ["12", "vm", "lost+found"], "/jc/vm": ["7", "8", ".ns", "x9"]}
    assert evidence.stale_job_dirs("/jc", "vm", entries, {"7", "12"}) == ["/jc/vm/8"]
    assert evidence.stale_job_dirs("/jc/", "vm", {"/jc/": ["3"]}, set()) == ["/jc/3"]
    assert evidence.stale_job_dirs("/jc", "vm", {}, set()) == []
