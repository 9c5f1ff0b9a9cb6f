"""The sweep as root in a world-writable /tmp, against hostile and odd
residue. Each test runs in its own mount namespace with a fresh tmpfs /tmp
(the sweep by hand: the sweeper fixture)."""
import os
import socket
import tempfile
import time
from pathlib import Path

import pytest

from tests import sweep_scenarios as sc
from tests.helpers import ids_of


def sweep(sweeper, site, *args):
    return sweeper(site, *args)


def orphan_socket(path):
    """A unix socket file nobody holds: bound, then closed."""
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()


def kept_reason(report, path):
    return next((k["reason"] for k in report["kept"] if k["path"] == path), None)


@pytest.fixture
def outside():
    """A directory outside /tmp that an attacker points at."""
    with tempfile.TemporaryDirectory(prefix="epilog-outside-", dir="/var/tmp") as d:
        yield Path(d)


def test_user_owned_symlink_x11_dir_is_skipped_and_nothing_outside_tmp_is_touched(sweeper, accounts, site, outside):
    orphan_socket(outside / "X90")
    x11 = site.path("/tmp/.X11-unix")
    x11.rmdir()
    x11.symlink_to(outside)
    os.lchown(x11, *ids_of("alice"))
    report = sweep(sweeper, site)
    assert (outside / "X90").is_socket(), "the sweep followed /tmp/.X11-unix out of /tmp"
    assert any("/tmp/.X11-unix: not a real directory (a symlink)" in s for s in report["skipped"]), report


def test_user_owned_x11_dir_is_skipped(sweeper, accounts, site):
    x11 = site.path("/tmp/.X11-unix")
    orphan_socket(x11 / "X91")
    os.chown(x11, *ids_of("alice"))
    report = sweep(sweeper, site)
    assert (x11 / "X91").is_socket()
    assert any("owned by uid" in s for s in report["skipped"]), report


def test_lock_symlink_to_a_file_outside_tmp_leaves_the_target(sweeper, accounts, site, outside):
    target = outside / "precious"
    original = sc.lock_bytes(site.dead_pid())
    target.write_bytes(original)
    lock = site.path("/tmp/.X92-lock")
    lock.symlink_to(target)
    os.lchown(lock, *ids_of("alice"))
    report = sweep(sweeper, site)
    assert target.read_bytes() == original
    assert lock.is_symlink()
    assert kept_reason(report, "/tmp/.X92-lock") == "not a regular file (a symlink)"


def test_regular_file_named_like_a_socket_is_kept(sweeper, accounts, site):
    site.write("/tmp/.X11-unix/X85", b"not a socket")
    report = sweep(sweeper, site)
    assert site.path("/tmp/.X11-unix/X85").exists()
    assert kept_reason(report, "/tmp/.X11-unix/X85") == "not a socket (a regular file)"


def test_fifo_named_as_a_lock_does_not_hang_the_sweep(sweeper, accounts, site):
    os.mkfifo(site.path("/tmp/.X93-lock"))
    started = time.monotonic()
    report = sweep(sweeper, site)
    assert time.monotonic() - started < 60
    assert kept_reason(report, "/tmp/.X93-lock") == "not a regular file (a FIFO)"


def test_odd_names_are_data(sweeper, accounts, site):
    dead = site.dead_pid()
    names = [f"clsbd.al ice.{dead}", f"clsbd.a\nb.{dead}", f"clsbd.-v.{dead}", f"-clsbd.x.{dead}", f"clsbd.{dead}"]
    for name in names:
        site.write(f"/tmp/{name}", b"")
    report = sweep(sweeper, site)
    assert set(report["removed"]) == {f"/tmp/clsbd.al ice.{dead}", f"/tmp/clsbd.a\\nb.{dead}", f"/tmp/clsbd.-v.{dead}"}
    assert site.path(f"/tmp/-clsbd.x.{dead}").exists(), "not a clsbd name: none of the sweep's business"
    assert "malformed name" in kept_reason(report, f"/tmp/clsbd.{dead}")


