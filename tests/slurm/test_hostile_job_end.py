"""Real job ends on the real one-node Slurm under attack: ssh logins racing
the job end through a real sshd that admits only the users in the allow file
(pam_listfile), and the same user's next job submitted while the epilog of
the one before still runs. Each test names the promise it attacks."""
import os
import pwd
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import kill_all_of, live_processes_of, process_uids, uid_of, wait_for

ALICE = "alice"


class Hammer:
    """THREADS loops of ssh logins as USER, each leaving a detached process
    behind, until stopped. Records when each login started and whether sshd
    let it in."""

    def __init__(self, sshd, user, threads=4):
        self.sshd, self.user = sshd, user
        self.stopping = threading.Event()
        self.results = []  # (started, admitted)
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(threads)]

    def _loop(self):
        while not self.stopping.is_set():
            started = time.monotonic()
            proc = self.sshd(self.user, "setsid -f sleep 600 </dev/null >/dev/null 2>&1; echo in")
            out, _ = proc.communicate(timeout=60)
            with self.lock:
                self.results.append((started, out.strip() == "in"))

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def admitted_before(self, moment):
        with self.lock:
            return sum(admitted for started, admitted in self.results if started < moment)

    def refused_after(self, moment):
        with self.lock:
            return sum(not admitted for started, admitted in self.results if started > moment)

    def __exit__(self, *exc):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=90)


@pytest.mark.parametrize("run", [1, 2, 3])
def test_a_login_racing_the_job_end_leaves_nothing_behind(slurm, listfile_sshd, rsyslog, run):
    """Promise 2: revoke access first, then kill. alice's ssh logins hammer
    the node (4 at a time, each leaving a detached process) while her job
    runs and ends. Access is revoked (39) before anything is killed (40),
    and 40 outlasts the logins that passed the check just before: after the
    epilog, once sshd refuses her, none of her processes is left. (With 40
    before 41, one or two survived each run.)"""
    slurm.chain.allow_file.write_text("")
    try:
        with Hammer(listfile_sshd, ALICE) as hammer:
            job = slurm.submit(ALICE, "sleep 4")
            wait_for(lambda: hammer.admitted_before(time.monotonic()) > 0, 60,
                     what="a login of alice admitted while her job runs")
            slurm.wait_epilog_end(job)
            ended = time.monotonic()
            wait_for(lambda: hammer.refused_after(ended) >= 4, 60, what="sshd to refuse alice after her job end")
        log = "\n".join(slurm.job_log(job))
        assert log.index("39-lastuserjob-ssh") < log.index("40-lastuserjob-processes"), log
        left = live_processes_of(uid_of(ALICE))
        assert left == {}, f"processes of alice outlived her last job end: {left}\n{log}"
    finally:
        kill_all_of(ALICE)
        slurm.wait_idle()


def test_a_new_job_of_the_user_is_never_hit_by_the_epilog_of_the_one_before(slurm, rsyslog):
    """Promise 4 (a regression test: the window does not open on Slurm
    22.05). A site part sleeps 3 s between the runner's "last job?" decision
    and part 40. alice's second job, submitted inside that window, is
    allocated only after the first job's epilog has ended: Slurm does not
    start a job on a node while a job there is completing. So her second job
    runs to its end, untouched."""
    slow = slurm.chain.conf_dir / "epilog.d/30-site-slow"
    slow.write_text("#!/bin/bash\nsleep 3\n")
    os.chmod(slow, 0o755)
    home = Path(pwd.getpwnam(ALICE).pw_dir)
    marker = home / f"second-job-{os.getpid()}"
    marker.unlink(missing_ok=True)
    try:
        first = slurm.submit(ALICE, "true")
        wait_for(lambda: any("epilog.sh" in line and "start;" in line for line in slurm.job_log(first)), 60,
                 what="the first job's epilog to start")
        second = slurm.submit(ALICE, f"sleep 2; echo survived > {marker}")
        slurm.wait_epilog_end(first)
        slurm.wait_epilog_end(second)
        assert marker.read_text() == "survived\n", "the second job was killed by the first job's epilog"
        lines = slurm.chain.log_text().splitlines()
        first_end = max(i for i, line in enumerate(lines) if f"epilog.sh job={first} " in line and line.endswith(": end"))
        second_prolog = min(i for i, line in enumerate(lines) if (f"job={second} " in line and "prolog.sh" in line)
                            or (f"job={second} " in line and "50-exclusive-ssh" in line))
        assert first_end < second_prolog, "\n".join(lines[-40:])
        first_log = "\n".join(slurm.job_log(first))
        assert "other jobs of this user on this node: no" in first_log
    finally:
        slow.unlink(missing_ok=True)
        marker.unlink(missing_ok=True)
        slurm.wait_idle()


