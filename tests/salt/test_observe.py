"""Observe mode, the brake and the parts turned off between jobs, through
the epilog module in-process on a chain the state laid down: epilog.strays
kill=True, epilog.sweep and its remove_ipc act on nothing and say what
they would have done; epilog.report's would section, epilog.explain and
epilog.verify say the mode and the brake. alice's real stray, her ssh line
and her System V IPC objects, and alicex's dead Cadence client's file, in
a fork of the test with a /tmp and an IPC namespace of its own (nothing
of the machine's is touched)."""
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import as_user, in_namespaces, kill_all_of, slurmd_env, stray, uid_of

# What the node program decides under observe mode, the brake and the parts
# turned off: the same on every Salt line (tests/salt/conftest.py).
pytestmark = pytest.mark.salt_line_independent

ALICE, OTHER = "alice", "alicex"


def ipcmk(user, *args):
    return int(subprocess.run([*as_user(user), "ipcmk", *args], capture_output=True, text=True,
                              check=True).stdout.split()[-1])


def ids():
    return {(kind, int(line.split()[1])) for kind in ("shm", "msg")
            for line in Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:] if line.split()}


def between_jobs(node, job_end=False):
    """In namespaces of the test's own: what alice's crashed job left (a
    stray, a segment and a queue) and alicex's dead clsbd file, then
    epilog.strays kill=True and epilog.sweep remove_ipc=True (and, with
    JOB_END, an epilog of alice's): their reports, and whether all of it
    is still there."""
    allow = node.base / "localusers"
    allow.write_text(f"{ALICE}\n")

    def inside():
        proc = stray(ALICE)
        done = subprocess.Popen(["true"])
        done.wait()
        clsbd = Path(f"/tmp/clsbd.{OTHER}.{done.pid}")
        clsbd.write_text("")
        os.chown(clsbd, uid_of(OTHER), uid_of(OTHER))
        made = {("shm", ipcmk(ALICE, "-M", "65536")), ("msg", ipcmk(ALICE, "-Q"))}
        seen = {"strays": node.run("strays", kill=True), "sweep": node.run("sweep", remove_ipc=True)}
        if job_end:
            ret = subprocess.run([str(node.conf_dir / "epilog.sh")], env=slurmd_env(ALICE, job=7101),
                                 capture_output=True)
            assert ret.returncode == 0, ret
        seen["left"] = {"process": proc.poll() is None, "clsbd": clsbd.exists(), "ipc": made <= ids(),
                        "line": allow.read_text() == f"{ALICE}\n"}
        proc.kill()
        return seen

    try:
        return in_namespaces(inside, pid=False, ipc=True, fresh=("/tmp",))
    finally:
        kill_all_of(ALICE)


def test_observe_mode_acts_on_nothing_between_jobs_and_says_what_it_would_have_done(node):
    node.set_pillar(mode="observe")
    node.apply()
    seen = between_jobs(node, job_end=True)
    assert seen["left"] == {"process": True, "clsbd": True, "ipc": True, "line": True}, seen
    strays = seen["strays"]
    alice = {user["user"]: user for user in strays["users"]}[ALICE]
    assert strays["mode"] == "observe" and alice["answer"] == "stray", strays
    assert alice["kill"]["outcome"] == "would" and alice["kill"]["would_signal"] >= 1, alice
    assert alice["kill"]["ipc"]["would"] is True and alice["kill"]["ipc"]["removed"] == {"shm": 1, "sem": 0, "msg": 1}
    assert strays["counts"]["killed"] == 0 and strays["counts"]["would_kill"] >= 1
    assert strays["counts"]["ipc_removed"] == 0 and strays["counts"]["ipc_would_remove"] == 2
    sweep = seen["sweep"]
    assert sweep["mode"] == "observe" and sweep["removed"] == [] and len(sweep["would_remove"]) == 1, sweep
    assert sweep["held_back"].startswith("observe mode") and sweep["ipc"]["counts"]["would_remove"] == 2, sweep
    assert sweep["ipc"]["counts"]["removed"] == 0 and sweep["ipc"]["held_back"].startswith("observe mode")

    report = node.run("report")
    would = report["would"]
    assert report["modes"] == {"enforce": 0, "observe": 1} and report["acted"] == 0
    assert would["acted"] == 1 and would["users"] == [ALICE] and would["processes_signalled"] >= 1, report
    assert would["ssh_lines_removed"] == 1 and would["ipc"]["removed"] == {"shm": 1, "sem": 0, "msg": 1}
    assert would["between_jobs"]["stray_processes_killed"] >= 1 and would["between_jobs"]["removed"]["clsbd"] == 1
    assert would["between_jobs"]["ipc_removed"] == {"shm": 2, "sem": 0, "msg": 2}, would
    assert report["between_jobs"]["stray_processes_killed"] == 0 and report["between_jobs"]["removed"]["clsbd"] == 0
    assert report["residue"]["removed"]["clsbd"] == 0 and report["processes_signalled"] == 0

    explained = node.run("explain", user=ALICE)
    assert explained["mode"] == "observe" and explained["brake"] == "off", explained
    assert explained["parts"]["40-lastuserjob-processes"].startswith("would act (observe mode"), explained
    assert explained["last_job_end"]["decision"] == "would have acted"
    notes = node.run("verify")["warnings"]
    assert any(note.startswith("[mode-observe] epilog:mode is observe") for note in notes), notes


