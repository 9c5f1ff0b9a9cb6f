"""Session fixtures: real accounts, a salt-call minion configured by
pytest-salt-factories, and the chain laid down by the real state."""
import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.helpers import ACCOUNTS, OPERATORS, REPO, VENV_BIN, Chain, SaltCall, lay_down, require, require_root, require_tools

# pytest-salt-factories logs its whole configuration as a warning at start-up,
# and salt's deferred handler prints it after the test summary.
logging.getLogger("saltfactories.manager").setLevel(logging.ERROR)


@pytest.fixture(scope="session")
def accounts():
    """Real accounts, made with useradd."""
    require_root()
    require_tools("useradd", "setpriv")
    for name in ACCOUNTS:
        if subprocess.run(["id", "-u", "--", name], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "--", name], check=True)
    return ACCOUNTS


@pytest.fixture(scope="session")
def salt_factories_default_root_dir():
    """Salt's test roots live under /var/tmp, not /tmp: the sweep tests run
    salt-call in a mount namespace whose /tmp is a fresh tmpfs."""
    root = Path(tempfile.mkdtemp(prefix="epilog-salt-", dir="/var/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def salt_minion(salt_factories):
    """A minion config (file_client: local) that serves this repo's salt/ and
    pillar/ trees and loads _modules/ from the repo root. Never started: the
    tests drive it with salt-call --local."""
    require_root()
    require((VENV_BIN / "salt-call").exists(), f"salt-call in {VENV_BIN} (bash .ci/setup)")
    return salt_factories.salt_minion_daemon(
        "slurm-work-test",
        overrides={
            "file_client": "local",
            "file_roots": {"base": [str(REPO / "salt"), str(REPO)]},
            "pillar_roots": {"base": [str(REPO / "pillar")]},
            "module_dirs": [str(REPO)],
            # salt-call's own log lines stay out of the pytest process.
            "pytest-minion": {"log": {"disabled": True}},
        },
    )


@pytest.fixture(scope="session")
def salt_call(salt_minion):
    return SaltCall(salt_minion.config_dir)


@pytest.fixture(scope="session")
def chain(tmp_path_factory, salt_call, accounts):
    """The chain laid down by the state at a custom slurm_config_dir."""
    base = tmp_path_factory.mktemp("chain")
    (base / "spool").mkdir()
    c = Chain(base / "opt-slurm", base / "localusers", base / "epilog.log", base / "spool")
    lay_down(salt_call, c)
    return c


@pytest.fixture(scope="session")
def default_chain(tmp_path_factory, salt_call, accounts):
    """The chain laid down by the state at the default slurm_config_dir,
    /etc/slurm, inside a private mount namespace (a tmpfs over /etc/slurm), so
    the host's /etc/slurm is never touched."""
    require_tools("unshare", "nsenter")
    base = tmp_path_factory.mktemp("default-chain")
    (base / "spool").mkdir()
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         "mkdir -p /etc/slurm && mount -t tmpfs -o mode=0755 epilog-test /etc/slurm && echo ready && exec sleep 86400"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready", "could not mount a tmpfs over /etc/slurm in a namespace"
        prefix = ["nsenter", f"--target={holder.pid}", "--mount"]
        root = Path(f"/proc/{holder.pid}/root")
        c = Chain("/etc/slurm", base / "localusers", base / "epilog.log", base / "spool",
                  prefix=prefix, view=lambda p: root / p.relative_to("/"))
        pillar = c.pillar(localusers=OPERATORS)
        del pillar["epilog"]["slurm_config_dir"]  # the default, from defaults.yaml
        ret = salt_call("state.apply", "epilog", pillar=pillar, prefix=prefix)
        assert ret.returncode == 0 and all(s["result"] for s in ret.states.values()), ret
        assert c.localusers.read_text() == "root\nje.kim\ns.shin\n"
        yield c
    finally:
        holder.kill()
        holder.wait()

