"""Why part 40 sends what it sends, on real processes: one kill(-1,
SIGKILL) from a process of the user leaves a fork loop no survivor (the
kernel refuses a fork to a process with a fatal signal pending, and walks
the task list for kill(-1) under the lock fork needs), so the kill needs no
SIGSTOP, which would leave root's su and runuser stopped with an unreaped
child; and a su the user stopped themselves (by stopping its child) is
resumed, reaps its child and exits."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.helpers import (
    REPO,
    as_user,
    end,
    hostile,
    ids_of,
    kill_all_of,
    killed,
    live_processes_of,
    process_uids,
    require,
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


def forks():
    """The forks since the boot (/proc/stat's processes): the last pid
    (/proc/loadavg's) wraps at pid_max (32768 here), which a fork loop
    reaches within seconds."""
    return next(int(row.split()[1]) for row in Path("/proc/stat").read_text().splitlines()
                if row.startswith("processes "))


def test_one_kill_of_all_leaves_a_fork_loop_no_survivor(chain, cbin, accounts):
    """Part 40's own kill, bound to one round: a single kill(-1, SIGKILL)
    from its sender. After it no signal is sent, and the fork loop dies out
    all the same: no child was born that the one signal missed."""
    try:
        loop, line = hostile(ALICE, str(cbin / "fighter"), "forkloop", reaper=cbin / "fighter")
        assert line == "ready"
        # its pid moves at every fork: a scan of /proc may miss it, never its fork count
        before = forks()
        wait_for(lambda: forks() > before + 100, 10, what="the fork loop to fork")
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from epilog_node import kill; "
                "k = kill.kill_uid(int(sys.argv[2]), 'alice', rounds_max=1); print(k.outcome, k.rounds)")
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
        before = forks()
        wait_for(lambda: forks() > before + 100, 10, what="the fork loop to fork")
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


# part 40's kill_uid in a python of its own (as root, the node's
# /usr/bin/python3), with HOOK (names below, comma-separated) put on the
# real functions it calls: a hook decides when something happens, never
# what kill_uid does about it. It prints the Killed as JSON, and lines
# "unfreeze PIDS" when a cut-off freeze was undone.
KILL = r'''
import json, os, signal, sys, time
sys.path.insert(0, sys.argv[1])
from epilog_node import kill, reach
uid, hooks, kwargs = int(sys.argv[2]), sys.argv[3].split(","), json.loads(sys.argv[4])


def live_of(uid):
    found = set()
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/status" % pid) as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except (OSError, ValueError):
            continue
        if fields["State"].split()[0] not in ("Z", "X") and int(fields["Uid"].split()[0]) == uid:
            found.add(pid)
    return found


if "cut" in hooks:  # the runner's SIGTERM, right after the frozen round killed hers one by one
    signal_each, unfreeze = kill._signal_each, kill._unfreeze

    def cut(*args):
        why = signal_each(*args)
        os.kill(os.getpid(), signal.SIGTERM)
        return why

    def undo(*args):
        done = unfreeze(*args)
        print("unfreeze " + " ".join(sorted(entry.split("(", 1)[0] for entry in done)), flush=True)
        return done

    kill._signal_each, kill._unfreeze = cut, undo
if "cutscan" in hooks:  # the runner's SIGTERM, during the frozen round's first scan after the freeze
    scan_, scans = reach.scan, [0]

    def scan_cut(*args):
        scans[0] += 1
        if scans[0] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return scan_(*args)

    reach.scan = scan_cut
if "fault" in hooks:  # the frozen round fails once hers were killed one by one (an OSError: EIO)
    each_ = kill._signal_each

    def each_failing(*args):
        each_(*args)
        raise OSError(5, "Input/output error")

    kill._signal_each = each_failing
if "termundo" in hooks:  # the runner's SIGTERM comes while the undo continues what the freeze stopped
    thaw__ = kill._thaw

    def thaw_termed(*args):
        os.kill(os.getpid(), signal.SIGTERM)
        return thaw__(*args)

    kill._thaw = thaw_termed
if "killed" in hooks:  # after the cut, the runner's SIGKILL comes while the undo looks at every process
    unfreeze_ = kill._unfreeze

    def unfreeze_killed(*args):
        reach.scan = lambda *args: os.kill(os.getpid(), signal.SIGKILL)
        return unfreeze_(*args)

    kill._unfreeze = unfreeze_killed
if "late" in hooks:  # the clock jumps by 60 s in the first frozen round
    shift, monotonic = [0.0], time.monotonic
    time.monotonic = lambda: monotonic() + shift[0]
    kill.SECONDS = 1000
    kwargs["until"] = time.monotonic() + kwargs["until"]
if "slowscan" in hooks:  # the kill's first scan takes 40 s by the clock (a node of very many processes)
    scan, monotonic = reach.scan, time.monotonic
    shift = [0.0]
    time.monotonic = lambda: monotonic() + shift[0]
    kill.SECONDS = 1000
    kwargs["until"] = time.monotonic() + kwargs["until"]

    def slow_scan(*args):
        found = scan(*args)
        if not shift[0]:
            shift[0] = 40.0
        return found

    reach.scan = slow_scan
if "run" in hooks:  # what a thaw continued runs before the next scan looks (the worst order)
    thaw = kill._thaw

    def thaw_and_run(*args):
        before = live_of(uid)
        done = thaw(*args)
        deadline = monotonic_() + 20
        while done and not live_of(uid) - before and monotonic_() < deadline:
            time.sleep(0.001)
        if "late" in hooks:
            shift[0] += 60
        return done

    monotonic_ = time.monotonic
    kill._thaw = thaw_and_run
for hook in hooks:
    if hook.startswith("parent="):  # the thaw comes once that parent stopped itself, as su does at once
        thaw_, parent = kill._thaw, hook.split("=", 1)[1]

        def thaw_once_stopped(*args):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                with open("/proc/%s/stat" % parent) as handle:
                    if handle.read().rsplit(")", 1)[1].split()[0] == "T":
                        break
                time.sleep(0.001)
            return thaw_(*args)

        kill._thaw = thaw_once_stopped
k = kill.kill_uid(uid, "alice", **kwargs)
print(json.dumps(dict(zip(("outcome rounds signalled left why jobs spared one_by_one continued").split(), k))))
'''


def kill_with(hooks, **kwargs):
    """(returncode, the Killed as a dict or None, the other lines printed)."""
    ret = subprocess.run(["/usr/bin/python3", "-I", "-B", "-c", KILL, str(REPO / "salt/_modules"),
                          str(uid_of(ALICE)), hooks, json.dumps(kwargs)], capture_output=True, text=True, timeout=120)
    lines = ret.stdout.splitlines()
    killed_ = json.loads(lines.pop()) if lines and lines[-1].startswith("{") else None
    return ret.returncode, killed_, lines, ret.stderr


@pytest.fixture
def her_setuid_fighter(cbin, accounts):
    """alice's copy of tests/c/fighter, made setuid to her by herself."""
    home = Path(tempfile.mkdtemp(prefix="epilog-setuid-", dir="/var/tmp"))
    try:
        os.chmod(home, 0o755)
        require(not os.statvfs(home).f_flag & os.ST_NOSUID, "/var/tmp is on a file system mounted nosuid")
        program = home / "herfighter"
        shutil.copy(cbin / "fighter", program)
        os.chown(program, *ids_of(ALICE))
        subprocess.run([*as_user(ALICE), "chmod", "u+s", str(program)], check=True)
        yield program
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_by_alicex(program, mode):
    """alicex's run of her setuid fighter in MODE: real uid alicex's,
    effective and saved alice's (a saved-only process), once ready."""
    proc, line = hostile("alicex", str(program), mode)
    assert line == "ready"
    wait_for(lambda: process_uids(proc.pid) == (uid_of("alicex"), uid_of(ALICE), uid_of(ALICE)), 5,
             what="alicex's run of her setuid fighter")
    return proc


def not_stopped(pid):
    return process_uids(pid) is not None and state(pid) not in ("T", "t")


def test_a_frozen_round_cut_off_by_sigterm_leaves_nothing_it_stopped_stopped(her_setuid_runs, accounts):
    """The runner's SIGTERM (its time is up) reaches kill_uid in the middle
    of a frozen round, after hers were killed one by one and before the
    thaw. The runner cannot send it at a chosen moment on demand, so a hook
    on the real _signal_each sends it (the real SIGTERM, to the kill's own
    process) right after that call returns. The freeze is undone all the
    same (_unfreeze: the runs of her setuid program by alicex, je.kim and
    root are running again, none left in state T), her stray is dead, and
    the process still dies of the SIGTERM, its old handler's (SIG_DFL)."""
    victim = stray(ALICE)
    try:
        code, result, lines, err = kill_with("cut")
        assert code == -signal.SIGTERM and result is None, (code, result, lines, err)
        unfrozen = next(line for line in lines if line.startswith("unfreeze")).split()[1:]
        assert sorted(unfrozen) == sorted(str(proc.pid) for proc in her_setuid_runs.values()), lines
        assert all(not_stopped(proc.pid) for proc in her_setuid_runs.values()), lines
        assert killed(victim), lines
    finally:
        end(victim)
        kill_all_of(ALICE)


def test_a_cut_frozen_round_continues_what_it_stopped_before_it_looks_at_every_process(her_setuid_runs, accounts):
    """As above, and the runner's SIGKILL (2 s after its SIGTERM) comes
    while the undo scans every process, as it can on a node of very many
    (a hook on the real reach.scan sends it, once the cut came). The runs
    of her setuid program by alicex, je.kim and root, which the freeze
    stopped, were continued before that scan, from the round's own last
    look: none is left in state T; her stray is dead."""
    victim = stray(ALICE)
    try:
        code, result, lines, err = kill_with("cut,killed")
        assert code == -signal.SIGKILL and result is None, (code, result, lines, err)
        assert all(not_stopped(proc.pid) for proc in her_setuid_runs.values()), lines
        assert killed(victim), lines
    finally:
        end(victim)
        kill_all_of(ALICE)


def test_a_sigterm_during_the_undo_of_a_failed_frozen_round_does_not_cut_the_undo_short(her_setuid_runs, accounts):
    """The frozen round fails once hers were killed one by one (an OSError,
    injected by a hook on the real _signal_each: no real part fails so on
    demand), and the runner's SIGTERM comes as the undo begins to continue
    what the freeze stopped (a hook on the real _thaw sends it). The undo
    is let finish: the runs of her setuid program by alicex, je.kim and
    root run again, none left in state T, and the process then dies of the
    SIGTERM, its old handler's."""
    victim = stray(ALICE)
    try:
        code, result, lines, err = kill_with("fault,termundo")
        assert code == -signal.SIGTERM and result is None, (code, result, lines, err)
        assert all(not_stopped(proc.pid) for proc in her_setuid_runs.values()), lines
        assert killed(victim), lines
    finally:
        end(victim)
        kill_all_of(ALICE)


def test_a_saved_only_process_that_becomes_hers_once_continued_is_killed_before_done(her_setuid_fighter):
    """alicex's run of her setuid fighter (becomeuser): once the thaw
    continues it, it takes her uid as its real one and forks. A hook on the
    real _thaw lets it do so before the next scan looks (the worst order,
    made certain). kill_uid scans after the thaw, so it does not end done
    on the scan before it: the next round kills both, and when it says
    done no process of real uid hers lives."""
    proc = run_by_alicex(her_setuid_fighter, "becomeuser")
    try:
        code, result, lines, err = kill_with("run")
        assert code == 0 and result, (code, lines, err)
        assert result["outcome"] == "done" and result["one_by_one"] == 1 and result["rounds"] >= 2, result
        assert any(entry.startswith(f"{proc.pid}(") for entry in result["continued"]), result
        assert killed(proc), result
        assert not [pid for pid in live_processes_of(uid_of(ALICE))
                    if (process_uids(pid) or (None,))[0] == uid_of(ALICE)], result
    finally:
        end(proc)
        kill_all_of(ALICE)


def test_a_saved_only_process_that_keeps_making_hers_ends_the_kill_bound_naming_it(her_setuid_fighter):
    """alicex's run of her setuid fighter (spawnuser) stays saved-only and
    forks a process of hers at every SIGCONT (the hook on _thaw lets it
    before the next scan looks). kill_uid never says done while hers keep
    coming: at its bound (3 rounds) it ends bound, every round a frozen
    one, and its why names the saved-only process; nothing is left
    stopped."""
    proc = run_by_alicex(her_setuid_fighter, "spawnuser")
    try:
        code, result, lines, err = kill_with("run", rounds_max=3)
        assert code == 0 and result, (code, lines, err)
        assert result["outcome"] == "bound" and result["rounds"] == result["one_by_one"] == 3, result
        assert "kept coming" in result["why"] and f"{proc.pid}(herfighter) uid {uid_of('alicex')}" in result["why"], \
            result
        assert not_stopped(proc.pid) and all(not_stopped(entry.split("(", 1)[0]) for entry in result["left"]), result
    finally:
        end(proc)
        kill_all_of(ALICE)


def test_no_frozen_round_starts_with_less_time_left_than_the_last_took(her_setuid_fighter):
    """As above (spawnuser: hers keep coming), with the kill's time ending
    100 s after it starts and the clock made to jump 60 s in its first
    round (a hook on time.monotonic and on _thaw): the second frozen round,
    which could not finish in the 40 s left, never starts. kill_uid ends
    bound after one round, its why naming the saved-only process, and
    nothing is stopped: the fighter and the process of hers it made run."""
    proc = run_by_alicex(her_setuid_fighter, "spawnuser")
    try:
        code, result, lines, err = kill_with("run,late", rounds_max=5, until=100)
        assert code == 0 and result, (code, lines, err)
        assert result["outcome"] == "bound" and result["rounds"] == result["one_by_one"] == 1, result
        assert f"{proc.pid}(herfighter)" in result["why"] and result["left"], result
        assert not_stopped(proc.pid) and all(not_stopped(entry.split("(", 1)[0]) for entry in result["left"]), result
    finally:
        end(proc)
        kill_all_of(ALICE)


def test_a_first_round_with_too_little_time_for_a_freeze_kills_hers_one_by_one_and_stops_nothing(her_setuid_runs,
                                                                                                  accounts):
    """The runs of her setuid program by alicex, je.kim and root live, so
    the kill's round would be a frozen one. Its first scan takes 40 s by
    the clock (a hook on the real reach.scan moves time.monotonic: a node
    of very many processes cannot be had on demand) and 60 s are left:
    a frozen round, which reads every process two or three times, could
    be cut off by the runner's time with others stopped. None runs: her
    stray is killed on its own through its pidfd, nothing is stopped or
    continued, and the kill is done in one round."""
    victim = stray(ALICE)
    try:
        code, result, lines, err = kill_with("slowscan", until=100)
        assert code == 0 and result, (code, lines, err)
        assert result["outcome"] == "done" and result["rounds"] == 1 and result["one_by_one"] == 0, result
        assert result["continued"] == [] and f"{victim.pid}(" in " ".join(result["signalled"]), result
        assert sorted(entry.split("(", 1)[0] for entry in result["spared"]) == \
            sorted(str(proc.pid) for proc in her_setuid_runs.values()), result
        assert all(not_stopped(proc.pid) for proc in her_setuid_runs.values()), result
        assert killed(victim), result
    finally:
        end(victim)
        kill_all_of(ALICE)


def test_a_frozen_round_cut_off_in_its_first_scan_continues_what_it_knew_first(her_setuid_runs, accounts):
    """The runner's SIGTERM comes during the frozen round's first scan after
    the freeze (a hook on the real reach.scan sends it), and its SIGKILL
    while the undo scans every process (as in the test above). The runs of
    her setuid program by alicex, je.kim and root, which the scan before
    the freeze found, were continued before that: none is left in state T."""
    victim = stray(ALICE)
    try:
        code, result, lines, err = kill_with("cutscan,killed")
        assert code == -signal.SIGKILL and result is None, (code, result, lines, err)
        assert all(not_stopped(proc.pid) for proc in her_setuid_runs.values()), lines
    finally:
        end(victim)
        kill_all_of(ALICE)


PARENT = r'''
import os, signal, sys
child = os.fork()
if child == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
print(child, flush=True)
while True:  # as su and runuser do: stopped when its child stops
    _, status = os.waitpid(child, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        break
    os.kill(os.getpid(), signal.SIGSTOP)
'''


def test_a_parent_that_stops_itself_when_its_child_stops_is_continued_and_nothing_else(her_setuid_runs):
    """root's parent (as su does: it stops itself when its child stops)
    of alicex's run of her setuid sleep: the freeze stops the child, the
    parent stops itself; _thaw continues the child and _thaw_parent the
    parent. A hook on the real _thaw lets the parent stop first (the
    kernel reports a child's stop to its parent only while the child is
    stopped: a parent slower than the kill's scans would never stop, and
    would have nothing to be continued from; _thaw_parent's own wait for a
    parent that stops late is tests/unit's). A stopped process of root's
    that is no parent of a continued one stays stopped."""
    program = os.readlink(f"/proc/{her_setuid_runs['alicex'].pid}/exe")
    parent = subprocess.Popen(["/usr/bin/python3", "-I", "-c", PARENT, *as_user("alicex"), program, "600"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, start_new_session=True)
    held = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, start_new_session=True)
    child = None
    try:
        child = int(parent.stdout.readline())
        wait_for(lambda: process_uids(child) == (uid_of("alicex"), uid_of(ALICE), uid_of(ALICE)), 5,
                 what="the parent's child, alicex's run of her setuid sleep")
        os.kill(held.pid, signal.SIGSTOP)
        wait_for(lambda: state(held.pid) == "T", 5, what="root's sleep to stop")
        code, result, lines, err = kill_with(f"parent={parent.pid}")
        assert code == 0 and result, (code, lines, err)
        assert result["outcome"] == "done" and result["one_by_one"] == 1, result
        assert f"{parent.pid}(python3)" in result["continued"] and any(
            entry.startswith(f"{child}(") for entry in result["continued"]), result
        assert not_stopped(parent.pid) and not_stopped(child), result
        assert state(held.pid) == "T" and not any(entry.startswith(f"{held.pid}(") for entry in result["continued"])
    finally:
        os.kill(held.pid, signal.SIGCONT)
        end(held)
        end(parent)
        if child:
            os.kill(child, signal.SIGKILL)
        kill_all_of(ALICE)
