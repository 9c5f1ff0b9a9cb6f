"""A real one-node Slurm (munge, slurmctld, slurmd: Debian's 22.05, and
26.05 and 24.11 built from source), a real sshd on 127.0.0.1 and a real rsyslogd,
started and stopped by the tests. slurm.conf points Epilog=/Prolog= at the
runners of a chain laid down as the state would (tests/release.py; what
needs Salt itself uses a minion of its own)."""
import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers import (
    HOST,
    Chain,
    clear_stale_dev_log,
    kill_pidfile,
    own_dev_log,
    require,
    require_root,
    require_tools,
    wait_for,
)

# The Slurm releases the real-Slurm tests run against: Debian 12's 22.05, and
# upstream 24.11 and 26.05 built by .ci/slurm-build (24.11 from the tarball
# Debian 13 carries, 26.05 from SchedMD's beside the clone) into their cache
# directories. Each runs with ports and directories of its own.


def built_prefix(release):
    return Path(os.environ.get(f"EPILOG_SLURM_{release.replace('.', '')}_PREFIX",
                               f"/var/cache/epilog-ci/slurm-{release}"))


SLURMS = {
    "22.05": {"sbin": Path("/usr/sbin"), "bin": Path("/usr/bin"), "ports": (16817, 16818)},
    **{release: {"sbin": built_prefix(release) / "sbin", "bin": built_prefix(release) / "bin", "ports": ports,
                 "prefix": built_prefix(release)}
       for release, ports in (("24.11", (17817, 17818)), ("26.05", (18817, 18818)))},
}
# The releases a run takes by default (EPILOG_SLURMS chooses others): the
# oldest and the newest line. 24.11 tests nothing the two do not (upstream's
# scope and cgroup names and each Epilog= run in turn, as 26.05; the
# PrologEpilogTimeout limit, as 22.05), so it runs only when asked for.
DEFAULT_SLURMS = ("22.05", "26.05")
# The tests of what happens at a real job end run on each release; the
# others (a master serving salt/, a release switched under fire) on 22.05.
ON_EVERY_SLURM = ("test_slurm_job_end.py", "test_sweep_job_end.py", "test_hostile_job_end.py",
                  "test_cgroup_job_end.py", "test_su_job_end.py", "test_ipc_job_end.py")
SSHD_PORT = 2222
LISTFILE_SSHD_PORT = 2223
OPERATOR = "opal"


