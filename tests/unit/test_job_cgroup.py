"""Which Slurm job's cgroup a process is in, from its /proc/PID/cgroup:
what part 40 tells the record (a process of the job, Slurm's to kill under
proctrack/cgroup, or a stray outside any job, the chain's). The real v1
lines of both Slurms are tests/slurm/test_cgroup_job_end.py's; the v2
lines here are real tasks' of Debian's 22.05 and upstream 24.11 and, for
26.05, the layout its source makes (src/plugins/cgroup/v2/cgroup_v2.c)."""
import os

import pytest

from tests.unit.conftest import node

system = node("system")
reach = node("reach")
metrics = node("metrics")
reader = node("reader")

# Debian's 22.05 (v1, root slurm_<host>), 24.11 (v1, root slurm), v2.
V1_2205 = ("9:name=systemd:/\n6:freezer:/slurm_vm/uid_50101/job_12/step_0\n"
           "4:memory:/slurm_vm/uid_50101/job_12/step_0/task_0\n0::/\n")
V1_2411 = "6:freezer:/slurm/uid_50101/job_7/step_extern\n"
V2 = "0::/system.slice/slurmstepd.scope/job_31/step_batch/user/task_0\n"
DIR = 0o40755


def node_owners(names):
    """(uid, mode) of the cgroup v2 root and of each of NAMES as a systemd
    node has them: root's 0755 directories, but systemd's delegated
    user@<uid>.service and all below it the user's."""
    uid, out = 0, [(0, DIR)]
    for name in names:
        if name.startswith("user@") and name.endswith(".service"):
            uid = int(name[5:-8])
        out.append((uid, DIR))
    return out


def test_v1_stays_as_it_was():
    never = lambda names: pytest.fail("v1 reads no owners")  # noqa: E731
    for text, uid, job in [
            (V1_2205, 50101, ("id", "12")), (V1_2205, None, ("id", "12")), (V1_2411, 50101, ("id", "7")),
            ("9:name=systemd:/user.slice/user-50101.slice/session-3.scope\n0::/\n", 50101, None),
            ("", 50101, None), ("6:freezer:/\n", 50101, None),
            # another uid's job in a v1 path is not this user's
            (V1_2205, 50102, None),
            # not from the root of the hierarchy: a directory the user could make
            ("6:freezer:/user.slice/slurm_vm/uid_50101/job_12\n", 50101, None),
            # the v2 form only in the v2 line; malformed ids and names
            ("6:freezer:/system.slice/slurmstepd.scope/job_9\n", 50101, None),
            ("6:freezer:/slurm_vm/uid_50101/job_\n", 50101, None),
            ("6:freezer:/slurm_vm/uid_50101/job_1x\n", 50101, None),
            ("6:freezer:/slurm_vm/uid_/job_1\n", 50101, None),
            ("6:freezer:/slurm_vm/uid_50101/job_\u0661\n", 50101, None),
            ("6:freezer:/slurmx/uid_50101/job_1\n", 50101, None),
            ("6:freezer:/slurm_vm/uid_50101/job_12/step_0\nnot a line\n", 50101, ("id", "12")),
            ("garbage\n\n::\n", 50101, None)]:
        assert system.job_of_cgroup(text, uid, never) == job, text


SLUID = "sEKNKTV3WPV500"  # cgroup.conf(5)'s example of 26.05