def test_a_job_allocated_before_the_epilog_of_another_ends_is_never_hit(slurm, rsyslog):
    """Promise 4, the window that does open on a shared node: alice's second
    job is allocated while her first still runs (two CPUs, one each), and
    its prolog is still running when the first job ends: a site part has
    made the job's scratch directory in /tmp, owned by alice, and takes 4 s
    more. The second job has no step yet, no socket, no slurmstepd; but the
    prolog marked it under alice's lock before anything else, so the first
    job's epilog says "another job: yes", and 42 does not remove the second
    job's scratch before it even starts."""
    slow = slurm.chain.conf_dir / "prolog.d/40-site-scratch"
    slow.write_text('#!/bin/bash\ninstall -d -o "$SLURM_JOB_UID" "/tmp/epilog-scratch-$SLURM_JOB_ID"\nsleep 4\n')
    os.chmod(slow, 0o755)
    home = Path(pwd.getpwnam(ALICE).pw_dir)
    started, marker = home / f"first-started-{os.getpid()}", home / f"second-found-{os.getpid()}"
    for path in (started, marker):
        path.unlink(missing_ok=True)
    try:
        first = slurm.submit(ALICE, f"touch {started}; sleep 2")
        wait_for(started.exists, 60, what="the first job to run")
        second = slurm.submit(ALICE, f'test -d "/tmp/epilog-scratch-$SLURM_JOB_ID" && echo found > {marker}')
        slurm.wait_epilog_end(first)
        first_log = "\n".join(slurm.job_log(first))
        assert (f"other jobs of this user on this node: yes (node-local: job {second} of uid {uid_of(ALICE)} "
                "started here") in first_log, first_log
        slurm.wait_epilog_end(second)
        assert marker.read_text() == "found\n", "the first job's epilog removed the second job's scratch"
    finally:
        slow.unlink(missing_ok=True)
        for path in (started, marker):
            path.unlink(missing_ok=True)
        slurm.wait_idle()


def test_a_node_local_no_needs_no_controller(slurm, rsyslog):
    """Promise 3 and 1: a user who floods slurmctld cannot turn the last-job
    answer into "unknown" and so dodge the cleanup. Another user's job runs
    on the node (its step socket and root's slurmstepd are there), so the
    spool alone does not settle it, and squeue is made unusable for real
    (/dev/null bound over it): the marks and the slurmstepd processes still
    answer "no" node-locally, and alice's stray goes."""
    other = slurm.submit("je.kim", "sleep 120")
    squeue = subprocess.run(["bash", "-c", "command -v squeue"], capture_output=True, text=True).stdout.strip()
    mounted = False
    try:
        wait_for(lambda: any(p.is_socket() and f"_{other}." in p.name for p in slurm.chain.spool_dir.iterdir()),
                 30, what="the other user's job to start")
        # Once the controller has shown that every job here is marked, the
        # marks alone answer from then on.
        first, _ = slurm.run_job(ALICE, "true")
        slurm.wait_epilog_end(first)
        assert (slurm.chain.run_dir / "complete").exists(), "\n".join(slurm.job_log(first))
        subprocess.run(["mount", "--bind", "/dev/null", squeue], check=True)
        mounted = True
        job, out = slurm.run_job(ALICE, "setsid -f bash -c 'echo STRAY=$$ >&3; exec sleep 600 3>&-' 3>&1 </dev/null "
                                        ">/dev/null 2>&1; sleep 0.2")
        pid = int(next(line.split("=", 1)[1] for line in out.splitlines() if line.startswith("STRAY=")))
        slurm.wait_epilog_end(job)
        log = "\n".join(slurm.job_log(job))
        assert ("other jobs of this user on this node: no (node-local: no other job of uid "
                f"{uid_of(ALICE)} marked here, and no slurmstepd of another job runs a process of uid") in log, log
        assert wait_for(lambda: process_uids(pid) is None, 10, what="alice's stray to die")
    finally:
        if mounted:
            subprocess.run(["umount", squeue], check=True)
        slurm.cmd("scancel", other, check=False)
        kill_all_of(ALICE)
        slurm.wait_idle()


