"""Observe mode, the brake and a part turned off, at real job ends of a
chain laid down as the state would: alice's real stray process, her ssh
allow line, her files in /tmp and /dev/shm and her System V IPC objects
(in mount and IPC namespaces of the test's own: nothing of the machine's is
touched), and a crashed Cadence client's file of alicex's for part 45.
Observe leaves them all and records what would have gone, as many as an
enforce job end then removes; the brake (a stop file of root's) stops the
acts; a stop file anybody else could have planted is ignored, and said so."""
import os
import subprocess

import pytest

from tests.helpers import as_user, end, killed, slurmd_env, still_running, stray, uid_of
from tests.node import test_ipc
from tests.node.conftest import add_part
from tests.node.test_ipc import make, objects

ALICE, OTHER = "alice", "alicex"
# test_ipc's fixtures: a chain under /var/tmp, and mount and IPC namespaces of the test's own
var_chain, ns = test_ipc.var_chain, test_ipc.ns
ACTING = ("39-lastuserjob-ssh", "40-lastuserjob-processes", "42-lastuserjob-cleanup", "45-stale-x-display")


def in_ns(ns, user, script):
    subprocess.run([*ns, *as_user(user), "sh", "-c", script], check=True)


def entries(ns):
    """Every path under the namespace's /tmp and /dev/shm, with its owner."""
    out = subprocess.run([*ns, "find", "/tmp", "/dev/shm", "-mindepth", "1", "-printf", "%p %U\n"],
                         capture_output=True, text=True, check=True).stdout
    return sorted(out.splitlines())


