"""Real job ends on a real one-node Slurm: the chain laid down by the state
runs as slurmd's Epilog=/Prolog=, for real accounts with a real ssh session."""
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.helpers import HOST, kill_all_of, live_processes_of, uid_of, wait_for
from tests.salt.conftest import Minion
from tests.slurm.conftest import OPERATOR

# Inside a job: start a stray that escapes the step (setsid, reparented to
# init, so proctrack/linuxproc loses it) and report its pid.
STRAY = "setsid -f bash -c 'echo STRAY=$$ >&3; exec sleep 600 3>&-' 3>&1 </dev/null >/dev/null 2>&1; sleep 0.2"


def stray_pid(stdout):
    return int(next(line.split("=", 1)[1] for line in stdout.splitlines() if line.startswith("STRAY=")))


def alive_as(pid, user):
    try:
        st = os.stat(f"/proc/{pid}")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return st.st_uid == uid_of(user) and state != "Z"


def kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def ssh_session(sshd, user):
    session = sshd(user, "echo ready; exec sleep 600")
    line = session.stdout.readline().strip()
    assert line == "ready", (line, session.stderr.read() if session.poll() is not None else "")
    return session


def assert_not_drained(slurm):
    state, reason = slurm.node_state()
    assert "DRAIN" not in state and "FAIL" not in state, (state, reason)


def test_listed_operator_keeps_ssh_session_and_stray_after_own_job(slurm, sshd, rsyslog):
    session = ssh_session(sshd, "opal")
    try:
        job, out = slurm.run_job("opal", STRAY)
        pid = stray_pid(out)
        slurm.wait_epilog_end(job)
        log = "\n".join(slurm.job_log(job))
        assert f"listed in {slurm.chain.localusers}" in log
        assert alive_as(pid, "opal"), "the operator's stray process was killed"
        # The epilog has ended: its session on the server side (sshd's
        # process of hers) is there, or it never will be again.
        left = live_processes_of(uid_of("opal"))
        assert any(name.startswith("sshd") for name in left.values()), f"the operator's ssh session was killed: {left}"
        assert session.poll() is None, f"the operator's ssh session ended: {session.stderr.read()}"
        assert_not_drained(slurm)
    finally:
        session.kill()
        session.wait()
        kill_all_of("opal")  # her session's shell on the server outlives the client


def test_ordinary_user_is_cleaned_up_after_last_job_and_loses_ssh(slurm, sshd, rsyslog):
    session = ssh_session(sshd, "alice")
    job, out = slurm.run_job("alice", STRAY + "; echo residue > /tmp/alice-job-residue; echo shm > /dev/shm/alice-job-shm")
    pid = stray_pid(out)
    slurm.wait_epilog_end(job)
    try:
        assert wait_for(lambda: not alive_as(pid, "alice"), 10, what="the stray to die")
        assert not Path("/tmp/alice-job-residue").exists()
        assert not Path("/dev/shm/alice-job-shm").exists()
        session.wait(timeout=10)
        assert session.returncode == 255, "alice's ssh session should end with her last job"
        log = "\n".join(slurm.job_log(job))
        assert "other jobs of this user on this node: no (node-local" in log
        assert "killed the processes of uid" in log
        assert_not_drained(slurm)
    finally:
        kill(pid)
        if session.poll() is None:
            session.kill()


def record_of(chain, job, stage="epilog"):
    """The decision record of JOB's STAGE, once the runner has written it
    (after its log's last line)."""
    return wait_for(lambda: next((r for r in chain.records() if r["job"] == int(job) and r["stage"] == stage), None),
                    60, what=f"the {stage} record of job {job}")


