#!/usr/bin/env python3
"""Wall times of state.apply epilog on a real master and three minions
(slurm-work-01..03 on loopback), all in one run: the first lay-down batched
with -b 1, a second (no-change) apply on one minion, on all three at once,
and batched with -b 1 against the single-minion apply as the baseline.

Run as root from the repo root:  .venv/bin/python bench/fleet_bench.py

It runs the fleet integration test (tests/salt/test_fleet.py), which
brings the master and minions up with pytest-salt-factories and records its
timings, then prints them.
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main():
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = {**os.environ, "EPILOG_FLEET_TIMINGS": out.name}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "tests/salt/test_fleet.py"],
                              cwd=REPO, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(proc.stdout[-4000:] + proc.stderr[-2000:])
        timings = json.loads(Path(out.name).read_text())
    single = timings["second apply, one minion"]
    print("state.apply epilog on a real master + three minions (wall time of the salt command)")
    for name, seconds in timings.items():
        print(f"  {name:45} {seconds:7.2f} s   {seconds / single:5.2f}x the single-minion apply")
    print(json.dumps(timings))


if __name__ == "__main__":
    main()
