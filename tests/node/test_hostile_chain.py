"""The chain against a hostile user, a misbehaving site part and a
compromised slurm account: real accounts, real processes (some of them C
helpers from tests/c, compiled at test time, because a race needs C speed),
real files, and the scripts as the state lays them down, run in the bare
environment slurmd gives an epilog. Each test names the promise it attacks."""
import contextlib
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import types
from pathlib import Path

import pytest

from tests.helpers import (
    ACCOUNTS,
    LAYOUT,
    REPO,
    as_user,
    end,
    hostile,
    kill_all_of,
    laid_down,
    live_processes_of,
    load_file,
    owned_file,
    process_uids,
    require_tools,
    slurmd_env,
    stray,
    uid_of,
    wait_for,
)
from tests.node.conftest import add_part

# The epilog of alice's last job on this node: another job's socket is not in
# the spool, SLURM_CONF points nowhere (no controller), so the decision is
# node-local, and alice is not in the list.
ALICE = "alice"


@pytest.fixture
def alice_cleanup(accounts):
    yield
    kill_all_of(ALICE)


def run_epilog(chain, user=ALICE, prefix=(), **env):
    ret = chain.run(chain.conf_dir / "epilog.sh", slurmd_env(user, SLURM_CONF="/nonexistent/slurm.conf", **env),
                    prefix=prefix)
    assert ret.returncode == 0, ret
    return ret


# -- 1. nothing of the user survives part 40 ----------------------------------
@pytest.mark.parametrize("attacks", [
    [["snipe"]], [["snipe", "2"]], [["forkloop"]], [["rename", "slurmstepd"]], [["threads"]],
    [["forkloop"], ["rename", "sshd"], ["threads"], ["snipe", "2"]],
], ids=["one-sniper", "two-snipers", "fork-loop", "renames-itself", "zombie-leader-with-a-live-thread", "all-at-once"])
def test_nothing_of_the_user_survives_part_40(chain, cbin, alice_cleanup, attacks):
    """Promise 1: at the user's last job end no process of that uid
    survives. alice's processes fight back: a sniper SIGKILLs every new pid
    near ns_last_pid (the old part 40's `setpriv ... kill -1` ran as alice
    and died with rc=137), a loop forks and lets its parent die so the pid
    keeps moving, a process keeps renaming itself, a process whose main
    thread exited shows in /proc as a zombie while a thread runs on. Strays
    of hers run beside them."""
    strays = [stray(ALICE) for _ in range(3)]  # first: a sniper kills any new process of hers
    fighters = [hostile(ALICE, str(cbin / "fighter"), *attack, reaper=cbin / "fighter")[0]
                for attack in attacks]  # the sniper last
    assert live_processes_of(uid_of(ALICE)), "precondition: alice has live processes"
    run_epilog(chain)
    left = live_processes_of(uid_of(ALICE))
    assert left == {}, f"processes of alice survived part 40: {left}"
    log = chain.log_text()
    assert f"killed the processes of uid {uid_of(ALICE)}" in log
    for proc in fighters + strays:
        end(proc)


def test_a_login_that_never_finishes_hits_the_bound_and_part_40_says_so(chain, alice_cleanup, tmp_path):
    """Promise 1, the bound. Part 40 goes on while root's sshd monitor of a
    login of the user lives (that login passed pam_listfile before 39
    revoked it, and its shell may still start). A monitor that never ends
    (as one hung in PAM on a dead NFS home would) cannot keep part 40 busy
    for ever: it gives up after its bound (50 rounds or 5 s), logs what it
    waited for, and exits 0."""
    sshd = tmp_path / "sshd"
    shutil.copy("/bin/sleep", sshd)  # root's process named sshd, titled as sshd titles a monitor
    monitor = subprocess.Popen(["bash", "-c", f'exec -a "sshd: {ALICE} [priv]" {sshd} 600'], start_new_session=True)
    victim = stray(ALICE)
    try:
        wait_for(lambda: Path(f"/proc/{monitor.pid}/cmdline").read_bytes().startswith(f"sshd: {ALICE} [priv]".encode()),
                 10, what="the monitor's title")
        mark = len(chain.log_text())
        ret = chain.run_part("40-lastuserjob-processes", slurmd_env(ALICE))
        assert ret.returncode == 0, ret
        log = chain.log_text()[mark:]
        assert f"processes of uid {uid_of(ALICE)} survived" in log, log
        assert f"1 {monitor.pid}(sshd: {ALICE} [priv]); gave up (bound: 50 rounds or 5 s)" in log, log
        assert process_uids(victim.pid) is None, "the user's own process was killed all the same"
        assert process_uids(monitor.pid) is not None, "root's process is never signalled"
    finally:
        end(monitor)
        end(victim)


@pytest.mark.parametrize("uid", [4294967295, 0, -1])
def test_part_40_sends_nothing_unless_it_really_runs_as_the_user(chain, uid):
    """Promise 1: the kill acts only as an ordinary uid from 1 to
    4294967294: (uid_t)-1 would leave setresuid's process root, and 0 is
    root. Asked for one of those (nothing the runner hands it: the guard
    refuses them first), it refuses, and root's processes live on."""
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from epilog_node import kill; "
                "print(kill.kill_uid(int(sys.argv[2]), 'alice').outcome)")
        ret = subprocess.run(["/usr/bin/python3", "-I", "-B", "-c", code, str(chain.release), str(uid)],
                             capture_output=True, text=True, timeout=60)
        assert ret.stdout.strip() == "failed", ret
        assert process_uids(proc.pid) is not None, "the kill reached a process of root"
    finally:
        end(proc)


X = 4294967294  # the first kill slot's uid X; slot i's is X - i