def test_a_real_job_end_leaves_one_decision_record_of_what_it_did(slurm, rsyslog):
    job, out = slurm.run_job("alice", STRAY)
    pid = stray_pid(out)
    try:
        record = record_of(slurm.chain, job)
        assert wait_for(lambda: not alive_as(pid, "alice"), 10, what="the stray to die")
        assert {key: record[key] for key in ("user", "uid", "node", "release")} == {
            "user": "alice", "uid": uid_of("alice"), "node": HOST, "release": slurm.chain.release_id}
        assert record["other"]["answer"] == "no" and record["guard"]["answer"] == "act", record
        parts = {part["part"]: part for part in record["parts"]}
        assert parts["40-lastuserjob-processes"]["facts"]["kill"]["signalled"] >= 1, record
        assert parts["39-lastuserjob-ssh"]["facts"]["allow"] == {"op": "remove", "change": "removed"}, record
        prolog = record_of(slurm.chain, job, "prolog")
        assert prolog["start"] <= record["start"] and prolog["parts"][0]["part"] == "50-exclusive-ssh", prolog
        assert [r["job"] for r in slurm.chain.records()].count(int(job)) == 2, "one record per stage and job"
        assert_not_drained(slurm)
    finally:
        kill(pid)


def test_prolog_adds_and_epilog_removes_the_users_allow_line(slurm, rsyslog):
    allow = slurm.chain.allow_file
    allow.write_text("bob\nalicex\n")
    job, out = slurm.run_job("alice", "cat " + str(allow))
    assert out.splitlines()[1:] == ["bob", "alicex", "alice"], "the prolog did not add exactly alice's line"
    slurm.wait_epilog_end(job)
    assert allow.read_text() == "bob\nalicex\n"
    assert_not_drained(slurm)


@pytest.mark.parametrize("evidence", ["mark", "slurmstepd"])
def test_another_job_of_the_user_keeps_the_lastuserjob_parts_from_running(slurm, rsyslog, evidence):
    """The batch job's prolog marked it as started here; without that mark
    (a job that started before this formula was deployed) root's real
    slurmstepd of the batch job, running a process of alice, says the same."""
    batch = slurm.submit("alice", "sleep 120")
    try:
        wait_for(lambda: any(p.is_socket() and f"_{batch}." in p.name for p in slurm.chain.spool_dir.iterdir()),
                 30, what="the batch job's step to start")
        mark = slurm.chain.run_dir / f"{uid_of('alice')}.{batch}"
        assert mark.read_text().startswith("running "), "the prolog marks the job"
        if evidence == "slurmstepd":
            mark.unlink()
        job, out = slurm.run_job("alice", STRAY)
        pid = stray_pid(out)
        slurm.wait_epilog_end(job)
        log = "\n".join(slurm.job_log(job))
        if evidence == "mark":
            marked = f"job {batch} of uid {uid_of('alice')} started here"
            assert f"other jobs of this user on this node: yes (node-local: {marked}" in log, log
        else:
            assert "other jobs of this user on this node: yes (node-local: root's slurmstepd" in log, log
        assert "skipping 40-lastuserjob-processes" in log
        assert alive_as(pid, "alice"), "a stray was killed while the user still has a job on the node"
    finally:
        slurm.cmd("scancel", batch, check=False)
        if "pid" in locals():
            kill(pid)
        slurm.wait_idle()
    assert_not_drained(slurm)


def test_decisions_reach_syslog_with_tag_slurm_epilog(slurm, rsyslog):
    """Promise 12: every wait waits for the event it checks. The prolog's
    line of the same job reaches syslog first; the test waits for the very
    lines it asserts (part 40's decision and the runner's end), not for the
    first line of the job."""
    job, _ = slurm.run_job("alice", "true")
    slurm.wait_epilog_end(job)

    def decisions():
        lines = [line for line in rsyslog.text().splitlines() if "slurm-epilog" in line and f"job={job} " in line]
        wanted = [any("40-lastuserjob-processes" in line and "killed the processes of uid" in line for line in lines),
                  any("epilog.sh" in line and line.endswith(": end") for line in lines)]
        return lines if all(wanted) else None

    lines = wait_for(decisions, 30, what=f"part 40's decision and the runner's end of job {job} in syslog")
    assert all("slurm-epilog" in line for line in lines), lines