def port_free(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def pid_alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def stop_pidfile(pidfile, timeout=15):
    pid = kill_pidfile(pidfile)
    if pid:
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            os.kill(pid, 9)


@pytest.fixture(scope="session")
def munge():
    require_root()
    require_tools("/usr/sbin/munged", "munge", "unmunge")
    require(Path("/etc/munge/munge.key").exists(), "/etc/munge/munge.key (package munge)")
    Path("/run/munge").mkdir(parents=True, exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    if subprocess.run("munge -n | unmunge", shell=True, capture_output=True).returncode != 0:
        subprocess.run(["setpriv", f"--reuid={pwd.getpwnam('munge').pw_uid}", f"--regid={pwd.getpwnam('munge').pw_gid}",
                        "--clear-groups", "/usr/sbin/munged"], check=True)
    wait_for(lambda: subprocess.run("munge -n | unmunge", shell=True, capture_output=True).returncode == 0,
             10, what="munged to answer")


def pytest_generate_tests(metafunc):
    """A test that takes a Slurm (the slurm or cgroup_slurm fixture) runs on each Slurm release of
    DEFAULT_SLURMS when its file is one of ON_EVERY_SLURM, else on 22.05. EPILOG_SLURMS (a comma
    list of SLURMS: 22.05, or 24.11,26.05) chooses the releases instead; CI leaves it unset. A test
    that takes a v2_case runs on each case of V2_CASES whose release is chosen, and, when its module
    names V2_ONLY_CASES, is one of them."""
    if "slurm_release" not in metafunc.fixturenames and "v2_case" not in metafunc.fixturenames:
        return
    wanted = [v for v in os.environ.get("EPILOG_SLURMS", ",".join(DEFAULT_SLURMS)).split(",") if v]
    if not wanted or set(wanted) - set(SLURMS):
        raise pytest.UsageError(f"EPILOG_SLURMS={os.environ.get('EPILOG_SLURMS')!r}: a comma list of {', '.join(SLURMS)}")
    if "v2_case" in metafunc.fixturenames:
        only = getattr(metafunc.module, "V2_ONLY_CASES", V2_CASES)
        cases = [case for case, (release, _) in V2_CASES.items() if release in wanted and case in only]
        metafunc.parametrize("v2_case", cases, indirect=True, scope="module", ids=[f"slurm{c}" for c in cases])
        return
    every = Path(str(metafunc.definition.path)).name in ON_EVERY_SLURM
    releases = [v for v in SLURMS if v in wanted] if every else ["22.05"]
    metafunc.parametrize("slurm_release", releases, indirect=True, scope="module",
                         ids=[f"slurm{v}" for v in releases])


@pytest.fixture(scope="session")
def slurm_release(request):
    """The Slurm release this test runs against: a key of SLURMS."""
    return getattr(request, "param", "22.05")


class Slurm:
    def __init__(self, base, chain, release="22.05"):
        self.base = base
        self.chain = chain
        self.release = release
        self.sbin = SLURMS[release]["sbin"]
        self.conf = base / "slurm.conf"
        path = f"{SLURMS[release]['bin']}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf), "PATH": path}

    def cmd(self, *argv, check=True, timeout=60):
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, check=check, timeout=timeout)

    def node_state(self):
        out = self.cmd("scontrol", "show", "node", HOST).stdout
        fields = dict(part.split("=", 1) for part in out.split() if "=" in part)
        return fields.get("State", ""), fields.get("Reason", "")

    def run_job(self, user, script, timeout=120):
        """Run SCRIPT with srun as USER; returns (job id, stdout)."""
        pw = pwd.getpwnam(user)
        proc = subprocess.run(
            ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups",
             "srun", "--quiet", "bash", "-c", 'echo "JOBID=$SLURM_JOB_ID"; ' + script],
            env={**self.env, "HOME": pw.pw_dir, "USER": user}, cwd="/tmp",
            capture_output=True, text=True, timeout=timeout,
        )
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        job = next(line.split("=", 1)[1] for line in proc.stdout.splitlines() if line.startswith("JOBID="))
        return job, proc.stdout

    def submit(self, user, script):
        pw = pwd.getpwnam(user)
        proc = subprocess.run(
            ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups",
             "sbatch", "--parsable", "--output=/dev/null", "--wrap", script],
            env={**self.env, "HOME": pw.pw_dir, "USER": user}, cwd="/tmp", capture_output=True, text=True, timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip().split(";")[0]

    def wait_epilog_end(self, job, timeout=90):
        """The runner logs '<epilog.sh> job=N ...: end' as its last line."""
        needle = f"epilog.sh job={job} "
        return wait_for(
            lambda: any(needle in line and line.endswith(": end") for line in self.chain.log_text().splitlines()),
            timeout, what=f"the epilog of job {job} to finish",
        )

    def site_epilog_jobs(self):
        """The jobs whose end ran the site's epilog (the first Epilog=)."""
        jobs = self.base / "log/site-epilog.jobs"
        return jobs.read_text().split() if jobs.exists() else []

    def job_log(self, job):
        return [line for line in self.chain.log_text().splitlines() if f" job={job} " in line]

    def wait_idle(self, timeout=60):
        def idle():
            state, _ = self.node_state()
            return state.split("+")[0] == "IDLE" and "COMPLETING" not in state
        wait_for(idle, timeout, interval=0.3, what="the node to be IDLE")


@pytest.fixture(scope="module")
def slurm(munge, accounts, slurm_release):
    """A real one-node Slurm of SLURM_RELEASE, its Epilog=/Prolog= the
    runners the state laid down; stopped (and its files removed) after the
    module's last test of that release. Module-scoped: no slurmd of the
    tests outlives its module, so the tests that follow (the quickstart, the
    fleet) meet a node without one, as epilog.verify finds a running
    slurmd's slurm.conf and reports the chain it runs."""
    with running_slurm(slurm_release) as s:
        yield s


