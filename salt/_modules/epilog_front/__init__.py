"""The Salt side of the epilog module: the rooms behind ``epilog.py``, the
thin front that Salt loads (each public function there is its docstring,
its arguments and one call into its room here). Synced with the front from
``_modules/`` and loaded the way the node program is (epilog.py's
_load_package: afresh on each module load, each room at its first use,
never writing bytecode; a room that only some functions need is imported
inside them, so a call loads only the rooms it uses). No
release holds these files and no node runs them: layout.yaml's package is
``epilog_node`` alone.

The rooms, each one question (the public function each serves):
  common.py     what every room reads through: the call's memo (_one_call),
                paths inside a process's root, names as shown, root-only
                checks, where layout.yaml puts the chain (_Chain)
  slurmconf.py  slurm.conf as Slurm reads it: parse, bounds, Include, trust,
                PrologFlags, SlurmdSpoolDir (parse_slurm_conf, conf_trust,
                prolog_flags)
  slurmd.py     the running slurmds and the slurm.conf each reads (slurmd_argv,
                slurmd_resolves), chain_wired, verify's judgement of each
                slurm.conf and of job_container/tmpfs
  pampolicy.py  pam_file, pam_clean, the operators' file, a user's ssh sessions
  releases.py   rollback, checkpoint, the release tool, the current release
  checks.py     verify: its checks, each problem or warning with its code,
                and its answer
  between.py    sweep, strays, schedule_held, and the record each leaves
  support.py    explain and report

Layers: the front (epilog.py) on top, then the rooms (common at their
bottom; a room imports only the rooms listed above it), then the node
program, which imports none of them. No Salt dunder is read here: what a
room needs of Salt it is given, as arguments (Salt, below, for one call)
or in this package's names below, which the front's loader sets before
any room is imported.
"""

# the node program synced beside the front (epilog_node), loaded by the front
NODE = None
# its package's name in a release (epilog_node)
PACKAGE = None
# a function: this host's node name as Salt's grains tell it (None when they do not)
GRAINS_HOST = None


class Salt:
    """What a room is given of Salt for one call (no room reads a Salt
    dunder): FUNCTIONS, the front's __salt__; OPTS, its __opts__; and, by
    name, GRAINS and what the front reads from Salt for the rooms: config,
    settings and recovery_settings (its readers of the pillar's settings),
    chain_wired (the public function), release_program (a release's own
    node program, loaded as the front loads packages)."""

    def __init__(self, functions, opts, **front):
        self.functions = functions
        self.opts = opts
        self.__dict__.update(front)


def __virtual__():
    # Synced with the epilog module from _modules/, which loads it: it is not
    # an execution module of its own.
    return (False, "epilog_front is the Salt side's rooms the epilog module loads, not an execution module")
