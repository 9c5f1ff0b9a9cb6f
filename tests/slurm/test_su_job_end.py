"""Root's su and runuser beside a user's last job end, on a real Slurm (each
release): an administrator's `su alice -c ...` and a service's `runuser -u
alice -- ...`, each holding a process of alice, when alice's last job here
ends. Part 40 kills alice's processes; su and runuser are never left
stopped: each reaps its child, closes its PAM session (pam_unix says so in
syslog) and exits. Repeated, to catch the race that a SIGSTOP to every
process of alice lost 3 times in 5; once with alice stopping her own
process first, which stops su and runuser themselves."""
import subprocess
from pathlib import Path

import pytest

from tests.helpers import as_user, end, kill_all_of, live_processes_of, uid_of, wait_for
from tests.slurm.test_slurm_job_end import assert_not_drained

ALICE = "alice"
ROUNDS = 5


def state(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def holders():
    """root's su and runuser, each running a process of alice."""
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL,
             "start_new_session": True}
    su = subprocess.Popen(["su", ALICE, "-s", "/bin/sh", "-c", "sleep 600; true"], **quiet)
    runuser = subprocess.Popen(["runuser", "-u", ALICE, "--", "sh", "-c", "sleep 600; true"], **quiet)
    for proc in (su, runuser):
        wait_for(lambda proc=proc: children_of(proc.pid), 10, what=f"a process of alice under pid {proc.pid}")
    return su, runuser


def closed_sessions(syslog):
    """{service: PAM sessions of alice's that pam_unix says were closed}."""
    return {service: syslog.count(f"pam_unix({service}:session): session closed for user {ALICE}\n")
            for service in ("su", "runuser")}


def children_of(pid):
    """pid's children that are alice's live processes."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        return []
    return [int(kid) for kid in kids if int(kid) in live_processes_of(uid_of(ALICE))]


@pytest.mark.parametrize("stopped_first", [False, True], ids=["running", "alice-stops-her-own-first"])
def test_root_su_and_runuser_end_with_alices_last_job(slurm, rsyslog, accounts, stopped_first):
    for _ in range(ROUNDS if not stopped_first else 2):
        su, runuser = holders()
        try:
            if stopped_first:
                for proc in (su, runuser):
                    subprocess.run([*as_user(ALICE), "kill", "-STOP", *map(str, children_of(proc.pid))], check=True)
                    wait_for(lambda proc=proc: state(proc.pid) == "T", 10, what=f"{proc.args[0]} to stop itself")
            closed = closed_sessions(rsyslog.text())
            job, _ = slurm.run_job(ALICE, "true")
            slurm.wait_epilog_end(job)
            for proc in (su, runuser):
                # its child killed: it reaps it, says so (128 + 9), and exits; never left in state T
                assert proc.wait(timeout=15) == 137, (proc.args, state(proc.pid))
            assert not live_processes_of(uid_of(ALICE))
            # each closed its PAM session (pam_unix says so; runuser's lines carry no pid)
            want = {"su": closed["su"] + 1, "runuser": closed["runuser"] + 1}
            wait_for(lambda want=want: closed_sessions(rsyslog.text()) == want, 10,
                     what="su and runuser to close their PAM sessions")
        finally:
            for proc in (su, runuser):
                if proc.poll() is None and state(proc.pid) == "T":
                    subprocess.run(["kill", "-CONT", str(proc.pid)], check=False)
                end(proc)
            kill_all_of(ALICE)
    assert_not_drained(slurm)
