#!/usr/bin/env python3
"""The residue sweep against the common method, one fuser per socket.

Run as root from the repo root:  .venv/bin/python bench/sweep_bench.py [--sizes 300:300,1000:1000]

For each size N:P it plants, in a private mount namespace with a fresh tmpfs
/tmp (the host's /tmp is never touched): N orphan sockets in /tmp/.X11-unix,
N/10 stale locks, N dead /tmp/clsbd.<user>.<pid> files, and P idle processes
(sleep, as an ordinary user, on top of what the machine runs). Then, each on
freshly planted residue, in the same run:

  baseline  the method sites' SOPs give (clean up after a crashed X server): a bash loop with one
            fuser per socket (x_socket_in_use), kill -0 for each lock and
            clsbd pid, rm -f per entry;
  floor     the least any sweep can do (FLOOR below, with the system
            python3 -I -S): python start-up, finding the network namespaces,
            one socket-table read, one lstat and one unlink per entry, and
            no judgement beyond "bound or not"; the part's cost over its work
            is part / floor. (Here every process shares one network
            namespace, so the floor, like the sweep, dumps the socket table
            of that one; it trusts its own dump and unlinks what is not
            bound, which only a floor may do;)
  part      epilog.d/45-stale-x-display as the state lays it down, run as
            slurmd would run it (bare environment);
  module    epilog.sweep through Salt's loader (salt.client.Caller, the
            engine of salt-call --local), timed around the call so that
            salt-call's start-up is excluded; that start-up (salt-call
            test.ping) is measured in the same run and shown beside it, and
            so is the report's own elapsed_ms.

Every method must leave the same thing: nothing of the residue. Prints a
table and one JSON line.
"""
import argparse
import json
import os
import pwd
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
USER = "alice"
# alice's uid in the tests (tests/helpers.py ACCOUNTS): a uid of her own, as
# the chain kills every process of it.
USER_UID = 50101

# The common cleanup, as sites' SOPs describe it (fuser first, ss as a
# fallback, keep when neither exists), written out here as the baseline.
BASELINE = r'''#!/bin/bash
x_socket_in_use() {
    local sock=$1
    if command -v fuser >/dev/null 2>&1; then
        fuser "$sock" >/dev/null 2>&1
        return $?
    fi
    return 0
}
x_lock_alive() {
    local pid
    pid=$(tr -d ' \n' < "$1" 2>/dev/null)
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}
cleanup_stale_x() {
    local sock lock n pid f
    for sock in /tmp/.X11-unix/X[0-9]*; do
        [ -S "$sock" ] || continue
        if x_socket_in_use "$sock"; then continue; fi
        n=${sock##*/X}
        lock=/tmp/.X${n}-lock
        if [ -f "$lock" ] && x_lock_alive "$lock"; then continue; fi
        rm -f -- "$sock" "$lock"
        echo "stale X display purged: :$n" >> "$LOG"
    done
    for lock in /tmp/.X[0-9]*-lock; do
        [ -f "$lock" ] || continue
        if x_lock_alive "$lock"; then continue; fi
        n=${lock##*/.X}; n=${n%-lock}
        if [ -S "/tmp/.X11-unix/X$n" ]; then continue; fi
        rm -f -- "$lock"
    done
    for f in /tmp/clsbd.*; do
        [ -e "$f" ] || continue
        pid=${f##*.}
        if kill -0 "$pid" 2>/dev/null; then continue; fi
        rm -f -- "$f"
        echo "stale clsbd purged: $f" >> "$LOG"
    done
}
cleanup_stale_x || true
exit 0
'''


