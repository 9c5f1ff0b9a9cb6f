"""The formula served from salt/ alone, as a formula is installed: a real
master whose file_roots is only the repository's salt/, and one whose gitfs
(root: salt) serves a local bare clone of the repository. In both, a real
minion applies the state and has the epilog module synced, and a real
Slurm job end runs the release it laid down and sweeps real residue."""
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests import sweep_scenarios as sc
from tests.helpers import LAYOUT, REPO, require_tools
from tests.slurm.conftest import OPERATOR
from tests.slurm.test_sweep_job_end import host_site, job_end  # noqa: F401 - the fixture


def bare_clone_of_the_working_tree(dest):
    """A bare clone of the repository as it is on disk (what git tracks or
    would track, symlinks as symlinks), on branch main: the working tree
    under test, committed or not."""
    require_tools("git", "tar")
    work = dest / "work"
    work.mkdir()
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.split(b"\0")
    names = sorted({name for name in listed if name and os.path.lexists(REPO / os.fsdecode(name))})
    pack = subprocess.run(["tar", "-C", str(REPO), "--null", "--no-recursion", "-T", "-", "-cf", "-"],
                          input=b"\0".join(names), capture_output=True, check=True).stdout
    subprocess.run(["tar", "-C", str(work), "-xf", "-"], input=pack, check=True)
    git = ["git", "-C", str(work), "-c", "user.name=epilog-test", "-c", "user.email=epilog-test@localhost"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "the working tree under test"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(dest / "epilog.git")], check=True)
    shutil.rmtree(work)
    return dest / "epilog.git"


SERVED = {
    # file_roots: the repository's salt/ and nothing else
    "salt-dir": lambda base: {"file_roots": {"base": [str(REPO / "salt")]}},
    # gitfs, root: salt, on a bare clone (GitPython, which Salt installs)
    "gitfs": lambda base: {
        "fileserver_backend": ["gitfs"],
        "gitfs_provider": "gitpython",
        "gitfs_base": "main",
        "gitfs_remotes": [{f"file://{bare_clone_of_the_working_tree(base)}": [{"root": "salt"}]}],
    },
}


@pytest.mark.parametrize("served,part_timeout", [("salt-dir", 19), ("gitfs", 18)])
def test_a_master_serving_salt_dir_alone_lays_down_a_chain_that_sweeps_at_a_job_end(
        salt_factories, slurm, accounts, host_site, served, part_timeout):  # noqa: F811
    base = Path(tempfile.mkdtemp(prefix=f"epilog-{served}-", dir="/var/tmp"))
    minion_id = f"{served}-01"
    (base / "pillar").mkdir()
    (base / "pillar/top.sls").write_text(json.dumps({"base": {minion_id: ["node"]}}))
    # the real Slurm's chain, with a setting of its own: a new release
    pillar = slurm.chain.pillar(localusers=["root", OPERATOR], part_timeout=part_timeout)
    (base / "pillar/node.sls").write_text(json.dumps(pillar))
    before = slurm.chain.release_id
    master = salt_factories.salt_master_daemon(
        f"epilog-{served}-master",
        overrides={"interface": "127.0.0.1", "pillar_roots": {"base": [str(base / "pillar")]},
                   **SERVED[served](base), "pytest-master": {"log": {"disabled": True}}})
    minion = master.salt_minion_daemon(minion_id, overrides={"pytest-minion": {"log": {"disabled": True}}})
    try:
        with master.started(start_timeout=120), contextlib.ExitStack() as stack:
            stack.enter_context(minion.started(start_timeout=120))
            cli = master.salt_cli(timeout=600)
            # the master's file list as its backend has it now (gitfs fetches
            # in the background: ask it to, and wait)
            assert master.salt_run_cli(timeout=300).run("fileserver.update").returncode == 0
            listed = cli.run("cp.list_master", minion_tgt=minion_id)
            assert listed.returncode == 0, listed
            package = {f"_modules/{LAYOUT['package']}/{p.name}" for p in (REPO / "_modules" / LAYOUT["package"]).glob("*.py")}
            assert {"_modules/epilog.py", "epilog/init.sls"} | package <= set(listed.data), listed.data
            assert not any(path.startswith(("tests/", "bench/", ".ci/", "pillar/")) for path in listed.data)
            ret = cli.run("state.apply", "epilog", minion_tgt=minion_id)
            assert ret.returncode == 0, ret
            failed = {key: s["comment"] for key, s in ret.data.items() if s["result"] is not True}
            assert not failed, failed
            release = slurm.chain.release_id
            assert release != before
            for path in (REPO / "salt/_modules" / LAYOUT["package"]).glob("*.py"):
                assert (slurm.chain.release / LAYOUT["package"] / path.name).read_bytes() == path.read_bytes(), path
            # the module came with the apply, from salt/_modules
            answer = cli.run("epilog.sweep", "test=True", minion_tgt=minion_id)
            assert answer.returncode == 0 and answer.data["test"] is True, answer
            expect = sc.orphan_socket_and_stale_lock(host_site)
            _, _, log = job_end(slurm)
            assert f"release={release}" in log, log
            sc.check(host_site, expect, log_text=log)
            state, reason = slurm.node_state()
            assert "DRAIN" not in state, (state, reason)
    finally:
        # the session's chain as the other tests expect it
        slurm.chain.lay_down(localusers=["root", OPERATOR])
        shutil.rmtree(base, ignore_errors=True)
