"""System V IPC at real job ends (each Slurm release): alice's segment (4
MiB), semaphore set and queue, made by alice herself in the node's IPC
namespace, survive while she has another job here and on a failed
localusers lookup, and go at her last job end; a segment of hers that
another user's live process is attached to stays, and so do the listed
operator's objects. Under observe mode and under the brake, her objects,
processes, files and ssh line all stay. The node is never drained."""
import subprocess
from pathlib import Path

from tests.helpers import as_user, kill_all_of, uid_of, wait_for
from tests.node.test_ipc import HOLD
from tests.slurm.conftest import OPERATOR
from tests.slurm.test_pam_adopt import running
from tests.slurm.test_slurm_job_end import STRAY, alive_as, assert_not_drained, record_of, stray_pid

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


def test_observe_mode_then_the_brake_leave_everything_of_alices_and_record_what_would_have_gone(slurm, accounts):
    """Real job ends of alice's, her last on the node each: first under
    epilog:mode observe (a release of its own), then under the brake (the
    enforce release, and a stop file of root's beside the chain). Her stray,
    her ssh line (the prolog still adds it), her files in /tmp and /dev/shm
    and her segment, set and queue are all left; the first record says what
    would have gone, the second that the stop file stopped it. The node is
    never drained."""
    chain = slurm.chain
    stop = chain.conf_dir / "epilog.stop"
    files = [Path(f"/tmp/alice-observe-{slurm.release}"), Path(f"/dev/shm/alice-observe-{slurm.release}")]
    mine = [("shm", make(ALICE, "-M", "65536")), ("sem", make(ALICE, "-S", "1")), ("msg", make(ALICE, "-Q"))]
    allow = chain.allow_file.read_text() if chain.allow_file.exists() else ""
    pids = []
    try:
        chain.lay_down(localusers=["root", OPERATOR], mode="observe")
        job, out = slurm.run_job(ALICE, STRAY + "".join(f"; echo x > {path}" for path in files))
        pids.append(stray_pid(out))
        observed = record_of(chain, job)
        assert observed["mode"] == "observe" and observed["guard"]["answer"] == "act", observed
        facts = {part["part"]: part.get("facts", {}) for part in observed["parts"]}
        assert facts["39-lastuserjob-ssh"]["allow"]["change"] == "would remove", observed
        kill = facts["40-lastuserjob-processes"]["kill"]
        assert kill["outcome"] == "would" and kill["signalled"] >= 1, kill
        assert facts["42-lastuserjob-cleanup"]["cleanup"]["would"] and facts["42-lastuserjob-cleanup"]["cleanup"][
            "removed"] >= len(files), facts
        assert facts["42-lastuserjob-cleanup"]["ipc"]["removed"] == {"shm": 1, "sem": 1, "msg": 1}, facts
        left = {"stray": alive_as(pids[0], ALICE), "files": all(path.exists() for path in files),
                "ipc": set(mine) <= present(), "line": ALICE in chain.allow_file.read_text().split("\n")}
        assert left == dict.fromkeys(left, True), left
        assert f"would kill the processes of uid {uid_of(ALICE)}" in "\n".join(slurm.job_log(job))

        chain.lay_down(localusers=["root", OPERATOR])
        stop.touch()
        job, out = slurm.run_job(ALICE, STRAY)
        pids.append(stray_pid(out))
        stopped = record_of(chain, job)
        assert stopped["stopped"] == str(stop) and stopped["mode"] == "enforce", stopped
        assert {part["part"]: part.get("why") for part in stopped["parts"] if not part["ran"]} == {
            name: f"stopped by {stop}" for name in ("39-lastuserjob-ssh", "40-lastuserjob-processes",
                                                    "42-lastuserjob-cleanup", "45-stale-x-display")}, stopped
        left = {"strays": all(alive_as(pid, ALICE) for pid in pids), "files": all(path.exists() for path in files),
                "ipc": set(mine) <= present(), "line": ALICE in chain.allow_file.read_text().split("\n")}
        assert left == dict.fromkeys(left, True), left
        assert_not_drained(slurm)
    finally:
        stop.unlink(missing_ok=True)
        chain.lay_down(localusers=["root", OPERATOR])
        chain.allow_file.write_text(allow)
        for path in files:
            path.unlink(missing_ok=True)
        remove(*mine)
        kill_all_of(ALICE)
