"""Shared helpers for the epilog formula's tests: real accounts, real processes,
the chain laid down by the real state, and the environment slurmd gives."""
import contextlib
import json
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
# What the formula lays down where (salt/epilog/layout.yaml): the tests take
# names and counts from it, as the states do.
LAYOUT = yaml.safe_load((REPO / "salt/epilog/layout.yaml").read_text())
# under slurm_config_dir: the releases' directory, and the current release
RELEASES = LAYOUT["releases"]["dir"]
CURRENT = f"{RELEASES}/{LAYOUT['releases']['current']}"


def laid_down(file_id):
    """The path under slurm_config_dir (or under a release, for release_data)
    of layout.yaml's file FILE_ID."""
    tool = LAYOUT["releases"]["tool"]
    if file_id == tool["id"]:
        return f"{LAYOUT['releases']['dir']}/{tool['path']}"
    return next(f["path"] for f in LAYOUT["data"] + LAYOUT["release_data"] if f["id"] == file_id)
# The Salt this run tests: the one of the venv pytest runs in (.venv: 3008;
# .venv-3006: 3006, which runs tests/salt a second time).
VENV_BIN = Path(sys.executable).parent
IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}
HOST = socket.gethostname().split(".")[0]

# Accounts the tests create with useradd. je.kim and s.shin are the seed's
# operators; alice an ordinary user; opal an operator with an ssh key.
# The tests' accounts, at uids of their own: part 40 kills every process of a
# job's uid, so no process the tests did not start may run as one of these (the
# accounts fixture checks). useradd would hand out the next free uid from
# 1000, which a machine's own services may use without a passwd entry.
ACCOUNTS = {"alice": 50101, "alicex": 50102, "je.kim": 50103, "s.shin": 50104, "opal": 50105, "jeXkim": 50106,
            "alice-admin": 50107, "alice.b": 50108}
# names useradd takes only with --badname (capitals)
BADNAMES = {"jeXkim"}
# The operators of the seed's list.
OPERATORS = ["root", "je.kim", "s.shin"]


def live_spool(path):
    """A directory standing in for slurmd's live SlurmdSpoolDir: slurmd keeps
    its cred_state there, which is what the runner checks before it trusts
    the directory's (absent) step sockets."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "cred_state").write_bytes(b"")
    return path


def require(ok, what):
    """A missing prerequisite fails the run under CI=true, else skips."""
    if ok:
        return
    if IN_CI:
        pytest.fail(f"missing prerequisite (CI=true, so this is a failure): {what}")
    pytest.skip(f"missing prerequisite: {what}")


def require_root():
    require(os.geteuid() == 0, "the tests run as root (the epilog runs as root)")


def require_tools(*tools):
    for tool in tools:
        require(shutil.which(tool) or Path(tool).exists(), f"{tool} is not installed (bash .ci/setup)")


# glibc's files backend reads a passwd line starting with '-' as NIS compat
# syntax, so no local account can be named '-v'. Sites get such names from a
# directory service: the test NSS module (tests/c/nss_epilogtest.c, the
# directory_users fixture) serves '-v' as uid 50199, the uid slurmd passes in
# SLURM_JOB_UID, with real processes and files owned by that uid.
NO_PASSWD_ENTRY = {"-v": (50199, 50199), "jekim-alias": (50103, 50103)}


def ids_of(user):
    if user in NO_PASSWD_ENTRY:
        return NO_PASSWD_ENTRY[user]
    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


def uid_of(user):
    return ids_of(user)[0]


def slurmd_env(user, job=4242, uid=None, **extra):
    """The environment slurmd gives an epilog: the job's user, uid and id, and no PATH."""
    env = {"SLURM_JOB_USER": user, "SLURM_JOB_ID": str(job), "SLURMD_NODENAME": HOST}
    if uid is None:
        try:
            uid = uid_of(user)
        except KeyError:
            uid = None
    if uid is not None:
        env["SLURM_JOB_UID"] = str(uid)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def as_user(user):
    """The command prefix that runs what follows as USER (uid, gid, no other
    groups): the one way the tests act as an ordinary user."""
    uid, gid = ids_of(user)
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]