@pytest.mark.parametrize("text, job", [
    # Debian's 22.05, built with MULTIPLE_SLURMD: <node>_slurmstepd.scope (a real task's)
    ("0::/system.slice/cg2node_slurmstepd.scope/job_3/step_batch/user/task_special\n", ("id", "3")),
    # upstream 24.11
    (V2, ("id", "31")),
    ("0::/system.slice/slurmstepd.scope/job_4/step_extern/slurm\n", ("id", "4")),
    # 26.05's default: the job's directory is its SLUID; CgroupJobIdPaths=yes: job_<id> again
    (f"0::/system.slice/slurmstepd.scope/{SLUID}/step_batch/user/task_0\n", ("sluid", SLUID)),
    ("0::/system.slice/slurmstepd.scope/s0000000000000/step_0/user/task_0\n", ("sluid", "s0000000000000")),
    ("0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0\n", ("id", "123")),
    # CgroupSlice=custom.slice, a nested slice, the scope at the root
    ("0::/custom.slice/slurmstepd.scope/job_8/step_0/user/task_0\n", ("id", "8")),
    ("0::/a.slice/a-b.slice/slurmstepd.scope/job_8/step_0\n", ("id", "8")),
    ("0::/slurmstepd.scope/job_4/step_0\n", ("id", "4")),
    # a containerised slurmd: its scope under the container's own cgroup
    ("0::/docker-4f3a9c1e.scope/system.slice/slurmstepd.scope/job_5/step_0/user/task_0\n", ("id", "5")),
    (f"0::/system.slice/docker-4f3a9c1e.scope/system.slice/n1_slurmstepd.scope/{SLUID}/step_0\n",
     ("sluid", SLUID)),
    # a hybrid node: v1 lines and the v2 line; a v1 job wins
    ("12:freezer:/slurm/uid_50101/job_7/step_0\n1:name=systemd:/system.slice/slurmd.service\n"
     "0::/system.slice/slurmd.service\n", ("id", "7")),
    ("0::/system.slice/slurmstepd.scope/job_9/step_0\n6:freezer:/slurm/uid_50101/job_7/step_0\n", ("id", "7")),
    ("12:freezer:/\n1:name=systemd:/system.slice/slurmstepd.scope\n"
     "0::/system.slice/slurmstepd.scope/job_9/step_0/user/task_0\n", ("id", "9")),
    # garbage and newlines around a real line
    ("\n\ngarbage\n::\n0::/system.slice/slurmstepd.scope/job_3/step_0\n\n", ("id", "3")),
    # outside any job: no scope, slurmstepd's own, the scope alone, no node name
    ("0::/user.slice/user-50101.slice/session-3.scope\n", None),
    ("0::/system.slice/slurmstepd.scope/system\n", None),
    # slurmd started by hand (no systemd): slurmd/ in the scope, its prolog's and epilog's too (real, 22.05 and 26.05)
    ("0::/system.slice/slurmstepd.scope/slurmd\n", None),
    ("0::/system.slice/cg2node_slurmstepd.scope/slurmd\n", None),
    ("0::/system.slice/slurmstepd.scope\n", None),
    ("0::/system.slice/_slurmstepd.scope/job_3\n", None),
    ("0::/system.slice/slurmstepd.scope.x/job_3\n", None),
    ("0::/\n", None),
    ("", None),
    # a user's forgery in her delegated subtree (user@.service): hers, no job's
    ("0::/user.slice/user-50101.slice/user@50101.service/x/slurmstepd.scope/job_5\n", None),
    ("0::/user.slice/user-50101.slice/user@50101.service/slurmstepd.scope/job_9\n", None),
    ("0::/user.slice/user-50101.slice/user@50101.service/x.slice/slurmstepd.scope/job_9\n", None),
    (f"0::/user.slice/user-50101.slice/user@50101.service/app.slice/n1_slurmstepd.scope/{SLUID}\n", None),
    ("0::/user.slice/user-50101.slice/user@50101.service/a/system.slice/slurmstepd.scope/job_5/step_0\n", None),
    # the v2 form in a v1 line is no job's; a malformed or unknown name under root's scope is unknown
    ("6:freezer:/system.slice/slurmstepd.scope/job_9\n", None),
    ("0::/system.slice/slurmstepd.scope/job_3x/step_0\n", "unknown"),
    ("0::/system.slice/slurmstepd.scope/job_\n", "unknown"),
    ("0::/system.slice/slurmstepd.scope/slurmd2/step_0\n", "unknown"),
    ("0::/system.slice/slurmstepd.scope/Slurmd\n", "unknown"),
    ("0::/system.slice/slurmstepd.scope/step_0/job_9\n", "unknown"),
    ("0::/system.slice/slurmstepd.scope/seknktv3wpv500/step_0\n", "unknown"),
    ("0::/system.slice/slurmstepd.scope/sGKNKTV3WPV500/step_0\n", "unknown"),
    ("0::/system.slice/slurmstepd.scope/sEKNKTV3WPV5I0/step_0\n", "unknown"),
    ("0::/system.slice/slurmstepd.scope/sEKNKTV3WPV5000/step_0\n", "unknown"),
    ("0::/system.slice/slurmstepd.scope/job_\u0661\n", "unknown"),
])
def test_a_process_is_in_the_job_cgroup_slurm_made_on_cgroup_v2(text, job):
    found = system.job_of_cgroup(text, 50101, node_owners)
    assert (found[0] if found and found[0] == "unknown" else found) == job


@pytest.mark.parametrize("owners, job", [
    (lambda names: None, "unknown"),  # no cgroup2 hierarchy mounted here
    (lambda names: [(0, DIR)] * 2, "unknown"),  # gone before the job's directory was read
    (lambda names: [(0, DIR)] * 3, "unknown"),
    (lambda names: [(0, DIR)] * 4, ("id", "3")),
    (lambda names: [(0, DIR)] * (len(names) + 1), ("id", "3")),
    # a directory another account could make one in: no job's
    (lambda names: [(0, DIR), (0, DIR | 0o020), (0, DIR), (0, DIR)], None),
    (lambda names: [(0, DIR | 0o002), (0, DIR), (0, DIR), (0, DIR)], None),
    (lambda names: [(0, DIR), (0, DIR), (0, DIR), (50101, DIR)], None),
    (lambda names: [(0, DIR), (0, DIR), (65534, DIR), (0, DIR)], None),
])
def test_only_directories_root_alone_made_tell_a_job_and_unread_ones_are_unknown(owners, job):
    found = system.job_of_cgroup("0::/system.slice/slurmstepd.scope/job_3/step_0/user\n", 50101, owners)
    assert (found[0] if found and found[0] == "unknown" else found) == job


