"""The walk parts 42 and 45 remove trees with (epilog_node/walk.py), on a
tree of the test's own uid in tmp_path: the descriptors it holds at any
depth, the path it reports for a deep entry, a symlink never followed. The
node tier (tests/node/test_hostile_sweep.py) walks real users' trees under a
low NOFILE limit and moves a branch out from under the walk."""
import os
import time

from tests.unit.conftest import node

walk = node("walk")
parts = node("parts")


def chain(top, depth):
    """DEPTH directories d below TOP, a file f in each (and in TOP)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for level in range(depth + 1):
        os.close(os.open("f", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
        if level < depth:
            os.mkdir("d", dir_fd=fd)
            below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
    os.close(fd)


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_the_walk_holds_a_bounded_number_of_descriptors_at_any_depth(tmp_path):
    chain(tmp_path, 200)
    seen = []

    class Counting(parts._Clear):
        def check(self):
            seen.append(open_fds())
            super().check()

    before = open_fds()
    assert Counting(os.getuid(), time.monotonic() + 60).run(str(tmp_path)) == (201 + 200, 0)
    assert os.listdir(tmp_path) == [] and open_fds() == before
    # the top, and a handle and a listing for each of the deepest KEEP_OPEN
    assert max(seen) - before <= 1 + 2 * walk.KEEP_OPEN + 1, max(seen) - before


def test_a_deep_entrys_path_is_cut_in_the_middle_for_a_report(tmp_path):
    chain(tmp_path, 30)
    paths = []

    class Shown(walk.Rules):
        test = True

        def judge(self, tree, name, st):
            if tree.depth in (3, 30) and name == "f":
                paths.append(tree.path(name))
            return walk.ENTER if name == "d" else walk.KEEP

    top = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        walk.Walk(top, Shown(), "/tmp/slurm77").run()
    finally:
        os.close(top)
    assert paths == ["/tmp/slurm77/d/d/d/f", "/tmp/slurm77/d/d/d/d/[22 levels]/d/d/d/d/f"]


def test_a_symlink_is_removed_itself_and_never_followed(tmp_path):
    (tmp_path / "top").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "keep").write_text("x")
    (tmp_path / "top" / "link").symlink_to(tmp_path / "outside")
    assert parts._clear(str(tmp_path / "top"), os.getuid(), time.monotonic() + 60) == (1, 0)
    assert (tmp_path / "outside" / "keep").read_text() == "x" and os.listdir(tmp_path / "top") == []


def test_the_deadline_stops_the_walk_and_counts_an_error(tmp_path):
    chain(tmp_path, 5)
    assert parts._clear(str(tmp_path), os.getuid(), time.monotonic() - 1) == (0, 1)
    assert len(os.listdir(tmp_path)) == 2


def test_part_42_shares_its_time_so_a_tree_no_walk_gets_through_leaves_the_rest_theirs():
    """Every user's part 42 walks all of /tmp (another's entry may lie in a
    user's tree): a tree of millions, which no walk gets through, takes at
    most its share of the time, and /dev/shm and System V IPC keep theirs;
    a step that ends early leaves its time to the next."""
    assert parts.share_until(100.0, parts.SHARES, now=0.0) == 50.0  # /tmp: half
    assert parts.share_until(100.0, parts.SHARES[1:], now=50.0) == 75.0  # /dev/shm: half of what is left
    assert parts.share_until(100.0, parts.SHARES[1:], now=10.0) == 55.0  # /tmp done early: more for the rest
    assert parts.share_until(100.0, parts.SHARES[2:], now=75.0) == 100.0  # IPC: the rest
    assert parts.share_until(100.0, parts.SHARES, now=120.0) == 120.0  # past the deadline: nothing
