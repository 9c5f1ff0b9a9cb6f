"""epilog.strays on real processes of real accounts, run as the epilog
module runs it (the release's own node program, in /usr/bin/python3, in a
process of its own), on a chain laid down as the state would: who is a
stray, who is kept and why, what test=True and kill=True do, the user's
lock, and a lookup that fails. The scheduler that runs it is the slurm
tier's (a real minion beside a real Slurm job)."""
import fcntl
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import HOST, end, kill_all_of, killed, process_uids, require, spawn_as, still_running, stray, uid_of, wait_for
from tests.unit.conftest import node

PYTHON = "/usr/bin/python3"
CODE = ("import sys; sys.path.insert(0, sys.argv[1]); from epilog_node import strays; "
        "sys.exit(strays.main(sys.argv[1:]))")
USERS = ("alice", "alicex", "je.kim", "alice.b")


def look(chain, kill=False, test=False, source="call", ipc_only=False, prefix=(), slurmd_pid=0):
    """The release's strays program, as the epilog module runs it: its
    report. PREFIX runs it in another context (a mount namespace);
    SLURMD_PID, the running slurmd the module found (0: none, and Slurm's
    tools come from PATH)."""
    args = {"kill": kill, "test": test, "source": source, "slurmd_pid": slurmd_pid, "env": {"SLURMD_NODENAME": HOST},
            "ipc_only": ipc_only}
    proc = subprocess.run([*prefix, PYTHON, "-ISB", "-c", CODE, str(chain.view(chain.release)), json.dumps(args)],
                          capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def told(report):
    return {entry["user"]: entry for entry in report["users"]}


@pytest.fixture
def processes(accounts):
    procs = {user: stray(user) for user in USERS}
    yield procs
    for proc in procs.values():
        end(proc)
    for user in USERS:
        kill_all_of(user)


def mark_running(chain, user, job=9100):
    import time  # pylint: disable=import-outside-toplevel

    chain.run_dir.mkdir(mode=0o700, exist_ok=True)
    (chain.run_dir / f"{uid_of(user)}.{job}").write_text(f"running {int(time.time())}\n")


def test_a_stray_is_told_previewed_and_killed_and_the_others_are_kept(own_chain, processes):
    """alice and alicex have no job here: strays, killed by part 40 with
    kill=True. alice.b's job is marked as running here: kept. je.kim is an
    operator: left out. test=True kills, locks and writes nothing."""
    chain = own_chain()
    mark_running(chain, "alice.b")
    chain.allow_file.write_text("je.kim\nalice\nalice.b\n")
    preview = look(chain, kill=True, test=True)
    users = told(preview)
    assert users["alice"]["answer"] == "stray" and users["alice"]["kill"] == "would kill", users
    assert "node-local: no step of another job" in users["alice"]["why"]
    assert any(p["pid"] == processes["alice"].pid and p["command"] == "sleep" and p["age"] is not None
               for p in users["alice"]["strays"]), users["alice"]
    assert users["alice.b"]["answer"] == "job" and "job 9100" in users["alice.b"]["why"], users
    assert "je.kim" not in users and preview["counts"]["operators"] >= 1, preview
    assert all(still_running(proc, grace=0) for proc in processes.values())
    assert not chain.record_file.exists()

    listed = look(chain)
    assert told(listed)["alice"]["answer"] == "stray" and "kill" not in told(listed)["alice"]
    assert all(still_running(proc, grace=0) for proc in processes.values())

    done = look(chain, kill=True, source="schedule")
    users = told(done)
    assert users["alice"]["kill"]["outcome"] == "done" and users["alicex"]["kill"]["outcome"] == "done", users
    wait_for(lambda: processes["alice"].poll() is not None and processes["alicex"].poll() is not None, 10,
             what="the strays to die")
    assert processes["alice"].returncode < 0 and processes["alicex"].returncode < 0
    # as at her last job end: her ssh line first (39), then her processes (40)
    assert chain.allow_file.read_text() == "je.kim\nalice.b\n"
    assert users["alice"]["kill"]["parts"] == {"39-lastuserjob-ssh": 0, "40-lastuserjob-processes": 0}, users
    assert still_running(processes["alice.b"], grace=0) and still_running(processes["je.kim"], grace=0)
    assert done["counts"]["killed"] >= 2 and done["counts"]["stray_users"] >= 2

    records = [rec for rec in chain.records() if rec["stage"] == "strays"]
    assert [(rec["source"], rec["kill"]) for rec in records] == [("call", False), ("schedule", True)], records
    assert records[1]["strays"]["killed"] >= 2
    assert {u["user"]: u["answer"] for u in records[1]["strays"]["users"]}["alice.b"] == "job"
    log = chain.log_text()
    assert f"killed the processes of uid {uid_of('alice')}" in log


def test_a_user_whose_job_end_holds_the_lock_is_left_to_it(own_chain, processes):
    chain = own_chain()
    chain.run_dir.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(chain.run_dir / f"lock.{uid_of('alice')}", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        users = told(look(chain, kill=True))
        assert users["alice"]["answer"] == "unknown" and "holds" in users["alice"]["why"], users
        assert "kill" not in users["alice"] and still_running(processes["alice"], grace=0)
        # the others are not held up by it
        assert users["alicex"]["kill"]["outcome"] == "done", users
    finally:
        os.close(fd)


def test_a_failed_lookup_is_never_a_licence_to_kill(own_chain, processes, accounts):
    """A listed operator that does not resolve could be at any uid; a
    process whose uid has no account could be anybody's: neither is killed."""
    chain = own_chain(localusers=["root", "je.kim", "nosuch-operator"])
    nobody = spawn_as("alice", "sleep", "600")
    orphan = subprocess.Popen(["setpriv", "--reuid=50199", "--regid=50199", "--clear-groups", "sleep", "600"],
                              start_new_session=True)
    try:
        wait_for(lambda: os.stat(f"/proc/{orphan.pid}").st_uid == 50199, 5, what="uid 50199's process")
        report = look(chain, kill=True)
        users = told(report)
        assert users["alice"]["answer"] == "unknown" and "nosuch-operator" in users["alice"]["why"], users
        assert {"uid": 50199, "processes": 1, "ipc_objects": False} in report["no_account"], report
        assert None not in users and report["counts"]["no_account_uids"] >= 1
        assert report["counts"]["killed"] == 0
        assert all(still_running(proc, grace=0) for proc in (*processes.values(), nobody, orphan))
    finally:
        for proc in (nobody, orphan):
            end(proc)


def test_her_setuid_program_run_by_others_is_not_hers_to_kill(own_chain, her_setuid_runs):
    """The look counts alicex's, je.kim's and root's runs of alice's
    setuid program under their real owners (a job, an operator, root:
    kept); kill=True kills her stray and leaves those three alone, as her
    last job end does, and the report and the record count them."""
    chain = own_chain()
    mark_running(chain, "alicex")
    victim = stray("alice")
    try:
        users = told(look(chain, kill=True))
        assert users["alicex"]["answer"] == "job", users
        assert users["alice"]["processes"] == 1 and users["alice"]["kill"]["outcome"] == "done", users
        assert users["alice"]["kill"]["saved_only"] == 3, users
        assert killed(victim)
        assert all(process_uids(proc.pid) for proc in her_setuid_runs.values())
        record = [rec for rec in chain.records() if rec["stage"] == "strays"][-1]
        assert {u["user"]: u["saved_only"] for u in record["strays"]["users"]}["alice"] == 3, record
    finally:
        end(victim)
        kill_all_of("alice")


def cgroup2_root():
    """The machine's cgroup2 mount of its namespace's root (a hybrid node's too)."""
    from tests.unit.conftest import node  # pylint: disable=import-outside-toplevel

    found = node("system").cgroup2_mounts(Path("/proc/self/mountinfo").read_bytes())
    assert found, "no cgroup2 mount of the namespace's root"
    return Path(found[0][0])


@pytest.fixture
def job_dir():
    """Slurm's cgroup/v2 layout of a job 77 (root's directories, made as
    slurmstepd makes them: step_0/slurm for the step's slurmstepd,
    step_0/user/task_0 for its task) in the machine's cgroup2 tree; each
    process put there is moved back to the root before the directories go."""
    top = cgroup2_root()
    scope = top / "epilog-test.slice" / f"{HOST}_slurmstepd.scope"
    job = scope / "job_77"
    for leaf in ("step_0/slurm", "step_0/user/task_0"):
        (job / leaf).mkdir(parents=True)
    yield job
    for where, _, _ in sorted(os.walk(top / "epilog-test.slice"), key=lambda level: -len(level[0])):
        for pid in (Path(where) / "cgroup.procs").read_text().split():
            try:
                (top / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        wait_for(lambda where=where: not (Path(where) / "cgroup.procs").read_text().strip(), 10,
                 what=f"{where} to empty")
        os.rmdir(where)


def test_a_job_directory_slurm_left_behind_shields_no_stray(own_chain, job_dir, tmp_path):
    """alice's process in the cgroup of job 77 (root's directories, Slurm's
    layout) while no slurmstepd of root's runs there: Slurm left the
    directory behind, and she has no job here, so she is a stray (before,
    that one process made her whole account a job for every look). Another
    process of root's there (an sshd session pam_slurm_adopt put in the
    job, which she keeps open) tells no job either, nor one of root's named
    slurmstepd by the file it ran (a setuid program that takes real uid 0,
    which she execs through a link she names so); once root's real
    slurmstepd (Slurm's binary, the one the look finds beside slurmd or on
    its PATH; `slurmstepd infinity`, as job_container/tmpfs runs it) runs
    in step_0/slurm, she has a job."""
    chain = own_chain()
    found = node("slurm").Slurm(0, {}, node("system").Trust(), {}).tool("slurmstepd")
    require(found, "no slurmstepd of root's on the node program's PATH (bash .ci/setup installs Debian's slurmd)")
    # run by the name slurmd runs it by (<sbin>/slurmstepd; Debian's is a link to slurmstepd-wlm)
    real = str(Path(found).parent / "slurmstepd")
    named = tmp_path / "slurmstepd"
    named.symlink_to("/bin/sleep")
    os.chmod(tmp_path, 0o755)
    victim, roots = stray("alice"), []
    try:
        (job_dir / "step_0" / "user" / "task_0" / "cgroup.procs").write_text(str(victim.pid))
        assert "/job_77/step_0/user/task_0\n" in Path(f"/proc/{victim.pid}/cgroup").read_text()
        alice = told(look(chain))["alice"]
        assert alice["answer"] == "stray", alice
        for argv, answer in ((["sleep", "600"], "stray"), ([str(named), "600"], "stray"), ([real, "infinity"], "job")):
            roots.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL))  # pylint: disable=consider-using-with
            (job_dir / "step_0" / "slurm" / "cgroup.procs").write_text(str(roots[-1].pid))
            alice = told(look(chain))["alice"]
            assert alice["answer"] == answer, (argv, alice)
        assert alice["why"] == f"process {victim.pid} is in the cgroup of Slurm job 77", alice
    finally:
        for proc in (victim, *roots):
            end(proc)
        kill_all_of("alice")
