"""The runners (epilog.sh, prolog.sh) and the allow-file edits, as the state
renders them: order, timeouts, faults that must never drain a node, and the
last-job lookup's unknown answer."""
import os
import shutil
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import (
    end,
    hostile,
    kill_all_of,
    killed,
    live_processes_of,
    owned_file,
    require,
    require_tools,
    slurmd_env,
    still_running,
    stray,
    uid_of,
    wait_for,
)
from tests.node.conftest import add_part


def test_the_worker_ends_with_the_formulas_last_part_and_is_reaped(own_chain, tmp_path):
    """The runner tells its worker that the formula's last part (45) is its
    last, and the worker ends with it: a site part after it (99) finds no
    live worker beside it among the runner's children (one that ended and is
    not reaped yet is a zombie: gone, and noted), and once the chain is over
    the runner has reaped it (PID 1 here never would)."""
    c = own_chain()
    seen = tmp_path / "seen"
    add_part(c, "99-looks-at-the-runner", f"""
for _ in $(seq 1 300); do
    live=""; ended=""
    for kid in $(cat /proc/$PPID/task/$PPID/children); do
        [ "$kid" = "$$" ] && continue
        state=$(sed 's/.*) //' /proc/$kid/stat 2>/dev/null | cut -d' ' -f1)
        if [ "$state" = Z ]; then ended="$ended $kid"; elif [ -n "$state" ]; then live="$live $kid"; fi
    done
    if [ -z "$live" ]; then echo "gone$ended" > {seen}; exit 0; fi
    sleep 0.01
done
echo "still:$live" > {seen}
""")
    ret = c.run(c.conf_dir / "epilog.sh", slurmd_env("je.kim"))
    assert ret.returncode == 0, ret
    said = seen.read_text().split()
    assert said[:1] == ["gone"], (said, c.log_text())
    for pid in said[1:]:
        assert not Path(f"/proc/{pid}").exists(), f"worker {pid} left unreaped"


def test_runner_runs_parts_in_ascending_order_and_only_run_parts_names(own_chain, tmp_path):
    c = own_chain()
    trail = tmp_path / "trail"
    for name in ["90-last", "10-first", "50-middle"]:
        add_part(c, name, f"echo {name} >> {trail}")
    add_part(c, "60-backup.bak", f"echo 60-backup.bak >> {trail}")
    add_part(c, "70-not-executable", f"echo 70 >> {trail}", mode=0o644)
    add_part(c, "README", f"echo README >> {trail}")
    ret = c.run(c.conf_dir / "epilog.sh", slurmd_env("je.kim"))
    assert ret.returncode == 0, ret
    assert trail.read_text().split() == ["10-first", "50-middle", "90-last"]


def test_a_hanging_part_is_stopped_and_the_chain_goes_on(own_chain):
    c = own_chain(part_timeout=2, sweep_budget=1)
    add_part(c, "30-hang", "sleep 120")
    proc = stray("alice")
    try:
        started = time.monotonic()
        ret = c.run(c.conf_dir / "epilog.sh", slurmd_env("alice"))
        assert ret.returncode == 0
        assert time.monotonic() - started < 30
        assert "30-hang exited 124" in c.log_text()
        assert killed(proc), "40 did not run after the hanging part"
    finally:
        end(proc)


def test_a_site_part_starts_with_the_signals_a_shell_would_give_it(own_chain, tmp_path):
    """The runner is python, which ignores SIGPIPE and SIGXFSZ; a site part
    exec'd from it starts with neither ignored (a `producer | head` in it
    ends as it would under a shell), and with no signal blocked."""
    c = own_chain()
    seen = tmp_path / "signals"
    add_part(c, "30-signals", f"exec grep -E '^Sig(Ign|Blk):' /proc/self/status > {seen}")
    ret = c.run(c.conf_dir / "epilog.sh", slurmd_env("je.kim"))
    assert ret.returncode == 0, ret
    masks = dict(line.split(":\t") for line in seen.read_text().splitlines())
    ignored, blocked = int(masks["SigIgn"], 16), int(masks["SigBlk"], 16)
    for sig in (13, 25):  # SIGPIPE, SIGXFSZ
        assert not ignored & (1 << (sig - 1)), masks
    assert blocked == 0, masks


def test_a_failing_part_does_not_fail_the_runner(own_chain):
    c = own_chain()
    add_part(c, "30-fails", "exit 3")
    ret = c.run(c.conf_dir / "epilog.sh", slurmd_env("je.kim"))
    assert ret.returncode == 0
    assert "30-fails exited 3" in c.log_text()


