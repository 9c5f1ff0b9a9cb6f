#!/usr/bin/env python3
"""How long a deploy or rollback switch takes, and how long a job end could
see a mixed chain, against the in-place replacement it superseded, all in
one run.

Two releases of the chain (differing in one setting) are laid down by the
real state (salt-call --local) into a sandbox. Then, alternately:

  switch     release.py rollback, as epilog.rollback runs it: the whole
             process (python start, the release's checks against its
             manifest, the rename), and the rename of `current` itself,
             which is all a job end can observe;
  in place   the baseline: the pre-release rollback's mechanism, each of the
             release's files written over the live one (open, write,
             chmod), one after the other. A job end that starts during it
             runs a mix of the two versions.

Run as root from the repo root:  .venv/bin/python bench/release_bench.py [ROUNDS]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def lay_down(sandbox, part_timeout):
    pillar = {"epilog": {"slurm_config_dir": f"{sandbox}/slurm", "ssh_allow_file": f"{sandbox}/localusers",
                         "log_file": f"{sandbox}/log/epilog.log", "slurmd_spool_dir": f"{sandbox}/spool",
                         "run_dir": f"{sandbox}/run", "part_timeout": part_timeout}}
    proc = subprocess.run([str(REPO / ".venv/bin/salt-call"), "--local", "--out=json", "state.apply", "epilog",
                           f"pillar={json.dumps(pillar)}"], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(proc.stdout[-3000:] + proc.stderr[-3000:])


def in_place(src, dst, files):
    started = time.perf_counter()
    for rel, mode in files:
        data = (src / rel).read_bytes()
        with open(dst / rel, "wb") as handle:
            handle.write(data)
        os.chmod(dst / rel, mode)
    return time.perf_counter() - started


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    with tempfile.TemporaryDirectory(prefix="epilog-release-bench-", dir="/var/tmp") as tmp:
        sandbox = Path(tmp)
        lay_down(sandbox, 20)
        lay_down(sandbox, 21)
        slurm = sandbox / "slurm"
        releases = slurm / "epilog-releases"
        tool = ["/usr/bin/python3", "-I", "-B", str(releases / "release.py"), "--root", str(slurm), "rollback"]
        a, b = os.readlink(releases / "previous"), os.readlink(releases / "current")
        files = [(str(p.relative_to(releases / a)), p.stat().st_mode & 0o7777)
                 for p in sorted((releases / a).rglob("*")) if p.is_file() and p.name != "MANIFEST.sha256"]
        # the baseline works on copies of the two releases, laid out in place
        live, old, new = sandbox / "live", releases / a, releases / b
        for rel, _ in files:
            (live / rel).parent.mkdir(parents=True, exist_ok=True)
        in_place(new, live, files)
        whole, renames, baseline = [], [], []
        for i in range(rounds):
            started = time.perf_counter()
            proc = subprocess.run(tool, capture_output=True, text=True)
            whole.append(time.perf_counter() - started)
            report = json.loads(proc.stdout)
            if not report.get("switched"):
                sys.exit(proc.stdout)
            renames.append(report["switch_seconds"])
            baseline.append(in_place(old if i % 2 == 0 else new, live, files))
    def ms(xs):
        return f"{statistics.median(xs) * 1000:8.3f} ms (min {min(xs) * 1000:.3f}, max {max(xs) * 1000:.3f})"

    print(f"{rounds} switches between two releases of {len(files)} files")
    print(f"  release.py rollback, whole process   {ms(whole)}")
    print(f"  the rename of current (what a job end can see change)  {ms(renames)}")
    print(f"  baseline: {len(files)} files rewritten in place      {ms(baseline)}")
    print(f"  mixed-chain window: release 0 (one atomic rename); in place the whole rewrite, "
          f"median {statistics.median(baseline) * 1e6:.0f} us")
    print(f"  ratio rename / in-place rewrite: {statistics.median(renames) / statistics.median(baseline):.3f}")
    print(f"  ratio whole rollback / in-place rewrite: {statistics.median(whole) / statistics.median(baseline):.1f}")


if __name__ == "__main__":
    main()