def dead_pid():
    """The pid of a process that has ended (PID 1 here never reaps: the test does)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def leave_a_job_behind(chain, ns):
    """What alice's last job leaves: a stray, her allow line, files at
    every depth (a directory of hers holds one of alicex's: it stays, with
    it), a file in /dev/shm, a segment, a semaphore set and a queue; and a
    dead Cadence client's file of alicex's, residue part 45 sweeps."""
    chain.allow_file.write_text(f"bob\n{ALICE}\n{OTHER}\n")
    subprocess.run([*ns, "chmod", "1777", "/tmp", "/dev/shm"], check=True)
    in_ns(ns, ALICE, "mkdir -p /tmp/a/b /tmp/mixed && echo x > /tmp/a/b/c && echo x > /tmp/a/d && "
                     "echo x > /tmp/top && echo x > /dev/shm/mpi-seg && chmod 1777 /tmp/mixed")
    in_ns(ns, OTHER, f"echo x > /tmp/mixed/theirs && echo x > /tmp/clsbd.{OTHER}.{dead_pid()}")
    made = {("shm", make(ns, ALICE, "-M", "65536")), ("sem", make(ns, ALICE, "-S", "2")),
            ("msg", make(ns, ALICE, "-Q"))}
    return stray(ALICE), made


def epilog(chain, ns, job):
    ret = chain.run(chain.conf_dir / "epilog.sh", slurmd_env(ALICE, job=job), prefix=ns)
    assert ret.returncode == 0, ret
    return chain.records()[-1]


def facts(rec):
    return {part["part"]: part.get("facts", part) for part in rec["parts"]}


def test_observe_leaves_everything_and_records_what_an_enforce_job_end_then_removes(var_chain, ns):
    chain = var_chain(mode="observe")
    proc, made = leave_a_job_behind(chain, ns)
    try:
        before, lines = entries(ns), chain.allow_file.read_text()
        observed = epilog(chain, ns, 4301)
        assert still_running(proc, grace=0), "observe mode killed her process"
        assert entries(ns) == before and chain.allow_file.read_text() == lines and made <= set(objects(ns))
        assert observed["mode"] == "observe" and observed["guard"]["answer"] == "act", observed
        seen = facts(observed)
        assert seen["39-lastuserjob-ssh"]["allow"] == {"op": "remove", "change": "would remove", "would": True}
        kill = seen["40-lastuserjob-processes"]["kill"]
        assert kill["outcome"] == "would" and kill["would"] is True and kill["signalled"] == 1, kill
        assert seen["42-lastuserjob-cleanup"]["cleanup"]["would"] is True
        assert seen["42-lastuserjob-cleanup"]["ipc"]["removed"] == {"shm": 1, "sem": 1, "msg": 1}
        assert seen["45-stale-x-display"]["sweep"]["counts"]["clsbd"]["removed"] == 1
        log = chain.log_text()
        for said in ("would remove the line from", f"would kill the processes of uid {uid_of(ALICE)}",
                     f"would remove (observe mode, epilog:mode: nothing removed) 6 entries of uid {uid_of(ALICE)}",
                     f"System V IPC of uid {uid_of(ALICE)}: would remove", "stale clsbd would be purged"):
            assert said in log, (said, log)

        chain.lay_down()  # enforce: a deploy, a release of its own
        enforced = epilog(chain, ns, 4302)
        assert killed(proc)
        done = facts(enforced)
        assert enforced["mode"] == "enforce" and chain.allow_file.read_text() == f"bob\n{OTHER}\n"
        assert not made & set(objects(ns))
        assert [path for path in entries(ns) if f" {uid_of(ALICE)}" in path] == ["/tmp/mixed 50101"]
        # as many as observe mode said would go
        assert done["40-lastuserjob-processes"]["kill"]["signalled"] == kill["signalled"]
        for part, key in (("42-lastuserjob-cleanup", "cleanup"), ("42-lastuserjob-cleanup", "ipc"),
                          ("45-stale-x-display", "sweep")):
            would = {k: v for k, v in seen[part][key].items() if k != "would"}
            assert done[part][key] == would, (part, key, done[part][key], would)
        assert done["39-lastuserjob-ssh"]["allow"]["change"] == "removed"
    finally:
        end(proc)


def test_the_brake_stops_every_act_and_the_chain_still_decides(var_chain, ns):
    chain = var_chain()
    stop = chain.conf_dir / "epilog.stop"
    stop.touch()
    proc, made = leave_a_job_behind(chain, ns)
    try:
        before, lines = entries(ns), chain.allow_file.read_text()
        rec = epilog(chain, ns, 4311)
        assert still_running(proc, grace=0) and entries(ns) == before and chain.allow_file.read_text() == lines
        assert made <= set(objects(ns))
        assert rec["stopped"] == str(stop) and rec["guard"]["answer"] == "act" and rec["other"]["answer"] == "no"
        assert {part["part"]: part for part in rec["parts"]} == {
            name: {"part": name, "ran": False, "why": f"stopped by {stop}"} for name in ACTING}
        assert f"the brake is on: {stop} exists" in chain.log_text() and rec["warnings"] == 1
        # its mark says done: the next job end decides on it
        assert (chain.run_dir / f"{uid_of(ALICE)}.4311").read_text() == "done\n"

        stop.unlink()  # rm releases it: the next job end acts
        released = epilog(chain, ns, 4312)
        assert "stopped" not in released and killed(proc) and not made & set(objects(ns))
    finally:
        end(proc)
        stop.unlink(missing_ok=True)


def test_a_brake_set_mid_chain_stops_the_parts_still_to_come(var_chain, ns):
    chain = var_chain()
    stop = chain.conf_dir / "epilog.stop"
    add_part(chain, "41-brake", f"touch {stop}")
    proc, _ = leave_a_job_behind(chain, ns)
    try:
        rec = epilog(chain, ns, 4321)
        assert killed(proc), "39 and 40 ran before the brake was set"
        ran = {part["part"]: part["ran"] for part in rec["parts"]}
        assert ran == {"39-lastuserjob-ssh": True, "40-lastuserjob-processes": True, "41-brake": True,
                       "42-lastuserjob-cleanup": False, "45-stale-x-display": False}, rec
        assert rec["stopped"] == str(stop) and "/tmp/top 50101" in entries(ns)
    finally:
        end(proc)
        stop.unlink(missing_ok=True)


@pytest.mark.parametrize("planted", ["alices", "in-a-directory-others-can-write"])
def test_a_stop_file_anybody_else_could_have_planted_is_ignored_and_warned_about(var_chain, ns, planted):
    if planted == "alices":
        chain = var_chain()
        stop = chain.conf_dir / "epilog.stop"
        stop.touch()
        os.chown(stop, uid_of(ALICE), uid_of(ALICE))
        why = f"{stop} is owned by uid {uid_of(ALICE)}, not root"
    else:
        chain = var_chain()
        open_dir = chain.conf_dir.parent / "open"
        open_dir.mkdir()
        open_dir.chmod(0o777)
        stop = open_dir / "epilog.stop"
        chain.lay_down(stop_file=str(stop))
        stop.touch()
        why = f"{stop} is in {open_dir}, which another account can write"
    proc, made = leave_a_job_behind(chain, ns)
    try:
        rec = epilog(chain, ns, 4331)
        assert killed(proc) and not made & set(objects(ns)), "the chain acted"
        assert "stopped" not in rec and rec["stop_ignored"].startswith(why), rec
        assert f"stop file {why}" in chain.log_text() and rec["warnings"] >= 1
    finally:
        end(proc)


def test_a_part_turned_off_is_recorded_off_and_never_runs(var_chain, ns):
    chain = var_chain(parts={"42-lastuserjob-cleanup": False})
    proc, made = leave_a_job_behind(chain, ns)
    try:
        rec = epilog(chain, ns, 4341)
        assert killed(proc), "40 is on"
        off = "off: epilog:parts:42-lastuserjob-cleanup is false"
        assert {part["part"]: part for part in rec["parts"]}["42-lastuserjob-cleanup"] == {
            "part": "42-lastuserjob-cleanup", "ran": False, "why": off}
        assert "/tmp/top 50101" in entries(ns) and made <= set(objects(ns))
        assert f"skipping 42-lastuserjob-cleanup: {off}" in chain.log_text()
        # run on its own, it says so too
        ret = chain.run_part("42-lastuserjob-cleanup", slurmd_env(ALICE, job=4342), prefix=ns)
        assert ret.returncode == 0 and f"not run: {off}" in chain.log_text()
        assert "/tmp/top 50101" in entries(ns)
    finally:
        end(proc)
