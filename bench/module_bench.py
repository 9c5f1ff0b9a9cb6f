#!/usr/bin/env python3
"""What a call of the epilog module costs over Salt's own: epilog.sweep of an
empty /tmp against test.ping, through salt-call and in-process.

Run as root from the repo root:  .venv/bin/python bench/module_bench.py [--runs 20]

What it does, all in one run:
  * a masterless minion of its own (a throwaway config directory under
    /var/tmp: file_roots at this checkout's salt/, module_dirs at the
    checkout, as the README's quickstart has them, and a pillar that puts
    the sweep's log and record files in the sandbox); nothing is laid down;
  * re-runs itself in a private mount and IPC namespace with a fresh tmpfs
    on /tmp holding only /tmp/.X11-unix (the host's /tmp is never touched;
    no System V object but root's, so the sweep's IPC look runs no program):
    the sweep finds nothing to remove, what is left is the module's cost;
  * whole process: salt-call --local test.ping (the baseline) and salt-call
    --local epilog.sweep, in turn run by run (a slower moment of the
    machine weighs on both alike): the medians, the median of the per-run
    differences sweep - ping, and the ratio sweep / ping;
  * in-process, in a fresh process per run (salt.client.Caller, the engine
    of salt-call --local, set up before the clock starts): the first
    epilog.sweep (the module's load by Salt's loader, then the call), a
    second one (the call alone), and slsutil.renderer of the settings as
    the module asks for them (its part of the call);
  * the module's import, by python -X importtime: the epilog module loaded
    as Salt's loader loads it, and each module of the node program and of
    the rooms that load imports, and what importtime says each cost.
Prints a table and one JSON line; asserts nothing.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SALT_CALL = REPO / ".venv/bin/salt-call"
PYTHON = REPO / ".venv/bin/python"

# One run in-process: the Caller made, test.ping called once (Salt's own
# first-call costs), then the timed steps. Prints one JSON line.
IN_PROCESS = r'''
import json, sys, time
import salt.client, salt.config
opts = salt.config.minion_config(sys.argv[1])
opts["file_client"] = "local"
caller = salt.client.Caller(mopts=opts)
caller.cmd("test.ping")
out = {}
start = time.perf_counter()
caller.sminion.functions["epilog.sweep"]
out["load_ms"] = (time.perf_counter() - start) * 1000
start = time.perf_counter()
caller.cmd("epilog.sweep")
out["first_call_ms"] = (time.perf_counter() - start) * 1000
start = time.perf_counter()
caller.cmd("epilog.sweep")
out["second_call_ms"] = (time.perf_counter() - start) * 1000
start = time.perf_counter()
caller.cmd("slsutil.renderer", path="salt://epilog/settings.jinja", default_renderer="jinja|json",
           tpldir="epilog", validate=True, family=True)
out["settings_render_ms"] = (time.perf_counter() - start) * 1000
print(json.dumps(out))
'''

# The epilog module loaded as Salt's loader loads it (a file, by path; Salt
# itself imported before the clock starts), under -X importtime; prints the
# load's wall time and the modules of the node program and of the rooms it
# loaded (those importlib.import_module loads are not in importtime's lines).
IMPORT = r'''
import importlib.util, json, sys, time
import salt.exceptions
start = time.perf_counter()
spec = importlib.util.spec_from_file_location("epilog", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
ms = (time.perf_counter() - start) * 1000
print(json.dumps([ms, sorted(name for name in sys.modules if name.startswith("_epilog_"))]))
'''


def sh(*argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


def stats(samples):
    ordered = sorted(samples)
    return {"median_ms": round(statistics.median(ordered), 2), "min_ms": round(ordered[0], 2),
            "max_ms": round(ordered[-1], 2), "runs": len(ordered)}


def minion(sandbox):
    """The throwaway masterless minion's config directory under SANDBOX."""
    conf, pillar = sandbox / "conf", sandbox / "pillar"
    for path in (conf, pillar, sandbox / "log", sandbox / "run", sandbox / "slurm"):
        path.mkdir(parents=True)
    (pillar / "top.sls").write_text("base:\n  '*':\n    - epilog\n")
    (pillar / "epilog.sls").write_text(json.dumps({"epilog": {
        "slurm_config_dir": str(sandbox / "slurm"), "log_file": str(sandbox / "log/epilog.log"),
        "record_file": str(sandbox / "log/records.jsonl"), "run_dir": str(sandbox / "run")}}))
    (conf / "minion").write_text(json.dumps({
        "id": "bench-module", "file_client": "local", "root_dir": str(sandbox / "root"),
        "file_roots": {"base": [str(REPO / "salt")]}, "module_dirs": [str(REPO)],
        "pillar_roots": {"base": [str(pillar)]}, "log_level_logfile": "quiet"}))
    return conf


