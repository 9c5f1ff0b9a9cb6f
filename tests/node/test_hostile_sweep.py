"""The residue sweep against a hostile user, run by hand (the sweeper) and
through part 45 of a laid-down chain. Each test runs in
a private mount namespace whose /tmp is a fresh tmpfs (the host's /tmp is
never swept), with residue from real X servers, real accounts and real FUSE
mounts. Each test names the promise it attacks."""
import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers import (
    LAYOUT,
    as_user,
    hostile,
    ids_of,
    in_namespaces,
    kept_names,
    laid_down,
    require,
    require_tools,
    slurmd_env,
    uid_of,
    wait_for,
)
from tests.unit.conftest import node

# alice binds an abstract unix socket named by argv[1]: any bytes, newlines too.
BIND_ABSTRACT = ("import socket, sys, time; s = socket.socket(socket.AF_UNIX); s.bind(b'\\0' + sys.argv[1].encode()); "
                 "s.listen(); print('ready', flush=True); time.sleep(600)")


def kept_reason(report, path):
    return next((k["reason"] for k in report["kept"] if k["path"] == path), None)


def sweep(sweeper, site, *args):
    return sweeper(site, *args)


def run_part_45(site, chain, user, job="4711", uid=None):
    env = slurmd_env(user, job=job, uid=uid_of(user) if uid is None else uid)
    ret = subprocess.run([*site.prefix, str(chain.part("45-stale-x-display"))], env=env, capture_output=True,
                         text=True, timeout=120)
    assert ret.returncode == 0, ret
    return ret


# -- 8. one bad entry never stops the sweep; "held" is never what a user prints ---
@pytest.mark.parametrize("forged", [
    # well formed: claims X80 is bound (inode 12345), so the old sweep kept it for ever
    "x\n0000000000000000: 00000002 00000000 00010000 0001 01 12345 /tmp/.X11-unix/X80",
    # malformed: the old sweep died on the inode field (ValueError) and swept nothing
    "x\n0000000000000000: 00000002 00000000 00010000 0001 01 notanumber /tmp/.X11-unix/X80",
], ids=["well-formed-forgery", "malformed-forgery"])
def test_a_line_a_user_prints_into_proc_net_unix_pins_nothing_and_stops_nothing(sweeper, accounts, site, forged):
    """Promise 8: the kernel prints abstract socket names raw in
    /proc/net/unix, newlines included, so alice can add any line to that
    table. Held must come from the bound file's own identity (the socket
    diagnostics' device and inode), so her forged line neither pins her
    crashed display nor stops the sweep."""
    site.crashed_xvfb(80)
    dead = site.dead_pid()
    site.write(f"/tmp/clsbd.alice.{dead}", b"")
    binder, line = hostile("alice", "/usr/bin/python3", "-c", BIND_ABSTRACT, forged, prefix=site.prefix)
    site.procs.append(binder)
    assert line == "ready"
    table = Path("/proc/net/unix").read_text()
    assert "/tmp/.X11-unix/X80" in table, "precondition: the forged line is in the socket table"
    report = sweep(sweeper, site)
    assert {"/tmp/.X11-unix/X80", "/tmp/.X80-lock", f"/tmp/clsbd.alice.{dead}"} <= set(report["removed"]), report
    assert not os.path.lexists(site.path("/tmp/.X11-unix/X80"))


@pytest.fixture
def fuse(site):
    """alice's FUSE mounts (bindfs, without allow_other: root gets EACCES on
    them), made inside the test's namespace."""
    require_tools("bindfs", "fusermount3")
    require(os.path.exists("/dev/fuse") and os.stat("/dev/fuse").st_mode & 0o006 == 0o006,
            "/dev/fuse open to users (mode 0666, as udev makes it; bash .ci/setup)")
    mounts = []

    def mount(path):
        uid, gid = ids_of("alice")
        src = f"/tmp/fuse-src-{len(mounts)}"
        for directory in (src, path):
            site.path(directory).mkdir()
            os.chown(site.path(directory), uid, gid)
        subprocess.run([*site.prefix, *as_user("alice"), "bindfs", "--no-allow-other", src, path],
                       check=True, timeout=30)
        mounts.append(path)
        with pytest.raises(PermissionError):
            os.lstat(site.path(path))  # precondition: root is refused
    yield mount
    for path in mounts:
        subprocess.run([*site.prefix, *as_user("alice"), "fusermount3", "-u", path], capture_output=True, timeout=30)