# What production sites run: proctrack/cgroup and task/cgroup, on the cgroup
# v1 controllers (CgroupPlugin names them: autodetection would pick v2 where
# /sys/fs/cgroup/unified exists). cgroup.conf is read from beside slurm.conf.
CGROUP_CONF = """\
CgroupPlugin=cgroup/v1
ConstrainCores=yes
ConstrainRAMSpace=yes
"""
CGROUP_CONTROLLERS = ("freezer", "cpuset", "memory", "devices", "cpuacct")


def cgroup_root(release):
    """Where the Slurm of RELEASE makes its cgroups in each controller:
    Debian's 22.05 (built with MULTIPLE_SLURMD) at slurm_<host>, upstream's
    builds at slurm."""
    return "slurm_" + HOST if release == "22.05" else "slurm"


@pytest.fixture(scope="module")
def cgroup_slurm(munge, accounts, slurm_release):
    """The slurm fixture's Slurm under proctrack/cgroup and task/cgroup,
    with PrologFlags=Contain (the extern step pam_slurm_adopt adopts into)."""
    for controller in CGROUP_CONTROLLERS:
        mount = Path("/sys/fs/cgroup", controller)
        require(os.access(mount / "tasks", os.W_OK) and os.path.ismount(mount),
                f"the cgroup v1 {controller} controller mounted rw at {mount}")
    with running_slurm(slurm_release, cgroup=True) as s:
        yield s


@pytest.fixture(scope="module")
def tmpfs_slurm(munge, accounts, slurm_release):
    """The slurm fixture's Slurm with job_container/tmpfs (BasePath under
    its own directory, job-tmp). slurmd must run in the initial mount
    namespace: in a nested one the plugin's mounts fail on this kernel."""
    try:  # where PID 1's namespace can be read (it cannot on every machine)
        initial = os.readlink("/proc/self/ns/mnt") == os.readlink("/proc/1/ns/mnt")
    except PermissionError:
        initial = True
    require(initial, "the tests in the initial mount namespace (job_container/tmpfs mounts there)")
    with running_slurm(slurm_release, tmpfs=True) as s:
        yield s


# The cgroup v2 job ends: (release, CgroupJobIdPaths=yes) by case. 22.05
# names a job's directory job_<id>; 26.05 by its SLUID (cgroup_v2.c's
# cgroup_p_step_create prints the step's sluid, which slurmctld gives every
# job: job_record_set_sluid, sluid_init with the cluster id it makes when
# there is no accounting), or job_<id> again with CgroupJobIdPaths=yes.
# slurmd, started by hand (no INVOCATION_ID), moves into the scope's
# slurmd/ (SLURMD_CGROUP), where its prolog of each job runs too.
V2_CASES = {"22.05": ("22.05", False), "26.05-sluid": ("26.05", False), "26.05-jobidpaths": ("26.05", True)}


@pytest.fixture(scope="module")
def v2_case(request):
    """A key of V2_CASES."""
    return request.param


def v2_cgroup_conf(release, job_id_paths):
    """cgroup.conf of a node without systemd on cgroup v2 (22.05 still
    wants CgroupAutomount, defunct from 24.11)."""
    return ("CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n" + ("CgroupAutomount=yes\n" if release == "22.05" else "")
            + ("CgroupJobIdPaths=yes\n" if job_id_paths else ""))