def test_a_kill_that_cannot_act_as_the_user_never_fails_the_chain(own_chain):
    """40 cannot take the user's uid when the chain runs without CAP_SETUID
    (setpriv drops it for real: setresuid fails with EPERM): it says so, the
    user's process lives on, and 42 still runs."""
    require_tools("setpriv")
    c = own_chain()
    proc = stray("alice")
    residue = owned_file("alice")
    try:
        drop = ["setpriv", "--inh-caps=-setuid,-setgid", "--bounding-set=-setuid,-setgid"]
        ret = c.run(c.conf_dir / "epilog.sh", slurmd_env("alice", SLURM_CONF="/nonexistent/slurm.conf"), prefix=drop)
        assert ret.returncode == 0, ret
        assert f"could not kill the processes of uid {uid_of('alice')} (cannot act as uid" in c.log_text()
        assert still_running(proc)
        assert not residue.exists(), "42 must still run after 40 failed"
    finally:
        end(proc)
        residue.unlink(missing_ok=True)


def test_no_log_dir_and_no_syslog_never_fail_a_part(own_chain, tmp_path):
    """No log directory (the state made it; it is gone since), and no syslog
    socket: if a syslog daemon runs here, /dev/null is bind-mounted over
    /dev/log in a private mount namespace."""
    c = own_chain(log_file=str(tmp_path / "missing-dir" / "epilog.log"))
    shutil.rmtree(tmp_path / "missing-dir")
    prefix = []
    if os.path.lexists("/dev/log"):
        prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                  'mount --bind /dev/null /dev/log && exec "$@"', "sh"]
    proc = stray("alice")
    try:
        ret = c.run(c.conf_dir / "epilog.sh", slurmd_env("alice"), prefix=prefix)
        assert ret.returncode == 0, ret
        assert killed(proc)
        assert not (tmp_path / "missing-dir").exists()
    finally:
        end(proc)


def test_unknown_other_jobs_skip_the_lastuserjob_parts(own_chain):
    """Another job's step socket in the spool, no slurmstepd holding one of the
    user's processes, job marks that cannot be trusted (the run directory
    belongs to the slurm account), and squeue cannot reach a controller:
    unknown, so the destructive parts are skipped and a warning is logged."""
    c = own_chain()
    c.run_dir.mkdir(mode=0o700, exist_ok=True)
    shutil.chown(c.run_dir, "slurm", "slurm")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(c.spool_dir / "node_999999.4294967291"))
    proc = stray("alice")
    try:
        env = slurmd_env("alice", SLURM_CONF="/nonexistent/slurm.conf")
        ret = c.run(c.conf_dir / "epilog.sh", env)
        assert ret.returncode == 0
        log = c.log_text()
        assert "other jobs of this user on this node: unknown (squeue failed or timed out" in log
        assert "skipping 40-lastuserjob-processes" in log
        assert still_running(proc)
    finally:
        end(proc)
        sock.close()


def test_no_step_of_another_job_is_a_node_local_last_job(own_chain):
    c = own_chain()
    proc = stray("alice")
    try:
        env = slurmd_env("alice", SLURM_CONF="/nonexistent/slurm.conf")  # no controller to ask
        assert c.run(c.conf_dir / "epilog.sh", env).returncode == 0
        assert "other jobs of this user on this node: no (node-local: no step of another job in" in c.log_text()
        assert killed(proc)
    finally:
        end(proc)


def test_a_spool_that_is_not_slurmds_live_one_is_not_trusted(own_chain):
    """No cred_state: the pillar's slurmd_spool_dir may not be the real
    SlurmdSpoolDir, so its lack of step sockets proves nothing; the runner
    goes on to root's slurmstepd and squeue."""
    c = own_chain()
    (c.spool_dir / "cred_state").unlink()
    env = slurmd_env("je.kim", SLURM_CONF="/nonexistent/slurm.conf")
    assert c.run(c.conf_dir / "epilog.sh", env).returncode == 0
    start = next(line for line in c.log_text().splitlines() if "epilog.sh" in line and "start;" in line)
    assert "node-local: no step of another job in" not in start, start


def run_prolog(chain, user):
    ret = chain.run(chain.conf_dir / "prolog.sh", slurmd_env(user))
    assert ret.returncode == 0, ret


def test_prolog_adds_the_exact_line_once_and_keeps_the_others(chain):
    allow = chain.allow_file
    allow.write_text("bob\nalice-admin\nalicex")  # no final newline
    os.chmod(allow, 0o640)
    inode = allow.stat().st_ino
    run_prolog(chain, "alice")
    run_prolog(chain, "alice")
    assert allow.read_text() == "bob\nalice-admin\nalicex\nalice\n"
    st = allow.stat()
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_uid == 0
    assert st.st_ino != inode, "the file must be replaced by a rename, not rewritten in place"
    assert not list(allow.parent.glob(".localusers.epilog-tmp.*"))


