"""System V IPC at real job ends (each Slurm release): alice's segment (4
MiB), semaphore set and queue, made by alice herself in the node's IPC
namespace, survive while she has another job here and on a failed
localusers lookup, and go at her last job end; a segment of hers that
another user's live process is attached to stays, and so do the listed
operator's objects. The node is never drained."""
import subprocess

from tests.helpers import as_user, kill_all_of, uid_of, wait_for
from tests.node.test_ipc import HOLD
from tests.slurm.conftest import OPERATOR
from tests.slurm.test_pam_adopt import running
from tests.slurm.test_slurm_job_end import assert_not_drained

ALICE, OTHER = "alice", "alicex"


def make(user, *args):
    out = subprocess.run([*as_user(user), "ipcmk", *args], capture_output=True, text=True, check=True).stdout
    return int(out.split()[-1])


def present():
    """{(kind, id)} of every object in the node's IPC namespace."""
    out = set()
    for kind, column in (("shm", "shmid"), ("sem", "semid"), ("msg", "msqid")):
        text = open(f"/proc/sysvipc/{kind}").read()
        names = text.split("\n")[0].split()
        out |= {(kind, int(dict(zip(names, line.split()))[column])) for line in text.split("\n")[1:] if line.split()}
    return out


def remove(*objects):
    for kind, ident in objects:
        flag = {"shm": "-m", "sem": "-s", "msg": "-q"}[kind]
        subprocess.run(["ipcrm", flag, str(ident)], capture_output=True, check=False)


def test_alices_objects_go_at_her_last_job_end_and_only_then(slurm, accounts):
    mine = [("shm", make(ALICE, "-M", str(4 << 20))), ("sem", make(ALICE, "-S", "2")), ("msg", make(ALICE, "-Q"))]
    attached = ("shm", make(ALICE, "-M", "4096", "-p", "0644"))
    operators = [("shm", make(OPERATOR, "-M", "4096")), ("msg", make(OPERATOR, "-Q"))]
    holder = subprocess.Popen([*as_user(OTHER), "/usr/bin/python3", "-c", HOLD, *map(str, attached)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    other_job = None
    try:
        assert holder.stdout.readline().strip() == "ready"
        # another job of hers runs here: her objects stay
        other_job = slurm.submit(ALICE, "sleep 300")
        wait_for(lambda: running(slurm, other_job), 60, what=f"job {other_job} to run")
        job, _ = slurm.run_job(ALICE, "true")
        slurm.wait_epilog_end(job)
        assert set(mine) <= present()
        # now her last job ends
        slurm.cmd("scancel", other_job)
        slurm.wait_epilog_end(other_job)
        assert not set(mine) & present(), "her last job end removed them"
        assert attached in present() and set(operators) <= present()
        log = "\n".join(slurm.job_log(other_job))
        assert f"System V IPC of uid {uid_of(ALICE)}: removed 1 segment(s) ({4 << 20} bytes), 1 semaphore set(s), " \
               "1 queue(s); kept 1 (attached: 1)" in log, log
        rec = [r for r in slurm.chain.records() if r["stage"] == "epilog" and r["job"] == int(other_job)][-1]
        ipc = {p["part"]: p for p in rec["parts"]}["42-lastuserjob-cleanup"]["facts"]["ipc"]
        assert ipc["removed"] == {"shm": 1, "sem": 1, "msg": 1} and ipc["bytes"] == 4 << 20, rec
        assert_not_drained(slurm)
    finally:
        holder.kill()
        holder.wait()
        remove(*mine, attached, *operators)
        kill_all_of(ALICE)


def test_a_failed_localusers_lookup_keeps_them(slurm, accounts):
    mine = [("shm", make(ALICE, "-M", "4096")), ("sem", make(ALICE, "-S", "1")), ("msg", make(ALICE, "-Q"))]
    try:
        slurm.chain.lay_down(localusers=["root", OPERATOR, "nosuch-operator"])
        job, _ = slurm.run_job(ALICE, "true")
        slurm.wait_epilog_end(job)
        assert set(mine) <= present()
        assert "localusers lookup failed" in "\n".join(slurm.job_log(job))
        assert_not_drained(slurm)
    finally:
        slurm.chain.lay_down(localusers=["root", OPERATOR])
        remove(*mine)
        kill_all_of(ALICE)
