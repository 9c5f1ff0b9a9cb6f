"""Session fixtures every tier shares: real accounts, the C helpers, the
directory accounts' NSS module, and the limit on each test's time. The
tiers: unit (pure decisions, no root), node (the node program on real
processes and files, laid down without Salt), salt (states and module
functions in-process, the fleet, the quickstart; run on each Salt line) and
slurm (real job ends on real Slurms)."""
import faulthandler
import logging
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers import (
    ACCOUNTS,
    BADNAMES,
    NO_PASSWD_ENTRY,
    OWN_DEV_LOG_ENV,
    REPO,
    clear_stale_dev_log,
    process_uids,
    require,
    require_root,
    require_tools,
)

# pytest-salt-factories logs its whole configuration as a warning at start-up,
# and salt's deferred handler prints it after the test summary.
logging.getLogger("saltfactories.manager").setLevel(logging.ERROR)

# No test may hang the run: a test (setup, call and teardown together) that
# runs past its limit prints every thread's stack and fails, and the run goes
# on. 600 s is about ten times the slowest test (the fleet's); a test that
# knowingly needs more says so with @pytest.mark.limit(SECONDS).
TEST_LIMIT = 600


def pytest_configure(config):
    config.addinivalue_line("markers", "limit(seconds): this test's own limit instead of the default")
    # Salt 3006's loader imports every module with importlib's load_module(),
    # which warns on each call (some 100,000 times a run); recording each
    # warning costs the run time and says nothing about the formula.
    config.addinivalue_line("filterwarnings",
                            r"ignore:the load_module\(\) method is deprecated:DeprecationWarning")
    # Salt, imported in-process (tests/salt), sets up a handler on the root
    # logger that holds every record back and prints them all to stderr at
    # exit: the run's own log capture has them, per test.
    try:
        from salt._logging import impl  # pylint: disable=import-outside-toplevel
    except ImportError:
        pass
    else:
        impl.setup_temp_handler()
        handler = impl.get_temp_handler()
        if handler is not None and handler.__class__.__name__ == "DeferredStreamHandler":
            logging.root.removeHandler(handler)
    if os.environ.get("CI") == "true" and config.option.durations is None:
        # CI's log names the slowest tests: the whole .ci/run must stay well
        # under 90 minutes.
        config.option.durations = 25
    own_dev_log(config)


def own_dev_log(config):
    """A machine that runs a syslog daemon of its own (a developer's VM, a
    node) keeps it, and it gets none of the tests' lines: a run as root that
    reaches tests/slurm, whose rsyslogd would own /dev/log, runs itself again
    in a mount namespace of its own (mounts propagate into it, none out),
    where tests/slurm's rsyslog binds its own socket over /dev/log
    (tests.helpers.own_dev_log). A run on a machine with no syslog daemon
    runs as it is."""
    if os.environ.get(OWN_DEV_LOG_ENV) or os.geteuid() != 0 or not reaches(config, REPO / "tests/slurm"):
        return
    clear_stale_dev_log()
    if not os.path.exists("/dev/log"):
        return
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.stop_global_capturing()
    sys.stdout.flush()
    sys.stderr.flush()
    env = {**os.environ, OWN_DEV_LOG_ENV: os.readlink("/proc/self/ns/mnt")}
    os.execvpe("unshare", ["unshare", "--mount", "--propagation", "slave", sys.executable, *sys.orig_argv[1:]], env)


def reaches(config, directory):
    """True when the run's arguments name DIRECTORY, a path in it, or a
    directory above it."""
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if path == directory or directory in path.parents or path in directory.parents:
            return True
    return False


_PHASE = {"in": False}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    marker = item.get_closest_marker("limit")
    limit = int(marker.args[0]) if marker else TEST_LIMIT
    if item.config.getoption("usepdb") or item.config.getoption("trace", False):
        yield
        return

    def overran(signum, frame):
        signal.alarm(30)  # a teardown that hangs too fails in turn
        out = sys.__stderr__
        out.write(f"\n{item.nodeid} ran for over {limit} s; its stacks:\n")
        out.flush()
        faulthandler.dump_traceback(file=out, all_threads=True)
        if _PHASE["in"]:  # only inside setup, call or teardown: never in pytest's own hooks
            pytest.fail(f"ran for over {limit} s (the test's limit; see the stacks printed above)", pytrace=True)

    previous = signal.signal(signal.SIGALRM, overran)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _phase():
    _PHASE["in"] = True
    try:
        yield
    finally:
        _PHASE["in"] = False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _phase()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _phase()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield from _phase()


@pytest.fixture(scope="session")
def accounts():
    """Real accounts, made with groupadd and useradd at the uids ACCOUNTS
    gives them. The tests kill every process of these uids (and of '-v''s),
    so none may belong to anything else: an account of that name at another
    uid, another account at that uid, or a process the tests did not start
    stops the run before anything is killed."""
    require_root()
    require_tools("useradd", "groupadd", "setpriv")
    for name, (uid, _) in NO_PASSWD_ENTRY.items():
        if uid in ACCOUNTS.values():
            continue  # a second name at a local account's uid, as a directory may serve one
        try:
            other = pwd.getpwuid(uid).pw_name
        except KeyError:
            continue
        pytest.fail(f"uid {uid} belongs to {other}; the tests need it for the directory account {name}", pytrace=False)
    for name, uid in ACCOUNTS.items():
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            pw = None
        if pw is not None:
            if pw.pw_uid != uid:
                pytest.fail(f"account {name} exists with uid {pw.pw_uid}; the tests make it with uid {uid} "
                            f"(an earlier version of the tests made it: userdel -r {name})", pytrace=False)
            continue
        try:
            other = pwd.getpwuid(uid).pw_name
        except KeyError:
            other = None
        if other is not None:
            pytest.fail(f"uid {uid} belongs to {other}; the tests need it for {name}", pytrace=False)
        if subprocess.run(["getent", "group", str(uid)], capture_output=True).returncode != 0:
            subprocess.run(["groupadd", "--gid", str(uid), "--", name], check=True)
        subprocess.run(["useradd", "--uid", str(uid), "--gid", str(uid), "--create-home", "--shell", "/bin/bash",
                        *(["--badname"] if name in BADNAMES else []), "--", name], check=True)
    return list(ACCOUNTS)