@pytest.mark.parametrize("content,reason", [
    (b"", "malformed content b'' (0 bytes)"),
    (b"%11d\n" % 4242, "malformed content"),  # 12 bytes
    (b"0", "malformed content"),
    (b"%10d\n" % 0, "pid 0 out of range"),
    (b"1", "malformed content"),
    (b"    abcdef\n", "malformed content"),
    (b"%10d\n" % 9999999999, "out of range"),  # above any pid_max
], ids=["empty", "12-bytes", "0", "0-padded", "1", "non-numeric", "above-pid-max"])
def test_odd_lock_contents_are_kept_and_reported(sweeper, accounts, site, content, reason):
    site.crashed_xvfb(94)
    site.write("/tmp/.X94-lock", content, mode=0o444)
    site.write("/tmp/.X95-lock", content, mode=0o444)  # and without a socket
    report = sweep(sweeper, site)
    for path in ("/tmp/.X11-unix/X94", "/tmp/.X94-lock", "/tmp/.X95-lock"):
        assert os.path.lexists(site.path(path)), path
    assert reason in kept_reason(report, "/tmp/.X94-lock"), report
    assert reason in kept_reason(report, "/tmp/.X95-lock"), report


@pytest.mark.parametrize("whose", ["init", "another user", "root"])
def test_a_pid_of_someone_else_in_a_users_lock_pins_nothing(sweeper, accounts, site, whose):
    """Promise: anything a user can write is not evidence. alice's crashed X
    server left X96 and its lock; she writes into her lock the pid of a
    process that will live for ever but is not hers (pid 1, another user's,
    root's). A pid in a file is evidence only of the file owner's own
    process: the display is swept all the same."""
    site.crashed_xvfb(96)
    pid = {"init": 1, "another user": site.live_pid("je.kim"), "root": os.getpid()}[whose]
    site.write("/tmp/.X96-lock", sc.lock_bytes(pid), mode=0o444)
    site.write("/tmp/.X97-lock", sc.lock_bytes(pid), mode=0o444)  # and without a socket
    report = sweep(sweeper, site)
    assert {"/tmp/.X11-unix/X96", "/tmp/.X96-lock", "/tmp/.X97-lock"} <= set(report["removed"]), report
    for path in ("/tmp/.X11-unix/X96", "/tmp/.X96-lock", "/tmp/.X97-lock"):
        assert not os.path.lexists(site.path(path)), path


def test_the_lock_owners_own_live_process_keeps_the_display(sweeper, accounts, site):
    """A lock naming a live process of the lock's own owner is kept (with its
    orphan socket): the sweep cannot tell that it is not the X server."""
    site.crashed_xvfb(96)
    pid = site.live_pid("alice")
    site.write("/tmp/.X96-lock", sc.lock_bytes(pid), mode=0o444)
    report = sweep(sweeper, site)
    assert site.path("/tmp/.X11-unix/X96").is_socket()
    assert kept_reason(report, "/tmp/.X96-lock") == f"lock pid {pid} alive (sleep)"


def test_unknown_whether_held_keeps_the_socket(sweeper, accounts, site):
    """No socket table can be read (/proc hidden by an empty tmpfs): the
    sweep cannot tell whether X97 is held, so it keeps it."""
    site.crashed_xvfb(97)
    site.path("/tmp/.X97-lock").unlink()
    hidden = sc.Site(site.root, [*site.prefix, "unshare", "--mount", "--propagation", "private", "sh", "-c",
                                 'mount -t tmpfs no-proc /proc && exec "$@"', "sh"])
    report = sweeper(hidden)
    assert site.path("/tmp/.X11-unix/X97").is_socket()
    assert kept_reason(report, "/tmp/.X11-unix/X97").startswith("unknown")


def test_time_budget_stops_the_sweep_and_reports_what_is_left(sweeper, accounts, site):
    """A budget below the pillar's whole second, by hand (the sweep itself
    takes any time ahead; epilog.sweep holds budget= to rules.yaml's range)."""
    dead = site.dead_pid()
    for i in range(3000):
        site.write(f"/tmp/clsbd.u{i}.{dead}", b"")
    report = sweeper(site, "--budget=0.001")
    assert report["budget_exhausted"] is True
    assert report["left"] > 0
    assert len(report["removed"]) + report["left"] <= 3000
    assert len(list(site.path("/tmp").glob("clsbd.*"))) == 3000 - len(report["removed"])