# The floor: only the system calls a sweep cannot do without.
FLOOR = r'''
import os, socket, struct
spaces = set()
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            spaces.add(os.readlink("/proc/%s/ns/net" % pid))
        except OSError:
            pass
bound = set()
with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4) as nl:
    req = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, 0, 2, 0xFFFFFFFF, 0xFFFFFFFF)
    nl.sendto(struct.pack("=IHHII", 16 + len(req), 20, 0x301, 1, 0) + req, (0, 0))
    done = False
    while not done:
        data, off = nl.recv(1 << 16), 0
        while off + 16 <= len(data):
            length, kind = struct.unpack_from("=IH", data, off)
            if kind in (2, 3):
                done = True
                break
            attr = off + 32
            while attr + 4 <= off + length:
                alen, atype = struct.unpack_from("=HH", data, attr)
                if atype == 1:
                    ino, kdev = struct.unpack_from("=II", data, attr + 4)
                    bound.add((os.makedev(kdev >> 20, kdev & 0xFFFFF), ino))
                attr += (alen + 3) & ~3
            off += (length + 3) & ~3
paths = ["/tmp/.X11-unix/" + n for n in os.listdir("/tmp/.X11-unix")]
paths += ["/tmp/" + n for n in os.listdir("/tmp") if n.startswith("clsbd.") or (n.startswith(".X") and n.endswith("-lock"))]
for path in paths:
    st = os.lstat(path)
    if (st.st_dev, st.st_ino) not in bound:
        os.unlink(path)
'''