def test_the_brake_stops_the_kill_the_sweep_and_the_ipc_removal_between_jobs(node):
    node.apply()
    stop = node.conf_dir / "epilog.stop"
    stop.touch()
    seen = between_jobs(node)
    assert seen["left"] == {"process": True, "clsbd": True, "ipc": True, "line": True}, seen
    strays = seen["strays"]
    alice = {user["user"]: user for user in strays["users"]}[ALICE]
    assert alice["answer"] == "stray" and alice["kill"] == f"stopped by {stop}", alice
    assert strays["stopped"] == str(stop) and strays["counts"]["killed"] == 0
    sweep = seen["sweep"]
    assert sweep["held_back"] == f"stopped by {stop}" and sweep["removed"] == [] and len(sweep["would_remove"]) == 1
    assert sweep["ipc"]["counts"]["removed"] == 0 and sweep["ipc"]["held_back"] == f"stopped by {stop}"
    report = node.run("report")
    assert report["stopped"] == {"job_ends": 0, "acts": 0, "looks": 2, "files": [str(stop)]}, report
    assert report["would"]["between_jobs"]["removed"]["clsbd"] == 1
    explained = node.run("explain", user=ALICE)
    assert explained["brake"] == f"on: stopped by {stop}", explained
    assert explained["parts"]["40-lastuserjob-processes"].startswith(f"stopped by {stop} (the brake"), explained
    verified = node.run("verify")
    assert verified["result"], verified["problems"]
    assert any(note.startswith(f"[brake-on] {stop} exists (since ") for note in verified["warnings"]), verified

    # one that anybody else could have planted: the brake is not on, and verify says why
    os.chown(stop, uid_of(ALICE), uid_of(ALICE))
    verified = node.run("verify")
    assert f"[stop-file-untrusted] {stop} is owned by uid {uid_of(ALICE)}, not root" in "\n".join(
        verified["problems"]), verified
    assert not any(note.startswith("[brake-on]") for note in verified["warnings"])


def test_a_part_turned_off_holds_its_act_back_between_jobs(node):
    node.set_pillar(parts={"40-lastuserjob-processes": False, "42-lastuserjob-cleanup": False,
                           "45-stale-x-display": False})
    node.apply()
    seen = between_jobs(node)
    # 39 is on: her line goes; 40, 42 and 45 are off: all else stays
    assert seen["left"] == {"process": True, "clsbd": True, "ipc": True, "line": False}, seen
    alice = {user["user"]: user for user in seen["strays"]["users"]}[ALICE]
    assert alice["kill"]["parts"] == {"39-lastuserjob-ssh": 0, "40-lastuserjob-processes":
                                      "not run: off: epilog:parts:40-lastuserjob-processes is false"}, alice
    assert seen["strays"]["off"] == ["40-lastuserjob-processes", "42-lastuserjob-cleanup"]
    assert seen["strays"]["counts"]["ipc_would_remove"] == 2
    sweep = seen["sweep"]
    assert sweep["held_back"] == "off: epilog:parts:45-stale-x-display is false" and sweep["removed"] == []
    report = node.run("report")
    assert report["parts_off"] == {"40-lastuserjob-processes": 1, "42-lastuserjob-cleanup": 2,
                                   "45-stale-x-display": 1}, report
    notes = node.run("verify")["warnings"]
    assert "[parts-off] epilog:parts turns off 40-lastuserjob-processes, 42-lastuserjob-cleanup, " \
           "45-stale-x-display: never run, recorded as off" in notes, notes