def spawn_as(user, *argv, prefix=()):
    """Start a real process as USER in its own session (a job's stray), after
    PREFIX (a namespace to enter, say). The tests' one process spawner
    (hostile() is the same with a pipe for its first line)."""
    cmd = [*prefix, *as_user(user), *argv]
    return subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stray(user):
    """A stray process of USER that lives until something kills it."""
    proc = spawn_as(user, "sleep", "600")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if os.stat(f"/proc/{proc.pid}").st_uid == uid_of(user) and "sleep" in Path(
                f"/proc/{proc.pid}/cmdline"
            ).read_text():
                return proc
        except (FileNotFoundError, KeyError):
            pass
        time.sleep(0.02)
    raise AssertionError(f"could not start a stray process as {user}")


def killed(proc, timeout=5.0):
    """True when PROC was killed by a signal within TIMEOUT (reaps it)."""
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return rc < 0


def still_running(proc, grace=0.3):
    """True when PROC is still alive after a short grace period."""
    time.sleep(grace)
    return proc.poll() is None


def end(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


def owned_file(user, directory="/tmp", name=None):
    path = Path(directory) / (name or f"epilog-test-{user}-{os.getpid()}-{time.monotonic_ns()}")
    path.write_text("job residue\n")
    os.chown(path, *ids_of(user))
    return path


class Chain:
    """The epilog chain as the state laid it down under CONF_DIR.

    PREFIX runs every command in another context (a mount namespace, dropped
    capabilities); VIEW maps a path to where this process sees it."""

    def __init__(self, conf_dir, allow_file, log_file, spool_dir, prefix=(), view=None, run_dir=None):
        self.conf_dir = Path(conf_dir)
        self.allow_file = Path(allow_file)
        self.log_file = Path(log_file)
        # the decision records, beside the log
        self.record_file = self.log_file.parent / "records.jsonl"
        self.spool_dir = Path(spool_dir)
        # the job marks of a chain of its own, beside its spool
        self.run_dir = Path(run_dir) if run_dir else self.spool_dir.parent / "epilog-run"
        self.prefix = list(prefix)
        self._view = view or Path

    def view(self, path):
        return self._view(Path(path))

    @property
    def release(self):
        """The current release's directory (RELEASES/<id>), as the
        chain names it: its scripts log this path."""
        current = os.readlink(self.view(self.conf_dir / CURRENT))
        return self.conf_dir / RELEASES / current

    @property
    def release_id(self):
        return self.release.name

    @property
    def localusers(self):
        return self.view(self.release / laid_down("localusers-backup"))

    def part(self, name):
        """The formula's part NAME in the current release (where layout.yaml
        puts it)."""
        return self.release / next(script["path"] for script in LAYOUT["scripts"]
                                   if script["path"].endswith(f"/{name}"))

    def run(self, script, env, prefix=(), timeout=60):
        cmd = [*self.prefix, *prefix, str(script)]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)

    def run_part(self, name, env, prefix=()):
        return self.run(self.part(name), env, prefix=prefix)

    def records(self):
        """The decision records the chain wrote, oldest first (the .1 file
        before the current one), each parsed: a line that is not JSON fails."""
        lines = []
        for path in (Path(f"{self.record_file}.1"), self.record_file):
            try:
                text = self.view(path).read_text()
            except FileNotFoundError:
                continue
            # a line being appended right now (no newline yet) is not one yet
            lines += text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
        return [json.loads(line) for line in lines]

    def log_text(self):
        try:
            return self.view(self.log_file).read_text()
        except FileNotFoundError:
            return ""

    def settings(self, **extra):
        """This chain's settings; EXTRA sets or overrides any key."""
        settings = {"slurm_config_dir": self.conf_dir, "ssh_allow_file": self.allow_file, "log_file": self.log_file,
                    "record_file": self.record_file, "slurmd_spool_dir": self.spool_dir, "run_dir": self.run_dir,
                    "localusers": list(OPERATORS)}
        settings.update(extra)
        return settings

    def pillar(self, **extra):
        """This chain's pillar; EXTRA sets or overrides any key."""
        return epilog_pillar(**self.settings(**extra))

    def lay_down(self, **extra):
        """Lay this chain down as the state would, without Salt (a settings
        file, the release, release.py), with EXTRA settings."""
        from tests.release import lay_down  # pylint: disable=import-outside-toplevel

        lay_down(**self.settings(**extra))
        return self