def imports():
    """The epilog module's load under -X importtime: (its wall ms, [the
    modules of the node program and of the rooms it loaded], [(module, self
    us, cumulative us)] of those importtime names)."""
    proc = sh(str(PYTHON), "-X", "importtime", "-c", IMPORT, str(REPO / "_modules/epilog.py"), cwd="/")
    rows = []
    for line in proc.stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if len(fields) == 3 and "_epilog_" in fields[2]:
            rows.append((fields[2].strip(), int(fields[0]), int(fields[1])))
    ms, loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    return ms, loaded, rows


def inner(sandbox, runs):
    """Runs inside the private mount and IPC namespace."""
    sh("mount", "-t", "tmpfs", "-o", "mode=1777", "bench-tmp", "/tmp")
    os.makedirs("/tmp/.X11-unix", mode=0o1777)
    os.chmod("/tmp/.X11-unix", 0o1777)
    conf = sandbox / "conf"
    salt_call = [str(SALT_CALL), f"--config-dir={conf}", "--local", "--out=json"]
    commands = {"ping": [*salt_call, "test.ping"], "sweep": [*salt_call, "epilog.sweep"]}
    # one of each first, untimed: the minion's cache and the files it serves
    for argv in commands.values():
        sh(*argv, cwd="/")
    samples = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            start = time.perf_counter()
            sh(*argv, cwd="/")
            samples[name].append((time.perf_counter() - start) * 1000)
    report = json.loads(sh(*commands["sweep"], cwd="/").stdout)["local"]
    steps = [json.loads(sh(str(PYTHON), "-c", IN_PROCESS, str(conf / "minion"), cwd="/").stdout.splitlines()[-1])
             for _ in range(runs)]
    load_ms, loaded, rows = imports()
    load_samples = [load_ms] + [imports()[0] for _ in range(runs - 1)]
    return {
        "ping": stats(samples["ping"]), "sweep": stats(samples["sweep"]),
        "sweep_minus_ping_ms": round(statistics.median(s - p for s, p in zip(samples["sweep"], samples["ping"])), 2),
        "sweep_over_ping": round(statistics.median(samples["sweep"]) / statistics.median(samples["ping"]), 3),
        "sweep_removed": len(report.get("removed", [])), "sweep_errors": len(report.get("errors", [])),
        "in_process": {key: stats([step[key] for step in steps]) for key in steps[0]},
        "module_import": stats(load_samples), "loaded": loaded,
        "imported": [{"module": name, "self_us": own, "cumulative_us": cumulative} for name, own, cumulative in rows],
    }


def outer(runs):
    """The sandbox made, this program run inside the namespace, its result."""
    sandbox = Path(tempfile.mkdtemp(prefix="epilog-module-bench-", dir="/var/tmp"))
    try:
        minion(sandbox)
        out = sh("unshare", "--mount", "--ipc", "--propagation", "private", sys.executable, __file__,
                 "--runs", str(runs), "--inner", str(sandbox)).stdout
        return json.loads(out.strip().splitlines()[-1])
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)


def show(result):
    ping, sweep = result["ping"], result["sweep"]
    print(f"epilog.sweep of an empty /tmp against test.ping ({ping['runs']} runs each, in turn; "
          f"the sweep removed {result['sweep_removed']}, {result['sweep_errors']} errors)")
    print(f"  {'':44} {'median':>9} {'min':>9} {'max':>9}")
    for name, s in (("salt-call --local test.ping (the baseline)", ping), ("salt-call --local epilog.sweep", sweep),
                    *((f"in-process: {key}", s) for key, s in result["in_process"].items()),
                    ("the module's import (a file, by path)", result["module_import"])):
        print(f"  {name:44} {s['median_ms']:>7.1f}ms {s['min_ms']:>7.1f}ms {s['max_ms']:>7.1f}ms")
    print(f"  sweep - ping: {result['sweep_minus_ping_ms']:+.1f} ms (median of per-run differences); "
          f"sweep / ping: {result['sweep_over_ping']:.3f}x (of the medians)")
    print(f"  modules of the node program and the rooms the import loads: {len(result['loaded'])} "
          f"({', '.join(result['loaded'])})")
    print(f"  of them by an import statement (-X importtime): "
          f"{', '.join(row['module'] + ' ' + str(row['self_us']) + ' us' for row in result['imported']) or 'none'}")
    print(json.dumps(result))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:  # inside the namespace: the measures, as one JSON line
        print(json.dumps(inner(Path(args.inner), args.runs)))
    elif os.geteuid() != 0:
        sys.exit("run as root: it mounts a fresh /tmp in a namespace of its own")
    else:
        show(outer(args.runs))


if __name__ == "__main__":
    main()
