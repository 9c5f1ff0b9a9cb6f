"""A real one-node Slurm (munge, slurmctld, slurmd from Debian), a real sshd
on 127.0.0.1 and a real rsyslogd, started and stopped by the tests. slurm.conf
points Epilog=/Prolog= at the runners the state laid down."""
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers import HOST, Chain, kill_pidfile, lay_down, require, require_root, require_tools, wait_for

SLURMCTLD_PORT = 16817
SLURMD_PORT = 16818
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


class Slurm:
    def __init__(self, base, chain):
        self.base = base
        self.chain = chain
        self.conf = base / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

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

    def job_log(self, job):
        return [line for line in self.chain.log_text().splitlines() if f" job={job} " in line]

    def wait_idle(self, timeout=60):
        def idle():
            state, _ = self.node_state()
            return state.split("+")[0] == "IDLE" and "COMPLETING" not in state
        wait_for(idle, timeout, interval=0.3, what="the node to be IDLE")


@pytest.fixture(scope="session")
def slurm(munge, salt_call, accounts):
    require_tools("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "srun", "sbatch", "scontrol", "sinfo")
    for port in (SLURMCTLD_PORT, SLURMD_PORT):
        require(port_free(port), f"port {port} free for the test Slurm")
    # Job users read slurm.conf, and pytest's base temp dir is 0700: use /var/tmp.
    base = Path(tempfile.mkdtemp(prefix="epilog-test-slurm-", dir="/var/tmp"))
    os.chmod(base, 0o755)
    for sub in ("state", "spool", "log", "run"):
        (base / sub).mkdir()
    chain = Chain(base / "etc-slurm", base / "localusers", base / "log" / "epilog.log", base / "spool")
    lay_down(salt_call, chain, localusers=["root", OPERATOR])
    conf = base / "slurm.conf"
    conf.write_text(f"""\
ClusterName=epilogtest
SlurmctldHost={HOST}
SlurmctldPort={SLURMCTLD_PORT}
SlurmdPort={SLURMD_PORT}
AuthType=auth/munge
SlurmUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
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
Epilog={chain.conf_dir}/epilog.sh
Prolog={chain.conf_dir}/prolog.sh
PrologFlags=Alloc
PrologEpilogTimeout=120
NodeName={HOST} CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
    s = Slurm(base, chain)
    try:
        s.cmd("/usr/sbin/slurmctld")
        wait_for(lambda: s.cmd("scontrol", "ping", check=False).returncode == 0, 30, what="slurmctld")
        s.cmd("/usr/sbin/slurmd")
        s.wait_idle()
        yield s
    finally:
        stop_pidfile(base / "run/slurmd.pid")
        stop_pidfile(base / "run/slurmctld.pid")
        shutil.rmtree(base, ignore_errors=True)


class Rsyslog:
    def __init__(self, base):
        self.base = base
        self.conf = base / "rsyslog.conf"
        self.pidfile = base / "rsyslogd.pid"
        self.out = base / "syslog"
        self.conf.write_text(f"""\
module(load="imuxsock" SysSock.Name="/dev/log")
global(workDirectory="{base}")
*.* action(type="omfile" file="{self.out}")
""")

    def start(self):
        if Path("/dev/log").exists() and not Path("/dev/log").is_socket():
            raise AssertionError("/dev/log exists and is not a socket")
        subprocess.run(["/usr/sbin/rsyslogd", "-f", str(self.conf), "-i", str(self.pidfile)], check=True)
        wait_for(lambda: Path("/dev/log").is_socket(), 10, what="rsyslogd to create /dev/log")

    def stop(self):
        stop_pidfile(self.pidfile)
        Path("/dev/log").unlink(missing_ok=True)

    def text(self):
        return self.out.read_text() if self.out.exists() else ""


@pytest.fixture(scope="session")
def rsyslog(tmp_path_factory):
    require_tools("/usr/sbin/rsyslogd")
    require(not Path("/dev/log").exists(), "no other syslog daemon owning /dev/log")
    r = Rsyslog(tmp_path_factory.mktemp("rsyslog"))
    r.start()
    yield r
    r.stop()


class Sshd:
    """A real sshd on 127.0.0.1 with key logins for opal and alice. With
    ALLOW_FILE, it runs in a mount namespace whose /etc/pam.d/sshd starts
    the account stack with pam_listfile on that file, as sites restrict ssh
    to the users with a job on the node (the file the prolog and 39 edit)."""

    def __init__(self, base, port, allow_file=None):
        self.base, self.port = base, port
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
        command = ["/usr/sbin/sshd", "-f", str(conf)]
        if allow_file is not None:
            pam = base / "pam.d-sshd"
            pam.write_text(f"account required pam_listfile.so item=user sense=allow file={allow_file} onerr=fail\n"
                           + Path("/etc/pam.d/sshd").read_text())
            command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                       f'mount --bind {pam} /etc/pam.d/sshd && exec "$@"', "sh", *command]
        subprocess.run(command, check=True)
        wait_for(lambda: not port_free(port), 10, what=f"sshd to listen on {port}")

    def __call__(self, user, command):
        return subprocess.Popen(
            ["ssh", "-i", str(self.base / "client_key"), "-p", str(self.port), "-o", "BatchMode=yes",
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
             f"{user}@127.0.0.1", command],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def stop(self):
        stop_pidfile(self.base / "sshd.pid")


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


@pytest.fixture(scope="session")
def listfile_sshd(tmp_path_factory, accounts, slurm):
    """A real sshd on 127.0.0.1:2223 that lets in only the users listed in
    the test Slurm's ssh allow file (pam_listfile, account stack)."""
    require(Path("/lib/x86_64-linux-gnu/security/pam_listfile.so").exists() or Path("/usr/lib64/security/pam_listfile.so").exists(),
            "pam_listfile (libpam-modules)")
    server = start_sshd(tmp_path_factory, "listfile-sshd", LISTFILE_SSHD_PORT, allow_file=slurm.chain.allow_file)
    yield server
    server.stop()