def run(argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


def plant(n, dead):
    x11 = Path("/tmp/.X11-unix")
    for display in range(100, 100 + n):
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(x11 / f"X{display}"))
        sock.close()
    for display in range(100 + n, 100 + n + n // 10):
        Path(f"/tmp/.X{display}-lock").write_bytes(b"%10d\n" % dead)
    for i in range(n):
        Path(f"/tmp/clsbd.user{i}.{dead}").write_bytes(b"")


def residue_left():
    return (len(os.listdir("/tmp/.X11-unix")) + sum(1 for name in os.listdir("/tmp")
                                                     if name.startswith((".X", "clsbd."))) - 1)  # -1: .X11-unix


def timed(argv, env=None, cwd=None):
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed: {proc.stderr[-2000:]}")
    return elapsed, proc.stdout


def inner(sandbox, sizes, runs):
    run(["mount", "-t", "tmpfs", "-o", "mode=1777", "bench-tmp", "/tmp"])
    os.mkdir("/tmp/.X11-unix", 0o1777)
    os.chmod("/tmp/.X11-unix", 0o1777)
    pw = pwd.getpwnam(USER)
    dead = subprocess.Popen(["true"])
    dead.wait()
    baseline = sandbox / "baseline.sh"
    baseline.write_text(BASELINE)
    baseline.chmod(0o755)
    floor = sandbox / "floor.py"
    floor.write_text(FLOOR)
    part = sandbox / "slurm/epilog-releases/current/epilog.d/45-stale-x-display"
    env = {"SLURM_JOB_USER": USER, "SLURM_JOB_UID": str(pw.pw_uid), "SLURM_JOB_ID": "777", "SLURMD_NODENAME": "bench"}
    salt_call = [str(REPO / ".venv/bin/salt-call"), f"--config-dir={sandbox / 'conf'}", "--local", "--out=json"]
    import salt.client  # pylint: disable=import-outside-toplevel
    import salt.config  # pylint: disable=import-outside-toplevel
    opts = salt.config.minion_config(str(sandbox / "conf/minion"))
    opts["file_client"] = "local"
    caller = salt.client.Caller(mopts=opts)
    results = []
    for n, p in sizes:
        idle = [subprocess.Popen(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups",
                                  "sleep", "3600"]) for _ in range(p)]
        procs = len([d for d in os.listdir("/proc") if d.isdigit()])
        row = {"N": n, "P": p, "processes_on_machine": procs}
        samples = {"baseline": [], "floor": [], "part": [], "module": [], "module_elapsed": [], "salt_call_startup": []}
        for _ in range(runs):
            plant(n, dead.pid)
            ms, _ = timed([str(baseline)], env={**env, "LOG": str(sandbox / "baseline.log"),
                                                "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
            assert residue_left() == 0, "the baseline left residue"
            samples["baseline"].append(ms)
            plant(n, dead.pid)
            ms, _ = timed(["/usr/bin/python3", "-I", "-S", str(floor)], env={})
            assert residue_left() == 0, "the floor left residue"
            samples["floor"].append(ms)
            plant(n, dead.pid)
            ms, _ = timed([str(part)], env=env)
            assert residue_left() == 0, "the part left residue"
            samples["part"].append(ms)
            ms, _ = timed([*salt_call, "test.ping"], cwd="/")
            samples["salt_call_startup"].append(ms)
            plant(n, dead.pid)
            start = time.perf_counter()
            report = caller.cmd("epilog.sweep")
            samples["module"].append((time.perf_counter() - start) * 1000)
            assert residue_left() == 0 and not report["errors"], "the module left residue"
            samples["module_elapsed"].append(report["elapsed_ms"])
        for proc in idle:
            proc.kill()
            proc.wait()
        med = {k: round(statistics.median(v), 1) for k, v in samples.items()}
        row.update(med)
        row["speedup_part"] = round(med["baseline"] / med["part"], 1)
        row["speedup_module"] = round(med["baseline"] / med["module"], 1)
        row["part_over_floor"] = round(med["part"] / med["floor"], 2)
        results.append(row)
    return results


def lay_down(sandbox):
    (sandbox / "pillar").mkdir()
    (sandbox / "pillar/top.sls").write_text("base:\n  '*':\n    - epilog\n")
    (sandbox / "pillar/epilog.sls").write_text(json.dumps({"epilog": {
        "slurm_config_dir": str(sandbox / "slurm"), "ssh_allow_file": str(sandbox / "localusers"),
        "log_file": str(sandbox / "epilog.log"), "slurmd_spool_dir": str(sandbox / "spool"), "run_dir": str(sandbox / "run"),
        "sweep_budget": 15}}))
    (sandbox / "conf").mkdir()
    (sandbox / "conf/minion").write_text(json.dumps({
        "id": "bench", "file_client": "local", "root_dir": str(sandbox / "root"),
        "file_roots": {"base": [str(REPO / "salt"), str(REPO)]}, "pillar_roots": {"base": [str(sandbox / "pillar")]},
        "module_dirs": [str(REPO)], "log_level_logfile": "quiet"}))
    run([str(REPO / ".venv/bin/salt-call"), f"--config-dir={sandbox / 'conf'}", "--local", "--retcode-passthrough",
         "--out=json", "state.apply", "epilog"], cwd="/")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="300:300,1000:1000", help="N:P pairs, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [tuple(int(x) for x in pair.split(":")) for pair in args.sizes.split(",")]
    if args.inner:
        print(json.dumps(inner(Path(args.inner), sizes, args.runs)))
        return
    if os.geteuid() != 0:
        sys.exit("run as root")
    try:
        pwd.getpwnam(USER)
    except KeyError:
        run(["groupadd", "--gid", str(USER_UID), USER])
        run(["useradd", "--uid", str(USER_UID), "--gid", str(USER_UID), "--create-home", USER])
    sandbox = Path(tempfile.mkdtemp(prefix="epilog-sweep-bench-", dir="/var/tmp"))
    try:
        lay_down(sandbox)
        out = run(["unshare", "--mount", "--propagation", "private", sys.executable, __file__, "--sizes", args.sizes,
                   "--runs", str(args.runs), "--inner", str(sandbox)]).stdout
        results = json.loads(out.strip().splitlines()[-1])
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)
    print(f"residue sweep: N orphan sockets + N/10 stale locks + N dead clsbd, P idle processes (median of {args.runs})")
    print(f"  {'N':>5} {'P':>5} {'procs':>6} {'baseline':>10} {'floor':>8} {'part':>9} {'module':>9} {'(report)':>9}"
          f" {'part x':>7} {'module x':>9} {'part/floor':>11} {'salt-call start-up':>19}")
    for r in results:
        print(f"  {r['N']:>5} {r['P']:>5} {r['processes_on_machine']:>6} {r['baseline']:>8.0f}ms {r['floor']:>6.1f}ms "
              f"{r['part']:>7.1f}ms {r['module']:>7.1f}ms {r['module_elapsed']:>7.1f}ms {r['speedup_part']:>6.1f}x "
              f"{r['speedup_module']:>8.1f}x {r['part_over_floor']:>10.2f}x {r['salt_call_startup']:>17.0f}ms")
    print("  (module = epilog.sweep through Salt's loader, salt-call start-up excluded; (report) = the sweep's own elapsed_ms)")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
