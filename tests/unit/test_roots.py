"""The resolver of a process's paths in its root (epilog_node/roots.py), on
trees of the test's own uid in tmp_path: the descriptors one resolution
holds at any depth, .. back to a directory left (by identity, a directory
moved meanwhile refused), a path compared by identity to what another
namespace sees, and /proc/PID/root/... told from a path of this root.
No root needed; the node tier (tests/node/test_slurm_conf_root.py) resolves
in a real process's private mount namespace."""
import errno
import os

import pytest

from tests.unit.conftest import node

roots = node("roots")

DEPTH = 300


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def deep(top, depth):
    """DEPTH directories d below TOP, a file f at the bottom; the bottom's path."""
    path = os.path.join(str(top), *["d"] * depth)
    os.makedirs(path)
    with open(os.path.join(path, "f"), "w") as handle:
        handle.write("x\n")
    return path


def ident(st):
    return st.st_dev, st.st_ino


@pytest.fixture
def counted(monkeypatch):
    """The most descriptors open at once (over those before) while a
    resolution opens names, as seen at each open and dup."""
    seen = []
    real_open, real_dup = os.open, os.dup

    def counting(real):
        def wrapped(*args, **kwargs):
            fd = real(*args, **kwargs)
            seen.append(open_fds())
            return fd
        return wrapped

    before = open_fds()
    monkeypatch.setattr(os, "open", counting(real_open))
    monkeypatch.setattr(os, "dup", counting(real_dup))
    yield lambda: max(seen) - before
    monkeypatch.undo()


