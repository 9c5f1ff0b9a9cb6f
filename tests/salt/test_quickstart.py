"""The README's quickstart, run as a new user would (bash .ci/quickstart),
into a sandbox of its own, with the Salt of this run (EPILOG_SALT_VENV)."""
import subprocess
import tempfile
from pathlib import Path

from tests.helpers import CURRENT, LAYOUT, REPO, VENV_BIN

# what a first apply lays down: the directories and the releases' directory,
# the log directory, the data files and the release tool, the release's
# directories and files, the node program, the switch to it and the
# module's sync (the packages are there, the retired files are not)
LAID_DOWN = (len(LAYOUT["directories"]) + 1 + 1 + len(LAYOUT["data"]) + 1 + 1 + len(LAYOUT["release_directories"])
             + len(LAYOUT["scripts"]) + len(LAYOUT["release_data"]) + 1 + 1 + 1)


def quickstart(sandbox):
    """bash .ci/quickstart into SANDBOX, as the README gives it: its stdout,
    once it has exited 0 and its verify has passed."""
    proc = subprocess.run(["bash", str(REPO / ".ci/quickstart")], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "EPILOG_QUICKSTART_DIR": sandbox,
                                            "EPILOG_SALT_VENV": str(VENV_BIN.parent)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "result:\n        True" in out[out.index("== 3."):out.index("== 4.")], "verify must pass after the apply"
    return out


def test_quickstart_previews_applies_and_sweeps_planted_residue_in_a_sandbox(accounts):
    etc_slurm_before = sorted(p.name for p in Path("/etc/slurm").iterdir()) if Path("/etc/slurm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="epilog-qs-", dir="/var/tmp") as sandbox:
        out = quickstart(sandbox)
        for step in ("== 1. preview", "== 2. apply", "== 3. health check", "== 6. salt-call epilog.sweep test=True",
                     "== 7. salt-call epilog.sweep"):
            assert step in out, step
        preview = out[out.index("== 1."):out.index("== 2.")]
        assert preview.count("Result: Differs") == LAID_DOWN, preview
        applied = out[out.index("== 2."):out.index("== 3.")]
        assert applied.count("Result: Changed") == LAID_DOWN, applied
        assert (Path(sandbox) / f"slurm/{CURRENT}/epilog.d/45-stale-x-display").is_file()
        log = (Path(sandbox) / "log/epilog.log").read_text()
        assert "stale X display purged: :42" in log and "stale clsbd purged: /tmp/clsbd.unknownUser." in log
        sweep = out[out.index("== 7."):]
        assert "- /tmp/.X11-unix/X42" in sweep and "- /tmp/.X42-lock" in sweep
    etc_slurm_after = sorted(p.name for p in Path("/etc/slurm").iterdir()) if Path("/etc/slurm").is_dir() else None
    assert etc_slurm_after == etc_slurm_before, "the quickstart must not touch /etc/slurm"