def epilog_pillar(base=None, **settings):
    """The tests' one pillar builder: {"epilog": ...} with the chain's paths
    under BASE (slurm/, localusers, epilog.log, records.jsonl, spool/, run/,
    and slurm-operators: epilog.pam and epilog.clean never meet the
    machine's own list), then SETTINGS (any key of the pillar; paths may be
    Paths). localusers, which has no default, is [root] unless SETTINGS
    sets it."""
    data = {"localusers": ["root"]}
    if base is not None:
        base = Path(base)
        data.update(slurm_config_dir=base / "slurm", ssh_allow_file=base / "localusers", log_file=base / "epilog.log",
                    record_file=base / "records.jsonl", slurmd_spool_dir=base / "spool", run_dir=base / "run",
                    pam_operators_file=base / "slurm-operators")
    data.update(settings)
    return {"epilog": {key: str(value) if isinstance(value, Path) else value for key, value in data.items()}}


class SaltCall:
    """salt-call --local against a minion configured by pytest-salt-factories,
    serving salt/ from this repo and the epilog module from _modules/."""

    def __init__(self, config_dir, bin_dir=VENV_BIN):
        self.config_dir, self.bin_dir = str(config_dir), Path(bin_dir)

    def __call__(self, *args, pillar=None, prefix=(), timeout=300):
        cmd = [
            *prefix, str(self.bin_dir / "salt-call"), f"--config-dir={self.config_dir}", "--local",
            "--out=json", "--retcode-passthrough", "--log-level=quiet", *args,
        ]
        if pillar is not None:
            cmd.append("pillar=" + json.dumps(pillar))
        # cwd=/ so that the repo's Saltfile (for operators) does not override
        # this minion's config.
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd="/")
        try:
            data = json.loads(proc.stdout)["local"] if proc.stdout.strip() else None
        except (ValueError, KeyError):
            data = None
        return SaltResult(proc.returncode, data, proc.stdout, proc.stderr)


def local_minion(salt_factories, minion_id, pillar_root, module_dirs=None, grains=None):
    """A minion config (file_client: local; never started) that serves this
    repo's salt/ alone, as a formula is installed, and loads the epilog
    module from _modules/ (unless MODULE_DIRS says otherwise: [] for a
    minion that has only what it synced), with PILLAR_ROOT as its pillar.
    GRAINS (a dict) override the minion's own grains. Returns a SaltCall on
    it that runs this run's salt-call; .config_dir is the config directory,
    .config the minion's configuration."""
    minion = salt_factories.salt_minion_daemon(
        minion_id,
        overrides={
            "file_client": "local",
            "file_roots": {"base": [str(REPO / "salt")]},
            "pillar_roots": {"base": [str(pillar_root)]},
            "module_dirs": [str(REPO)] if module_dirs is None else list(module_dirs),
            **({"grains": dict(grains)} if grains else {}),
            # salt-call's own log lines stay out of the pytest process.
            "pytest-minion": {"log": {"disabled": True}},
        },
    )
    call = SaltCall(minion.config_dir)
    call.config = minion.config
    return call


class SaltResult:
    def __init__(self, returncode, data, stdout, stderr):
        self.returncode, self.data, self.stdout, self.stderr = returncode, data, stdout, stderr

    @property
    def states(self):
        """{state id: result dict}, when the call returned state results."""
        if not isinstance(self.data, dict):
            return {}
        return {key.split("_|-")[1]: value for key, value in self.data.items() if "_|-" in key}

    def __repr__(self):
        failed = {key: value.get("comment") for key, value in self.states.items() if value.get("result") is False}
        return (f"SaltResult(rc={self.returncode}, failed={failed!r}, stdout={self.stdout[:2000]!r}, "
                f"stderr={self.stderr[-2000:]!r})")