@pytest.mark.parametrize("how", ["down", "down-up-down", "relative-link-up", "absolute-link"])
def test_a_deep_resolution_holds_a_bounded_number_of_descriptors(tmp_path, counted, how):
    """However deep the path (here 300 directories), and whatever .. and
    symlinks it takes, a resolution holds at most three descriptors at once
    beside the root's (the root's copy, the directory a name is looked up
    in, that name's) and names the file the kernel names."""
    bottom = deep(tmp_path, DEPTH)
    half = os.path.join(str(tmp_path), *["d"] * (DEPTH // 2))
    os.symlink("/".join([".."] * (DEPTH // 2)) + "/" + "/".join(["d"] * DEPTH) + "/f", os.path.join(half, "up"))
    os.symlink(bottom + "/f", os.path.join(str(tmp_path), "abs"))
    path = {"down": bottom + "/f",
            "down-up-down": bottom + "/" + "/".join([".."] * (DEPTH - 1)) + "/" + "/".join(["d"] * (DEPTH - 1)) + "/f",
            "relative-link-up": half + "/up",
            "absolute-link": str(tmp_path) + "/abs"}[how]
    root = roots.Root()
    try:
        before = open_fds()
        fd, st, _ = root.resolve(path)
        os.close(fd)
        assert open_fds() == before
    finally:
        root.close()
    assert ident(st) == ident(os.stat(path))
    assert counted() <= 3 + 1, counted()  # (+1: the listing of /proc/self/fd that counts them)


def test_dotdot_back_to_a_directory_left_must_find_that_directory(tmp_path, monkeypatch):
    """A .. back to a directory whose descriptor was let go reopens it as
    .. of the one below, and refuses (EAGAIN) what is not that very
    directory: here c is moved from b to z between its open and the .."""
    for name in ("a/b/c", "a/z", "a/x"):
        os.makedirs(str(tmp_path / name))
    real_open = os.open

    def moving(name, *args, **kwargs):
        fd = real_open(name, *args, **kwargs)
        if name == "c":
            os.rename(str(tmp_path / "a/b/c"), str(tmp_path / "a/z/c"))
        return fd

    root = roots.Root()
    monkeypatch.setattr(os, "open", moving)
    try:
        with pytest.raises(OSError) as raised:
            root.resolve(f"{tmp_path}/a/b/c/../../x")
    finally:
        monkeypatch.undo()
        root.close()
    assert raised.value.errno == errno.EAGAIN


def test_within_compares_by_identity_never_by_name(tmp_path):
    """Root.within: what a path names (through symlinks) is the directory
    given, or lies below it, by device and inode; a sibling, a directory
    above, or a path that names nothing is not."""
    chain = tmp_path / "chain"
    (chain / "sub").mkdir(parents=True)
    (chain / "sub/epilog.sh").write_text("x\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other/epilog.sh").write_text("x\n")
    (tmp_path / "alias").symlink_to(chain)
    mine = ident(os.stat(str(chain)))
    root = roots.Root()
    try:
        assert root.within(f"{tmp_path}/alias/sub/epilog.sh", mine) is True
        assert root.within(f"{tmp_path}/chain", mine) is True
        assert root.within(f"{tmp_path}/other/epilog.sh", mine) is False
        assert root.within(str(tmp_path), mine) is False
        assert root.within(f"{tmp_path}/none/epilog.sh", mine) is None
        assert root.within(f"{tmp_path}/other/epilog.sh", ident(os.stat(str(tmp_path / "other/epilog.sh")))) is True
    finally:
        root.close()


@pytest.mark.parametrize("path,expect", [
    ("/proc/12/root", (12, "/")),
    ("/proc/12/root/etc/slurm/slurm.conf", (12, "/etc/slurm/slurm.conf")),
    ("/proc/12/rootx/etc", (None, "/proc/12/rootx/etc")),
    ("/proc/\u0661\u0662/root/etc", (None, "/proc/\u0661\u0662/root/etc")),
    ("/proc/self/root/etc", (None, "/proc/self/root/etc")),
    ("/etc/slurm/slurm.conf", (None, "/etc/slurm/slurm.conf")),
])
def test_a_path_in_a_process_root_is_told_from_one_here(path, expect):
    assert roots.split(path) == expect


def test_a_reused_pid_is_refused(tmp_path):
    """A Root opened for a pid with the start time its process was found
    with: another start time (the pid taken by another process since) is
    refused; the same is opened, and /proc/PID is read as that process's."""
    pid = os.getpid()
    with open(f"/proc/{pid}/stat", "rb") as handle:
        started = roots.system.started(handle.read())
    root = roots.Root(pid, started=started)
    try:
        assert root.read_proc("stat", 4096).startswith(f"{pid} (".encode())
        assert root.exists(str(tmp_path))
    finally:
        root.close()
    with pytest.raises(OSError) as raised:
        roots.Root(pid, started=started - 10)
    assert raised.value.errno == errno.ESRCH


def test_squeues_slurm_conf_directory_is_judged_on_descriptors_in_its_root(tmp_path):
    """The chain's own squeue is given a SLURM_CONF whose directory only
    root can write, or none there; a /proc/PID/root/... directory (a
    slurmd's own, in its mount namespace) is judged in that root, not by
    the /proc/PID/root link itself (a symlink, which no rule passes)."""
    judged = node("slurm").conf_dir_root_only
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    pid = os.getpid()
    assert judged("/usr") and judged(f"/proc/{pid}/root/usr") and judged(f"/proc/{pid}/root")
    assert not node("system").Trust().root_only(f"/proc/{pid}/root/usr")  # the link, judged as a path
    assert not judged(str(open_dir)) and not judged(f"/proc/{pid}/root{open_dir}")
    assert judged("/nonexistent-epilog/a/b")  # not there, under / (root's alone)
    # not there, where another account could make it (or turn a dangling
    # symlink into a directory of its own) before squeue reads it: refused
    (open_dir / "dangling").symlink_to(tmp_path / "nowhere")
    assert not judged(str(open_dir / "none")) and not judged(str(open_dir / "dangling"))
    assert not judged(f"/proc/{pid}/root{open_dir}/none/deeper")
    assert not judged("/proc/999999999/root/usr")
