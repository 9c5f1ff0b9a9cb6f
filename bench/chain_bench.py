#!/usr/bin/env python3
"""Wall time of the epilog chain for an ordinary job end on an idle node.

Run as root from the repo root:  .venv/bin/python bench/chain_bench.py [--runs 30]

What it does, all in one run:
  * lays the chain down with the real state (salt-call --local) into a sandbox,
    and beside it the chain of the formula before the node program (its
    runner and parts in bash: the last revision with BASH_RUNNER, exported
    with git archive and laid down by its own state);
  * re-runs itself in a private mount namespace with a fresh tmpfs on /tmp
    holding 200 files of other users (an idle node's /tmp; the host's /tmp is
    never touched), and a tmpfs on each chain's run_dir, as a node's /run is;
  * per run: the prolog adds the user's allow line, the job leaves a stray
    process and a /tmp file, then epilog.sh is timed from fork to exit in the
    bare environment slurmd gives (no PATH). SLURM_CONF points nowhere, so a
    controller RPC could not succeed: the decision must be node-local;
  * baselines in the same run, interleaved run by run with ours: the
    parts sites commonly run (grep -w guard, killall -9 -u, sed -i "/$user/d",
    find -user -exec rm) run in a run-parts loop with logger calls, as sites
    run them today (the bar: ours at or below 0.8x of it); the bash chain before the
    node program; ours with the metrics textfile on; the process floors
    (bash -c : and /usr/bin/python3 -ISB -c pass);
  * then, in the same run and IPC namespace of its own, 4,000 System V
    segments on the node, and ours and the sites' parts timed again.
Prints a table and one JSON line.
"""
import argparse
import json
import os
import pwd
import shutil
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
# The formula as it was before the node program: its runner and parts in
# Jinja-rendered bash, with a Perl sender in part 40. Found in the history as
# the parent of the commit that removed its runner template.
BASH_RUNNER = "salt/epilog/files/runner.sh.jinja"


def bash_chain_revision():
    removed = sh("git", "-C", str(REPO), "rev-list", "-1", "HEAD", "--", BASH_RUNNER).stdout.strip()
    if not removed:
        sys.exit(f"no commit removed {BASH_RUNNER}: a clone with its history is needed (git clone, not a shallow one)")
    return sh("git", "-C", str(REPO), "rev-parse", "--short", removed + "^").stdout.strip()

SEED_PARTS = {
    "40-lastuserjob-processes": r'''#!/bin/bash
if grep -q -w "$SLURM_JOB_USER" "$CONF/localusers.backup"; then exit 0; fi
if [ "$SLURM_JOB_USER" != root ]; then
    if killall -9 -u "$SLURM_JOB_USER" ; then logger -t slurm-epilog "Killed residual user processes"; fi
fi
exit 0
''',
    "41-lastuserjob-ssh": r'''#!/bin/bash
if grep -q -w "$SLURM_JOB_USER" "$CONF/localusers.backup"; then exit 0; fi
sed -i "/$SLURM_JOB_USER/d" "$ALLOW"
logger -t slurm-epilog "Removed $SLURM_JOB_USER from $ALLOW"
exit 0
''',
    "42-lastuserjob-cleanup": r'''#!/bin/bash
find /tmp /dev/shm -xdev -user "$SLURM_JOB_USER" -exec rm -rf {} + 2>/dev/null
logger -t slurm-epilog "Cleaned /tmp for $SLURM_JOB_USER"
exit 0
''',
}
SEED_RUNNER = r'''#!/bin/bash
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
logger -t slurm-epilog "START user=$SLURM_JOB_USER job=$SLURM_JOB_ID"
for part in "$CONF"/epilog.d/*; do "$part"; done
exit 0
'''


def sh(*argv, **kw):
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


