#!/usr/bin/env python3
"""Part 42's removal (parts._clear) against the one before walk.py.

Run as root from the repo root:  .venv/bin/python bench/clear_bench.py [--runs 5] [--base REV]

Both run with the system python3 (as a node runs them), each in a process
of its own, on freshly planted trees in a private mount namespace with a
fresh tmpfs on /tmp (the host's /tmp is never touched), interleaved run by
run. The trees, each removed whole:

  flat   one directory of 200,000 files
  wide   2,000 directories of 100 files
  deep   a chain of 900 directories with a file in each (within the old
         walk's descriptors: deeper, it removed nothing)

The old walk is the parts.py of REV (default: the last revision without
walk.py), from the git history. Prints a table and one JSON line.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PLANT = r'''
import os, sys
kind = sys.argv[1]
os.mkdir("/tmp/t")
fd = os.open("/tmp/t", os.O_RDONLY)
if kind == "flat":
    for i in range(200000):
        os.close(os.open("f%d" % i, os.O_CREAT | os.O_WRONLY, dir_fd=fd))
elif kind == "wide":
    for d in range(2000):
        os.mkdir("d%d" % d, dir_fd=fd)
        sub = os.open("d%d" % d, os.O_RDONLY, dir_fd=fd)
        for i in range(100):
            os.close(os.open("f%d" % i, os.O_CREAT | os.O_WRONLY, dir_fd=sub))
        os.close(sub)
else:
    for level in range(900):
        os.close(os.open("f", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
        os.mkdir("d", dir_fd=fd)
        below = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = below
os.close(fd)
'''

CLEAR = r'''
import os, resource, sys, time
sys.path.insert(0, sys.argv[1])
from epilog_node import parts
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # as the old part 42 raised it
start = time.monotonic()
removed, errors = parts._clear("/tmp/t", 0, time.monotonic() + 600)
elapsed = time.monotonic() - start
assert errors == 0 and os.listdir("/tmp/t") == [], (removed, errors)
print(elapsed, removed)
'''


def base_rev():
    added = subprocess.run(["git", "-C", str(REPO), "log", "--diff-filter=A", "--format=%H", "--",
                            "salt/_modules/epilog_node/walk.py"], capture_output=True, text=True, check=True)
    first = added.stdout.split()[-1]
    return f"{first}^"


def old_package(rev, into):
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "salt/_modules/epilog_node"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "salt/_modules"


def in_tmpfs(script):
    """SCRIPT (shell) in a private mount namespace with a fresh tmpfs on /tmp."""
    ret = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                          "mount -t tmpfs bench /tmp && " + script], capture_output=True, text=True, check=False)
    if ret.returncode != 0:
        raise SystemExit(ret.stderr)
    return ret.stdout


def one(modules, kind):
    quoted = {name: "'" + text.replace("'", "'\\''") + "'" for name, text in (("plant", PLANT), ("clear", CLEAR))}
    out = in_tmpfs(f"/usr/bin/python3 -I -c {quoted['plant']} {kind} && "
                   f"/usr/bin/python3 -I -B -c {quoted['clear']} {modules}")
    elapsed, removed = out.split()
    return float(elapsed), int(removed)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--base", default=None)
    args = parser.parse_args()
    rev = args.base or base_rev()
    with tempfile.TemporaryDirectory(prefix="clear-bench-", dir="/var/tmp") as tmp:
        methods = {"old": str(old_package(rev, Path(tmp))), "walk": str(REPO / "salt/_modules")}
        result = {}
        for kind in ("flat", "wide", "deep"):
            times = {name: [] for name in methods}
            for _ in range(args.runs):
                for name, modules in methods.items():
                    elapsed, removed = one(modules, kind)
                    times[name].append(elapsed)
            result[kind] = {name: round(statistics.median(t) * 1000, 1) for name, t in times.items()}
            result[kind]["entries"] = removed
            result[kind]["ratio"] = round(result[kind]["walk"] / result[kind]["old"], 2)
    print(f"old: parts.py of {rev}; median of {args.runs} runs each, ms")
    print(f"{'tree':6} {'entries':>8} {'old':>9} {'walk':>9} {'ratio':>6}")
    for kind, row in result.items():
        print(f"{kind:6} {row['entries']:8d} {row['old']:9.1f} {row['walk']:9.1f} {row['ratio']:6.2f}")
    print(json.dumps({"base": rev, "runs": args.runs, "result": result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