@pytest.mark.parametrize("creds", [["--reuid"], ["--ruid"]], ids=["runs-as-x", "real-uid-x-effective-root"])
def test_part_40_never_signals_through_a_uid_x_some_process_holds(chain, alice_cleanup, creds):
    """Promise 1: kill(-1) from the sender reaches every process whose real
    or saved uid is its X as well as the user's. While a process holds a
    slot's X (whatever its effective uid, which names /proc/PID), part 40
    passes that slot over; while every slot's X is held, it sends nothing:
    neither those processes nor the user's are signalled."""
    holders = [subprocess.Popen(["setpriv", f"{creds[0]}={X - i}", "sleep", "600"], start_new_session=True)
               for i in range(16)]
    victim = stray(ALICE)
    try:
        for i, holder in enumerate(holders):
            wait_for(lambda h=holder, x=X - i: (process_uids(h.pid) or [None])[0] == x, 10,
                     what="a process of real uid X")
        mark = len(chain.log_text())
        run_epilog(chain)
        log = chain.log_text()[mark:]
        assert "did not kill the processes of uid 50101: a process of uid" in log, log
        assert process_uids(victim.pid) is not None and all(process_uids(h.pid) is not None for h in holders)
        end(holders[5])
        run_epilog(chain)
        assert process_uids(victim.pid) is None, chain.log_text()[mark:]
        assert all(process_uids(h.pid) is not None for i, h in enumerate(holders) if i != 5)
    finally:
        for holder in holders:
            end(holder)
        end(victim)


def test_two_part_40s_at_once_each_signal_through_an_x_of_their_own(chain, alice_cleanup):
    """Promise 1, two users' job ends at once: each part 40 holds real uid X
    while it signals, and through one X each would reach the other. Another
    job end's part 40 (here: flock holding the first slot, its child holding
    that slot's X) is mid-kill: this one takes the next slot, never waits
    for the other, kills all of its user's, and never reaches the other."""
    chain.view(chain.run_dir).mkdir(mode=0o700, exist_ok=True)
    lock_path = chain.view(chain.run_dir / "kill.lock")
    lock_path.touch(mode=0o600)
    holder = subprocess.Popen(["flock", "-o", str(lock_path), "setpriv", f"--reuid={X}", "sleep", "600"],
                              start_new_session=True)
    victim = stray(ALICE)
    try:
        wait_for(lambda: [p for p in holder_children(holder.pid) if (process_uids(p) or [None])[0] == X], 10,
                 what="the other part 40 to hold the first slot and its X")
        run_epilog(chain)
        assert process_uids(victim.pid) is None, chain.log_text()
        assert holder.poll() is None and [p for p in holder_children(holder.pid) if process_uids(p)], \
            "the kill reached the other part 40's process"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(holder.pid, signal.SIGKILL)  # flock and its child, which holds X
        holder.wait(timeout=10)
        end(victim)


