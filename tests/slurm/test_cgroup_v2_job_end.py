"""Real job ends under proctrack/cgroup on cgroup v2, on 22.05 (job_<id>
under Debian's <node>_slurmstepd.scope) and 26.05 (the job's SLUID under
slurmstepd.scope, and job_<id> with CgroupJobIdPaths=yes): one Slurm start
per case (the v2_slurm fixture). slurmd runs where the kernel's cgroup2
hierarchy is mounted at /sys/fs/cgroup, as on a pure-v2 node; a preloaded
library shows Slurm's daemons /proc/PID/cgroup as such a node has it (the 0::
line alone: this machine's kernel lists its v1 hierarchies too, and Slurm
refuses that). The chain, run by that slurmd, reads the v2 tree as it is.
Slurm ends what runs in a job's cgroup; part 40 ends what runs outside any
job at the user's last job end, and its record tells the two apart."""
import os
import pwd
import re
from pathlib import Path
from types import SimpleNamespace

from tests.helpers import HOST, REPO, load_file, uid_of, wait_for
from tests.node.test_strays import look, told
from tests.slurm.test_cgroup_job_end import outside_any_job
from tests.slurm.test_slurm_job_end import STRAY, alive_as, assert_not_drained, kill, record_of, stray_pid
from tests.unit.conftest import node

system = node("system")


def scope(slurm):
    """Slurm's scope: Debian's 22.05 is built with MULTIPLE_SLURMD."""
    return f"{HOST}_slurmstepd.scope" if slurm.release == "22.05" else "slurmstepd.scope"


def pids_under(top):
    """The pids in the cgroup TOP and every cgroup below it (each level's
    cgroup.procs; a level gone meanwhile holds none)."""
    for where, _, _ in os.walk(top):
        try:
            yield from (top / where / "cgroup.procs").read_text().split()
        except OSError:
            continue


# The scope's directories of Slurm's own processes (cgroup_v2.c): system/
# and, slurmd being started by hand here, slurmd/, which holds slurmd and
# the prolog it runs for a job (with that job's SLURM_JOB_ID) too
SLURM_OWN = ("system", "slurmd")