def test_prolog_grants_no_line_the_epilog_would_never_revoke(chain):
    """Grant and revoke follow the guard's one rule: slurm (uid 64030,
    above login.defs' UID_MAX and below 65536: a system account, whose
    last job end runs no part 39) and je.kim (a listed operator, who gets
    in by the operators' list) get no line from prolog.sh, as slurmd runs
    it; each run says why in one line and its record."""
    chain.allow_file.write_text("bob\n")
    mark = len(chain.log_text())
    run_prolog(chain, "slurm")
    run_prolog(chain, "je.kim")
    assert chain.allow_file.read_text() == "bob\n"
    log = [line for line in chain.log_text()[mark:].splitlines() if "not added to" in line]
    assert len(log) == 2, log
    assert "uid 64030 is root or a system account" in log[0] and "(system account: part 39" in log[0], log
    assert "listed in" in log[1] and "(listed: part 39" in log[1], log
    facts = [p["facts"] for rec in chain.records()[-2:] for p in rec["parts"] if p["part"] == "50-exclusive-ssh"]
    assert [f["allow"]["why"] for f in facts] == ["system account", "listed"], facts


def test_prolog_creates_a_missing_allow_file(chain):
    chain.allow_file.unlink(missing_ok=True)
    run_prolog(chain, "alice")
    assert chain.allow_file.read_text() == "alice\n"