def test_owners_are_read_only_for_a_path_naming_slurms_scope_and_only_so_deep():
    asked = []
    assert system.job_of_cgroup("0::/user.slice/user-1.slice/session-2.scope\n", 1, asked.append) is None
    assert asked == []
    deep = "/".join(f"d{i}.slice" for i in range(40))
    found = system.job_of_cgroup(f"0::/{deep}/slurmstepd.scope/job_1\n", 1, node_owners)
    assert found[0] == "unknown" and "deeper than 32" in found[1], found
    assert system.v2_job(["slurmstepd.scope", "job_1"], None)[0] == "unknown"


MOUNTINFO = (b"24 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n"
             b"35 24 0:30 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate\n"
             b"36 24 0:31 / /sys/fs/cgroup/systemd rw shared:11 - cgroup cgroup rw,name=systemd\n"
             b"90 80 0:30 /../.. /ctr/cg rw - cgroup2 cgroup2 rw\n"
             b"91 80 0:30 / /a\\040b rw - cgroup2 cgroup2 rw\n"
             b"92 80 0:30 / /x rw shared:3 master:2 - cgroup2 none rw\n"
             b"garbage - cgroup2\n\n")


def test_the_cgroup2_mounts_of_the_namespaces_root_come_from_mountinfo():
    assert system.cgroup2_mounts(MOUNTINFO) == [("/sys/fs/cgroup/unified", os.makedev(0, 30)),
                                                ("/x", os.makedev(0, 30))]
    assert system.cgroup2_mounts(b"") == []


def test_owners_are_read_by_descriptor_below_the_mount_never_through_a_symlink(tmp_path, monkeypatch):
    (tmp_path / "system.slice" / "slurmstepd.scope" / "job_3").mkdir(parents=True)
    (tmp_path / "link.slice").symlink_to(tmp_path / "system.slice")
    (tmp_path / "system.slice").chmod(0o775)
    me = [(os.getuid(), os.stat(str(tmp_path / path)).st_mode) for path in (
        "", "system.slice", "system.slice/slurmstepd.scope", "system.slice/slurmstepd.scope/job_3")]
    monkeypatch.setattr(system, "_CGROUP2", [[("/nonexistent-epilog", 1),
                                              (str(tmp_path), os.stat(str(tmp_path)).st_dev)]])
    assert system.cgroup_owners(["system.slice", "slurmstepd.scope", "job_3", "step_0"]) == me
    assert me[1][1] & 0o777 == 0o775
    assert system.cgroup_owners(["link.slice", "slurmstepd.scope", "job_3"]) == me[:1]
    assert system.cgroup_owners(["..", "x"]) == me[:1]
    monkeypatch.setattr(system, "_CGROUP2", [[(str(tmp_path), os.stat(str(tmp_path)).st_dev + 1)]])
    assert system.cgroup_owners(["system.slice"]) is None  # another mount over the one mountinfo names
    monkeypatch.setattr(system, "_CGROUP2", [[]])
    assert system.cgroup_owners(["system.slice"]) is None


def test_the_job_end_tells_its_own_cgroup_by_id_or_sluid_from_another_jobs_and_an_unread_one():
    jobs = {"1(a)": ("id", "7"), "2(b)": ("sluid", SLUID), "3(c)": ("id", "8"), "4(d)": ("unknown", "why"),
            "5(e)": ("sluid", "s0000000000000")}
    assert reach.job_cgroups(jobs, "7", SLUID) == (["1(a)", "2(b)"], ["3(c) job 8", "5(e) job s0000000000000"],
                                                   ["4(d): why"])
    assert reach.job_cgroups(jobs, "7", None) == (["1(a)"], [f"2(b) job {SLUID}", "3(c) job 8",
                                                             "5(e) job s0000000000000"], ["4(d): why"])
    assert reach.job_cgroups(jobs, "7", "") == reach.job_cgroups(jobs, "7")
    assert reach.job_cgroups({}, "7", SLUID) == ([], [], [])