class Cgroup2Namespace:
    """A private mount namespace, held open by a process, with the kernel's
    cgroup2 hierarchy mounted at /sys/fs/cgroup (as a pure-v2 node has it)
    and system.slice made (no systemd makes it here). PREFIX runs a command
    in it; TREE is that /sys/fs/cgroup seen from outside (through the
    holder's root)."""

    def __init__(self):
        require("cgroup2" in Path("/proc/filesystems").read_text(), "cgroup2 in /proc/filesystems")
        require_tools("unshare", "nsenter")
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             "mount -t cgroup2 none /sys/fs/cgroup && echo ready && exec sleep 3600"],
            stdout=subprocess.PIPE, text=True)
        if self.holder.stdout.readline().strip() != "ready":
            self.holder.kill()
            raise AssertionError("could not mount cgroup2 at /sys/fs/cgroup in a mount namespace")
        self.prefix = ["nsenter", f"--target={self.holder.pid}", "--mount", "--"]
        self.tree = Path(f"/proc/{self.holder.pid}/root/sys/fs/cgroup")
        self.made_slice = not (self.tree / "system.slice").exists()
        (self.tree / "system.slice").mkdir(exist_ok=True)

    def close(self):
        """Removes the scopes Slurm made (empty once its jobs and slurmd
        have gone) and the slice if it was made here; ends the holder."""
        try:
            for scope in (self.tree / "system.slice").glob("*slurmstepd.scope"):
                for where, _, _ in sorted(os.walk(scope), key=lambda w: -w[0].count("/")):
                    with contextlib.suppress(OSError):
                        os.rmdir(where)
            if self.made_slice:
                with contextlib.suppress(OSError):
                    (self.tree / "system.slice").rmdir()
        finally:
            self.holder.kill()
            self.holder.wait()


@pytest.fixture(scope="module")
def v2_slurm(munge, accounts, cbin, v2_case):
    """A real one-node Slurm under proctrack/cgroup on cgroup v2
    (cgroup/v2, task/none: the controllers are bound to v1 on this
    machine's kernel, and proctrack needs none), PrologFlags=Contain, one
    start per V2_CASES case. slurmd runs in a Cgroup2Namespace, so its
    slurmstepds, and the epilog chain it runs, read and write the real
    cgroup2 tree at /sys/fs/cgroup. The kernel still lists its v1
    hierarchies in every /proc/PID/cgroup, which Slurm refuses ("Hybrid
    mode is not supported"): tests/c/cgroup2_only.c, preloaded into slurmd,
    shows Slurm's daemons that file as a pure-v2 node would, its 0:: line
    alone, and nothing else (the chain reads the file as it is). Jobs
    share cores: a test runs three at once.
    The Slurm gets NS (the namespace) and NAMING ("id" or "sluid")."""
    release, job_id_paths = V2_CASES[v2_case]
    ns = Cgroup2Namespace()
    preload = ["env", f"LD_PRELOAD={cbin / 'libcgroup2_only.so'}"]
    try:
        with running_slurm(release, cgroup_v2=v2_cgroup_conf(release, job_id_paths), shared=True,
                           place_slurmd=lambda s: ([*ns.prefix, *preload], str(s.conf))) as s:
            s.ns, s.naming = ns, "sluid" if since(release, "26.05") and not job_id_paths else "id"
            yield s
    finally:
        ns.close()


def since(release, first):
    """Whether Slurm RELEASE ("26.05") is FIRST or later."""
    return tuple(map(int, release.split("."))) >= tuple(map(int, first.split(".")))