def test_a_mark_whose_epilog_never_ran_is_set_aside_by_the_controller(slurm, rsyslog):
    """Promise 3: a mark whose epilog never ran (slurmd died during the job)
    must not spare the user for ever. It is old, its job has no slurmstepd,
    and the real controller no longer has it on this node: the mark is set
    aside with a warning, and alice's last job end cleans up."""
    stale = slurm.chain.run_dir / f"{uid_of(ALICE)}.999999"
    stale.write_text("running 1000000000\n")
    try:
        job, out = slurm.run_job(ALICE, "setsid -f bash -c 'echo STRAY=$$ >&3; exec sleep 600 3>&-' 3>&1 </dev/null "
                                        ">/dev/null 2>&1; sleep 0.2")
        pid = int(next(line.split("=", 1)[1] for line in out.splitlines() if line.startswith("STRAY=")))
        slurm.wait_epilog_end(job)
        log = "\n".join(slurm.job_log(job))
        assert (f"job 999999 of uid {uid_of(ALICE)} was marked as started here long ago, has no slurmstepd and "
                "the controller no longer has it here") in log, log
        assert "other jobs of this user on this node: no" in log, log
        assert wait_for(lambda: process_uids(pid) is None, 10, what="alice's stray to die")
        assert not stale.exists() or stale.read_text() == "done\n"
    finally:
        stale.unlink(missing_ok=True)
        kill_all_of(ALICE)
        slurm.wait_idle()


def test_marks_that_do_not_cover_every_job_are_not_enough_for_a_no(slurm, rsyslog):
    """Promise 3, the rollout: the formula reaches a node where jobs already
    run, unmarked (here: je.kim's job, its mark removed, and the run
    directory born after it started). A job of alice between its steps on
    this node would be as unmarked, and without PrologFlags=Contain have no
    socket and no slurmstepd here either. Until the
    controller has shown that every job on the node is marked, a "no" comes
    from squeue, and the marks are not declared complete."""
    run_dir = slurm.chain.run_dir
    other = slurm.submit("je.kim", "sleep 120")
    try:
        wait_for(lambda: any(p.is_socket() and f"_{other}." in p.name for p in slurm.chain.spool_dir.iterdir()),
                 30, what="the other user's job to start")
        (run_dir / f"{uid_of('je.kim')}.{other}").unlink()
        (run_dir / "complete").unlink(missing_ok=True)
        (run_dir / "since").write_text(f"since {int(time.time()) + 1}\n")
        job, out = slurm.run_job(ALICE, "setsid -f bash -c 'echo STRAY=$$ >&3; exec sleep 600 3>&-' 3>&1 </dev/null "
                                        ">/dev/null 2>&1; sleep 0.2")
        pid = int(next(line.split("=", 1)[1] for line in out.splitlines() if line.startswith("STRAY=")))
        slurm.wait_epilog_end(job)
        log = "\n".join(slurm.job_log(job))
        assert f"other jobs of this user on this node: no (squeue: no other job of uid {uid_of(ALICE)}" in log, log
        assert wait_for(lambda: process_uids(pid) is None, 10, what="alice's stray to die")
        assert not (run_dir / "complete").exists(), "je.kim's job started before the marks and has none"
    finally:
        slurm.cmd("scancel", other, check=False)
        kill_all_of(ALICE)
        slurm.wait_idle()