def test_node_never_drains_without_syslog_daemon(slurm, rsyslog):
    rsyslog.stop()
    try:
        # nothing reads /dev/log: none is there, or, in a run in a mount
        # namespace of its own, it is the stopped daemon's socket
        assert not Path("/dev/log").exists() or rsyslog.own_dev_log
        assert subprocess.run(["logger", "--socket-errors=on", "-t", "probe", "x"], capture_output=True).returncode != 0, \
            "precondition: logger must fail without /dev/log"
        residue = Path("/tmp/alice-no-syslog")
        job, out = slurm.run_job("alice", STRAY + f"; echo x > {residue}")
        pid = stray_pid(out)
        slurm.wait_epilog_end(job)
        assert wait_for(lambda: not alive_as(pid, "alice"), 10, what="the stray to die")
        assert not residue.exists()
        slurm.wait_idle()
        assert_not_drained(slurm)
    finally:
        rsyslog.start()


def test_each_release_runs_the_epilogs_slurm_conf_names_as_it_reads_them(slurm, salt_factories, rsyslog, tmp_path):
    """slurm.conf names a site's epilog, then the chain (Epilog= twice).
    Slurm before 24.05 runs only the last Epilog=, so 22.05 runs the chain
    alone; 24.05 and later run each in turn, so 24.11 and 26.05 run the
    site's, then the chain. Either way the chain runs and cleans up, and epilog.verify,
    which cannot know which Slurm reads the file, names the double Epilog=."""
    job, _ = slurm.run_job("alice", "true")
    slurm.wait_epilog_end(job)
    assert "killed the processes of uid" in "\n".join(slurm.job_log(job))
    # Once the node is idle again, every Epilog= that was to run has run.
    slurm.wait_idle()
    if slurm.release == "22.05":
        assert job not in slurm.site_epilog_jobs(), "22.05 runs only the last Epilog="
    else:
        assert job in slurm.site_epilog_jobs(), "24.05 and later run every Epilog="
    assert_not_drained(slurm)
    # a minion whose pillar is this chain's: verify finds slurm.conf through the running slurmd
    minion = Minion(salt_factories, tmp_path / "minion")
    minion.set_pillar(slurm.chain.pillar(localusers=["root", OPERATOR]))
    report = minion("epilog.verify")
    problems = "\n".join(report["problems"])
    assert f"{slurm.conf} gives Epilog= 2 times" in problems, report


@pytest.mark.parametrize("user,acts", [(OPERATOR, False), ("alice", True)])
def test_explain_says_before_a_real_job_what_its_end_then_does(slurm, salt_factories, tmp_path, rsyslog, user, acts):
    """epilog.explain on this node (the chain's own node program in its dry
    run, finding Slurm through the running slurmd), then a real job of the user
    with a stray: the stray dies exactly when explain said the parts act,
    and the job end's guard gives explain's answer word for word."""
    minion = Minion(salt_factories, tmp_path / "minion")
    minion.set_pillar(slurm.chain.pillar(localusers=["root", OPERATOR]))
    report = minion("epilog.explain", user=user)
    assert report["other_jobs"]["answer"] == "no", report
    assert report["parts"]["40-lastuserjob-processes"].startswith("acts") == acts, report
    try:
        job, out = slurm.run_job(user, STRAY)
        pid = stray_pid(out)
        slurm.wait_epilog_end(job)
        if acts:
            wait_for(lambda: not alive_as(pid, user), 10, what="the stray to die")
        else:
            assert alive_as(pid, user), "the operator's stray process was killed"
        log = "\n".join(slurm.job_log(job))
        assert report["localusers"]["why"] and report["localusers"]["why"] in log, (report, log)
        assert_not_drained(slurm)
    finally:
        kill_all_of(user)