@contextlib.contextmanager
def running_slurm(slurm_release, cgroup=False, tmpfs=False, conf_via="env", place_slurmd=None, cgroup_v2=None,
                  shared=False):
    """A real one-node Slurm of SLURM_RELEASE, its Epilog=/Prolog= the chain
    (laid down without Salt). slurmd finds its slurm.conf by CONF_VIA:
    SLURM_CONF in its environment ("env", as a systemd Environment= line
    gives it), its -f ("-f"), or configless from slurmctld ("configless":
    --conf-server, no local file; it caches the controller's in its spool).
    PLACE_SLURMD(slurm), when given, is called before slurmd starts and
    returns (a command prefix it runs under, the path of its -f): a slurmd
    in a mount namespace of its own. CGROUP_V2, a cgroup.conf: proctrack/cgroup
    on cgroup v2, with task/none. SHARED: up to 4 jobs share a core (more
    jobs at once than a small machine has cores). The clients always have
    SLURM_CONF."""
    sbin, bin_dir = SLURMS[slurm_release]["sbin"], SLURMS[slurm_release]["bin"]
    build = SLURMS[slurm_release].get("prefix")
    how = f"bash .ci/slurm-build {slurm_release}" if build else "bash .ci/setup"
    for tool in (sbin / "slurmctld", sbin / "slurmd", *(bin_dir / t for t in ("srun", "sbatch", "scontrol", "sinfo"))):
        require(tool.exists(), f"{tool} of Slurm {slurm_release} ({how})")
    if build:
        require((build / ".built").exists(), f"a finished build in {build} ({how})")
    slurmctld_port, slurmd_port = SLURMS[slurm_release]["ports"]
    for port in (slurmctld_port, slurmd_port):
        require(port_free(port), f"port {port} free for the test Slurm")
    # Job users read slurm.conf, and pytest's base temp dir is 0700: use /var/tmp.
    base = Path(tempfile.mkdtemp(prefix=f"epilog-test-slurm-{slurm_release}-", dir="/var/tmp"))
    os.chmod(base, 0o755)
    for sub in ("state", "spool", "log", "run"):
        (base / sub).mkdir()
    chain = Chain(base / "etc-slurm", base / "localusers", base / "log" / "epilog.log", base / "spool")
    chain.lay_down(localusers=["root", OPERATOR])
    # A site's own epilog, named before the chain: Slurm before 24.05 runs
    # only the last Epilog=, 24.05 and later run each, in order.
    site_epilog = base / "site-epilog.sh"
    site_epilog.write_text(f'#!/bin/sh\necho "$SLURM_JOB_ID" >> {base}/log/site-epilog.jobs\n')
    os.chmod(site_epilog, 0o755)
    # From 25.05 these are the limits (unset, they take PrologEpilogTimeout,
    # whose default waits for ever); a 26.05 site sets them.
    timeouts = "EpilogTimeout=120\nPrologTimeout=120" if since(slurm_release, "25.05") else ""
    conf = base / "slurm.conf"
    conf.write_text(f"""\
ClusterName=epilogtest
SlurmctldHost={HOST}
SlurmctldPort={slurmctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
SlurmUser=root
ProctrackType={"proctrack/cgroup" if cgroup or cgroup_v2 else "proctrack/linuxproc"}
TaskPlugin={"task/cgroup" if cgroup else "task/none"}
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd.log
SlurmctldPidFile={base}/run/slurmctld.pid
SlurmdPidFile={base}/run/slurmd.pid
Epilog={site_epilog}
Epilog={chain.conf_dir}/epilog.sh
Prolog={chain.conf_dir}/prolog.sh
PrologFlags={"Contain" if cgroup or cgroup_v2 or tmpfs else "Alloc"}
PrologEpilogTimeout=120
{timeouts}
{"SlurmctldParameters=enable_configless" if conf_via == "configless" else ""}
NodeName={HOST} CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP{" OverSubscribe=FORCE:4" if shared else ""}
""")
    if cgroup or cgroup_v2:
        (base / "cgroup.conf").write_text(cgroup_v2 or CGROUP_CONF)
    if tmpfs:
        with conf.open("a") as handle:
            # job_container/tmpfs is namespace/tmpfs from 25.11 (the old key and
            # name are still taken, with a warning); both read job_container.conf.
            handle.write("NamespaceType=namespace/tmpfs\n" if since(slurm_release, "25.11")
                         else "JobContainerType=job_container/tmpfs\n")
        (base / "job_container.conf").write_text(f"AutoBasePath=true\nBasePath={base}/job-tmp\n")
    s = Slurm(base, chain, slurm_release)
    try:
        s.cmd(str(sbin / "slurmctld"))
        wait_for(lambda: s.cmd("scontrol", "ping", check=False).returncode == 0, 30, what="slurmctld")
        prefix, own_conf = place_slurmd(s) if place_slurmd is not None else ((), str(conf))
        if conf_via == "env" and place_slurmd is None:
            s.cmd(str(sbin / "slurmd"))
        else:
            own = {key: value for key, value in s.env.items() if key != "SLURM_CONF"}
            argv = ["-f", own_conf] if conf_via != "configless" else ["--conf-server", f"{HOST}:{slurmctld_port}"]
            subprocess.run([*prefix, str(sbin / "slurmd"), *argv], env=own, capture_output=True, text=True,
                           check=True, timeout=60)
        s.wait_idle()
        version = s.cmd("scontrol", "--version").stdout.split()  # "slurm 24.11.5", "slurm-wlm 22.05.8"
        assert version and version[-1].startswith(f"{slurm_release}."), (slurm_release, version)
        yield s
    finally:
        stop_pidfile(base / "run/slurmd.pid")
        stop_pidfile(base / "run/slurmctld.pid")
        # a configless slurmd's link to its cache (/run/slurm/conf), once it points nowhere
        link = Path("/run/slurm/conf")
        if link.is_symlink() and os.readlink(link).startswith(str(base)):
            link.unlink()
        shutil.rmtree(base, ignore_errors=True)