def test_an_entry_that_refuses_root_is_kept_and_reported_and_the_rest_is_swept(sweeper, accounts, site, fuse):
    """Promise 8: alice mounts FUSE file systems on an entry of
    /tmp/.X11-unix and on a clsbd name; root's lstat of them fails with
    EACCES (the old sweep stopped there with nothing removed). Each is kept
    and reported as not judged, and the rest of the sweep finishes: her
    crashed display and a dead clsbd file go."""
    fuse("/tmp/.X11-unix/X81")
    dead = site.dead_pid()
    fuse(f"/tmp/clsbd.alice.{dead}")
    site.crashed_xvfb(82)
    site.write(f"/tmp/clsbd.bob.{dead}", b"")
    report = sweep(sweeper, site)
    assert {"/tmp/.X11-unix/X82", "/tmp/.X82-lock", f"/tmp/clsbd.bob.{dead}"} <= set(report["removed"]), report
    for path in ("/tmp/.X11-unix/X81", f"/tmp/clsbd.alice.{dead}"):
        assert kept_reason(report, path).startswith("could not be judged"), report
        assert any(line.startswith(f"{path}: ") for line in report["unjudged"]), report


def test_an_x_server_in_a_users_own_network_namespace_is_held(sweeper, accounts, site):
    """Promise 8 (the other direction): a live X server that alice runs in a
    network namespace of her own (unshare -rn) binds its socket there; the
    diagnostics are asked in every namespace a process is in, so the socket
    is held and kept."""
    proc = site.spawn("alice", "unshare", "-rn", "Xvfb", ":83", "-nolisten", "tcp")
    wait_for(lambda: site.path("/tmp/.X11-unix/X83").is_socket() and site.path("/tmp/.X83-lock").exists(), 20,
             what="Xvfb :83 in its own network namespace")
    assert proc.poll() is None
    report = sweep(sweeper, site)
    assert site.path("/tmp/.X11-unix/X83").is_socket()
    # named through the diagnostics of her namespace, not only through the connect probe
    assert kept_reason(report, "/tmp/.X11-unix/X83") == f"held by pid {proc.pid} (Xvfb)", report


# -- 10. names are data everywhere ----------------------------------------------
@pytest.mark.parametrize("user", ["-v", "--budget=0", "--help", "-h", "--test", "--log-fd=1", "--part"])
def test_a_user_name_that_looks_like_an_option_is_data_to_the_sweep(chain, accounts, site, user):
    """Promise 10: a job user named -v used to reach the sweep's argument
    parser as an option (exit 2: part 45 swept nothing); so did --budget=0.
    The part hands the sweep the job through SLURM_JOB_* only: whatever the
    name, the residue goes."""
    site.crashed_xvfb(84)
    run_part_45(site, chain, user, uid=uid_of("-v"))  # a uid no passwd entry names
    assert not os.path.lexists(site.path("/tmp/.X11-unix/X84")), chain.log_text()[-2000:]
    assert not os.path.lexists(site.path("/tmp/.X84-lock"))
    purged = f"45-stale-x-display job=4711 user={user} release={chain.release_id}: stale X display purged: :84"
    assert purged in chain.log_text()


# -- 11. scratch removal never deletes another account's file -------------------
def plant_scratch(site, job):
    """alice's scratch of job JOB: a directory of mode 1777 (as rta made it),
    into which alicex wrote (as rtb did), nested, and files of her own."""
    top = f"/tmp/slurm{job}"
    site.path(top).mkdir()
    os.chown(site.path(top), *ids_of("alice"))
    os.chmod(site.path(top), 0o1777)
    for path in (f"{top}/sub", f"{top}/sub/deeper", f"{top}/own"):
        site.path(path).mkdir()
        os.chown(site.path(path), *ids_of("alice"))
        os.chmod(site.path(path), 0o1777)
    for path in (f"{top}/a.out", f"{top}/sub/b.out", f"{top}/sub/deeper/c.out", f"{top}/own/d.out", f"/tmp/slurm{job}.log"):
        site.write(path, b"alice's\n", user="alice")
    site.write(f"{top}/sub/deeper/rtb.data", b"alicex's\n", user="alicex")
    site.write(f"/tmp/slurm{job}.alicex", b"alicex's\n", user="alicex")
    gone = {f"{top}/a.out", f"{top}/sub/b.out", f"{top}/sub/deeper/c.out", f"{top}/own", f"/tmp/slurm{job}.log"}
    stay = {f"{top}/sub/deeper/rtb.data", f"{top}/sub/deeper", f"{top}/sub", top, f"/tmp/slurm{job}.alicex"}
    return gone, stay