def job_dir(slurm, job):
    """(kind, name) of JOB's directory as this Slurm names it: ("id", "<id>")
    for job_<id>, ("sluid", "s...") for the SLUID the controller gives it;
    None while no process of the job runs in one."""
    if slurm.naming == "id":
        return "id", job
    # 26.05.3's scontrol prints no SLUID for these jobs: the directory under
    # the scope whose processes Slurm started with SLURM_JOB_ID=JOB, and the
    # SLURM_JOB_SLUID it gave them names it (the test's own reading: root's)
    top = slurm.ns.tree / "system.slice" / scope(slurm)
    for entry in sorted(os.listdir(top)):
        if entry in SLURM_OWN or not (top / entry).is_dir():
            continue
        for pid in pids_under(top / entry):
            try:
                env = dict(item.split(b"=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                           if b"=" in item)
            except OSError:
                continue
            if env.get(b"SLURM_JOB_ID") == str(job).encode():
                assert env.get(b"SLURM_JOB_SLUID") == entry.encode(), (entry, env.get(b"SLURM_JOB_SLUID"))
                return "sluid", entry
    return None


def processes_in(slurm, job, uid):
    """{pid: /proc/PID/cgroup} of UID's live processes in JOB's cgroup, read
    from the v2 tree itself (its directory under the scope, every level)."""
    where = job_dir(slurm, job)
    if where is None:  # not started yet
        return {}
    kind, name = where
    top = slurm.ns.tree / "system.slice" / scope(slurm) / (f"job_{name}" if kind == "id" else name)
    found = {}
    for pid in pids_under(top):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                found[int(pid)] = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            continue
    return found


def running_in(slurm, job, uid, command):
    """{pid: /proc/PID/cgroup} of UID's processes in JOB's cgroup that run
    COMMAND (argv, each NUL-ended), once one does: the job's own, not the
    processes Slurm starts it with, which come and go (one seen a moment
    ago may be a zombie now)."""
    def found():
        out = {}
        for pid, cgroup in processes_in(slurm, job, uid).items():
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes() == command:
                    out[pid] = cgroup
            except OSError:
                continue
        return out or None
    return wait_for(found, 60, what=f"{command!r} of uid {uid} in job {job}'s cgroup")


SLEEP_300, SLEEP_600 = b"sleep\0" b"300\0", b"sleep\0" b"600\0"


def as_grandchild(uid, command):
    """A batch script that runs COMMAND as UID one process below it (not a
    child of slurmstepd, which the chain's evidence would count as a job of
    UID's)."""
    pw = pwd.getpwuid(uid)
    return f"setpriv --reuid={pw.pw_uid} --regid={pw.pw_gid} --init-groups {command}; true"


def test_the_first_of_two_jobs_ends_alone_and_the_last_ends_what_runs_outside_any_job(v2_slurm, rsyslog):
    """alice runs a stray outside any job, a batch job, and a process in a
    job of root's (an admin's job running something as her); her first job
    ends while the batch job runs: Slurm ends the first job's processes,
    and the chain sees the other job and leaves everything else. Her last
    job end: Slurm ends the batch job's processes, part 40 the stray and
    the process in root's job, and its record counts one stray and one in
    another job's cgroup."""
    slurm, uid = v2_slurm, uid_of("alice")
    outside = outside_any_job("alice")
    second = rooted = None
    try:
        second = slurm.submit("alice", "sleep 300")
        kept = running_in(slurm, second, uid, SLEEP_300)
        expected = job_dir(slurm, second)
        for pid, cgroup in kept.items():
            assert f"0::/system.slice/{scope(slurm)}/{'job_' if expected[0] == 'id' else ''}{expected[1]}/step_batch/" \
                in cgroup, (pid, cgroup)
            assert system.job_of_cgroup(cgroup, uid) == expected, (pid, cgroup)
        rooted = slurm.submit("root", as_grandchild(uid, "sleep 600"))
        theirs = running_in(slurm, rooted, uid, SLEEP_600)

        names = {pid: Path(f"/proc/{pid}/cmdline").read_bytes() for pid in (*kept, *theirs)}
        first, out = slurm.run_job("alice", STRAY)
        inside = stray_pid(out)
        record = record_of(slurm.chain, first)
        assert record["other"]["answer"] == "yes", record
        assert {part["part"]: part["ran"] for part in record["parts"]}["40-lastuserjob-processes"] is False, record
        assert not alive_as(inside, "alice"), "Slurm left a process in the ending job's cgroup"
        left = [pid for pid in (*kept, *theirs, outside.pid) if not alive_as(pid, "alice")]
        assert not left, f"the end of the first job ended {left} (of {kept}, {theirs}, {outside.pid}; {names})"

        slurm.cmd("scancel", second)
        record = record_of(slurm.chain, second)
        assert record["other"]["answer"] == "no" and record["guard"]["answer"] == "act", record
        kill_facts = {part["part"]: part for part in record["parts"]}["40-lastuserjob-processes"]["facts"]["kill"]
        assert {key: value for key, value in kill_facts.items() if key != "rounds"} == {
            "outcome": "done", "signalled": 2, "strays": 1, "in_job_cgroup": 0, "in_other_job_cgroup": 1,
            "unclassified": 0, "resumed": 0, "saved_only": 0, "one_by_one": 0, "continued": 0}, kill_facts
        wait_for(lambda: not any(alive_as(pid, "alice") for pid in (*kept, *theirs, outside.pid)), 10,
                 what="alice's processes to die")
        assert_not_drained(slurm)
    finally:
        kill(outside.pid)
        outside.wait()
        for job in (second, rooted):
            if job is not None:
                slurm.cmd("scancel", job, check=False)
        slurm.wait_idle()


def layout(slurm):
    """(info, problems) of verify's cgroup check, run here, where the
    host's cgroups are v1: it reads the cgroups of the namespace slurmd
    runs in, its mountinfo and mounts through slurmd's own root, as it
    reads a slurm.conf judged there (/proc/PID/root/...)."""
    checks = load_file(REPO / "_modules/epilog.py", "epilog_module_v2_layout").checks
    pid = int((slurm.base / "run/slurmd.pid").read_text())
    v = SimpleNamespace(info=[], problems=[], judged=[(f"/proc/{pid}/root{slurm.conf}", {}, "path", HOST)])
    checks._cgroup_layout(v)
    return v.info, v.problems


def test_epilog_strays_finds_a_running_job_by_its_cgroup(v2_slurm, rsyslog):
    """Between job ends, epilog.strays (the node program, run where slurmd
    runs) tells alice's running job by the cgroup her processes are in,
    whatever this Slurm names it, and kills nothing of hers; verify's
    reading of the node's cgroups names that layout, with no problem."""
    slurm, uid = v2_slurm, uid_of("alice")
    outside = outside_any_job("alice")
    job = None
    try:
        job = slurm.submit("alice", "sleep 300")
        kept = running_in(slurm, job, uid, SLEEP_300)
        # the module passes the running slurmd: its slurmstepd is the one whose processes count
        report = look(slurm.chain, kill=True, prefix=slurm.ns.prefix,
                      slurmd_pid=int((slurm.base / "run/slurmd.pid").read_text()))
        alice = told(report)["alice"]
        _, name = job_dir(slurm, job)
        assert alice["answer"] == "job", alice
        assert re.fullmatch(rf"process [0-9]+ is in the cgroup of Slurm job {name}", alice["why"]), alice
        assert "kill" not in alice, alice
        dead = [pid for pid in (*kept, outside.pid) if not alive_as(pid, "alice")]
        assert not dead, (dead, "of the job's", kept, "and the one outside", outside.pid, alice)
        # verify reads this layout (slurmd's own slurmd/ beside system/ and the job's directory)
        # hybrid: the namespace mounts cgroup2 over the machine's v1 hierarchies,
        # which its mountinfo still lists (on a pure-v2 node: "cgroup v2")
        said, problems = layout(slurm)
        assert not problems and said == [f"cgroup hybrid: v2 (/system.slice/{scope(slurm)}, job directories "
                                         f"{'SLUID' if slurm.naming == 'sluid' else 'job_<id>'}), CgroupPlugin="
                                         "cgroup/v2, ProctrackType=proctrack/cgroup"], (said, problems)
    finally:
        kill(outside.pid)
        outside.wait()
        if job is not None:
            slurm.cmd("scancel", job, check=False)
        slurm.wait_idle()