def wait_for(predicate, timeout, interval=0.1, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def kill_pidfile(pidfile, sig=signal.SIGTERM):
    try:
        pid = int(Path(pidfile).read_text().split()[0])
        os.kill(pid, sig)
        return pid
    except (FileNotFoundError, ValueError, ProcessLookupError, IndexError):
        return None


def clear_stale_dev_log():
    """A syslog daemon that was killed (a run cut short, a crash) leaves its
    /dev/log socket behind with nobody reading it. That socket is not another
    daemon: a datagram to it is refused. Remove it so that ours can bind;
    leave a live one (it is another daemon's) and anything not a socket."""
    dev_log = Path("/dev/log")
    if not dev_log.is_socket() or dev_log.is_symlink():
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(str(dev_log))
        except ConnectionRefusedError:
            dev_log.unlink(missing_ok=True)
        except OSError:
            pass


# Set, to the mount namespace the run started in, in a run that re-ran itself
# in a mount namespace of its own (tests/conftest.py, own_dev_log).
OWN_DEV_LOG_ENV = "EPILOG_TESTS_OWN_DEV_LOG"


def own_dev_log():
    """True in a run that re-ran itself in a mount namespace of its own
    because a syslog daemon of the machine's reads /dev/log: there the
    tests' rsyslogd's socket is bound over /dev/log (tests/slurm's
    rsyslog), and the machine's daemon keeps its own and sees none of the
    tests' lines. The namespace is checked, not only the variable: one set
    in the machine's own namespace is not a licence to mount over its
    /dev/log."""
    started_in = os.environ.get(OWN_DEV_LOG_ENV)
    return bool(started_in) and os.readlink("/proc/self/ns/mnt") != started_in


def private_tmp_namespace(setup=""):
    """A process holding a private mount namespace whose /tmp is a fresh
    tmpfs with /tmp/.X11-unix root:root 1777 (as systemd-tmpfiles makes it).
    When this repo itself lives under /tmp, it is bound back in place so the
    namespace still sees it. Returns (holder Popen, nsenter prefix, root view)."""
    script = r'''
set -e
keep=$(mktemp -d /var/tmp/epilog-keep-XXXXXX)
mount --bind "$0" "$keep"
mount -t tmpfs -o mode=1777 epilog-test-tmp /tmp
mkdir -m 1777 /tmp/.X11-unix
case "$0" in /tmp/*) mkdir -p "$0"; mount --bind "$keep" "$0" ;; esac
umount -l "$keep"; rmdir "$keep"
''' + setup + '''
echo ready
exec sleep 86400
'''
    holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(REPO)],
                              stdout=subprocess.PIPE, text=True)
    line = holder.stdout.readline().strip()
    if line != "ready":
        holder.kill()
        raise AssertionError("could not set up a private /tmp in a mount namespace")
    return holder, ["nsenter", f"--target={holder.pid}", "--mount"], Path(f"/proc/{holder.pid}/root")


def process_uids(pid):
    """(real, effective, saved) uids of PID when it is alive, else None. A
    zombie is dead unless its other threads still run; this machine's PID 1
    never reaps, so kill -0 would call every killed orphan alive."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    state = fields["State"].split()[0]
    if state in ("Z", "X") and int(fields.get("Threads", "1")) <= 1:
        return None
    return tuple(int(uid) for uid in fields["Uid"].split()[:3])


def live_processes_of(uid):
    """pid -> name of every live process whose real or saved uid is UID."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            uids = process_uids(entry.name)
            if uids and uid in (uids[0], uids[2]):
                try:
                    found[int(entry.name)] = (entry / "comm").read_text().strip()
                except OSError:
                    found[int(entry.name)] = "?"
    return found


def kill_all_of(user):
    """Test cleanup: whatever USER still runs goes."""
    subprocess.run(["pkill", "-KILL", "-U", str(uid_of(user))], capture_output=True)