def check_scratch(site, gone, stay):
    for path in gone:
        assert not os.path.lexists(site.path(path)), f"{path} is alice's and should be gone"
    for path in stay:
        assert os.path.lexists(site.path(path)), f"{path} was removed"
    assert site.path("/tmp/slurm77/sub/deeper/rtb.data").read_bytes() == b"alicex's\n"


def test_scratch_goes_only_as_far_as_the_jobs_uid_owns_it_epilog_sweep(sweeper, accounts, site):
    """Promise 11: alice's /tmp/slurm77/ is mode 1777; alicex wrote a file two
    levels down. Job 77's sweep (by hand) removes alice's entries
    at every depth, keeps alicex's file and the directories on the path to
    it, and reports them. The preview predicts exactly that."""
    gone, stay = plant_scratch(site, "77")
    preview = sweep(sweeper, site, "--job=77", f"--uid={uid_of('alice')}", "--test")
    report = sweep(sweeper, site, "--job=77", f"--uid={uid_of('alice')}")
    assert set(preview["would_remove"]) == set(report["removed"])
    check_scratch(site, gone, stay)
    assert set(report["removed"]) == {"/tmp/slurm77.log"}
    kept = {k["path"]: k["reason"] for k in report["kept"]}
    assert kept["/tmp/slurm77/sub/deeper/rtb.data"] == f"owned by uid {uid_of('alicex')}, not the job's uid {uid_of('alice')}"
    for path in ("/tmp/slurm77/sub/deeper", "/tmp/slurm77/sub", "/tmp/slurm77"):
        assert kept[path] == "on the path to entries of another account, kept with them"
    assert kept["/tmp/slurm77.alicex"].startswith("owned by uid")


def test_scratch_goes_only_as_far_as_the_jobs_uid_owns_it_part_45(chain, accounts, site):
    """Promise 11, through part 45 at job 77's end."""
    gone, stay = plant_scratch(site, "77")
    run_part_45(site, chain, "alice", job="77")
    check_scratch(site, gone, stay)


def test_part_42_leaves_another_accounts_file_in_the_users_directory(chain, accounts):
    """Promise 11, part 42 (alice's last job end): find -uid is tested at
    every depth, so alicex's file in alice's 1777 directory stays, with the
    directories on the path to it."""
    top = Path(tempfile.mkdtemp(prefix="epilog-scratch-", dir="/tmp"))
    try:
        os.chown(top, *ids_of("alice"))
        os.chmod(top, 0o1777)
        (top / "sub").mkdir()
        os.chown(top / "sub", *ids_of("alice"))
        for name, owner in (("mine", "alice"), ("sub/mine", "alice"), ("sub/theirs", "alicex")):
            (top / name).write_text("x")
            os.chown(top / name, *ids_of(owner))
        assert chain.run_part("42-lastuserjob-cleanup", slurmd_env("alice")).returncode == 0
        assert not (top / "mine").exists() and not (top / "sub/mine").exists()
        assert (top / "sub/theirs").read_text() == "x"
    finally:
        shutil.rmtree(top, ignore_errors=True)




# -- 12. a tree deeper than the descriptors the walk may hold --------------------
DEPTH = 3000  # levels: far more than the NOFILE limit the walks get here
NOFILE = 256


