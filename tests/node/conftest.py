"""Fixtures of the node program's tests: the chain laid down as the state
would, without Salt (a settings file, the release, release.py: tests/
release.py), at a custom slurm_config_dir or at /etc/slurm in a mount
namespace of its own; a mount namespace with a /tmp of its own; the sweep
run by hand there."""
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests import sweep_scenarios as sc
from tests.helpers import (
    CURRENT,
    Chain,
    as_user,
    end,
    ids_of,
    live_spool,
    private_tmp_namespace,
    process_uids,
    require,
    require_tools,
    spawn_as,
    wait_for,
)
from tests.release import DEFAULTS, lay_down


@pytest.fixture(scope="session")
def chain(accounts):
    """The chain at a custom slurm_config_dir, with the seed's operators,
    under /var/tmp: a mount namespace with a /tmp of its own still sees it."""
    base = Path(tempfile.mkdtemp(prefix="epilog-chain-", dir="/var/tmp"))
    live_spool(base / "spool")
    yield Chain(base / "opt-slurm", base / "localusers", base / "epilog.log", base / "spool").lay_down()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def own_chain(tmp_path, accounts):
    """A chain of its own, for tests that add parts or change settings:
    own_chain(**settings)."""
    def make(**settings):
        live_spool(tmp_path / "spool")
        c = Chain(tmp_path / "slurm", tmp_path / "localusers", tmp_path / "epilog.log", tmp_path / "spool")
        return c.lay_down(**settings)
    return make


@pytest.fixture(scope="session")
def default_chain(tmp_path_factory, accounts):
    """The chain at the default slurm_config_dir, /etc/slurm, inside a
    private mount namespace (a tmpfs over /etc/slurm), so the host's
    /etc/slurm is never touched."""
    require_tools("unshare", "nsenter")
    base = tmp_path_factory.mktemp("default-chain")
    live_spool(base / "spool")
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
        settings = c.settings()
        del settings["slurm_config_dir"]  # the default, from defaults.yaml
        lay_down(view=c.view, prefix=prefix, **settings)
        assert os.readlink(c.view("/etc/slurm/epilog.sh")) == f"{CURRENT}/epilog.sh"
        yield c
    finally:
        holder.kill()
        holder.wait()


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


class Sweeper:
    """The node program's sweep, run by hand in a site's namespace
    (python3 -m epilog_node.sweep from a release), as root: its report, the
    very dict epilog.sweep returns, and the lines it logged."""

    def __init__(self, release, log_file, patterns):
        self.release, self.log_file, self.patterns = release, log_file, patterns

    def __call__(self, site, *args, check=True):
        code = ("import sys; sys.path.insert(0, sys.argv.pop(1)); from epilog_node import sweep; "
                "sys.exit(sweep.main(sys.argv[1:]))")
        ret = subprocess.run([*site.prefix, "/usr/bin/python3", "-I", "-B", "-c", code, str(self.release), "sweep",
                              "--json", f"--log-file={self.log_file}", *[f"--pattern={p}" for p in self.patterns],
                              *args], capture_output=True, text=True, timeout=120)
        if check:
            assert ret.returncode == 0, ret
            return json.loads(ret.stdout)
        return ret

    def log_text(self):
        try:
            return Path(self.log_file).read_text()
        except FileNotFoundError:
            return ""


@pytest.fixture(scope="session")
def sweeper(chain):
    """The sweep of the session's chain, by hand, logging to a file of its own."""
    log = chain.log_file.parent / "sweep-log" / "sweep.log"
    log.parent.mkdir(exist_ok=True)
    return Sweeper(chain.release, log, DEFAULTS["scratch_patterns"])


@pytest.fixture
def her_setuid_runs(accounts):
    """alice's copy of sleep, made setuid to her by herself (chmod u+s on
    her own file, in a directory on a file system without nosuid), run by
    alicex (another account; a test gives him a job), by je.kim (an
    operator) and by root: {runner: Popen}, each process of its runner's
    real uid and her saved uid."""
    home = Path(tempfile.mkdtemp(prefix="epilog-setuid-", dir="/var/tmp"))
    runs = {}
    try:
        os.chmod(home, 0o755)
        require(not os.statvfs(home).f_flag & os.ST_NOSUID, "/var/tmp is on a file system mounted nosuid")
        program = home / "hersleep"
        shutil.copy("/usr/bin/sleep", program)
        os.chown(program, *ids_of("alice"))
        subprocess.run([*as_user("alice"), "chmod", "u+s", str(program)], check=True)
        runs.update((user, spawn_as(user, str(program), "600")) for user in ("alicex", "je.kim"))
        runs["root"] = subprocess.Popen([str(program), "600"], stdin=subprocess.DEVNULL, start_new_session=True)
        her = ids_of("alice")[0]
        for user, proc in runs.items():
            real = 0 if user == "root" else ids_of(user)[0]
            wait_for(lambda p=proc, r=real: process_uids(p.pid) == (r, her, her), 5,
                     what=f"{user}'s run of alice's setuid program")
        yield runs
    finally:
        for proc in runs.values():
            end(proc)
        shutil.rmtree(home, ignore_errors=True)