class Rsyslog:
    """The tests' rsyslogd, writing every line it gets to SELF.out. It owns
    /dev/log, or, in a run in a mount namespace of its own (a machine whose
    own syslog daemon reads /dev/log: tests.helpers.own_dev_log), a socket
    of its own that is bound over /dev/log in that namespace, where the
    tests and every process they start (slurmd and the chain, sshd, su)
    run."""

    def __init__(self, base):
        self.base = base
        self.conf = base / "rsyslog.conf"
        self.pidfile = base / "rsyslogd.pid"
        self.out = base / "syslog"
        self.own_dev_log = own_dev_log()
        self.socket = base / "log" if self.own_dev_log else Path("/dev/log")
        self.bound = False
        self.conf.write_text(f"""\
module(load="imuxsock" SysSock.Name="{self.socket}")
global(workDirectory="{base}")
*.* action(type="omfile" file="{self.out}")
""")

    def start(self):
        if not self.own_dev_log:
            clear_stale_dev_log()
            if Path("/dev/log").exists() and not Path("/dev/log").is_socket():
                raise AssertionError("/dev/log exists and is not a socket")
        else:
            self.socket.unlink(missing_ok=True)  # a stopped daemon's, never to be bound again
        subprocess.run(["/usr/sbin/rsyslogd", "-f", str(self.conf), "-i", str(self.pidfile)], check=True)
        wait_for(self.socket.is_socket, 10, what=f"rsyslogd to create {self.socket}")
        if self.own_dev_log:
            # a restarted daemon's socket is a new one: bind it in the old one's place
            self.unbind()
            subprocess.run(["mount", "--bind", str(self.socket), "/dev/log"], check=True)
            self.bound = True

    def unbind(self):
        if self.bound:
            subprocess.run(["umount", "/dev/log"], check=True)
            self.bound = False

    def stop(self):
        """Stops the daemon. /dev/log is then gone, or, in a namespace of
        the run's own, the stopped daemon's socket, which nobody reads."""
        stop_pidfile(self.pidfile)
        if not self.own_dev_log:
            Path("/dev/log").unlink(missing_ok=True)

    def text(self):
        return self.out.read_text() if self.out.exists() else ""


@pytest.fixture(scope="session")
def rsyslog(tmp_path_factory):
    require_tools("/usr/sbin/rsyslogd")
    if not own_dev_log():
        clear_stale_dev_log()
        require(not Path("/dev/log").exists(),
                "no other syslog daemon owning /dev/log (as root, the run re-runs itself in a mount namespace of "
                "its own when one does: tests/conftest.py)")
    r = Rsyslog(tmp_path_factory.mktemp("rsyslog"))
    r.start()
    yield r
    r.stop()
    r.unbind()


@pytest.fixture(scope="session", autouse=True)
def syslog_first(request):
    """In a run in a mount namespace of its own, the tests' /dev/log is
    bound before any process of the tier starts: a mount namespace made
    before it (an sshd's, a slurmd's own) would keep the machine's."""
    if own_dev_log():
        request.getfixturevalue("rsyslog")


