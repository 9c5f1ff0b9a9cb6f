"""Real job ends under what production sites run: proctrack/cgroup and
task/cgroup (cgroup v1 here), PrologFlags=Contain, on each release.
Slurm ends the processes in the job's cgroup before the epilog; part 40
ends what runs outside any job; the record tells the two apart, and the
node never drains."""
import pwd
import subprocess

from tests.helpers import uid_of, wait_for
from tests.slurm.conftest import OPERATOR, cgroup_root
from tests.slurm.test_slurm_job_end import STRAY, alive_as, assert_not_drained, kill, record_of, stray_pid
from tests.unit.conftest import node

system = node("system")
CGROUP = "; echo CGROUP_BEGIN; cat /proc/self/cgroup; echo CGROUP_END"


def outside_any_job(user):
    """A process of USER started outside Slurm (as a login would): in no
    job's cgroup. Returns the Popen (the test reaps it)."""
    pw = pwd.getpwnam(user)
    proc = subprocess.Popen(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups",
                             "setsid", "sleep", "600"], stdin=subprocess.DEVNULL)
    wait_for(lambda: alive_as(proc.pid, user), 10, what=f"{user}'s process outside any job to start")
    return proc


def job_cgroup_text(stdout):
    return stdout.split("CGROUP_BEGIN\n", 1)[1].split("CGROUP_END", 1)[0]


def test_slurm_ends_the_jobs_processes_and_part_40_the_strays_outside_any_job(cgroup_slurm, rsyslog):
    slurm, uid = cgroup_slurm, uid_of("alice")
    outside = outside_any_job("alice")
    try:
        job, out = slurm.run_job("alice", STRAY + CGROUP)
        inside = stray_pid(out)
        # The job's processes are in its cgroup, as Slurm names it on this release.
        cgroups = job_cgroup_text(out)
        assert f":/{cgroup_root(slurm.release)}/uid_{uid}/job_{job}/step_0" in cgroups, cgroups
        assert system.job_of_cgroup(cgroups, uid) == ("id", job)
        record = record_of(slurm.chain, job)
        assert record["guard"]["answer"] == "act" and record["other"]["answer"] == "no", record
        parts = {part["part"]: part for part in record["parts"]}
        kill_facts = parts["40-lastuserjob-processes"]["facts"]["kill"]
        # Slurm's cgroup kill ended the one inside before the epilog ran;
        # part 40 ended the one outside any job.
        assert {key: value for key, value in kill_facts.items() if key != "rounds"} == {
            "outcome": "done", "signalled": 1, "strays": 1, "in_job_cgroup": 0, "in_other_job_cgroup": 0,
            "unclassified": 0, "resumed": 0, "saved_only": 0, "one_by_one": 0, "continued": 0}, kill_facts
        assert kill_facts["rounds"] >= 1
        assert not alive_as(inside, "alice") and wait_for(lambda: not alive_as(outside.pid, "alice"), 10,
                                                           what="the stray outside any job to die")
        assert_not_drained(slurm)
    finally:
        kill(outside.pid)
        outside.wait()


def test_a_listed_operator_is_spared_by_the_chain_and_their_job_ended_by_slurm(cgroup_slurm, rsyslog):
    """The chain spares what an operator runs outside jobs; what ran in
    their job's cgroup is Slurm's, and Slurm ends it whoever is listed."""
    slurm = cgroup_slurm
    outside = outside_any_job(OPERATOR)
    try:
        job, out = slurm.run_job(OPERATOR, STRAY)
        inside = stray_pid(out)
        record = record_of(slurm.chain, job)
        assert record["guard"]["answer"] == "spare", record
        assert not alive_as(inside, OPERATOR), "Slurm left the process in the operator's job cgroup"
        assert alive_as(outside.pid, OPERATOR), "the chain killed a listed operator's process outside any job"
        assert_not_drained(slurm)
    finally:
        kill(outside.pid)
        outside.wait()