def test_allow_file_symlink_is_left_alone(chain, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("bob\nalice\n")
    chain.allow_file.unlink(missing_ok=True)
    chain.allow_file.symlink_to(target)
    mark = len(chain.log_text())
    try:
        run_prolog(chain, "alicex")
        assert chain.run_part("39-lastuserjob-ssh", slurmd_env("alice")).returncode == 0
        assert target.read_text() == "bob\nalice\n"
        assert chain.allow_file.is_symlink()
        assert chain.log_text()[mark:].count("is not a regular file; left alone") == 2
    finally:
        chain.allow_file.unlink()


def test_an_allow_file_another_account_can_write_is_edited_and_named_at_each_edit(chain):
    """An allow file of alicex's, and one of root's that its group can
    write: either could change who logs in. Part 39 still removes alice's
    line (it is not evidence of anything, and her access goes), and says
    at each edit who could write it and how to fix it; of root's own file,
    mode 0644, it says nothing."""
    try:
        for owner, mode, warned in ((uid_of("alicex"), 0o644, True), (0, 0o664, True), (0, 0o644, False)):
            mark = len(chain.log_text())
            chain.allow_file.write_text("bob\nalice\n")
            os.chown(chain.allow_file, owner, 0)
            os.chmod(chain.allow_file, mode)
            assert chain.run_part("39-lastuserjob-ssh", slurmd_env("alice")).returncode == 0
            assert chain.allow_file.read_text() == "bob\n"
            said = f"is owned by uid {owner}, group 0, mode {mode:04o}: not root's alone, so another account can " \
                   "change who gets ssh access here; chown root and chmod go-w it"
            assert (said in chain.log_text()[mark:]) == warned, chain.log_text()[mark:]
    finally:
        os.chown(chain.allow_file, 0, 0)
        os.chmod(chain.allow_file, 0o644)
        chain.allow_file.write_text("")


def test_an_allow_file_larger_than_an_edit_reads_is_left_alone_whole(chain):
    """An allow file past the 16 MiB an edit reads (allow.ALLOW_MAX), the
    user's line at its head and an operator's at its tail: part 39 leaves
    it alone, and says so, rather than write back the part it read and
    drop the tail. One of exactly 16 MiB is edited."""
    filler = b"".join(b"user%07d\n" % i for i in range((16 << 20) // 12 + 1))
    whole = b"alice\n" + filler + b"je.kim\n"
    mark = len(chain.log_text())
    try:
        chain.allow_file.write_bytes(whole)
        assert chain.run_part("39-lastuserjob-ssh", slurmd_env("alice")).returncode == 0
        assert chain.allow_file.read_bytes() == whole
        assert f"is {len(whole)} bytes and {16 << 20} were read (an edit reads {16 << 20} at most" \
            in chain.log_text()[mark:]
        exactly = b"alice\n" + whole[-(16 << 20) + 6:]
        assert len(exactly) == 16 << 20 and exactly.endswith(b"je.kim\n")
        chain.allow_file.write_bytes(exactly)
        assert chain.run_part("39-lastuserjob-ssh", slurmd_env("alice")).returncode == 0
        assert chain.allow_file.read_bytes() == exactly[6:]
    finally:
        chain.allow_file.write_text("")


def test_39_removes_a_crlf_line_of_the_user_only(chain):
    chain.allow_file.write_bytes(b"bob\r\nalice\r\nalicex\r\n")
    assert chain.run_part("39-lastuserjob-ssh", slurmd_env("alice")).returncode == 0
    assert chain.allow_file.read_bytes() == b"bob\r\nalicex\r\n"


@pytest.mark.parametrize("user", ["root", "daemon", "munge", "slurm", "nobody"])
def test_root_and_system_accounts_are_never_targets_even_if_unlisted(chain, user, tmp_path):
    """A pillar that forgets root must not make the epilog kill root's
    processes; nor those of daemons (uid < UID_MIN, or Debian's static system
    range above UID_MAX: slurm is 64030, nobody 65534)."""
    chain.localusers.write_text("je.kim\n")
    mark = len(chain.log_text())
    residue = owned_file(user)
    try:
        proc = subprocess.Popen(["setpriv", f"--reuid={user}", "--regid=65534", "--clear-groups", "sleep", "600"],
                                start_new_session=True)
        try:
            for part in ("40-lastuserjob-processes", "42-lastuserjob-cleanup"):
                assert chain.run_part(part, slurmd_env(user)).returncode == 0
            assert still_running(proc)
            assert residue.exists()
            # root's uid 0 is no job uid at all; the others are system accounts
            why = "is not a uid from 1 to 4294967294" if user == "root" else "is root or a system account"
            assert chain.log_text()[mark:].count(why) == 2
        finally:
            end(proc)
    finally:
        residue.unlink(missing_ok=True)
        chain.localusers.write_text("root\nje.kim\ns.shin\n")


def test_nothing_to_kill_and_a_vanished_allow_file_never_fail_a_part(chain):
    """killall/pkill exit 1 when nothing matched, and the allow file may be
    gone: neither is an error, and no part exits non-zero."""
    chain.allow_file.unlink(missing_ok=True)
    env = slurmd_env("alicex")
    mark = len(chain.log_text())
    for part in ("39-lastuserjob-ssh", "40-lastuserjob-processes", "42-lastuserjob-cleanup"):
        assert chain.run_part(part, env).returncode == 0
    log = chain.log_text()[mark:]
    assert "killed the processes of uid" in log and "round(s)): 0" in log
    assert f"not in {chain.allow_file}; nothing to remove" in log


def test_a_release_runs_no_shell_and_no_perl(chain):
    """What a node runs is the node program: every entry point of a release
    (Epilog=, Prolog= and each of the formula's parts) is a few lines of
    Python run by the system's python3 (-I: nothing of the caller's
    environment, -S: no site, -B: no bytecode written), no file of it is a
    shell or Perl script, and none calls a shell."""
    release = chain.release
    files = [p for p in release.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    shell_lines = 0
    for path in files:
        head = path.read_bytes()[:64]
        if os.access(path, os.X_OK):
            assert head.startswith(b"#!/usr/bin/python3 -ISB\n"), path
            assert len(path.read_text().splitlines()) < 25, path
        assert not head.startswith((b"#!/bin/bash", b"#!/bin/sh", b"#!/usr/bin/perl", b"#!/usr/bin/env")), path
        text = path.read_text(errors="replace")
        assert "shell=True" not in text and "os.system(" not in text and "perl" not in text.lower(), path
        if head.startswith((b"#!/bin/bash", b"#!/bin/sh")):
            shell_lines += len(text.splitlines())
    assert shell_lines <= 200


@pytest.mark.parametrize("access", ["adopt", "none"])
def test_when_the_allow_file_does_not_govern_ssh_the_chain_never_edits_it(own_chain, access):
    """epilog:ssh_access adopt (pam_slurm_adopt governs ssh) or none: prolog
    50 and epilog 39 do not run, run by the runner or on their own; the
    other lastuserjob parts still act."""
    c = own_chain(ssh_access=access)
    c.allow_file.write_text("bob\nalice\n")
    before = os.stat(c.allow_file)
    run_prolog(c, "s.shin")
    proc = stray("alice")
    try:
        ret = c.run(c.conf_dir / "epilog.sh", slurmd_env("alice", SLURM_CONF="/nonexistent/slurm.conf"))
        assert ret.returncode == 0, ret
        assert killed(proc), "40 must still kill the user's strays"
    finally:
        end(proc)
    assert c.run_part("39-lastuserjob-ssh", slurmd_env("alice")).returncode == 0
    after = os.stat(c.allow_file)
    assert c.allow_file.read_text() == "bob\nalice\n"
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    log = c.log_text()
    for part in ("50-exclusive-ssh", "39-lastuserjob-ssh"):
        assert f"skipping {part}: epilog:ssh_access is {access}" in log, log
    assert f"not run: epilog:ssh_access is {access}" in log, log
    last = c.records()[-1]
    assert {p["part"]: (p["ran"], p.get("why")) for p in last["parts"]}["39-lastuserjob-ssh"] == \
        (False, "epilog:ssh_access"), last


def pids_cgroup(name):
    """A pids cgroup of the test's own: cgroup v1's pids hierarchy, or
    cgroup v2's root with the pids controller on for its children."""
    v1 = Path("/sys/fs/cgroup/pids")
    if (v1 / "cgroup.procs").exists():
        parent = v1
    else:
        parent = next((Path(line.split()[4]) for line in Path("/proc/self/mountinfo").read_text().splitlines()
                       if " - cgroup2 " in line), None)
        require(parent is not None and "pids" in (parent / "cgroup.controllers").read_text().split(),
                "a pids cgroup controller (v1, or v2's) to use the pids up for real")
        (parent / "cgroup.subtree_control").write_text("+pids")
    group = parent / name
    group.mkdir()
    return group


def test_a_chain_with_no_free_pid_still_revokes_kills_and_records(own_chain, cbin, accounts):
    """alice's processes hold every pid the chain may have: its pids cgroup
    (the kernel's own limit, pids.max, as pid_max or threads-max would be
    for the whole node; RLIMIT_NPROC would not do, root is above it) is
    full of them, a subreaper of root's reaping them as a node's init
    would. The runner, moved in past the limit as slurmd's child would be
    there, cannot fork its worker, nor the site's part 10: it runs 39 and
    40 itself (her line revoked, her processes killed), writes her job's
    mark done and the record, and 42, after the kill freed pids, runs in a
    worker of its own; the record names part 10 as not run, "no free pid",
    and 39 and 40 as run in the runner. It exits 0."""
    c = own_chain()
    trail = c.conf_dir.parent / "site-part-ran"
    add_part(c, "10-site", f"touch {trail}")
    c.allow_file.write_text("bob\nalice\n")
    c.run_dir.mkdir(mode=0o700, exist_ok=True)
    mark = c.run_dir / f"{uid_of('alice')}.4242"
    mark.write_text(f"running {int(time.time())}\n")
    residue = owned_file("alice")
    group = pids_cgroup(f"epilog-test-nofork-{os.getpid()}")
    enter = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(group)]
    filler = None
    try:
        (group / "pids.max").write_text("24")
        filler, line = hostile("alice", str(cbin / "fighter"), "fill", prefix=enter, reaper=cbin / "fighter")
        assert line == "ready"
        assert int((group / "pids.current").read_text()) == 24
        ret = c.run(c.conf_dir / "epilog.sh", slurmd_env("alice", SLURM_CONF="/nonexistent/slurm.conf"),
                    prefix=enter)
        assert ret.returncode == 0, ret
        log = c.log_text()
        assert not live_processes_of(uid_of("alice")), log
        assert c.allow_file.read_text() == "bob\n", log
        assert mark.read_text() == "done\n"
        assert not residue.exists(), "42 runs once the kill freed pids"
        assert not trail.exists()
        parts = {part["part"]: part for part in c.records()[-1]["parts"]}
        assert parts["10-site"] == {"part": "10-site", "ran": False, "why": "no free pid"}, parts
        for name in ("39-lastuserjob-ssh", "40-lastuserjob-processes"):
            assert parts[name]["ran"] and parts[name]["facts"]["ran_in_runner"] == "no free pid", parts[name]
        assert parts["40-lastuserjob-processes"]["facts"]["kill"]["outcome"] == "done", parts
        assert parts["42-lastuserjob-cleanup"]["ran"] and "ran_in_runner" not in parts["42-lastuserjob-cleanup"]["facts"]
        assert "no process of its own for 40-lastuserjob-processes (no free pid): it runs in the runner itself" in log
        assert filler.wait(timeout=10) == 0  # the subreaper: nothing of hers left to reap
    finally:
        if filler is not None:
            end(filler)
        kill_all_of("alice")
        residue.unlink(missing_ok=True)
        wait_for(lambda: int((group / "pids.current").read_text()) == 0, 10, what="the test's cgroup to empty")
        group.rmdir()