def hostile(user, *argv, prefix=(), reaper=None):
    """Start ARGV as USER in a session of its own and wait for the first line
    it prints ("ready", "locked", ...). Returns (Popen, that line). With
    REAPER (the fighter helper), ARGV runs under `fighter reap`, which reaps
    its orphans as a node's init would."""
    reap = [str(reaper), "reap"] if reaper else []
    proc = subprocess.Popen([*prefix, *reap, *as_user(user), *argv],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    line = proc.stdout.readline().strip()
    if not line:
        proc.kill()
        raise AssertionError(f"{argv} as {user} printed nothing (rc={proc.wait()})")
    return proc, line


def load_file(path, name):
    """The Python file PATH loaded as a module named NAME, as the tests read
    the epilog module and the sweep without Salt's loader."""
    spec = spec_from_file_location(name, path)
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x1000, 0x4000, 0x40000


def _kept_under(fresh):
    """{directory of FRESH: [the checkout and the tests' Python under it]}:
    what a fresh tmpfs there must not hide from the tests (a clone in /tmp,
    as a CI machine may make one)."""
    kept = {}
    for path in dict.fromkeys([str(REPO), sys.prefix]):
        for directory in fresh:
            if path == directory or path.startswith(directory.rstrip("/") + "/"):
                if not any(path.startswith(other.rstrip("/") + "/") for other in kept.get(directory, [])):
                    kept.setdefault(directory, []).append(path)
    return kept


def kept_names(directory):
    """The names in DIRECTORY, freshly mounted by in_namespaces, that are
    the checkout's or the tests' Python's, bound back (a clone in /tmp): a
    test that lists DIRECTORY leaves them out."""
    return {path[len(directory.rstrip("/")) + 1:].split("/", 1)[0] for path in _kept_under([directory]).get(directory, [])}


def in_namespaces(fn, *args, pid=True, ipc=False, fresh=(), timeout=300):
    """FN(*ARGS) in a fork of this process (the in-process minion's loaders
    come along) in namespaces of its own: a mount namespace, with a fresh
    tmpfs on each directory of FRESH; with PID a pid namespace and a /proc
    of its own (it sees none of the node's processes: no slurmd of the
    machine's); with IPC a System V IPC namespace. What FN returns
    (pickled), or what it raised, raised here. Whatever FN starts ends
    with it (the pid namespace's init is FN's process). The checkout and
    the tests' Python stay where they are under a fresh directory (bound
    back over its tmpfs)."""
    import ctypes  # pylint: disable=import-outside-toplevel
    import pickle  # pylint: disable=import-outside-toplevel
    import select  # pylint: disable=import-outside-toplevel

    libc = ctypes.CDLL(None, use_errno=True)

    def check(rc, what):
        if rc != 0:
            raise OSError(ctypes.get_errno(), what)

    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(read_end)
            check(libc.unshare(CLONE_NEWNS | (CLONE_NEWPID if pid else 0) | (CLONE_NEWIPC if ipc else 0)),
                  "unshare")
            check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
            # (opened in the new namespace: a bind mount's source must be one of its mounts)
            kept = {directory: [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in paths]
                    for directory, paths in _kept_under(fresh).items()}
            inner = os.fork() if pid else 0
            if inner == 0:
                try:
                    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: it dies with the child, at a timeout too
                    if pid:
                        check(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None),
                              "mount /proc")
                    for directory in fresh:
                        check(libc.mount(b"epilog-ns", os.fsencode(directory), b"tmpfs", 0, b"mode=0755"),
                              f"mount tmpfs on {directory}")
                        for path, handle in kept.get(directory, ()):
                            os.makedirs(path, exist_ok=True)
                            check(libc.mount(b"/proc/self/fd/%d" % handle, os.fsencode(path), None,
                                             MS_BIND | MS_REC, None), f"bind {path} back")
                    try:
                        result = ("ok", fn(*args))
                    except BaseException as exc:  # noqa: BLE001 - raised again in the parent
                        result = ("raised", exc)
                    try:
                        data = pickle.dumps(result)
                        pickle.loads(data)  # an exception that pickles may not unpickle
                    except Exception:  # noqa: BLE001 - what cannot be pickled is told by its repr
                        data = pickle.dumps(("raised", AssertionError(repr(result[1]))))
                    view = memoryview(data)
                    while view:
                        view = view[os.write(write_end, view):]
                    code = 0
                finally:
                    os._exit(code)
            os.close(write_end)
            code = os.waitstatus_to_exitcode(os.waitpid(inner, 0)[1])
        finally:
            os._exit(code)
    os.close(write_end)
    chunks, until = [], time.monotonic() + timeout
    try:
        while True:
            left = until - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                os.kill(child, signal.SIGKILL)
                raise AssertionError(f"{getattr(fn, '__name__', fn)} did not finish within {timeout} s")
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        status = os.waitpid(child, 0)[1]
    if not chunks:
        raise AssertionError(f"{getattr(fn, '__name__', fn)} in its namespaces ended with status "
                             f"{os.waitstatus_to_exitcode(status)} and said nothing")
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "raised":
        raise value
    return value


