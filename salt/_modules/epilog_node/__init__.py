"""
The epilog formula's node program: everything a Slurm node runs of the
formula, at every job end and start, without Salt. Standard library only,
Python 3.6 and later (RHEL 8's and SLES 15's system python3).

Each release of the chain holds this package, its settings (settings.json,
rendered by the state from map.jinja's merge) and thin entry points
(epilog.sh, prolog.sh and each part in epilog.d/ and prolog.d/, a few lines
of Python each). Where to change what:

==============  ============================================================
runner.py       the chain's rules: the parts in order, each under its
                deadline, the marks and the user's lock, the lastuserjob
                gate, the brake, the log, the record; explain's dry run
budget.py       the chain's deadline budget: a chain's worst case, the
                least chain_timeout, the seconds a part may have now
worker.py       how a part runs: the worker's fork, pipes and reaping, a
                site's part exec'd, a part run in the runner itself when no
                pid is free (its scheduling put back)
context.py      Context, what a part's action is handed
guard.py        the localusers guard: the job's identity, the list, system
                accounts: act, spare or unknown, and why
evidence.py     the last-job evidence: marks, the spool, slurmstepd,
                squeue: another job of the user here, yes, no or unknown
slurm.py        the running Slurm the evidence asks: its tools (beside
                slurmd, root's alone), root's real slurmstepd, squeue
registry.py     the formula's parts, one entry each: stage, action, what
                the runner, the worker, the strays and the module know of
                each by its name; what the settings say of a part
parts.py        the parts' dispatch (each action by the registry), the
                brake, and parts 42 (files, IPC) and 45 (the sweep)
allow.py        parts 39 and 50: the ssh allow file's edit, revoke, grant
kill.py         part 40: the kill's rounds, the frozen round, kill slots
reach.py        whose a process is to the kill, and the scan of /proc
sweep.py        the residue sweep's decision table (part 45, epilog.sweep):
                each entry's facts gathered, judged and acted on
sweep_names.py  where the residue lies, the names and patterns of each
                kind, part 45's first look (imports no re)
sweep_holders.py  who holds it: the kernel's socket diagnostics in every
                network namespace, a listener's answer, the processes
sweep_remove.py the sweep's removal: re-checked, relative to a directory
                handle, the job's scratch walked, an owner's lock
sweep_report.py the sweep's report, its log, its budget and SIGTERM, the
                fact for the job end's record
walk.py         the walk of a tree parts 42 and 45 remove from: any depth,
                bounded descriptors, never a symlink, never out of the tree
record.py       the decision record: each kind's fields, built and written
                at each job end (and each look between jobs)
metrics.py      the metrics textfile, and the rules that count a record
reader.py       the records read back, chosen and summed: epilog.report and
                epilog.explain only (no job end imports it)
release.py      the releases: check, manifest, switch, roll back (also the
                tool laid down beside them, run on its own)
log.py          the log file, its rotation, and syslog
system.py       what the program reads from the node: /proc, who may
                write a directory, names shown safely, which Slurm job's
                cgroup a process is in
cgroups.py      the node's cgroup layout as verify reads it: the version,
                where Slurm's job cgroups are (no job end imports it)
roots.py        a process's paths resolved in its root (a slurmd in
                another mount namespace), judged on descriptors
==============  ============================================================

Every decision is a function from facts to a verdict with its reasons
(guard.decide, evidence.decide, allow.allow_change, sweep.judge_display):
the unit tests call them directly, and the log line, the record, the
metrics and epilog.explain all come from the same verdict objects.
"""


def __virtual__():
    # Synced with the epilog module from _modules/, which loads it: it is not
    # an execution module of its own.
    return (False, "epilog_node is the node program the epilog module loads, not an execution module")
