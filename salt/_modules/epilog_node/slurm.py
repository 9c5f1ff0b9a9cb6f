"""The running Slurm, as the last-job evidence (evidence.NodeFacts) asks
it: where its tools come from (beside the running slurmd, before PATH, only
where root alone can have put them), whether a process is root's real
slurmstepd, and the controller's jobs on this node (squeue, under a
timeout, with a slurm.conf only root can write). Below the evidence: it
imports nothing of the chain.
"""
import os

from . import system


class Slurm:
    """The Slurm of one job end (or look between jobs): SLURMD_PID, the
    running slurmd (the runner's parent; 0: none known), ENV, what slurmd
    gave the chain (SLURMD_NODENAME, SLURM_CONF), TRUST (system.Trust), and
    SETTINGS (epilog:squeue_timeout). Each tool is looked for once."""

    def __init__(self, slurmd_pid, env, trust, settings):
        self.slurmd_pid, self.env, self.trust, self.settings = slurmd_pid, env, trust, settings
        self._dirs = None
        self._tools = {}

    def dirs(self):
        """Where a Slurm tool may come from: beside the running slurmd (the
        runner's parent; Debian names the binary slurmd-wlm) and the bin
        beside its sbin, before PATH. A node may carry more than one Slurm
        (a distro package beside a site's build under /opt): only the running
        slurmd's own slurmstepd and squeue speak for it."""
        if self._dirs is None:
            dirs = []
            try:
                if self.slurmd_pid and os.lstat("/proc/%d" % self.slurmd_pid).st_uid == 0:
                    exe = os.readlink("/proc/%d/exe" % self.slurmd_pid)
                    if exe.endswith(" (deleted)"):
                        exe = exe[:-len(" (deleted)")]
                    plain = exe.startswith("/") and system.plain(exe, "._+@/-")
                    if plain and os.path.basename(exe) in ("slurmd", "slurmd-wlm", "slurmstepd", "slurmstepd-wlm"):
                        dirs.append(os.path.dirname(exe))
                        if dirs[0].endswith("/sbin"):
                            dirs.append(dirs[0][:-len("/sbin")] + "/bin")
            except (OSError, ValueError):
                pass
            self._dirs = dirs + system.PATH.split(":")
        return self._dirs

    def tool(self, name):
        """The first NAME in dirs() that only root can have put there: in a
        directory only root can write, a regular executable file of root's
        that group and others cannot write (a symlink counts by what it
        resolves to, which must pass the same test)."""
        if name not in self._tools:
            found = None
            for directory in self.dirs():
                if not self.trust.root_only(directory) or not os.path.lexists(os.path.join(directory, name)):
                    continue
                found = self.trust.root_tool(os.path.join(directory, name))
                if found:
                    break
            self._tools[name] = found
        return self._tools[name]

    def real_stepd(self, pid, proc=None):
        """Is PID root's real slurmstepd? A user can name a process anything
        and parent their own processes to it; only root's own process running
        the slurmstepd binary counts (a zombie has no executable, and never
        counts). PROC: its /proc/PID descriptor (system.open_proc), read
        through when given; then OSError when it cannot be read and has not
        ended (a zombie's executable reads as gone)."""
        stepd = self.tool("slurmstepd")
        if not stepd:
            return False
        if proc is not None:
            try:
                return os.fstat(proc).st_uid == 0 and os.path.samestat(os.stat("exe", dir_fd=proc), os.stat(stepd))
            except OSError as exc:
                if exc.errno in system.GONE:
                    return False
                raise  # unreadable, not gone: the caller's look is unreadable
        try:
            if os.lstat("/proc/%d" % pid).st_uid != 0:
                return False
            return os.path.samestat(os.stat("/proc/%d/exe" % pid), os.stat(stepd))
        except OSError:
            return False

    def squeue(self):
        """(lines, None): the controller's jobs on this node, of every user
        and in every state, "jobid STATE start-epoch uid", asked under
        squeue_timeout; or (None, why). Users choose none of these fields."""
        node = self.env.get("SLURMD_NODENAME")
        if not node:
            return None, "SLURMD_NODENAME is unset"
        # squeue's answer is only as good as the slurm.conf it reads: one
        # another account can rewrite (configless mode caches it in the
        # spool, the slurm user's on Debian) could point it at a controller
        # of theirs.
        conf = self.env.get("SLURM_CONF") or ""
        conf_dir = os.path.dirname(conf) if conf.startswith("/") and conf.count("/") > 1 else ""
        if conf_dir and not conf_dir_root_only(conf_dir):
            return None, "SLURM_CONF is in %s, which another account can write; squeue not asked" % system.show(conf_dir)
        tool = self.tool("squeue")
        if not tool:
            return None, "no squeue only root can have put beside slurmd or on PATH"
        import subprocess  # only when the controller is asked  # pylint: disable=import-outside-toplevel

        env = dict(system.child_env(self.env), SLURM_TIME_FORMAT="%s")
        try:
            proc = subprocess.run([tool, "--noheader", "--nodelist=" + node, "--states=all", "--format=%A %T %S %U"],
                                  env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, timeout=self.settings["squeue_timeout"], check=False)
        except subprocess.TimeoutExpired:
            return None, "squeue failed or timed out (rc=124)"
        except OSError as exc:
            return None, "squeue failed or timed out (%s)" % exc.strerror
        if proc.returncode != 0:
            return None, "squeue failed or timed out (rc=%d)" % proc.returncode
        return [line for line in proc.stdout.decode("ascii", "replace").split("\n") if line.strip()], None


def conf_dir_root_only(conf_dir):
    """Whether only root can write CONF_DIR, the directory of the
    SLURM_CONF squeue is given, or it is not there and only root can
    make it (its deepest directory that is there is one only root can
    write: squeue then finds no slurm.conf and fails; under a directory
    another account writes it could be made, or be a dangling symlink
    made real, between this look and squeue's): judged as roots.Root
    judges a slurmd's paths, on the descriptor of each directory its
    resolution goes through; a /proc/PID/root/... directory (a slurmd's
    own, in its mount namespace) resolved in that root, never through
    the magic link."""
    from . import roots  # pylint: disable=import-outside-toplevel

    pid, inner = roots.split(conf_dir)
    try:
        root = roots.Root(pid)
    except OSError:
        return False
    try:
        while not root.exists(inner) and inner not in ("/", ""):
            inner = os.path.dirname(inner)
        return root.root_only(inner or "/")
    finally:
        root.close()
