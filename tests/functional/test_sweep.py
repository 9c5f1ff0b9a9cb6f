"""epilog.sweep through a real salt-call, on residue from real X servers, in a
private mount namespace with its own tmpfs /tmp (the host's /tmp is never
swept by these tests). The same scenario table runs at a real Slurm job end
in tests/integration/test_sweep_job_end.py."""
import json
import os
import subprocess

import pytest
import yaml

from tests import sweep_scenarios as sc
from tests.helpers import RELEASES, REPO, local_minion, require_root


def sweep(sweeper, site, *args):
    ret = sweeper("epilog.sweep", *args, prefix=site.prefix)
    assert ret.returncode == 0, ret
    return ret.data


@pytest.mark.parametrize("scenario", sc.SCENARIOS, ids=[f.__name__ for f in sc.SCENARIOS])
def test_sweep_module_follows_the_decision_table(sweeper, accounts, site, scenario):
    expect = scenario(site)
    log_before = sweeper.log_file.read_text() if sweeper.log_file.exists() else ""
    preview = sweep(sweeper, site, "test=True")
    assert preview["test"] is True and preview["removed"] == []
    assert (sweeper.log_file.read_text() if sweeper.log_file.exists() else "") == log_before, "a preview must not log"
    assert set(preview["would_remove"]) == expect.removed
    for path in expect.removed:
        assert os.path.lexists(site.path(path)), f"test=True removed {path}"
    report = sweep(sweeper, site)
    assert set(report["removed"]) == set(preview["would_remove"]), "test=True must predict the real run"
    sc.check(site, expect, report, log_text=sweeper.log_file.read_text() if expect.logged else None)


def test_sweep_removes_only_the_ending_jobs_scratch(sweeper, accounts, site):
    expect, others = sc.scratch_of_the_ending_job(site, "4711")
    site.write("/tmp/slurm4711.je.kim", b"x", user="je.kim")  # the job's pattern, another user's file
    report = sweep(sweeper, site, "job=4711", "user=alice")
    sc.check(site, expect, report)
    assert report["counts"]["scratch"]["removed"] == 2
    for path in others:
        assert site.path(path).exists(), f"{path} belongs to another job"
    assert site.path("/tmp/slurm4711.je.kim").exists()
    reason = next(k["reason"] for k in report["kept"] if k["path"] == "/tmp/slurm4711.je.kim")
    assert reason.startswith("owned by uid") and "not the job's uid" in reason


def test_scratch_needs_the_jobs_user(sweeper, accounts, site):
    ret = sweeper("epilog.sweep", "job=4711", prefix=site.prefix)
    assert ret.returncode != 0
    assert "give user=" in ret.stdout + ret.stderr


def test_all_rows_at_once_with_counts_per_kind(sweeper, accounts, site):
    expects = [scenario(site) for scenario in sc.SCENARIOS]
    report = sweep(sweeper, site)
    for expect in expects:
        sc.check(site, expect, report)
    counts = report["counts"]
    assert counts["x_socket"] == {"removed": 2, "kept": 3}
    assert counts["x_lock"] == {"removed": 2, "kept": 3}
    assert counts["clsbd"] == {"removed": 2, "kept": 1}
    assert report["errors"] == [] and report["budget_exhausted"] is False


def test_salt_call_json_output_is_pure_json(accounts, site, sweeper):
    sc.orphan_socket_and_stale_lock(site)
    proc = subprocess.run([*site.prefix, str(REPO / ".venv/bin/salt-call"), f"--config-dir={sweeper.config_dir}",
                           "--local", "--out=json", "epilog.sweep", "test=True"], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data["local"]["would_remove"]) == {"/tmp/.X11-unix/X80", "/tmp/.X80-lock"}


@pytest.mark.parametrize("arg, message", [
    ("job=not-a-number", "job must be a numeric Slurm job id"),
    # budget= is held to the pillar's rule for sweep_budget (rules.yaml's seconds)
    ("budget=0.5", "budget (0.5) must be a whole number of seconds from 1 to 3600"),
    ("budget=3601", "budget (3601) must be a whole number of seconds from 1 to 3600"),
    ("budget=True", "budget (True) must be a whole number of seconds from 1 to 3600"),
])
def test_sweep_that_cannot_run_exits_non_zero(salt_call, arg, message):
    ret = salt_call("epilog.sweep", "test=True", arg)
    assert ret.returncode != 0
    assert message in ret.stdout + ret.stderr


def test_the_module_has_no_settings_of_its_own(salt_factories, salt_line, tmp_path):
    """The module takes its settings from the formula's map.jinja (through
    settings.jinja): no defaults, merge or rules of its own. A pillar the
    state refuses is refused by the module's functions with the state's
    message, naming the entry, and a good one is what they read."""
    require_root()
    minion = local_minion(salt_factories, "settings-test", tmp_path, salt_line=salt_line)
    (tmp_path / "top.sls").write_text("base:\n  '*':\n    - epilog\n")
    (tmp_path / "epilog.sls").write_text(yaml.safe_dump({"epilog": {"localusers": ["root", "a:b"],
                                                                "slurm_config_dir": str(tmp_path / "no-chain")}}))
    for function in ("epilog.sweep", "epilog.verify", "epilog.explain"):
        args = ["test=True"] if function == "epilog.sweep" else ["user=alice"] if function == "epilog.explain" else []
        ret = minion(function, *args)
        assert ret.returncode != 0, (function, ret)
        assert "epilog:localusers[1] ('a:b') holds a character other than" in ret.stdout + ret.stderr, (function, ret)
    # ... but not the recovery operations: a rollback works under the pillar that broke a deploy
    ret = minion("epilog.rollback")
    assert f"no releases under {tmp_path / 'no-chain'}/{RELEASES}" in ret.data["comment"], ret
    (tmp_path / "epilog.sls").write_text(yaml.safe_dump({"epilog": {"slurm_config_dir": str(tmp_path / "no-chain")}}))
    ret = minion("epilog.rollback")
    assert f"no releases under {tmp_path / 'no-chain'}/{RELEASES}" in ret.data["comment"], ret
