"""Why part 40 sends what it sends, on real processes: one kill(-1,
SIGKILL) from a process of the user leaves a fork loop no survivor (the
kernel refuses a fork to a process with a fatal signal pending, and walks
the task list for kill(-1) under the lock fork needs), so the kill needs no
SIGSTOP, which would leave root's su and runuser stopped with an unreaped
child; and a su the user stopped themselves (by stopping its child) is
resumed, reaps its child and exits."""
import os
import signal
import subprocess
from pathlib import Path

from tests.helpers import (
    as_user,
    end,
    hostile,
    kill_all_of,
    killed,
    live_processes_of,
    process_uids,
    slurmd_env,
    spawn_as,
    stray,
    uid_of,
    wait_for,
)

ALICE = "alice"


def state(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def test_one_kill_of_all_leaves_a_fork_loop_no_survivor(chain, cbin, accounts):
    """Part 40's own kill, bound to one round: a single kill(-1, SIGKILL)
    from its sender. After it no signal is sent, and the fork loop dies out
    all the same: no child was born that the one signal missed."""
    try:
        loop, line = hostile(ALICE, str(cbin / "fighter"), "forkloop", reaper=cbin / "fighter")
        assert line == "ready"
        # its pid moves at every fork: a scan of /proc may miss it, never its fork count
        before = wait_for(lambda: int(Path("/proc/loadavg").read_text().split()[4]), 5, what="the last pid")
        wait_for(lambda: int(Path("/proc/loadavg").read_text().split()[4]) > before + 100, 10,
                 what="the fork loop to fork")
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from epilog_node import parts; "
                "k = parts.kill_uid(int(sys.argv[2]), 'alice', rounds_max=1); print(k.outcome, k.rounds)")
        ret = subprocess.run(["/usr/bin/python3", "-I", "-B", "-c", code, str(chain.release), str(uid_of(ALICE))],
                             capture_output=True, text=True, timeout=60)
        outcome, rounds = ret.stdout.split()
        assert outcome in ("done", "bound") and rounds == "1", ret
        # the reaper (root's subreaper of every process the loop forks) exits
        # once it has no descendant left: the loop died out, no signal more
        assert loop.wait(timeout=20) == 0
        assert not live_processes_of(uid_of(ALICE))
    finally:
        kill_all_of(ALICE)


