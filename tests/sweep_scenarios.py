"""One scenario table for the residue sweep, run against both callers: the
sweep run by hand (tests/node/test_sweep.py) and the epilog
part 45-stale-x-display at a real Slurm job end
(tests/slurm/test_sweep_job_end.py).

Each scenario plants real residue through a `Site` (a view of some /tmp, and
a way to run processes where that /tmp is) and returns what the sweep must
remove and what it must keep, with a word of the reason."""
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import ids_of, spawn_as, wait_for


@dataclass
class Expect:
    removed: set = field(default_factory=set)
    kept: dict = field(default_factory=dict)  # path -> a piece of the reason
    logged: list = field(default_factory=list)  # lines the log must hold


class Site:
    """Where residue is planted: ROOT is how this process sees that machine's
    root (Path('/') on the host, /proc/PID/root for a mount namespace), PREFIX
    runs a command there."""

    def __init__(self, root=Path("/"), prefix=()):
        self.root = Path(root)
        self.prefix = list(prefix)
        self.procs = []

    def path(self, path):
        return self.root / str(path).lstrip("/")

    def write(self, path, data, user="alice", mode=0o644):
        target = self.path(path)
        target.write_bytes(data)
        os.chmod(target, mode)
        os.chown(target, *ids_of(user))

    def spawn(self, user, *argv):
        proc = spawn_as(user, *argv, prefix=self.prefix)
        self.procs.append(proc)
        return proc

    def live_pid(self, user="alice"):
        proc = self.spawn(user, "sleep", "600")
        wait_for(lambda: Path(f"/proc/{proc.pid}/comm").read_text().strip() == "sleep", 5, what="a live process")
        return proc.pid

    @staticmethod
    def dead_pid():
        proc = subprocess.Popen(["true"])
        proc.wait()
        return proc.pid

    def xvfb(self, display, user="alice"):
        """A real X server; returns its Popen once its socket is there."""
        proc = self.spawn(user, "Xvfb", f":{display}", "-nolisten", "tcp")
        wait_for(lambda: self.path(f"/tmp/.X11-unix/X{display}").is_socket() and self.path(f"/tmp/.X{display}-lock").exists(),
                 20, what=f"Xvfb :{display} to listen")
        return proc

    def crashed_xvfb(self, display, user="alice"):
        """A real X server killed with SIGKILL: its socket and lock stay."""
        proc = self.xvfb(display, user)
        # Xvfb may still run xkbcomp, which holds its socket: the crash
        # leaves the socket to no process only once its children are gone
        try:
            kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        except FileNotFoundError:
            kids = []
        proc.kill()
        proc.wait()
        wait_for(lambda: not any(_alive(kid) for kid in kids), 20, what=f"the children of Xvfb :{display} to end")
        assert self.path(f"/tmp/.X11-unix/X{display}").is_socket()
        return proc.pid

    def cleanup(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def lock_bytes(pid):
    return b"%10d\n" % pid


# -- the decision table --------------------------------------------------------
def orphan_socket_and_stale_lock(site):
    """Xvfb :80 crashed (kill -9): no process holds X80, the lock's pid is dead."""
    site.crashed_xvfb(80)
    return Expect(removed={"/tmp/.X11-unix/X80", "/tmp/.X80-lock"}, logged=["stale X display purged: :80"])


def orphan_socket_without_lock(site):
    """The field report's case: only the socket is left, no lock."""
    site.crashed_xvfb(81)
    site.path("/tmp/.X81-lock").unlink()
    return Expect(removed={"/tmp/.X11-unix/X81"}, logged=["stale X display purged: :81"])


def held_socket_is_kept_with_its_lock(site):
    """A live Xvfb :82 listens on X82."""
    proc = site.xvfb(82)
    return Expect(kept={"/tmp/.X11-unix/X82": f"held by pid {proc.pid} (Xvfb)",
                        "/tmp/.X82-lock": f"held by pid {proc.pid} (Xvfb)"})


def orphan_socket_with_live_lock_pid_keeps_both(site):
    site.crashed_xvfb(83)
    pid = site.live_pid()
    site.write("/tmp/.X83-lock", lock_bytes(pid), mode=0o444)
    return Expect(kept={"/tmp/.X11-unix/X83": f"lock pid {pid} alive", "/tmp/.X83-lock": f"lock pid {pid} alive"})


def stale_lock_without_socket_is_removed(site):
    site.write("/tmp/.X84-lock", lock_bytes(site.dead_pid()), mode=0o444)
    return Expect(removed={"/tmp/.X84-lock"}, logged=["stale X display purged: :84"])


def clsbd_with_live_pid_is_kept(site):
    pid = site.live_pid()
    site.write(f"/tmp/clsbd.alice.{pid}", b"")
    return Expect(kept={f"/tmp/clsbd.alice.{pid}": f"pid {pid} alive"})


def clsbd_with_dead_pid_is_removed(site):
    dead = site.dead_pid()
    site.write(f"/tmp/clsbd.alice.{dead}", b"")
    site.write(f"/tmp/clsbd.unknownUser.{dead}", b"", user="root")
    return Expect(removed={f"/tmp/clsbd.alice.{dead}", f"/tmp/clsbd.unknownUser.{dead}"},
                  logged=[f"stale clsbd purged: /tmp/clsbd.alice.{dead}"])


def malformed_lock_is_kept_and_reported(site):
    site.crashed_xvfb(85)
    site.write("/tmp/.X85-lock", b"not-a-pid\n", mode=0o444)
    return Expect(kept={"/tmp/.X11-unix/X85": "cannot tell whether the display is in use",
                        "/tmp/.X85-lock": "malformed content"})


SCENARIOS = [
    orphan_socket_and_stale_lock,
    orphan_socket_without_lock,
    held_socket_is_kept_with_its_lock,
    orphan_socket_with_live_lock_pid_keeps_both,
    stale_lock_without_socket_is_removed,
    clsbd_with_live_pid_is_kept,
    clsbd_with_dead_pid_is_removed,
    malformed_lock_is_kept_and_reported,
]


def scratch_of_the_ending_job(site, job):
    """slurm{jobid}* and vcs*{jobid}* of the ending job's user (alice) go,
    with directory trees; another job's (a longer id with the same prefix)
    stays."""
    other = f"{job}1"
    site.write(f"/tmp/slurm{job}.out", b"x")
    for sub in (f"/tmp/vcs_sim_{job}_dir", f"/tmp/vcs_sim_{job}_dir/sub"):
        site.path(sub).mkdir()
        os.chown(site.path(sub), *ids_of("alice"))
    site.write(f"/tmp/vcs_sim_{job}_dir/sub/wave.vpd", b"x")
    site.write(f"/tmp/slurm{other}.out", b"x")
    site.write(f"/tmp/vcs_{other}", b"x")
    return Expect(removed={f"/tmp/slurm{job}.out", f"/tmp/vcs_sim_{job}_dir"},
                  kept={}, logged=[f"job scratch purged: /tmp/slurm{job}.out"]), \
        [f"/tmp/slurm{other}.out", f"/tmp/vcs_{other}"]


def check(site, expect, report=None, log_text=None):
    """The disk, and the report when there is one, agree with EXPECT."""
    for path in expect.removed:
        assert not os.path.lexists(site.path(path)), f"{path} still there"
    for path in expect.kept:
        assert os.path.lexists(site.path(path)), f"{path} was removed"
    if report is not None:
        removed = set(report["removed"])
        assert expect.removed <= removed, (expect.removed - removed, report)
        kept = {k["path"]: k["reason"] for k in report["kept"]}
        for path, reason in expect.kept.items():
            assert path in kept and reason in kept[path], (path, reason, kept.get(path), report)
    if log_text is not None:
        for line in expect.logged:
            assert line in log_text, (line, log_text[-3000:])