def timed_together(commands, env, runs, before=None, after=None):
    """{name: [ms, ...]}: each run times every command once, in turn, so a
    slower moment of the machine weighs on all of them alike. BEFORE() runs
    before each, AFTER(name, what BEFORE returned) after each, untimed."""
    samples = {name: [] for name in commands}
    for _ in range(runs):
        for name, (argv, cmd_env) in commands.items():
            token = before() if before else None
            start = time.perf_counter()
            subprocess.run(argv, env=cmd_env or env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            samples[name].append((time.perf_counter() - start) * 1000)
            if after:
                after(name, token)
    return samples


def paired(ours, base):
    """The median of the per-run differences OURS - BASE (each run times
    both, one after the other), and the difference of the medians."""
    return {"median_of_differences": round(statistics.median(a - b for a, b in zip(ours, base)), 2),
            "difference_of_medians": round(statistics.median(ours) - statistics.median(base), 2)}


def stats(samples):
    ordered = sorted(samples)
    return {"median_ms": round(statistics.median(ordered), 2), "p90_ms": round(ordered[int(len(ordered) * 0.9) - 1], 2),
            "min_ms": round(ordered[0], 2), "runs": len(ordered)}


def lay_down(sandbox, name, tree=None, **extra):
    """Lay the chain of TREE (this repo when None) down under SANDBOX/NAME
    with that tree's own state, through a masterless minion of its own;
    EXTRA: more pillar settings."""
    base = sandbox / name
    (base / "spool").mkdir(parents=True)
    (base / "spool/cred_state").write_bytes(b"")  # as in slurmd's live spool
    (base / "log").mkdir()
    pillar = {"epilog": {
        "slurm_config_dir": str(base / "slurm"), "ssh_allow_file": str(sandbox / "localusers"),
        "log_file": str(base / "log/epilog.log"), "slurmd_spool_dir": str(base / "spool"), "run_dir": str(base / "run"),
        "localusers": ["root", "je.kim", "s.shin"], "record_file": str(base / "log/records.jsonl"), **extra,
    }}
    tree = tree or REPO
    conf = base / "conf"
    conf.mkdir()
    (conf / "minion").write_text(json.dumps({
        "id": f"bench-{name}", "file_client": "local", "root_dir": str(base / "root"),
        "file_roots": {"base": [str(tree / "salt"), str(tree)]}, "module_dirs": [str(tree)],
    }))
    sh(str(REPO / ".venv/bin/salt-call"), f"--config-dir={conf}", "--local", "--retcode-passthrough", "--out=json",
       "state.apply", "epilog", "pillar=" + json.dumps(pillar), cwd="/")
    return base / "slurm"


SEGMENTS = 4000
# the bar: the ordinary job end at this fraction of the sites' common parts, or below
BAR = 0.8


def make_segments(count):
    """COUNT System V shared memory segments of root's (4 KiB each), in this
    process's IPC namespace: how many could be made."""
    import ctypes  # pylint: disable=import-outside-toplevel

    libc = ctypes.CDLL(None, use_errno=True)
    made = 0
    for _ in range(count):
        if libc.shmget(0, 4096, 0o1600) < 0:  # IPC_PRIVATE, IPC_CREAT | 0600
            break
        made += 1
    return made


def inner(sandbox, runs):
    """Runs inside the private mount namespace."""
    sh("mount", "-t", "tmpfs", "-o", "mode=1777", "bench-tmp", "/tmp")
    # run_dir (the marks and the users' locks) on a tmpfs, as a node's /run
    # is (systemd mounts one at every boot); the sandbox is on /var/tmp's disk
    for name in ("ours", "ours-metrics", "bash-chain"):
        run_dir = sandbox / name / "run"
        run_dir.mkdir(mode=0o700, exist_ok=True)
        sh("mount", "-t", "tmpfs", "-o", "mode=0700", "bench-run", str(run_dir))
    os.makedirs("/tmp/.X11-unix", mode=0o1777)
    for i in range(200):
        path = Path(f"/tmp/other-{i}")
        path.write_text("x")
        os.chown(path, 0 if i % 2 else 1, 0)
    pw = pwd.getpwnam(USER)
    ours, bash_chain = sandbox / "ours/slurm", sandbox / "bash-chain/slurm"
    ours_metrics = sandbox / "ours-metrics/slurm"
    env = {"SLURM_JOB_USER": USER, "SLURM_JOB_UID": str(pw.pw_uid), "SLURM_JOB_ID": "777",
           "SLURMD_NODENAME": "bench-node", "SLURM_CONF": "/nonexistent/slurm.conf"}
    strays, killed = [], {}

    def job_start():
        subprocess.run([str(ours / "prolog.sh")], env=env, check=True)
        stray = subprocess.Popen(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups",
                                  "sleep", "600"], start_new_session=True)
        strays.append(stray)
        residue = Path(f"/tmp/{USER}-residue")
        residue.write_text("x")
        os.chown(residue, pw.pw_uid, pw.pw_gid)
        time.sleep(0.02)
        return stray

    def job_end(name, stray):
        """Whether the chain NAME killed the stray of its own job (a floor's
        is left to the next chain)."""
        if name.endswith("_floor"):
            return
        try:
            stray.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return
        killed[name] = killed.get(name, 0) + 1

    # The parts sites commonly run, in a run-parts loop.
    seed = sandbox / "seed"
    (seed / "epilog.d").mkdir(parents=True)
    shutil.copy(ours / "localusers.backup", seed / "localusers.backup")
    for name, body in SEED_PARTS.items():
        (seed / "epilog.d" / name).write_text(body)
        os.chmod(seed / "epilog.d" / name, 0o755)
    (seed / "epilog.sh").write_text(SEED_RUNNER)
    os.chmod(seed / "epilog.sh", 0o755)
    seed_env = {**env, "CONF": str(seed), "ALLOW": str(sandbox / "localusers")}

    samples = timed_together({
        "ours": ([str(ours / "epilog.sh")], None),
        "ours_with_metrics": ([str(ours_metrics / "epilog.sh")], None),
        "bash_chain": ([str(bash_chain / "epilog.sh")], None),
        "seed_prefix_chain": ([str(seed / "epilog.sh")], seed_env),
        "bash_floor": (["/bin/bash", "-c", ":"], None),
        "python_floor": (["/usr/bin/python3", "-ISB", "-c", "pass"], None),
    }, env, runs, before=job_start, after=job_end)
    # The same job end with a node's worth of System V shared memory (4,000
    # segments of root's, kernel.shmmni is 4096: part 42 reads every row),
    # timed against the sites' parts again, in this run's IPC namespace.
    made = make_segments(SEGMENTS)
    crowded = timed_together({
        "ours_with_segments": ([str(ours / "epilog.sh")], None),
        "seed_with_segments": ([str(seed / "epilog.sh")], seed_env),
    }, env, runs, before=job_start, after=job_end)
    samples.update(crowded)
    log = (sandbox / "ours/log/epilog.log").read_text().splitlines()
    decisions = [line for line in log if "epilog.sh job=777" in line and "start;" in line]
    node_local = sum("other jobs of this user on this node: no (node-local" in line for line in decisions)

    execs = None
    if shutil.which("strace"):
        job_start()
        trace = sandbox / "trace"
        subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve", "-o", str(trace), str(ours / "epilog.sh")], env=env)
        names = [line.split('"')[1].rsplit("/", 1)[-1] for line in trace.read_text().splitlines()
                 if "execve(" in line and "= 0" in line]
        execs = {"count": len(names), "programs": sorted(set(names)),
                 "controller_rpcs": sum(n in ("squeue", "scontrol", "sinfo") for n in names)}
    for p in strays:
        if p.poll() is None:
            p.kill()
        p.wait()
    records = (sandbox / "ours/log/records.jsonl").read_text().splitlines()
    return {**{name: stats(values) for name, values in samples.items()},
            "metrics_added_ms": paired(samples["ours_with_metrics"], samples["ours"]),
            "segments": made, "segments_added_ms": paired(samples["ours_with_segments"], samples["ours"]),
            "ours_minus_seed_ms": paired(samples["ours"], samples["seed_prefix_chain"]),
            "records_written": sum('"stage":"epilog"' in line for line in records),
            "node_local_decisions": f"{node_local}/{len(decisions)}", "strays_killed": f"{killed.get('ours', 0)}/{runs}",
            "strays_killed_by_chain": killed,
            "execs_per_job_end": execs, "tmp_entries": len(os.listdir("/tmp"))}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--bash-chain", help="the git revision of the bash chain (default: the last with its runner)")
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        print(json.dumps(inner(Path(args.inner), args.runs)))
        return
    if os.geteuid() != 0:
        sys.exit("run as root: the epilog runs as root")
    args.bash_chain = args.bash_chain or bash_chain_revision()
    try:
        pwd.getpwnam(USER)
    except KeyError:
        sh("groupadd", "--gid", str(USER_UID), USER)
        sh("useradd", "--uid", str(USER_UID), "--gid", str(USER_UID), "--create-home", USER)
    sandbox = Path(tempfile.mkdtemp(prefix="epilog-bench-", dir="/var/tmp"))
    try:
        lay_down(sandbox, "ours")
        lay_down(sandbox, "ours-metrics", metrics_file=str(sandbox / "ours-metrics/metrics/epilog.prom"))
        for name, rev in (("bash-chain", args.bash_chain),):
            tree = sandbox / f"{name}-tree"
            tree.mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "salt", "_modules"],
                                     check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
            lay_down(sandbox, name, tree)
        out = sh("unshare", "--mount", "--ipc", "--propagation", "private", sys.executable, __file__,
                 "--runs", str(args.runs), "--inner", str(sandbox)).stdout
        result = json.loads(out.strip().splitlines()[-1])
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)
    ours, bash_chain, seed = (result[k] for k in ("ours", "bash_chain", "seed_prefix_chain"))
    print(f"epilog chain, ordinary job end on an idle node ({ours['runs']} runs each, interleaved; "
          f"/tmp with {result['tmp_entries']} entries)")
    print(f"  {'':40} {'median':>9} {'p90':>9} {'min':>9}")
    for name, s in (("this formula's epilog.sh", ours), ("ours, metrics_file on", result["ours_with_metrics"]),
                    (f"the bash chain ({args.bash_chain})", bash_chain),
                    ("sites' common parts (the bar)", seed), ("bash -c : (process floor)", result["bash_floor"]),
                    ("python3 -ISB -c pass (python's floor)", result["python_floor"])):
        print(f"  {name:40} {s['median_ms']:>7.2f}ms {s['p90_ms']:>7.2f}ms {s['min_ms']:>7.2f}ms")
    ratio = ours['median_ms'] / seed['median_ms']
    print(f"  ours/seed {ratio:.2f}x (at or below 1.00x: {'yes' if ratio <= 1 else 'NO'}; the bar, at or "
          f"below {BAR:.2f}x: {'met' if ratio <= BAR else 'NOT met'}; per-run difference "
          f"{result['ours_minus_seed_ms']['median_of_differences']:+.2f} ms); "
          f"ours/bash chain {ours['median_ms'] / bash_chain['median_ms']:.2f}x")
    crowded = result["ours_with_segments"]
    print(f"  with {result['segments']} shared memory segments on the node: ours {crowded['median_ms']:.2f} ms, "
          f"sites' parts {result['seed_with_segments']['median_ms']:.2f} ms "
          f"({crowded['median_ms'] / result['seed_with_segments']['median_ms']:.2f}x); the segments add "
          f"{result['segments_added_ms']['difference_of_medians']:+.2f} ms to ours")
    metrics = result["metrics_added_ms"]
    print(f"  the metrics textfile adds {metrics['median_of_differences']:.2f} ms (median of per-run differences; "
          f"difference of medians {metrics['difference_of_medians']:.2f} ms); {result['records_written']} records written")
    print(f"  decisions answered node-locally: {result['node_local_decisions']}; strays killed: {result['strays_killed']}")
    if result["execs_per_job_end"]:
        e = result["execs_per_job_end"]
        print(f"  execs per job end: {e['count']} ({', '.join(e['programs'])}); controller RPC commands: {e['controller_rpcs']}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