def test_a_su_the_user_stopped_is_resumed_and_ends(chain, accounts):
    """root's `su alice -c ...`: alice stops her own process under it, so su
    stops itself (state T). Part 40 kills her process and continues su,
    which reaps its child and exits; part 40's record counts it."""
    su = subprocess.Popen(["su", ALICE, "-s", "/bin/sh", "-c", "sleep 600; true"], stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        child = wait_for(lambda: next(iter(live_processes_of(uid_of(ALICE))), None), 10, what="su's child")
        subprocess.run([*as_user(ALICE), "kill", "-STOP", str(child)], check=True)
        wait_for(lambda: state(su.pid) == "T", 10, what="su to stop itself")
        ret = chain.run_part("40-lastuserjob-processes", slurmd_env(ALICE))
        assert ret.returncode == 0, ret
        assert su.wait(timeout=15) != 0  # its child was killed: su says so, and exits
        log = chain.log_text()
        assert f"resumed the stopped parents of killed processes of uid {uid_of(ALICE)} (su, runuser): 1 {su.pid}(su)" \
            in log, log
    finally:
        end(su)
        kill_all_of(ALICE)


def test_her_setuid_program_run_by_others_outlives_her_last_job_end(chain, cbin, her_setuid_runs):
    """kill(-1) as alice would reach every process whose real or saved uid
    is hers: alicex's, je.kim's and root's runs of her setuid copy of sleep
    too. Her last job end kills her stray and her fork loop (started by a
    script in a session of its own: the group is signalled whole, as
    kill(-1) would reach it) and leaves those three alone, and the record
    and the log say so."""
    victim = stray(ALICE)
    loop, line = hostile(ALICE, "setsid", "bash", "-c", f"{cbin / 'fighter'} forkloop & exec sleep 600",
                         reaper=cbin / "fighter")
    try:
        assert line == "ready"
        mark = len(chain.log_text())
        ret = chain.run(chain.conf_dir / "epilog.sh", slurmd_env(ALICE, SLURM_CONF="/nonexistent/slurm.conf"))
        assert ret.returncode == 0, ret
        assert killed(victim), chain.log_text()[mark:]
        assert loop.wait(timeout=20) == 0  # the subreaper: nothing of the loop left
        assert all(process_uids(proc.pid) for proc in her_setuid_runs.values()), chain.log_text()[mark:]
        fact = next(part for part in chain.records()[-1]["parts"]
                    if part["part"] == "40-lastuserjob-processes")["facts"]["kill"]
        assert fact["outcome"] == "done" and fact["saved_only"] == 3 and fact["one_by_one"] >= 1, fact
        assert sorted(fact["saved_only_first"]) == sorted(
            f"{proc.pid}(hersleep) uid {0 if user == 'root' else uid_of(user)}" for user, proc in her_setuid_runs.items())
        log = chain.log_text()[mark:]
        assert f"left alone the processes whose saved uid is {uid_of(ALICE)} but real uid another's" in log, log
    finally:
        end(victim)
        end(loop)
        kill_all_of(ALICE)


def test_a_fork_loop_that_leaves_its_group_dies_while_her_setuid_program_runs_for_others(chain, cbin,
                                                                                          her_setuid_runs):
    """While another account's run of her setuid program lives, part 40
    sends no kill(-1, SIGKILL): it freezes (kill(-1, SIGSTOP)), kills hers
    one by one, then continues what the freeze stopped of the others. A
    fork loop whose every generation calls setsid and forks dies all the
    same; alicex's and je.kim's runs are alive and running again, root's,
    which root had stopped before, stays stopped; the log says so."""
    her = uid_of(ALICE)
    held = her_setuid_runs["root"].pid
    os.kill(held, signal.SIGSTOP)
    wait_for(lambda: state(held) == "T", 5, what="root's run to stop")
    loop, line = hostile(ALICE, str(cbin / "fighter"), "setsidloop", reaper=cbin / "fighter")
    try:
        assert line == "ready"
        before = wait_for(lambda: int(Path("/proc/loadavg").read_text().split()[4]), 5, what="the last pid")
        wait_for(lambda: int(Path("/proc/loadavg").read_text().split()[4]) > before + 100, 10,
                 what="the fork loop to fork")
        mark = len(chain.log_text())
        ret = chain.run_part("40-lastuserjob-processes", slurmd_env(ALICE))
        assert ret.returncode == 0, ret
        log = chain.log_text()[mark:]
        assert loop.wait(timeout=20) == 0, log  # the subreaper: nothing of the loop left
        assert not [pid for pid in live_processes_of(her) if (process_uids(pid) or (None,))[0] == her], log
        others = [proc.pid for user, proc in her_setuid_runs.items() if user != "root"]
        assert all(process_uids(pid) and state(pid) not in ("T", "t") for pid in others), log
        assert state(held) == "T", log
        assert "the user's were frozen with SIGSTOP, then killed by group and one by one" in log, log
        assert f"killed the processes of uid {her} (" in log, log
        continued = log.split("continued again, of those the freeze stopped: ", 1)[1].split("\n", 1)[0]
        assert continued.startswith("2 ") and all(f"{pid}(hersleep)" in continued for pid in others), log
        assert f"{held}(" not in continued, log
    finally:
        os.kill(held, signal.SIGCONT)
        end(loop)
        kill_all_of(ALICE)


def in_her_namespace():
    """alice's sleep in a user namespace of her own (unshare -U), and
    root's sleep that joined it (nsenter, credentials kept: real uid 0):
    kill(-1) from her reaches both (she holds CAP_KILL in a namespace she
    owns), so both are hers to part 40."""
    holder = spawn_as(ALICE, "unshare", "-U", "sleep", "600")
    mine = os.readlink("/proc/self/ns/user")

    def ns(pid):
        try:
            return os.readlink(f"/proc/{pid}/ns/user")
        except OSError:
            return None

    hers = wait_for(lambda: (lambda found: found if found not in (None, mine) else None)(ns(holder.pid)), 10,
                    what="alice's user namespace")
    joined = subprocess.Popen(["nsenter", f"--user=/proc/{holder.pid}/ns/user", "--preserve-credentials",
                               "sleep", "600"], stdin=subprocess.DEVNULL, start_new_session=True)
    wait_for(lambda: ns(joined.pid) == hers and "sleep" in Path(f"/proc/{joined.pid}/cmdline").read_text(), 10,
             what="root's process to join her namespace")
    assert (process_uids(joined.pid) or (None,))[0] == 0
    return holder, joined


def test_processes_in_her_user_namespace_are_hers_in_a_plain_round(chain, accounts):
    """No saved-only process: the plain kill(-1, SIGKILL) round, which
    always reached them, now counts them too: both die, and the record
    counts them signalled."""
    holder, joined = in_her_namespace()
    try:
        ret = chain.run_part("40-lastuserjob-processes", slurmd_env(ALICE))
        assert ret.returncode == 0, ret
        assert killed(holder) and killed(joined), chain.log_text()
        fact = next(part for part in chain.records()[-1]["parts"]
                    if part["part"] == "40-lastuserjob-processes")["facts"]["kill"]
        assert fact["outcome"] == "done" and fact["signalled"] >= 2, fact
    finally:
        end(holder)
        end(joined)
        kill_all_of(ALICE)


def test_processes_in_her_user_namespace_are_killed_not_left_stopped_in_a_frozen_round(chain, her_setuid_runs):
    """While another account's run of her setuid program lives, the round
    freezes: root's process in her namespace, which the freeze stops (the
    kernel lets her signal it), is hers and killed, never left stopped;
    the others' runs are running again."""
    holder, joined = in_her_namespace()
    try:
        mark = len(chain.log_text())
        ret = chain.run_part("40-lastuserjob-processes", slurmd_env(ALICE))
        assert ret.returncode == 0, ret
        log = chain.log_text()[mark:]
        assert killed(holder) and killed(joined), log
        assert all(process_uids(proc.pid) and state(proc.pid) not in ("T", "t")
                   for proc in her_setuid_runs.values()), log
        fact = next(part for part in chain.records()[-1]["parts"]
                    if part["part"] == "40-lastuserjob-processes")["facts"]["kill"]
        assert fact["outcome"] == "done" and fact["one_by_one"] >= 1 and fact["saved_only"] == 3, fact
    finally:
        end(holder)
        end(joined)
        kill_all_of(ALICE)