# (an hour at most, as the sleep it stands for: a holder whose pytest was
# killed outright ends all the same)
REAPER = ("import os, time\n"
          "until = time.monotonic() + 3600\n"
          "while time.monotonic() < until:\n"
          "    try:\n"
          "        while os.waitpid(-1, os.WNOHANG)[0]:\n"
          "            pass\n"
          "    except ChildProcessError:\n"
          "        pass\n"
          "    time.sleep(0.05)\n")


@contextlib.contextmanager
def mount_namespace(fresh=(), copied=(), pid=False, ipc=False, within=()):
    """A private mount namespace, held open by a process while the block
    runs: a fresh tmpfs (0755) on each directory of FRESH, and on each of
    COPIED a tmpfs holding a copy of what the node has there, so whatever
    runs in it writes none of the node's own. With PID, a pid namespace of
    its own too (its /proc shows none of the node's processes: no slurmd of
    the machine's); with IPC, a System V IPC namespace of its own. WITHIN,
    the prefix of another mount namespace (one without a pid namespace of
    its own), makes it from that one, with that one's mounts. Yields the
    command prefix (nsenter) that runs a command in it."""
    require_tools("unshare", "nsenter")
    saved = Path(tempfile.mkdtemp(prefix="epilog-ns-", dir="/var/tmp"))
    script = []
    for i, directory in enumerate(copied):
        shutil.copytree(directory, saved / str(i), symlinks=True)
        script.append(f'mount -t tmpfs -o mode=0755 epilog-ns "{directory}" && cp -a "{saved}/{i}/." "{directory}/"')
    script += [f'mount -t tmpfs -o mode=0755 epilog-ns "{directory}"' for directory in fresh]
    # (--kill-child: the namespace's init, and so all in it, dies with the holder)
    pid_ns = ["--pid", "--fork", "--kill-child", "--mount-proc"] if pid else []
    # a pid namespace's init reaps what is left to it (a daemon's children,
    # once the daemon has gone: zombies would hold up whoever waits for them)
    hold = f"exec /usr/bin/python3 -c {shlex.quote(REAPER)}" if pid else "exec sleep 3600"
    holder = subprocess.Popen(
        [*within, "unshare", "--mount", "--propagation", "private", *(["--ipc"] if ipc else []), *pid_ns, "sh", "-c",
         " && ".join([*script, "echo $$ ready"]) + " && " + hold],
        stdout=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline().split()
        assert line[1:] == ["ready"], "the mount namespace was not made"
        # with a pid namespace, the holder is unshare's child (pid 1 inside)
        target = holder.pid if not pid else int(Path(f"/proc/{holder.pid}/task/{holder.pid}/children").read_text()
                                                     .split()[0])
        yield ["nsenter", f"--target={target}", "--mount", *(["--pid"] if pid else []), *(["--ipc"] if ipc else []),
               "--"]
    finally:
        holder.kill()
        holder.wait()
        shutil.rmtree(saved, ignore_errors=True)
