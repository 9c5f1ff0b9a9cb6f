"""Fixtures of the sweep tests: a mount namespace with its own /tmp, and a
minion whose pillar points the sweep's log at a file of its own."""
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests import sweep_scenarios as sc
from tests.helpers import Chain, lay_down, live_spool, local_minion, private_tmp_namespace, require_tools


@pytest.fixture
def own_chain(tmp_path, salt_call, accounts):
    """A chain of its own, for tests that add parts or change settings."""
    def make(**settings):
        live_spool(tmp_path / "spool")
        c = Chain(tmp_path / "slurm", tmp_path / "localusers", tmp_path / "epilog.log", tmp_path / "spool")
        lay_down(salt_call, c, **settings)
        return c
    return make


def add_part(chain, name, body, mode=0o755):
    """A site's own part in epilog.d."""
    path = chain.conf_dir / "epilog.d" / name
    path.write_text("#!/bin/bash\n" + body + "\n")
    os.chmod(path, mode)
    return path


@pytest.fixture
def site():
    """A mount namespace whose /tmp is a fresh tmpfs, with /tmp/.X11-unix
    root:root 1777 as systemd-tmpfiles makes it at boot."""
    require_tools("unshare", "nsenter", "Xvfb")
    holder, prefix, root = private_tmp_namespace()
    s = sc.Site(root=root, prefix=prefix)
    yield s
    s.cleanup()
    holder.kill()
    holder.wait()


@pytest.fixture(scope="session")
def sweeper(salt_factories, salt_line):
    """A minion whose pillar sends the sweep's log lines to a file of its own."""
    base = Path(tempfile.mkdtemp(prefix="epilog-sweep-", dir="/var/tmp"))
    (base / "pillar").mkdir()
    (base / "pillar/top.sls").write_text("base:\n  '*':\n    - epilog\n")
    (base / "pillar/epilog.sls").write_text(f"epilog:\n  log_file: {base}/epilog.log\n")
    call = local_minion(salt_factories, "sweep-test", base / "pillar", salt_line=salt_line)
    call.log_file = base / "epilog.log"
    yield call
    shutil.rmtree(base, ignore_errors=True)