def test_the_report_and_metrics_tell_strays_from_a_jobs_processes():
    kill = {"outcome": "done", "signalled": 6, "strays": 3, "in_job_cgroup": 2, "in_other_job_cgroup": 1,
            "unclassified": 0}
    rec = {"v": 1, "stage": "epilog", "node": "n1", "job": 7, "user": "alice", "uid": 50101, "start": 1.8e9,
           "ms": 40, "other": {"answer": "no", "why": ""}, "guard": {"answer": "act", "why": ""}, "warnings": 0,
           "parts": [{"part": "40-lastuserjob-processes", "ran": True, "rc": 0, "ms": 5, "facts": {"kill": kill}}]}
    old = {**rec, "job": 6, "parts": [{"part": "40-lastuserjob-processes", "ran": True, "rc": 0, "ms": 5,
                                       "facts": {"kill": {"outcome": "done", "signalled": 4}}}]}
    out = reader.summary([rec, old])
    assert (out["processes_signalled"], out["strays_signalled"], out["job_cgroup_processes_signalled"],
            out["other_job_cgroup_processes_signalled"]) == (10, 3, 2, 1)
    assert metrics.signalled(rec) == {"stray": 3, "job_cgroup": 2, "other_job_cgroup": 1, "unclassified": 0}
    assert metrics.signalled(old) == {}
    text = metrics.render_metrics({metrics.KILLED_METRIC % "stray": 3})
    back = metrics.read_metrics(text.encode())
    assert back['epilog_processes_signalled_total{where="stray"}'] == 3
    assert back['epilog_processes_signalled_total{where="job_cgroup"}'] == 0


evidence = node("evidence")


def test_a_basepath_job_directory_of_no_running_job_is_stale():
    entries = {"/jc": ["12", "vm", "lost+found"], "/jc/vm": ["7", "8", ".ns", "x9"]}
    assert evidence.stale_job_dirs("/jc", "vm", entries, {"7", "12"}) == ["/jc/vm/8"]
    assert evidence.stale_job_dirs("/jc/", "vm", {"/jc/": ["3"]}, set()) == ["/jc/3"]
    assert evidence.stale_job_dirs("/jc", "vm", {}, set()) == []


def stops_at(n, read):
    """OWNERS that read only the first N directories below the root, as
    node_owners would (READ: the real reader's view up to where it stopped:
    the rest removed meanwhile, too deep, or a name it could not open)."""
    return lambda names: read(names[:n])


@pytest.mark.parametrize("text, owners", [
    # deeper than the reader goes, under her delegated subtree
    ("0::/user.slice/user-50101.slice/user@50101.service/" + "/".join(f"d{i}" for i in range(29))
     + "/x_slurmstepd.scope/job_1\n", node_owners),
    # a name the reader cannot open (not UTF-8: printed by the kernel as bytes)
    ("0::/user.slice/user-50101.slice/user@50101.service/\udcff/x_slurmstepd.scope/job_1\n", stops_at(4, node_owners)),
    # the directories below hers removed before they were read
    ("0::/user.slice/user-50101.slice/user@50101.service/a/slurmstepd.scope/job_1\n", stops_at(3, node_owners)),
])
def test_her_own_directory_on_the_way_is_no_job_however_deep_or_unread_below_it(text, owners):
    """What was read is judged first: a directory of hers on the way makes
    the path none of a job's, never "unknown" (which epilog.strays never
    kills: a user could make herself unknown to it)."""
    assert system.job_of_cgroup(text, 50101, owners) is None


def test_a_cgroup_name_that_is_not_utf8_reaches_the_reader_as_its_bytes(monkeypatch):
    asked = []
    monkeypatch.setattr(system, "cgroup_owners", asked.append)
    monkeypatch.setattr(system.os, "read", lambda fd, n: b"0::/system.slice/\xff/slurmstepd.scope/job_1\n")
    system.job_cgroup(os.getpid())
    assert asked and os.fsencode(asked[0][1]) == b"\xff"


def test_a_read_cut_short_judges_whole_lines_alone(monkeypatch):
    """On a hybrid node the v1 lines come first, and a user makes hers as
    long as she likes (her delegated subtree in name=systemd's hierarchy):
    a read of /proc/PID/cgroup that ends inside the 0:: line must not
    judge what is left of it (job_12 cut to job_1 names another job). The
    reader takes what a hybrid node's lines can hold, and a cut line
    tells nothing."""
    monkeypatch.setattr(system, "cgroup_owners", lambda names: [(0, DIR)] * (len(names) + 1))
    whole = b"9:name=systemd:/" + b"d/" * 3000 + b"\n0::/system.slice/slurmstepd.scope/job_12/step_0\n"
    sizes = []

    def read(fd, n):
        sizes.append(n)
        return whole[:n]
    monkeypatch.setattr(system.os, "read", read)
    assert system.job_cgroup(os.getpid()) == ("id", "12")
    assert sizes[0] >= 14 * 4100  # every hierarchy's line at PATH_MAX
    monkeypatch.setattr(system.os, "read", lambda fd, n: whole[:len(whole) - len(b"2/step_0\n")])
    assert system.job_cgroup(os.getpid()) is None