@pytest.fixture(scope="session", autouse=True)
def no_foreign_process_of_the_test_uids(request):
    """Before any test runs: nothing runs as a uid the tests kill (a run of
    the unit tier alone kills nothing, and needs no such check)."""
    unit = REPO.resolve() / "tests" / "unit"
    if all(unit in Path(str(item.path)).resolve().parents for item in request.session.items):
        return
    uids = set(ACCOUNTS.values()) | {uid for uid, _ in NO_PASSWD_ENTRY.values()}
    foreign = {}
    for pid, ids in ((p, process_uids(p)) for p in os.listdir("/proc") if p.isdigit()):
        if ids and uids & set(ids):
            try:
                foreign[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:80]
            except OSError:
                continue
    require(not foreign, f"no process running as one of the test uids {sorted(uids)} before the tests start "
                         f"(they kill every process of those uids), found: {foreign}; if an earlier, aborted "
                         f"run of the tests left them: " + "; ".join(f"pkill -KILL -U {uid}" for uid in sorted(uids)))


@pytest.fixture(scope="session")
def cbin():
    """The C helpers of tests/c, compiled at test time (a race needs C
    speed): a directory every account can run them from."""
    require_tools("gcc")
    out = Path(tempfile.mkdtemp(prefix="epilog-test-bin-", dir="/var/tmp"))
    os.chmod(out, 0o755)
    src = REPO / "tests/c"
    subprocess.run(["gcc", "-Wall", "-Werror", "-O2", "-pthread", "-o", str(out / "fighter"), str(src / "fighter.c")],
                   check=True)
    subprocess.run(["gcc", "-Wall", "-Werror", "-O2", "-shared", "-fPIC", "-o", str(out / "libnss_epilogtest.so.2"),
                    str(src / "nss_epilogtest.c")], check=True)
    subprocess.run(["gcc", "-Wall", "-Werror", "-O2", "-shared", "-fPIC", "-o", str(out / "libcgroup2_only.so"),
                    str(src / "cgroup2_only.c"), "-ldl"], check=True)
    yield out
    shutil.rmtree(out, ignore_errors=True)


class DirectoryUsers:
    """Where the directory accounts of tests/c/nss_epilogtest.c (such as
    '-v', uid 50199) resolve: PREFIX enters a mount namespace whose
    /etc/nsswitch.conf adds the module, ENV points the loader at it."""

    def __init__(self, prefix, env):
        self.prefix, self.env = prefix, env


@pytest.fixture(scope="session")
def directory_users(cbin, tmp_path_factory):
    """glibc's files backend refuses a passwd line starting with '-', but a
    directory service (LDAP, SSSD) serves such names: this is one, real NSS,
    in a mount namespace of its own; the host's nsswitch.conf is untouched."""
    require_tools("unshare", "nsenter")
    conf = tmp_path_factory.mktemp("nss") / "nsswitch.conf"
    lines = [line for line in Path("/etc/nsswitch.conf").read_text().splitlines()
             if not line.startswith(("passwd:", "group:"))]
    conf.write_text("\n".join(["passwd: files epilogtest", "group: files", *lines]) + "\n")
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"mount --bind {conf} /etc/nsswitch.conf && echo ready && exec sleep 86400"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready", "could not bind a test nsswitch.conf in a namespace"
        users = DirectoryUsers(["nsenter", f"--target={holder.pid}", "--mount"], {"LD_LIBRARY_PATH": str(cbin)})
        probe = subprocess.run([*users.prefix, "id", "-u", "--", "-v"], env={**os.environ, **users.env},
                               capture_output=True, text=True)
        assert probe.stdout.strip() == "50199", ("the test NSS module does not serve -v", probe.stderr)
        yield users
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture(scope="session")
def salt_factories_default_root_dir():
    """Salt's test roots live under /var/tmp, not /tmp: tests run Salt
    beside mount namespaces whose /tmp is a fresh tmpfs."""
    root = Path(tempfile.mkdtemp(prefix="epilog-salt-", dir="/var/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def salt_factories_config():
    """The daemons are stopped with SIGKILL, not SIGTERM and a wait (a
    minion takes seconds to exit): no test reads what a daemon does as it
    stops, and nothing measures coverage."""
    return {"slow_stop": False}


def pytest_unconfigure(config):
    """Importing salt installs a deferred log handler that flushes, at exit,
    whatever salt logged before its logging was set up, into the stderr that
    pytest has closed by then. Silence it so the test summary stays last."""
    logging.disable(logging.CRITICAL)
    try:
        from salt._logging import impl  # pylint: disable=import-outside-toplevel
    except ImportError:
        return
    handler = impl.get_temp_handler()
    if handler is not None:
        handler.setStream(open(os.devnull, "w", encoding="utf-8"))