def holder_children(pid):
    try:
        return [int(kid) for kid in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def test_a_worker_killed_before_its_part_is_replaced_and_the_part_runs(own_chain, alice_cleanup):
    """The formula's parts run in the runner's worker. A site part (they
    misbehave) kills it while it waits: 39 and 40 run all the same, in a new
    one, and nothing is reported as failed."""
    c = own_chain()
    add_part(c, "38-kills-the-worker", "#!/bin/sh\npkill -KILL -P \"$PPID\" -x epilog.sh\nexit 0\n")
    c.allow_file.write_text("bob\nalice\n")
    victim = stray(ALICE)
    try:
        run_epilog(c)
        log = c.log_text()
        assert c.allow_file.read_text() == "bob\n", log
        assert process_uids(victim.pid) is None, log
        assert "exited" not in log and "failed" not in log, log
        parts = {part["part"]: part for part in c.records()[-1]["parts"]}
        assert parts["39-lastuserjob-ssh"]["rc"] == 0 and parts["40-lastuserjob-processes"]["rc"] == 0
    finally:
        end(victim)


# -- 3. the last-job decision uses only evidence a user cannot forge ------------
@pytest.fixture
def fake_stepd(alice_cleanup):
    """alice's own copy of bash, named slurmstepd and titled like root's
    ("slurmstepd: [999.extern]"), parenting a process of hers."""
    home = Path(tempfile.mkdtemp(prefix="epilog-fake-stepd-", dir="/var/tmp"))
    os.chmod(home, 0o755)
    shutil.copy("/bin/bash", home / "slurmstepd")
    os.chown(home / "slurmstepd", uid_of(ALICE), uid_of(ALICE))
    proc, line = hostile(ALICE, "bash", "-c", f'exec -a "slurmstepd: [999.extern]" {home}/slurmstepd -c '
                                              "'sleep 600 & echo ready; wait'")
    assert line == "ready"
    children = wait_for(lambda: [p for p, name in live_processes_of(uid_of(ALICE)).items() if name == "sleep"], 5,
                        what="the fake slurmstepd's child")
    yield proc, children
    end(proc)
    shutil.rmtree(home, ignore_errors=True)


def test_a_users_fake_slurmstepd_is_no_evidence_of_another_job(own_chain, fake_stepd):
    """Promise 3: only root's real slurmstepd counts. The spool belongs to
    the slurm user (as Debian's /var/lib/slurm/slurmd does), so the runner
    may not trust it and asks for slurmstepd processes: alice's fake, with
    a child of hers, must not make it answer "another job: yes" and skip the
    cleanup."""
    c = own_chain()
    shutil.chown(c.spool_dir, "slurm", "slurm")
    run_epilog(c)
    start = next(line for line in c.log_text().splitlines() if "epilog.sh" in line and "start;" in line)
    assert "other jobs of this user on this node: no (node-local: no slurmstepd of root on this node)" in start, start
    assert live_processes_of(uid_of(ALICE)) == {}, "alice's fake slurmstepd and its child outlived her last job"


def test_a_spool_the_slurm_user_can_write_is_not_evidence(own_chain):
    """Promise 3: step sockets count only in slurmd's own root-owned spool. A
    compromised slurm account owns Debian's spool and could remove another
    job's step sockets to make the runner answer "no other job": with the
    spool not root's alone, the runner never reads it."""
    c = own_chain()
    shutil.chown(c.spool_dir, "slurm", "slurm")
    run_epilog(c, user="je.kim")
    start = next(line for line in c.log_text().splitlines() if "epilog.sh" in line and "start;" in line)
    assert f"no step of another job in {c.spool_dir}" not in start, start


def test_a_job_of_the_user_still_in_its_prolog_keeps_another_jobs_epilog_from_acting(chain, alice_cleanup):
    """Promise 4: on a shared node, alice's job 8 was allocated while her job
    7 still ran; 8 is in its prolog (no step yet: no socket, no slurmstepd)
    when 7 ends. 8's prolog marked it in the root-only run directory, under
    alice's lock, before it added her allow line: 7's epilog sees the mark
    and leaves her processes and her line alone."""
    victim = stray(ALICE)
    try:
        assert chain.run(chain.conf_dir / "prolog.sh", slurmd_env(ALICE, job=8)).returncode == 0
        assert (chain.run_dir / f"{uid_of(ALICE)}.8").read_text().startswith("running ")
        mark = len(chain.log_text())
        run_epilog(chain, SLURM_JOB_ID=7)
        log = chain.log_text()[mark:]
        assert f"other jobs of this user on this node: yes (node-local: job 8 of uid {uid_of(ALICE)} started here" in log
        assert process_uids(victim.pid) is not None
        assert "alice" in chain.allow_file.read_text().splitlines()
        assert (chain.run_dir / f"{uid_of(ALICE)}.7").read_text() == "done\n"
        # 8 ends: now it is alice's last job here.
        run_epilog(chain, SLURM_JOB_ID=8)
        assert process_uids(victim.pid) is None
    finally:
        end(victim)


@pytest.mark.parametrize("content", ["running 1000000000\n", "", "runn"], ids=["old", "empty", "torn"])
def test_an_old_mark_without_a_slurmstepd_is_never_a_licence_to_kill(chain, alice_cleanup, content):
    """Promise 3: a mark older than the chain's deadline whose job has no
    slurmstepd here is either a job of several nodes between its steps, or
    a job whose epilog never ran (slurmd died). Only the controller can
    tell; here it cannot be asked (no slurmctld): the answer is "unknown",
    nothing is killed, and the mark stays. Only "done" means ended: an empty
    mark (a full /run) or a torn one counts as running. (tests/slurm
    sets one aside through a real squeue.)"""
    chain.run_dir.mkdir(mode=0o700, exist_ok=True)
    stale = chain.run_dir / f"{uid_of(ALICE)}.5"
    stale.write_text(content)
    victim = stray(ALICE)
    try:
        mark = len(chain.log_text())
        run_epilog(chain, SLURM_JOB_ID=7)
        log = chain.log_text()[mark:]
        assert (f"other jobs of this user on this node: unknown (job(s) 5 of uid {uid_of(ALICE)} marked as "
                "started here long ago, with no slurmstepd; the controller cannot confirm they ended") in log, log
        assert process_uids(victim.pid) is not None
        assert stale.read_text() == content
    finally:
        end(victim)
        stale.unlink(missing_ok=True)


def test_jobs_of_the_user_ending_together_leave_nothing_behind(chain, alice_cleanup):
    """Promise 1 and 3: alice's jobs 7 and 8 end at once, and a site part
    before 39 holds the epilog that answered "no" (and so alice's lock)
    until the other has decided too. Each epilog marks its own job as
    ended before it waits: the one that decides sees the other's mark so,
    answers "no", and kills; the other gives up waiting for the lock
    (10 s), answers "unknown" and leaves it to the first. (When one decides
    before the other has marked its job, it answers "yes" and the other
    "no".) The site part waits for a file the test makes once both have
    decided; its part_timeout, 12 s, is its bound."""
    release = chain.conf_dir.parent / "release-30-site-slow"
    slow = add_part(chain, "30-site-slow", f"until [ -e {release} ]; do sleep 0.05; done")
    victim = stray(ALICE)
    try:
        for job in (7, 8):
            assert chain.run(chain.conf_dir / "prolog.sh", slurmd_env(ALICE, job=job)).returncode == 0
        mark = len(chain.log_text())
        procs = [subprocess.Popen([*chain.prefix, str(chain.conf_dir / "epilog.sh")],
                                  env=slurmd_env(ALICE, job=job, SLURM_CONF="/nonexistent/slurm.conf"))
                 for job in (7, 8)]
        wait_for(lambda: chain.log_text()[mark:].count("start; other jobs of this user on this node: ") == 2, 60,
                 what="both epilogs to decide (the one that waits for alice's lock gives up after 10 s)")
        release.touch()
        assert [p.wait(timeout=120) for p in procs] == [0, 0]
        log = chain.log_text()[mark:]
        assert "other jobs of this user on this node: no" in log, log
        assert "killed the processes of uid" in log, log
        assert process_uids(victim.pid) is None
    finally:
        release.unlink(missing_ok=True)
        end(victim)
        slow.unlink()
        for job in (7, 8):
            (chain.run_dir / f"{uid_of(ALICE)}.{job}").unlink(missing_ok=True)


def test_a_user_cannot_forge_a_mark(chain, alice_cleanup):
    """Promise 3: the marks are root's, in a directory only root can write.
    Were it writable by the user, she could plant a mark to dodge the
    cleanup: then the runner does not read the marks at all."""
    run_dir = chain.run_dir
    run_dir.mkdir(mode=0o700, exist_ok=True)
    forged = run_dir / f"{uid_of(ALICE)}.99"
    os.chmod(run_dir, 0o1777)
    try:
        forged.write_text("running 9999999999\n")
        os.chown(forged, uid_of(ALICE), uid_of(ALICE))
        victim = stray(ALICE)
        mark = len(chain.log_text())
        run_epilog(chain, SLURM_JOB_ID=7)
        assert "job 99" not in chain.log_text()[mark:]
        assert process_uids(victim.pid) is None, chain.log_text()[mark:]
    finally:
        forged.unlink(missing_ok=True)
        os.chmod(run_dir, 0o700)


# -- 5. no other account can stall the allow-file edits -------------------------
def test_no_other_account_can_hold_the_allow_file_lock(chain, cbin, alice_cleanup):
    """Promise 5: alice takes an exclusive flock on the allow file's
    directory (what the edits used to lock: any user can open a directory
    read-only) and tries to on ssh_allow.lock, the lock they use now (root
    0600: she cannot even open it). The prolog of another user's job still
    adds the line, without waiting for any lock."""
    old, line = hostile(ALICE, str(cbin / "fighter"), "flock", "/etc")  # the default allow file's directory
    assert line == "locked", "precondition: any user can lock a directory she can open"
    new, line = hostile(ALICE, str(cbin / "fighter"), "flock", str(chain.conf_dir / laid_down("config-ssh-allow-lock")))
    assert line == "denied 13", line
    chain.allow_file.write_text("bob\n")
    mark = len(chain.log_text())
    ret = chain.run(chain.conf_dir / "prolog.sh", slurmd_env("alicex"))
    assert ret.returncode == 0, ret
    assert chain.allow_file.read_text() == "bob\nalicex\n"
    assert "cannot lock" not in chain.log_text()[mark:]
    end(old)
    end(new)


# -- 6. a part's leftovers never hold up the runner ---------------------------------
def test_a_site_part_that_leaves_processes_behind_does_not_hold_the_runner(own_chain, alice_cleanup):
    """Promise 6: a site part runs `sleep 600 &`, another starts a daemon with
    setsid; with the default part_timeout the runner must still end as soon as its
    parts have returned (it used to wait on its capture pipe for as long as
    they lived: slurmd would kill it and drain the node). The formula's own
    parts after them still run."""
    c = own_chain()
    marker = f"epilog-leftover-{os.getpid()}"
    add_part(c, "20-background", f"bash -c 'exec -a {marker} sleep 600' & exit 0")
    add_part(c, "21-daemon", f"setsid -f bash -c 'exec -a {marker} sleep 600'; exit 0")
    victim = stray(ALICE)
    try:
        # 60 s is far below the leftovers' 600 s: a runner waiting on them fails here.
        ret = c.run(c.conf_dir / "epilog.sh", slurmd_env(ALICE, SLURM_CONF="/nonexistent/slurm.conf"), timeout=60)
        assert ret.returncode == 0
        log = c.log_text()
        assert f"epilog.sh job=4242 user=alice release={c.release_id}: end" in log
        assert process_uids(victim.pid) is None, "part 40 did not run after the site parts"
        leftovers = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
        assert len(leftovers) == 2, "precondition: both site parts left a process running"
    finally:
        subprocess.run(["pkill", "-f", marker])
        end(victim)


def test_the_whole_chain_keeps_its_own_deadline_and_site_parts_cannot_eat_the_cleanups_time(own_chain,
                                                                                               alice_cleanup):
    """Promise 6: the chain has its own deadline below slurm.conf's
    EpilogTimeout, and the formula's own parts keep their share of it. With
    chain_timeout 40 and part_timeout 5, three hanging site parts numbered
    before 39 get only what is left once 39, 40, 42 and 45 have their
    part_timeout + 2 each: the first two are stopped, the third is skipped
    with a warning, and 39 and 40 still revoke and kill (they used to be the
    ones skipped)."""
    c = own_chain(part_timeout=5, chain_timeout=40, sweep_budget=1)
    for name in ("10-hang", "20-hang", "30-hang"):
        add_part(c, name, "sleep 120")
    c.allow_file.write_text("alice\n")
    victim = stray(ALICE)
    try:
        ret = c.run(c.conf_dir / "epilog.sh", slurmd_env(ALICE, SLURM_CONF="/nonexistent/slurm.conf"), timeout=120)
        assert ret.returncode == 0
        log = c.log_text()
        assert "10-hang exited 124" in log and "20-hang exited 124" in log, log
        assert "skipping 30-hang: the chain's deadline of 40s is reached" in log, log
        assert process_uids(victim.pid) is None, "40 did not run"
        assert c.allow_file.read_text() == "", "39 did not run"
        assert "skipping 39-" not in log and "skipping 40-" not in log
    finally:
        end(victim)


def workers_with(path):
    """The pids of the chain's processes (named epilog.sh, as the runner and
    its worker are) that hold PATH open."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "epilog.sh":
                continue
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                    found.append(int(pid))
                    break
    return found


def test_a_lock_that_another_holds_never_makes_39_outlive_its_deadline(own_chain, alice_cleanup):
    """Promise 6: a stuck root process (a hung prolog, say) holds
    ssh_allow.lock. 39 waits for it only within its own deadline, says so
    (the user's line stays: the list is never edited without the lock), and
    40 runs after it."""
    c = own_chain(part_timeout=4, sweep_budget=1)
    lock = c.conf_dir / laid_down("config-ssh-allow-lock")
    holder = subprocess.Popen(["flock", "-o", str(lock), "sleep", "600"], start_new_session=True)
    c.allow_file.write_text("alice\n")
    victim = stray(ALICE)
    try:
        wait_for(lambda: subprocess.run(["flock", "-n", str(lock), "true"]).returncode != 0,
                 10, what="the lock to be held")
        run_epilog(c)
        log = c.log_text()
        assert f"cannot lock {lock} to edit {c.allow_file}; left alone" in log, log
        assert "exited" not in log, log
        assert process_uids(victim.pid) is None, "40 did not run after 39"
        assert c.allow_file.read_text() == "alice\n"
    finally:
        end(holder)
        end(victim)


def test_an_own_part_that_hangs_is_stopped_with_its_worker_and_the_chain_goes_on(own_chain, alice_cleanup):
    """Promise 6: the formula's own parts are held to part_timeout as well.
    Each bounds its own waits, so the hang is injected: while 39 waits for
    ssh_allow.lock (a stuck root process holds it), its worker is stopped,
    as a part stuck in the kernel would be. After part_timeout the runner
    stops the worker's whole group, logs it, and 40 still runs, in a new
    worker; nothing of the chain outlives it."""
    c = own_chain(part_timeout=6, sweep_budget=1)
    lock = c.conf_dir / laid_down("config-ssh-allow-lock")
    holder = subprocess.Popen(["flock", "-o", str(lock), "sleep", "600"], start_new_session=True)
    c.allow_file.write_text("alice\n")
    victim = stray(ALICE)
    job = None
    try:
        wait_for(lambda: subprocess.run(["flock", "-n", str(lock), "true"]).returncode != 0,
                 10, what="the lock to be held")
        job = subprocess.Popen([str(c.conf_dir / "epilog.sh")], env=slurmd_env(ALICE, SLURM_CONF="/nonexistent/slurm.conf"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        worker = wait_for(lambda: workers_with(lock), 20, what="39 to wait for the lock")[0]
        os.kill(worker, signal.SIGSTOP)
        assert job.wait(timeout=60) == 0
        log = c.log_text()
        assert "39-lastuserjob-ssh exited 124 (124: timed out after 6s)" in log, log
        assert process_uids(victim.pid) is None, "40 did not run after 39 was stopped"
        assert process_uids(worker) is None, "the stopped worker outlived the chain"
        left = subprocess.run(["pgrep", "-f", str(c.conf_dir / "epilog.sh")], capture_output=True, text=True)
        assert left.stdout.split() == [], "a process of the chain's outlived it"
        assert c.allow_file.read_text() == "alice\n"
    finally:
        end(holder)
        if job is not None:
            job.wait(timeout=60)
        end(victim)


# -- 7. no other account can redirect or block root's log write -----------------
@pytest.fixture
def reachable():
    """A directory every account can reach (pytest's own are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="epilog-hostile-", dir="/var/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def compromised_log_dir(own_chain, base):
    """The chain laid down, then its log directory handed to the slurm user
    (a compromised slurm owns Debian's /var/log/slurm)."""
    log_dir = base / "log-of-slurm"
    c = own_chain(log_file=str(log_dir / "epilog.log"))
    shutil.chown(log_dir, "slurm", "slurm")
    return c, log_dir


def as_slurm(*argv):
    subprocess.run([*as_user("slurm"), *argv], check=True)


def test_a_symlink_swapped_in_by_the_slurm_user_is_never_followed(own_chain, tmp_path, reachable, alice_cleanup):
    """Promise 7: the slurm account owns the log directory and swaps
    epilog.log for a symlink to a root-only file, then to a file that does
    not exist yet (as /etc/nologin would be): job ends append nothing to the
    one and never create the other."""
    c, log_dir = compromised_log_dir(own_chain, reachable)
    vault = tmp_path / "vault"
    vault.mkdir(mode=0o700)
    secret = vault / "secret"
    secret.write_text("root only\n")
    os.chmod(secret, 0o600)
    (log_dir / "epilog.log").unlink(missing_ok=True)
    as_slurm("ln", "-s", str(secret), str(log_dir / "epilog.log"))
    for _ in range(5):
        run_epilog(c)
    assert secret.read_text() == "root only\n"
    as_slurm("rm", str(log_dir / "epilog.log"))
    as_slurm("ln", "-s", str(vault / "nologin"), str(log_dir / "epilog.log"))
    for _ in range(5):
        run_epilog(c)
    assert not (vault / "nologin").exists(), "root created a file through the slurm user's symlink"


def test_a_fifo_swapped_in_by_the_slurm_user_never_blocks_the_runner(own_chain, reachable, alice_cleanup):
    """Promise 7: a FIFO in place of epilog.log, with no reader: the runner
    must not block on it (60 s is far above a job end, and the part
    timeouts would not save a runner that blocks itself)."""
    c, log_dir = compromised_log_dir(own_chain, reachable)
    (log_dir / "epilog.log").unlink(missing_ok=True)
    as_slurm("mkfifo", str(log_dir / "epilog.log"))
    victim = stray(ALICE)
    ret = c.run(c.conf_dir / "epilog.sh", slurmd_env(ALICE, SLURM_CONF="/nonexistent/slurm.conf"), timeout=60)
    assert ret.returncode == 0
    assert process_uids(victim.pid) is None, "the chain did not clean up"


def test_a_user_who_locks_the_log_cannot_stop_its_rotation(own_chain, reachable, alice_cleanup):
    """Promise 7: the log is 0644, so any account that reaches it can open
    it and flock it. alicex holds a shared lock on it for as long as she
    likes: past log_max_kb it is renamed to .1 all the same (under a lock of
    root's alone beside it), and the job end does not wait for her."""
    log_dir = reachable / "log"
    c = own_chain(log_file=str(log_dir / "epilog.log"), log_max_kb=16)
    log = log_dir / "epilog.log"
    os.chmod(log_dir, 0o755)
    log.write_text("old\n" * 5000)
    os.chmod(log, 0o644)
    holder, line = hostile("alicex", "flock", "-s", str(log), "sh", "-c", "echo locked; exec sleep 600")
    try:
        assert line == "locked"
        run_epilog(c, "je.kim")
        assert (log_dir / "epilog.log.1").read_text() == "old\n" * 5000
        assert "old" not in log.read_text() and "epilog.sh job=" in log.read_text()
        lock = log_dir / ".epilog.log.lock"
        assert lock.stat().st_uid == 0 and stat.S_IMODE(lock.stat().st_mode) == 0o600
    finally:
        end(holder)
        kill_all_of("alicex")


# -- 9. the name and the uid must agree, or nothing happens ---------------------
@pytest.mark.parametrize("user,uid_of_whom", [
    ("alice", "opal"),        # alice's name, the uid of a listed operator
    ("nobody", "alice"),      # Slurm 22.05's answer when its own lookup fails
    ("alicex", "alice"),      # another ordinary account's name
])
def test_a_name_that_does_not_resolve_to_the_jobs_uid_changes_nothing(chain, user, uid_of_whom, alice_cleanup):
    """Promise 9: the guard looks up localusers by name, part 40 kills by
    uid: unless the name resolves on this node to exactly SLURM_JOB_UID the
    user is unknown and the lastuserjob parts do nothing, to anybody."""
    victim = stray(uid_of_whom)
    residue = owned_file(uid_of_whom)
    chain.allow_file.write_text(f"{user}\n{uid_of_whom}\n")
    try:
        mark = len(chain.log_text())
        run_epilog(chain, user=user, SLURM_JOB_UID=uid_of(uid_of_whom))
        assert process_uids(victim.pid) is not None, f"a process of {uid_of_whom} was killed"
        assert residue.exists()
        assert chain.allow_file.read_text() == f"{user}\n{uid_of_whom}\n"
        log = chain.log_text()[mark:]
        assert f"does not resolve on this node to uid {uid_of(uid_of_whom)}" in log, log
        for part in ("39-lastuserjob-ssh", "40-lastuserjob-processes", "42-lastuserjob-cleanup"):
            assert chain.run_part(part, slurmd_env(user, uid=uid_of(uid_of_whom))).returncode == 0
        assert process_uids(victim.pid) is not None and residue.exists()
    finally:
        end(victim)
        residue.unlink(missing_ok=True)
        kill_all_of(uid_of_whom)


@pytest.mark.parametrize("uid", ["0", "4294967295", "4294967296", "99999999999", "",
                                 f"+{ACCOUNTS[ALICE]}", f"0{ACCOUNTS[ALICE]}", f"{ACCOUNTS[ALICE]} "])
def test_a_uid_outside_1_to_4294967294_changes_nothing(chain, uid, alice_cleanup):
    """Promise 9: refuse uids outside 1..4294967294 (and anything that is not
    a plain number)."""
    victim = stray(ALICE)
    try:
        mark = len(chain.log_text())
        run_epilog(chain, SLURM_JOB_UID=uid)
        assert process_uids(victim.pid) is not None
        assert "is not a uid from 1 to 4294967294" in chain.log_text()[mark:]
    finally:
        end(victim)


def test_a_name_of_digits_only_is_unknown(chain, alice_cleanup):
    """Promise 9: `id` reads a name of digits only as a uid, so the name
    "50101" would resolve to alice's uid 50101 with no account named 50101."""
    uid = uid_of(ALICE)
    victim = stray(ALICE)
    try:
        run_epilog(chain, user=str(uid), SLURM_JOB_UID=uid)
        assert process_uids(victim.pid) is not None
        assert "is digits only" in chain.log_text()
    finally:
        end(victim)


def test_a_directory_user_named_dash_v_is_cleaned_up_like_anyone(chain, directory_users):
    """Promise 10: names are data everywhere. '-v' (uid 50199, served by NSS
    as a directory would) reaches id, grep, the allow file edit and the
    sender as data, and is cleaned up like any user."""
    proc = subprocess.Popen(["setpriv", f"--reuid={uid_of('-v')}", f"--regid={uid_of('-v')}", "--clear-groups", "sleep", "600"],
                            start_new_session=True)
    chain.allow_file.write_text("bob\n-v\n")
    try:
        ret = chain.run(chain.conf_dir / "epilog.sh",
                        {**slurmd_env("-v", SLURM_CONF="/nonexistent/slurm.conf"), **directory_users.env},
                        prefix=directory_users.prefix)
        assert ret.returncode == 0, ret
        assert wait_for(lambda: proc.poll() is not None, 10, what="-v's process to die")
        assert chain.allow_file.read_text() == "bob\n"
    finally:
        end(proc)



def test_a_login_still_at_its_password_prompt_does_not_hold_part_40(chain, alice_cleanup, tmp_path):
    """Promise 1: sshd titles its monitor "sshd: USER [priv]" as soon as the
    user name is known, before authentication: anybody could hold such a
    connection open at the password prompt to keep part 40 waiting and
    logging a false "survived". A monitor whose child runs as the privilege
    separation user has not authenticated (and cannot pass pam_listfile any
    more): part 40 does not wait for it."""
    sshd_bin = tmp_path / "sshd"
    shutil.copy("/bin/bash", sshd_bin)
    pw = pwd.getpwnam("sshd")
    monitor = subprocess.Popen(
        ["bash", "-c", f'exec -a "sshd: {ALICE} [priv]" {sshd_bin} -c '
                       f'"setpriv --reuid={pw.pw_uid} --regid={pw.pw_gid} --clear-groups sleep 600 & wait"'],
        start_new_session=True)
    victim = stray(ALICE)
    try:
        wait_for(lambda: Path(f"/proc/{monitor.pid}/task/{monitor.pid}/children").read_text().split(), 10,
                 what="the pre-authentication child")
        mark = len(chain.log_text())
        assert chain.run_part("40-lastuserjob-processes", slurmd_env(ALICE)).returncode == 0
        log = chain.log_text()[mark:]
        assert "killed the processes of uid" in log and "survived" not in log, log
        assert process_uids(victim.pid) is None
    finally:
        os.killpg(monitor.pid, 9)
        monitor.wait()
        end(victim)


def test_no_lastuserjob_part_runs_past_the_next_prologs_wait(own_chain, alice_cleanup):
    """Promise 4: alice's next job's prolog waits for her lock at most half
    the chain's deadline (20 s here), then marks its job and lets it start.
    Site lastuserjob parts that hang (four of them, 5 s each) must not go on
    killing or deleting past that: the last one gets what is left of the
    wait, and 42, which would come after it, is skipped. The prolog, started
    while they hang, gets the lock within its wait."""
    c = own_chain(chain_timeout=40, part_timeout=5, sweep_budget=3)
    for letter in "abcd":
        add_part(c, f"41-lastuserjob-hang-{letter}", "sleep 60")
    assert c.run(c.conf_dir / "prolog.sh", slurmd_env(ALICE, job=7)).returncode == 0
    epilog = subprocess.Popen([*c.prefix, str(c.conf_dir / "epilog.sh")],
                              env=slurmd_env(ALICE, job=7, SLURM_CONF="/nonexistent/slurm.conf"))
    wait_for(lambda: subprocess.run(["pgrep", "-f", "41-lastuserjob-hang-a"], capture_output=True).returncode == 0,
             30, what="the first hanging part to start")
    prolog = c.run(c.conf_dir / "prolog.sh", slurmd_env(ALICE, job=8))
    assert prolog.returncode == 0
    assert epilog.wait(timeout=60) == 0
    log = c.log_text()
    assert "cannot lock" not in log, log
    assert (c.run_dir / f"{uid_of(ALICE)}.8").read_text().startswith("running ")
    # hang-d gets what is left of the wait (or nothing, on a busy machine).
    assert (re.search(r"41-lastuserjob-hang-d exited 124 \(124: timed out after [12]s\)", log)
            or "skipping 41-lastuserjob-hang-d: a new job of the user may start now" in log), log
    assert "skipping 42-lastuserjob-cleanup: a new job of the user may start now" in log, log


def test_a_full_tmp_changes_no_decision(chain, alice_cleanup):
    """Promise 8's class: any user can fill /tmp (every block and every
    inode). A decision that needed a temporary file there would read
    nothing, and nothing read must never become "no other job". Here /tmp is
    a full tmpfs (in the job end's own mount namespace) while alice's job 8
    is marked as running: the job end of her job 7 still sees it, and
    leaves her processes alone."""
    require_tools("unshare")
    victim = stray(ALICE)
    try:
        assert chain.run(chain.conf_dir / "prolog.sh", slurmd_env(ALICE, job=8)).returncode == 0
        full = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount -t tmpfs -o size=4k,nr_inodes=2 full /tmp && (cat /dev/zero > /tmp/fill) 2>/dev/null; '
                'touch /tmp/one-more 2>/dev/null && exit 99; exec "$@"', "sh"]
        mark = len(chain.log_text())
        ret = chain.run(chain.conf_dir / "epilog.sh", slurmd_env(ALICE, job=7, SLURM_CONF="/nonexistent/slurm.conf"),
                        prefix=full)
        assert ret.returncode == 0, ret
        log = chain.log_text()[mark:]
        assert f"other jobs of this user on this node: yes (node-local: job 8 of uid {uid_of(ALICE)} started here" in log
        assert process_uids(victim.pid) is not None
    finally:
        end(victim)
        for job in (7, 8):
            (chain.run_dir / f"{uid_of(ALICE)}.{job}").unlink(missing_ok=True)


def test_a_site_part_another_account_can_write_never_runs_as_root(own_chain, tmp_path):
    """The compromised slurm account, or anyone in a part's group, must not
    get code run as root: a site part runs only when it is root's (or a
    symlink to root's) and nobody else can write it, and epilog.verify names
    each one it would skip."""
    c = own_chain()
    ran = tmp_path / "ran"
    ran.mkdir()
    slurm_uid = pwd.getpwnam("slurm").pw_uid
    add_part(c, "10-site-ok", f"touch {ran}/ok")
    # an old copy of a part an earlier version laid down in place: never a site's
    add_part(c, "41-lastuserjob-ssh", f"touch {ran}/retired-41")
    add_part(c, "11-group-writable", f"touch {ran}/group-writable", mode=0o775)
    os.chown(add_part(c, "12-slurm-owned", f"touch {ran}/slurm-owned"), slurm_uid, 0)
    target = tmp_path / "slurm-owned-target"
    target.write_text(f"#!/bin/bash\ntouch {ran}/through-link\n")
    os.chmod(target, 0o755)
    os.chown(target, slurm_uid, 0)
    (c.conf_dir / "epilog.d/13-link-to-slurms").symlink_to(target)
    # a symlink even to root's own file: what it points to may be swapped
    root_target = tmp_path / "root-target"
    root_target.write_text(f"#!/bin/bash\ntouch {ran}/through-roots-link\n")
    os.chmod(root_target, 0o755)
    (c.conf_dir / "epilog.d/14-link-to-roots").symlink_to(root_target)
    ret = c.run(c.conf_dir / "epilog.sh", slurmd_env("je.kim", SLURM_CONF="/nonexistent/slurm.conf"))
    assert ret.returncode == 0
    assert sorted(p.name for p in ran.iterdir()) == ["ok"]
    log = c.log_text()
    site = c.conf_dir / "epilog.d"
    said = {"11-group-writable": f"{site}/11-group-writable is owned by uid 0 or writable by group or others (mode 0775)",
            "12-slurm-owned": f"{site}/12-slurm-owned is owned by uid {slurm_uid} or writable by group or others (mode "
                              "0755)",
            "13-link-to-slurms": f"{site}/13-link-to-slurms is a symlink: ",
            "14-link-to-roots": f"{site}/14-link-to-roots is a symlink: "}
    logged = dict(re.findall(r"skipping (\S+): (.*)", log))
    assert "10-site-ok" not in logged and "41-lastuserjob-ssh" not in logged, logged
    for name, why in said.items():
        assert logged.get(name, "").startswith(why), (name, logged)
    # verify says what the runner logged, word for word, with its code
    module = load_file(REPO / "_modules/epilog.py", "epilog_module_hostile_site_parts")
    looked = types.SimpleNamespace(problems=[], chain=module.common._Chain(str(c.conf_dir), LAYOUT))
    module.checks._site_parts(looked)
    assert looked.problems == [f"[site-part-{'symlink' if '-link-' in name else 'not-root-only'}] {logged[name]}; "
                               "the runner skips it" for name in sorted(said)]
    # the same parts, with the directory itself writable by slurm: none runs
    shutil.chown(c.conf_dir / "epilog.d", "slurm")
    try:
        ret = c.run(c.conf_dir / "epilog.sh", slurmd_env("je.kim", job=4243, SLURM_CONF="/nonexistent/slurm.conf"))
    finally:
        shutil.chown(c.conf_dir / "epilog.d", "root")
    assert ret.returncode == 0
    (ran / "ok").unlink()
    assert not list(ran.iterdir())
    assert "job=4243" in c.log_text() and f"skipping 10-site-ok: {site} is not a directory only root can write" \
        in c.log_text()


@pytest.mark.parametrize("where,counts", [("beside-the-running-slurmd", True), ("in-a-directory-others-can-write", False),
                                          ("with-no-slurmd-running-the-chain", False)])
def test_only_the_slurmstepd_beside_the_running_slurmd_is_evidence(own_chain, alice_cleanup, where, counts):
    """Promise 3, two Slurms on one node (a distro package beside a site's
    build under /opt): root's slurmstepd of job 999 from the build runs a
    process of alice. It is evidence of another job when the build's slurmd
    runs the chain, as it finds its slurmstepd (and squeue) beside that
    slurmd, first; not when the build's sbin is a directory another account
    can write (anyone could have put it there), nor when the chain does not
    run under that slurmd (then PATH's, Debian's, is the one that counts):
    then root's process named slurmstepd proves nothing either way, the
    controller is asked (none here), and nothing is killed."""
    c = own_chain()
    shutil.chown(c.spool_dir, "slurm", "slurm")  # no step sockets to go by: the slurmstepd processes decide
    prefix = Path(tempfile.mkdtemp(prefix="epilog-opt-slurm-", dir="/var/tmp"))
    os.chmod(prefix, 0o755)
    sbin = prefix / "sbin"
    sbin.mkdir(mode=0o755)
    for name in ("slurmd", "slurmstepd"):
        shutil.copy("/bin/bash", sbin / name)
    if where == "in-a-directory-others-can-write":
        os.chmod(sbin, 0o777)
    uid, gid = uid_of(ALICE), pwd.getpwnam(ALICE).pw_gid
    stepd = subprocess.Popen(
        ["bash", "-c", f'exec -a "slurmstepd: [999.extern]" {sbin}/slurmstepd -c '
                       f'"setpriv --reuid={uid} --regid={gid} --clear-groups sleep 600 & echo ready; wait"'],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert stepd.stdout.readline().strip() == "ready"
        wait_for(lambda: "sleep" in live_processes_of(uid).values(), 5, what="the job's process of alice")
        env = slurmd_env(ALICE, SLURM_CONF="/nonexistent/slurm.conf")
        epilog = c.conf_dir / "epilog.sh"
        if where == "with-no-slurmd-running-the-chain":
            ret = c.run(epilog, env)
        else:  # the build's slurmd (a root process running $sbin/slurmd) runs the chain
            ret = c.run(epilog, env, prefix=[str(sbin / "slurmd"), "-c", '"$0"; exit $?'])
        assert ret.returncode == 0, ret
        start = next(line for line in c.log_text().splitlines() if "epilog.sh" in line and "start;" in line)
        if counts:
            assert f"other jobs of this user on this node: yes (node-local: root's slurmstepd {stepd.pid} of another " \
                   f"job runs process" in start, start
        else:
            assert "other jobs of this user on this node: unknown (squeue failed" in start, start
        assert "sleep" in live_processes_of(uid).values(), "the other job's process was killed"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(stepd.pid, 9)
        stepd.wait()
        shutil.rmtree(prefix, ignore_errors=True)


# -- 13. access control never fails open on a full file system --------------------
@pytest.fixture
def full_allow_fs():
    """A file system of its own for the ssh allow file, in a mount namespace
    the chain runs in: a tmpfs of 64 inodes, with a sticky directory any
    user can write (as /var/tmp, sharing a file system with /etc). Returns
    (the directory, as the chain sees it and as seen from here, the
    namespace's prefix, fill()), fill using up every free inode as alice."""
    require_tools("unshare", "nsenter")
    # Not under tmp_path: alice must reach the mount point to fill it.
    mount = Path(tempfile.mkdtemp(prefix="epilog-allowfs-", dir="/run"))
    mount.chmod(0o755)
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"mount -t tmpfs -o size=1m,nr_inodes=64,mode=0755 allowfs {mount} && mkdir -m 1777 {mount}/shared "
         "&& echo ready && exec sleep 86400"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "ready"
    prefix = ["nsenter", f"--target={holder.pid}", "--mount"]
    view = Path(f"/proc/{holder.pid}/root") / str(mount).lstrip("/")

    def fill():
        fill_script = "i=0; while true > shared/f$i 2>/dev/null; do i=$((i+1)); done; echo $i"
        ret = subprocess.run([*prefix, *as_user(ALICE), "sh", "-c", f"cd {mount} && {fill_script}"],
                             capture_output=True, text=True, check=True)
        assert int(ret.stdout.strip()) > 0
        probe = subprocess.run([*prefix, "sh", "-c", f"true > {mount}/probe"], capture_output=True)
        assert probe.returncode != 0, "precondition: no free inode left, not even for root"

    try:
        yield mount, view, prefix, fill
    finally:
        holder.kill()
        holder.wait()
        mount.rmdir()


def test_a_revoke_on_a_file_system_with_no_free_inode_still_removes_the_line(own_chain, full_allow_fs, alice_cleanup):
    """Defect 1: alice uses up every inode of the file system that holds the
    ssh allow file. The edit cannot create the file it renames over the old
    one, so part 39 edits the file in place: her line becomes #s at her last
    job end (access control never fails open), everyone else's stays, and
    the prolog still adds a line there."""
    mount, view, prefix, fill = full_allow_fs
    allow = mount / "localusers"
    c = own_chain(ssh_allow_file=str(allow))
    (view / "localusers").write_text("bob\nalice\nje.kim\n")
    fill()
    mark = len(c.log_text())
    ret = c.run(c.conf_dir / "prolog.sh", slurmd_env("alicex", job=5), prefix=prefix)
    assert ret.returncode == 0, ret
    assert (view / "localusers").read_text() == "bob\nalice\nje.kim\nalicex\n"
    victim = stray(ALICE)
    try:
        run_epilog(c, prefix=prefix)
        assert process_uids(victim.pid) is None
    finally:
        end(victim)
    assert (view / "localusers").read_text() == "bob\n#####\nje.kim\nalicex\n"
    log = c.log_text()[mark:]
    assert f"removed from {allow} (in place: no room for a new file" in log, log
    assert f"added to {allow} (in place: no room for a new file" in log, log
    assert "left as it was" not in log