class Sshd:
    """A real sshd on 127.0.0.1 with key logins for opal and alice. With
    ALLOW_FILE, it runs in a mount namespace whose /etc/pam.d/sshd starts
    the account stack with pam_listfile on that file, as sites restrict ssh
    to the users with a job on the node (the file the prolog and 39 edit).
    PREFIX runs it in another context (a mount namespace), with ENV; with
    KEYS_DIR (a directory only root can write, as sshd's StrictModes wants),
    root logs in too, by a key file there rather than in any home."""

    def __init__(self, base, port, allow_file=None, prefix=(), env=None, keys_dir=None):
        self.base, self.port, self.keys_dir = base, port, keys_dir
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / "host_key")], check=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / "client_key")], check=True)
        pub = (base / "client_key.pub").read_text()
        for user in ("opal", "alice"):
            pw = pwd.getpwnam(user)
            ssh_dir = Path(pw.pw_dir) / ".ssh"
            ssh_dir.mkdir(mode=0o700, exist_ok=True)
            keys = ssh_dir / "authorized_keys"
            old = keys.read_text() if keys.exists() else ""
            if pub not in old:
                keys.write_text(old + pub)
            for path in (ssh_dir, keys):
                os.chown(path, pw.pw_uid, pw.pw_gid)
        conf = base / "sshd_config"
        conf.write_text(f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {base}/host_key
PidFile {base}/sshd.pid
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
UsePAM yes
MaxStartups 100
""")
        if keys_dir is not None:
            keys_dir.mkdir(mode=0o755, exist_ok=True)
            (keys_dir / "authorized_keys").write_text(pub)
            with conf.open("a") as handle:
                handle.write(f"AuthorizedKeysFile {keys_dir}/authorized_keys\nPermitRootLogin prohibit-password\n")
        command = [*prefix, "/usr/sbin/sshd", "-f", str(conf)]
        if allow_file is not None:
            pam = base / "pam.d-sshd"
            pam.write_text(f"account required pam_listfile.so item=user sense=allow file={allow_file} onerr=fail\n"
                           + Path("/etc/pam.d/sshd").read_text())
            command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                       f'mount --bind {pam} /etc/pam.d/sshd && exec "$@"', "sh", *command]
        subprocess.run(command, check=True, env=env)
        wait_for(lambda: not port_free(port), 10, what=f"sshd to listen on {port}")

    def __call__(self, user, command):
        return subprocess.Popen(
            ["ssh", "-i", str(self.base / "client_key"), "-p", str(self.port), "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
             f"{user}@127.0.0.1", command],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def login(self, user, command="echo in", timeout=60):
        """(exit status, stdout, stderr) of one ssh login of USER."""
        proc = self(user, command)
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err

    def logs_in(self, user):
        status, out, _ = self.login(user)
        return status == 0 and out == "in\n"

    def stop(self):
        stop_pidfile(self.base / "sshd.pid")
        if self.keys_dir is not None:
            shutil.rmtree(self.keys_dir, ignore_errors=True)


def start_sshd(tmp_path_factory, name, port, allow_file=None):
    require_tools("/usr/sbin/sshd", "ssh", "ssh-keygen")
    require(port_free(port), f"port {port} free for the test sshd")
    base = tmp_path_factory.mktemp(name)
    os.chmod(base, 0o755)
    Path("/run/sshd").mkdir(exist_ok=True)
    return Sshd(base, port, allow_file)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory, accounts):
    """A real sshd on 127.0.0.1:2222 with key logins for the test accounts."""
    server = start_sshd(tmp_path_factory, "sshd", SSHD_PORT)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def listfile_sshd(tmp_path_factory, accounts, slurm):
    """A real sshd on 127.0.0.1:2223 that lets in only the users listed in
    the test Slurm's ssh allow file (pam_listfile, account stack)."""
    require(any(Path(d, "security/pam_listfile.so").exists() for d in ("/lib/x86_64-linux-gnu", "/usr/lib64")),
            "pam_listfile (libpam-modules)")
    server = start_sshd(tmp_path_factory, "listfile-sshd", LISTFILE_SSHD_PORT, allow_file=slurm.chain.allow_file)
    yield server
    server.stop()