def plant_chain(top, depth, owner, theirs_at=None, other=None, names=("d", "f")):
    """TOP (in /tmp) and DEPTH levels below it, each directory named d, each
    level with the files NAMES names beside d (made in that order): OWNER's;
    at level THEIRS_AT a file "theirs" of OTHER's. Built relative to a
    handle (no path is longer than a name)."""
    uid, gid = ids_of(owner)
    os.mkdir(top)
    os.chown(top, uid, gid)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for level in range(depth + 1):
        for name in names if level < depth else [n for n in names if n != "d"]:
            if name == "d":
                os.mkdir(name, dir_fd=fd)
            else:
                os.close(os.open(name, os.O_CREAT | os.O_WRONLY, dir_fd=fd))
            os.chown(name, uid, gid, dir_fd=fd)
        if level == theirs_at:
            os.close(os.open("theirs", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
            os.chown("theirs", *ids_of(other), dir_fd=fd)
        if level < depth:
            below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
    os.close(fd)


def levels(top):
    """[names at level 0, level 1, ...] down the chain of d's under TOP."""
    found = []
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    while True:
        names = sorted(os.listdir(fd))
        found.append(names)
        if "d" not in names:
            os.close(fd)
            return found
        below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = below


def low_nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def test_part_42_removes_a_tree_deeper_than_its_descriptors_and_keeps_another_accounts_file_with_its_path(accounts):
    """Part 42's walk (parts._clear, as cleanup runs it on /tmp) under a
    NOFILE limit of 256, in a /tmp of its own: alice's tree of 3,000
    levels goes whole; in another of 3,000, alicex's file at level 2,000
    stays with the 2,001 directories on the path to it (each an error:
    alice's, kept), and everything of alice's below and beside them goes.
    The preview (observe mode) counts the same and removes nothing."""
    alice = uid_of("alice")

    def inside():
        parts = node("parts")
        plant_chain("/tmp/deep", DEPTH, "alice")
        plant_chain("/tmp/kept", DEPTH, "alice", theirs_at=2000, other="alicex")
        low_nofile()
        preview = parts._clear("/tmp", alice, time.monotonic() + 60, test=True)
        unchanged = len(levels("/tmp/deep")), len(levels("/tmp/kept"))
        done = parts._clear("/tmp", alice, time.monotonic() + 60)
        return preview, unchanged, done, sorted(os.listdir("/tmp")), levels("/tmp/kept")

    preview, unchanged, done, left, kept = in_namespaces(inside, pid=False, fresh=("/tmp",))
    # deep: 3,001 files and 3,001 directories; kept: 3,001 files and levels 2,001 to 3,000
    assert done == (6002 + 4001, 2001), done
    assert preview == done and unchanged == (DEPTH + 1, DEPTH + 1)
    assert [name for name in left if name not in kept_names("/tmp")] == ["kept"]
    assert kept == [["d"]] * 2000 + [["theirs"]]


def test_a_branch_moved_out_of_the_tree_mid_walk_takes_the_walk_nowhere_outside(accounts):
    """Part 42's walk of /tmp/top (200 levels of alice's: files a and z
    beside d at each, so that whatever the listing's order one is left to
    do above the walk) under a NOFILE limit of 256: when it is at the
    bottom, a rename moves level 50 (a directory it no longer holds) to
    /tmp/out, where alice has files of those very names, and a directory
    d. Going up, ".." of level 50 is /tmp/out, not level 49: the walk
    gives up what is left above and counts an error; /tmp/out keeps
    everything, and so do levels 1 to 49 what the walk had left to do. A
    symlink of alice's at the bottom, to /tmp/out, goes itself, never
    its target."""
    alice, gid = ids_of("alice")

    def inside():
        parts = node("parts")
        plant_chain("/tmp/top", 200, "alice", names=("a", "d", "z"))
        os.symlink("/tmp/out", "/tmp/top" + "/d" * 200 + "/link")
        os.lchown("/tmp/top" + "/d" * 200 + "/link", alice, gid)
        os.mkdir("/tmp/out")
        for name in ("a", "z", "d", "d/a"):
            path = f"/tmp/out/{name}"
            if name == "d":
                os.mkdir(path)
            else:
                Path(path).write_text("bait")
            os.chown(path, alice, gid)
        moved = []

        class Renamed(parts._Clear):
            def judge(self, tree, name, st):
                if tree.depth == 200 and not moved:
                    os.rename("/tmp/top" + "/d" * 50, "/tmp/out/moved")
                    moved.append(name)
                return super().judge(tree, name, st)

        low_nofile()
        done = Renamed(alice, time.monotonic() + 60).run("/tmp/top")
        out = sorted(str(p.relative_to("/tmp/out")) for p in Path("/tmp/out").rglob("*"))
        return moved, done, out, levels("/tmp/top")

    moved, done, out, top = in_namespaces(inside, pid=False, fresh=("/tmp",))
    assert moved, "the walk never reached the bottom"
    assert done[1] >= 1, done
    # level 50, moved, stays in /tmp/out (its parent is not the walk's to act in)
    assert {"a", "z", "d", "d/a", "moved"} <= set(out), out
    # levels 1 to 48 keep d and the file left to do, level 49 that file; the
    # walk held the top (level 0) throughout: it goes on there
    assert len(top) == 50 and top[0] == ["d"], top
    assert all(len(names) == 2 and "d" in names for names in top[1:49]), top
    assert top[49] in (["a"], ["z"]), top[49]


def test_the_sweep_removes_a_scratch_tree_deeper_than_its_descriptors_and_reports_what_stays(accounts):
    """Part 45's walk of job 77's scratch (sweep.run_sweep, as part 45 runs
    it), under a NOFILE limit of 256 in a /tmp of its own: /tmp/slurm77.a,
    3,000 levels of alice's, goes whole (the sweep once recursed and held a
    descriptor per level: it removed nothing of it); in /tmp/slurm77.b,
    alicex's file at level 2,000 stays, reported with a path cut short, and
    so do the directories on the path to it."""
    alice = uid_of("alice")

    def inside():
        sweep = node("sweep")
        plant_chain("/tmp/slurm77.a", DEPTH, "alice")
        plant_chain("/tmp/slurm77.b", DEPTH, "alice", theirs_at=2000, other="alicex", names=("f", "d"))
        low_nofile()
        report = sweep.run_sweep(job="77", patterns=["slurm{jobid}*"], uid=alice, budget=60)
        return report, sorted(os.listdir("/tmp")), levels("/tmp/slurm77.b")

    report, left, kept = in_namespaces(inside, pid=False, fresh=("/tmp",))
    assert report["removed"] == ["/tmp/slurm77.a"] and not report["errors"], report["errors"][:3]
    assert "slurm77.a" not in left and kept == [["d"]] * 2000 + [["theirs"]]
    reasons = {k["path"]: k["reason"] for k in report["kept"]}
    theirs = "/tmp/slurm77.b/d/d/d/d/[1992 levels]/d/d/d/d/theirs"
    assert reasons[theirs] == f"owned by uid {uid_of('alicex')}, not the job's uid {alice}", sorted(reasons)[:5]
    assert reasons["/tmp/slurm77.b"] == "on the path to entries of another account, kept with them"
    assert len(reasons) == 2001 + 1 and max(len(path) for path in reasons) < 80


# -- the bytecode part 45 runs ---------------------------------------------------
def release_status(chain):
    ret = subprocess.run(["/usr/bin/python3", "-I", "-B", str(chain.conf_dir / laid_down("release-tool")),
                          "--root", str(chain.conf_dir), "status"], capture_output=True, text=True, timeout=60)
    assert ret.returncode == 0, ret
    return json.loads(ret.stdout)


def import_sweep_verbosely(release, prefix=()):
    """How a job end's python3 imports the release's sweep (-v: where the code came from)."""
    ret = subprocess.run([*prefix, "/usr/bin/python3", "-I", "-S", "-B", "-v", "-c",
                          "import sys; sys.path.insert(0, sys.argv[1]); import epilog_node.sweep", str(release)],
                         capture_output=True, text=True, timeout=60)
    assert ret.returncode == 0, ret
    return ret.stderr


def part_45_sweeps_a_crashed_display_and_a_dead_clsbd(site, chain, display):
    site.crashed_xvfb(display)
    dead = site.dead_pid()
    site.write(f"/tmp/clsbd.alice.{dead}", b"")
    run_part_45(site, chain, "alice")
    for path in (f"/tmp/.X11-unix/X{display}", f"/tmp/.X{display}-lock", f"/tmp/clsbd.alice.{dead}"):
        assert not os.path.lexists(site.path(path)), path


def test_part_45_runs_the_bytecode_of_its_release_and_writes_none(chain, accounts, site):
    """A job end imports the node program from its release, where release.py
    compiled it at the deploy (checked-hash .pyc files in the manifest),
    instead of compiling thousands of lines at every job end; and the job
    end writes nothing into the release (python3 -B), so the release stays
    exactly its manifest."""
    release = chain.release
    package = LAYOUT["package"]
    tag = subprocess.run(["/usr/bin/python3", "-I", "-c", "import sys; print(sys.implementation.cache_tag)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    pyc = f"{package}/__pycache__/sweep.{tag}.pyc"
    before = release_status(chain)
    assert pyc in before["manifest"] and before["problems"] == [], before
    assert f"{release / pyc} matches {release / package / 'sweep.py'}" in import_sweep_verbosely(release)
    files = sorted(p.relative_to(release) for p in release.rglob("*"))
    part_45_sweeps_a_crashed_display_and_a_dead_clsbd(site, chain, 81)
    assert sorted(p.relative_to(release) for p in release.rglob("*")) == files
    assert release_status(chain) == before


def test_part_45_without_bytecode_for_its_python_compiles_the_source_and_still_sweeps(chain, accounts, site):
    """A node whose python3 finds no bytecode of its own in the release (3.6
    has no hash-based .pyc; another minor version has another cache tag)
    runs the source, as before, and writes no bytecode into the release: the
    release's __pycache__ is hidden here under an empty tmpfs, in the test's
    own mount namespace only."""
    cache = chain.release / LAYOUT["package"] / "__pycache__"
    subprocess.run([*site.prefix, "mount", "-t", "tmpfs", "-o", "mode=0755", "epilog-test-no-pyc", str(cache)], check=True)
    imported = import_sweep_verbosely(chain.release, prefix=site.prefix)
    source = chain.release / LAYOUT["package"] / "sweep.py"
    assert f"code object from {source}\n" in imported and "sweep.cpython" not in imported
    part_45_sweeps_a_crashed_display_and_a_dead_clsbd(site, chain, 82)
    assert os.listdir(site.path(cache)) == []


# -- what users can create never floods root's log --------------------------------
@pytest.fixture
def var_chain_with_metrics(accounts):
    """A chain of its own under /var/tmp (a private-/tmp namespace still
    sees it), with the metrics textfile on."""
    from tests.helpers import Chain, live_spool  # pylint: disable=import-outside-toplevel

    base = Path(tempfile.mkdtemp(prefix="epilog-flood-", dir="/var/tmp"))
    live_spool(base / "spool")
    c = Chain(base / "slurm", base / "localusers", base / "log/epilog.log", base / "spool")
    yield c.lay_down(metrics_file=str(base / "metrics/epilog.prom"))
    shutil.rmtree(base, ignore_errors=True)


def test_a_users_thousands_of_malformed_locks_make_one_warning_and_it_is_counted(var_chain_with_metrics, site):
    """Defects 3 and 4: alicex leaves 5,000 /tmp/.X<N>-lock files with
    malformed content. Every other user's job end keeps them (they are not
    the sweep's to judge) and says so in one warning with the count and the
    first names, not 5,000 lines (or 778 KB) in root's log and syslog; and
    that warning counts in the job end's record and in
    epilog_warnings_total, as every warning does."""
    c = var_chain_with_metrics
    uid, gid = ids_of("alicex")
    for display in range(1000, 6000):
        path = site.path(f"/tmp/.X{display}-lock")
        path.write_bytes(b"garbage")
        os.chown(path, uid, gid)
    before = len(c.log_text().splitlines())
    ret = c.run(c.conf_dir / "epilog.sh", slurmd_env("je.kim", job=9001, SLURM_CONF="/nonexistent/slurm.conf"),
                prefix=site.prefix, timeout=120)
    assert ret.returncode == 0, ret
    lines = c.log_text().splitlines()[before:]
    assert len(lines) < 30, lines[:40]
    flagged = [line for line in lines if " warning " in line and "45-stale-x-display" in line]
    assert len(flagged) == 1 and "5000 entries; the first 3: " in flagged[0], flagged
    record = c.records()[-1]
    assert record["job"] == 9001
    assert record["warnings"] == sum(1 for line in lines if " warning " in line) >= 1, (record, lines)
    sweep = next(p for p in record["parts"] if p["part"] == "45-stale-x-display")["facts"]["sweep"]
    assert sweep["counts"]["x_lock"] == {"removed": 0, "kept": 5000}
    metrics = {line.split()[0]: line.split()[1] for line in (c.log_file.parent.parent / "metrics/epilog.prom")
               .read_text().splitlines() if not line.startswith("#")}
    assert int(metrics["epilog_warnings_total"]) == record["warnings"], metrics
    assert len(list(site.path("/tmp").glob(".X*-lock"))) == 5000
