"""
The epilog formula's execution module: ``epilog.sweep``, ``strays``,
``schedule_held``, ``verify``, ``chain_wired``, ``pam_file``, ``pam_clean``,
``rollback``, ``checkpoint``, ``explain``, ``report`` and the slurm.conf
readers (``parse_slurm_conf``, ``conf_trust``, ``prolog_flags``,
``slurmd_argv``, ``slurmd_resolves``).

This file is the thin front Salt loads: each public function is its
docstring, its arguments and one call into the room that does the work,
in ``epilog_front/`` beside this file (its __init__.py says which room holds
what). The front loads two packages synced with it from ``_modules/``, the
same way (_load_package), each module at its first use: the node program
(``epilog_node/``), which every release holds and every job end runs, and the
Salt side's rooms (``epilog_front/``), which no release holds. It gives the rooms what they
need of Salt (_given: its functions, opts and grains, the pillar's
settings); no room reads a Salt dunder. ``epilog.explain`` loads the
current release's own node program instead (its runner, in a dry run).
Nothing in this file or the rooms is laid down on a node: changing them
changes no release.
"""
import functools
import importlib
import importlib.util
import os
import re
import sys

from salt.exceptions import CommandExecutionError

__virtualname__ = "epilog"
# the node program's package, beside this file and in each release
PACKAGE = "epilog_node"
# its modules, and those only verify and explain ask (a release made before them has none)
PACKAGE_MODULES = ("system", "log", "guard", "evidence", "record", "sweep", "parts", "runner")
PACKAGE_LATER = ("pam", "ipc", "roots", "context", "slurm", "worker", "metrics", "reader", "registry", "allow",
                 "budget", "kill", "reach", "sweep_names", "sweep_holders", "sweep_remove", "sweep_report", "cgroups")
# the Salt side's rooms, beside this file and in no release (epilog_front/__init__.py)
FRONT = "epilog_front"
FRONT_ROOMS = ("common", "slurmconf", "slurmd", "pampolicy", "releases", "checks", "between", "support")


def _in_sys_modules(name):
    """The names in sys.modules of package NAME and its modules."""
    return [key for key in sys.modules if key == name or key.startswith(name + ".")]


def _load_package(directory, name, modules=PACKAGE_MODULES, later=PACKAGE_LATER, given=None, lazy=False):
    """The package in DIRECTORY (its __init__.py and its MODULES, and those
    of LATER it holds), loaded under NAME, afresh each time this module is
    loaded: a minion that reloads its modules after a sync runs the new node
    program, not the one it first imported. GIVEN: {name: value} set on the
    package before any of its modules is imported (what the front gives its
    rooms). LAZY: only its __init__.py now, and each of those modules at its
    first use, as an attribute of the package (_first_use): a call loads
    only the modules it uses. Never writes bytecode: a release's files are
    what its manifest says, and nothing else."""
    for key in _in_sys_modules(name):
        del sys.modules[key]
    spec = importlib.util.spec_from_file_location(name, os.path.join(directory, "__init__.py"),
                                                  submodule_search_locations=[directory])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
        for key, value in (given or {}).items():
            setattr(module, key, value)
        if lazy:
            module.__getattr__ = _first_use(module, directory, modules, later)
            return module
        for sub in modules:
            setattr(module, sub, importlib.import_module(f"{name}.{sub}"))
        for sub in later:
            if os.path.isfile(os.path.join(directory, f"{sub}.py")):
                setattr(module, sub, importlib.import_module(f"{name}.{sub}"))
    except BaseException:
        for key in _in_sys_modules(name):
            del sys.modules[key]
        raise
    finally:
        sys.dont_write_bytecode = writes
    return module


def _first_use(package, directory, modules, later):
    """The __getattr__ of PACKAGE, loaded lazily from DIRECTORY: its module
    SUB (of MODULES, or of LATER when DIRECTORY holds it) imported at its
    first use, then an attribute of PACKAGE. When a later load of this module
    put its own package under PACKAGE's name (verify's state run loads it
    anew), PACKAGE's modules are in sys.modules while SUB imports, then the
    later load's again: SUB and what it imports are PACKAGE's."""
    name = package.__name__

    def __getattr__(sub):
        if sub not in modules and not (sub in later and os.path.isfile(os.path.join(directory, f"{sub}.py"))):
            raise AttributeError(f"module {name!r} has no attribute {sub!r}")
        displaced = sys.modules.get(name) is not package
        if displaced:
            saved = {key: sys.modules.pop(key) for key in _in_sys_modules(name)}
            sys.modules[name] = package
            sys.modules.update({f"{name}.{key}": value for key, value in vars(package).items()
                                if getattr(value, "__name__", None) == f"{name}.{key}"})
        writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
        try:
            return importlib.import_module(f"{name}.{sub}")
        finally:
            sys.dont_write_bytecode = writes
            if displaced:
                for key in _in_sys_modules(name):
                    del sys.modules[key]
                sys.modules.update(saved)

    return __getattr__


def _grains_host():
    return __grains__.get("host")  # noqa: F821 - a Salt dunder


def _synced():
    """(the node program synced beside this file, the Salt side's rooms,
    None) or (None, None, why): each __init__.py, its modules at their first
    use (Salt loads this module for a call of any of its functions). A
    module missing (a sync cut short) is a why, as a package that fails to load is."""
    here = os.path.dirname(os.path.abspath(__file__))
    directory = os.path.join(here, PACKAGE)
    try:
        # the synced copy is this version's: every module, the later ones too
        missing = [sub for sub in ("__init__", *PACKAGE_MODULES, *PACKAGE_LATER)
                   if not os.path.isfile(os.path.join(directory, f"{sub}.py"))]
        node = _load_package(directory, "_epilog_node_synced", lazy=True)
        if not missing:
            directory = os.path.join(here, FRONT)
            missing = [sub for sub in ("__init__", *FRONT_ROOMS) if not os.path.isfile(os.path.join(directory, f"{sub}.py"))]
        if missing:
            raise FileNotFoundError(f"no {', '.join(f'{sub}.py' for sub in missing)}")
        front = _load_package(directory, "_epilog_front_synced", FRONT_ROOMS, (),
                              {"NODE": node, "PACKAGE": PACKAGE, "GRAINS_HOST": _grains_host}, lazy=True)
        return node, front, None
    except Exception as exc:  # noqa: BLE001 - whatever it is, the loader gets a reason, not a traceback
        return None, None, f"cannot load {directory} ({type(exc).__name__}: {exc}): run saltutil.sync_modules"


_node, _front, _NODE_MISSING = _synced()


def __getattr__(name):
    """A room (FRONT_ROOMS) as an attribute of this module (epilog.checks), loaded at its first use."""
    if name in FRONT_ROOMS and _front is not None:
        return getattr(_front, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _given(operators_optional=False):
    """What the rooms are given of Salt for this call (epilog_front.Salt);
    OPERATORS_OPTIONAL: its config is _config's with no operators' list
    asked for (epilog.clean's calls)."""
    config = functools.partial(_config, operators_optional=True) if operators_optional else _config
    return _front.Salt(__salt__, __opts__, grains=__grains__, config=config, settings=_settings,  # noqa: F821
                       recovery_settings=_recovery_settings, chain_wired=chain_wired, release_program=_release_program)


def _release_program(chain, current):
    """The node program of release CURRENT, loaded from the release itself
    (what its job ends run), under a name of its own."""
    directory = os.path.join(chain.releases, current, PACKAGE)
    if not os.path.isdir(directory):
        raise CommandExecutionError(f"the current release {current} predates the node program (epilog_node/): "
                                    "apply the state epilog to explain with it")
    trust = _node.system.Trust()
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.endswith(".py") and not trust.root_file(path):
            raise CommandExecutionError(f"{path} is not a file only root can write in a directory only root can "
                                        "write: not loaded (epilog.verify says more)")
    try:
        return _load_package(directory, f"_epilog_node_{current}")
    except Exception as exc:
        raise CommandExecutionError(f"cannot load {directory}: {type(exc).__name__}: {exc}") from exc


# -- slurm.conf and slurmd (epilog_front/slurmconf.py, slurmd.py) ---------------
def conf_trust(uid, mode, regular, placed, slurm_uid):
    """How far a slurm.conf, or a file it includes, or a directory an
    Include glob of it lists, is trusted, from its facts: its owner UID, its
    MODE, whether it is a REGULAR file (for a directory: a directory),
    whether it is PLACED in directories only root can write (every
    directory its resolution went through, in the root of the slurmd that
    reads it), and the uid of the slurm account (None: no such account). "root": a file only root can write. "slurm": the slurm
    account's, writable by it alone (saltstack-formulas/slurm-formula lays
    slurm.conf down so): what it says is what slurmd runs, so it is judged,
    and the slurm account can run anything as root through Epilog= and
    Prolog=, which is the site's risk to know (a warning). "untrusted":
    anything else (another account's, writable by a group or others, not a
    regular file, or in a directory another account can write): what it
    says proves nothing. The one rule verify and chain_wired judge every
    slurm.conf by."""
    return _front.slurmconf.conf_trust(uid, mode, regular, placed, slurm_uid)


def parse_slurm_conf(path):
    """slurm.conf as Slurm reads it: keys in any case, spaces around '=',
    quoted values, several pairs on a line, '#' comments ('\\#' is a
    literal '#'), Include (relative to the including file's directory,
    globs allowed) read in place. A /proc/PID/root/... path is read in that
    process's root, its absolute Includes too. Returns ({key lowercased:
    [values in order]}, [files read], [problems]); the last value is the one
    Slurm uses (Epilog= and Prolog= may be given more than once from
    24.05). A parse is bounded in all, whatever includes what (CONF_*_MAX,
    CONF_SECONDS: a file that includes itself, a glob of /proc, a thousand
    Include lines are answered in bounded time), and each bound it reached
    is one of the problems, [slurm-conf-cut]. Names are shown escaped
    (_shown)."""
    return _front.slurmconf.parse_slurm_conf(path)


def prolog_flags(value):
    """The flags (lower case) Slurm sets for PrologFlags=VALUE, each flag
    with the ones it sets."""
    return _front.slurmconf.prolog_flags(value)


def slurmd_argv(argv):
    """({option letter: its argument}, {long option: its argument}) of a
    slurmd command line ARGV, read as slurmd's getopt_long reads it: short
    options clustered (-Df /x), an argument joined (-f/x) or the next word,
    a long option by any unique prefix (--conf-s=host), -- the end."""
    return _front.slurmd.slurmd_argv(argv)


def slurmd_resolves(argv, env, default_conf, exists):
    """(slurm.conf, how) as slurmd resolves its configuration from its
    command line ARGV, its environment ENV, the build's DEFAULT_CONF (its
    sysconfdir's slurm.conf; None when it cannot be told) and EXISTS(path),
    in the precedence of slurmd.c's _establish_configuration: a
    configuration cache handed to a re-exec'd slurmd
    (SLURMD_RECONF_CONF_CACHE, 24.11 on reconfigure); --conf-server
    (configless); -f; SLURM_CONF; the build's default when it exists; else
    configless (DNS SRV records). A configless answer's path is None: the
    cache is in slurmd's spool (the caller finds it); with no -f or
    SLURM_CONF and a default that cannot be told, (None, "unknown"). how:
    reconf-cache, -f, SLURM_CONF, default, configless, unknown."""
    return _front.slurmd.slurmd_resolves(argv, env, default_conf, exists)


def __virtual__():
    if not sys.platform.startswith("linux"):
        return (False, "the epilog module needs Linux (/proc and /tmp/.X11-unix)")
    if _node is None:
        return (False, _NODE_MISSING)
    return __virtualname__


# -- Salt ---------------------------------------------------------------------
def _config(validate=True, operators_optional=False):
    """(settings, rules, layout): the node's settings, merged and validated by
    the formula's map.jinja (defaults.yaml, osfamilymap.yaml, the pillar) with
    the rules of rules.yaml, as the states see them, and layout.yaml, which
    names what the states lay down. Rendered from the formula's
    settings.jinja, so the module has no defaults, merge, rules or names of
    laid-down files of its own, and a bad pillar fails here with the message the state gives.
    VALIDATE=False: the same merge without the checks, for the recovery
    operations, which must work under the pillar that broke a deploy; they
    check the one setting they use themselves (_recovery_settings).
    OPERATORS_OPTIONAL: checked, but with no epilog pillar, or none of
    localusers, the operators are [] rather than refused (what epilog.clean
    calls: the chain comes off a minion whose pillar is gone). Read once in
    a call (_one_call) of this module (common._config)."""
    return _front.common._config(__salt__["slsutil.renderer"], validate, _front,  # noqa: F821 - a Salt dunder
                                 operators_optional)


def _settings():
    """(settings, chain): the validated settings and where their chain is."""
    settings, _, layout = _config()
    return settings, _front.common._Chain(settings["slurm_config_dir"], layout)


def _recovery_settings():
    """_settings for rollback and checkpoint: merged whatever else the
    pillar gets wrong, with slurm_config_dir held to the path rule."""
    settings, rules, layout = _config(validate=False)
    confdir = settings.get("slurm_config_dir")
    if not isinstance(confdir, str) or not re.match(rules["path"], confdir) or re.search(rules["path_dots"], confdir):
        raise CommandExecutionError(f"epilog:slurm_config_dir ({confdir!r}) must be an absolute path of letters, "
                                    "digits and . _ + @ - without . or .. components")
    return settings, _front.common._Chain(confdir, layout)


def sweep(test=None, job=None, user=None, budget=None, remove_ipc=False, **kwargs):
    """
    Sweep /tmp for residue of crashed X/VNC servers and Cadence clients
    (orphan /tmp/.X11-unix/X<N> sockets, stale /tmp/.X<N>-lock files, dead
    /tmp/clsbd.<user>.<pid> files) and, with ``job``, that job's scratch
    (``epilog:scratch_patterns``). Removes only what no live process holds.

    Between jobs (by hand, or the minion's scheduler under
    ``epilog:schedule``) an entry goes only while its owner's lock is free:
    one a job end or prolog of theirs holds is kept, for that chain. Unless
    ``test``, each sweep is a record of the record file (stage ``sweep``,
    source ``call`` or ``schedule``), which ``epilog.report`` counts.

    It also looks at the System V IPC objects (shared memory, semaphore
    sets, message queues) of accounts that have no job on the node, decided
    as ``epilog.strays`` decides (the current release's own guard and
    last-job evidence, under the user's lock), and removes those part 42
    would remove only with ``remove_ipc=True``.

    Held back as a job end is: under ``epilog:mode: observe``, while the
    brake holds (``epilog:stop_file``) or with part 45 turned off
    (``epilog:parts``), it decides as a sweep that removes and removes
    nothing (its report is a preview's, ``held_back`` says why), and its
    record says so; the IPC objects go only under the rules of part 42 the
    same way.

    Returns a report: ``removed`` (or, with ``test=True``, ``would_remove``),
    ``kept`` with a reason for each path (the first 10,000 of each list;
    ``more`` counts the rest), ``errors``, ``skipped``,
    ``counts`` per kind, and ``ipc``: ``users`` (each account with objects
    and no job here: what would go, and with ``remove_ipc`` what went) and
    ``counts``, or why it could not look. Raises an error (exit code 1) only
    when the sweep itself cannot run: a bad ``job`` or ``budget``, an
    unknown ``user``, an argument it does not take.

    test
        Report what would be removed and remove nothing. Defaults to the
        minion's ``test`` option.

    job
        A Slurm job id: also remove that job's scratch entries, those owned
        by ``user``.

    user
        The job's user; needed with ``job``.

    budget
        Whole seconds the sweep may take, 1 to 3600 (rules.yaml's seconds;
        default ``epilog:sweep_budget``).

    remove_ipc
        Remove the System V IPC objects of accounts with no job here that
        part 42 would remove at their last job end (default: only report
        them).

    CLI Example:

    .. code-block:: bash

        salt-call epilog.sweep
        salt '*' epilog.sweep test=True
        salt '*' epilog.sweep job=1234 user=alice
        salt '*' epilog.sweep remove_ipc=True
    """
    return _front.between.sweep(_given(), test, job, user, budget, remove_ipc, **kwargs)


def schedule_held():
    """
    The formula's schedule entries this minion holds (``entries``: the
    names of epilog-sweep and epilog-strays, each held with the formula's
    function: another function under such a name is the site's), in the
    running minion's memory or in the file a minion reads when it starts
    (minion.d/_schedule.conf). epilog.clean takes these entries out (from
    the file when no salt-minion daemon runs: salt/epilog/minion.jinja).

    CLI Example:

    .. code-block:: bash

        salt-call epilog.schedule_held
    """
    return _front.between.schedule_held(_given())


def chain_wired(slurm_config_dir=None):
    """
    Whether any slurm.conf of this node still names the chain under
    SLURM_CONFIG_DIR (the pillar's by default) in Epilog= or Prolog=, read
    the way Slurm reads it (Include, quotes, any case, $SLURM_CONF, what
    slurmd was started with, a configless node's cache, and
    SLURM_CONFIG_DIR's own slurm.conf). ``epilog.clean`` refuses unless
    ``wired`` is empty and ``known`` is True.

    ``elsewhere`` lists each Epilog=/Prolog= that names the runner of
    another chain of this formula's (``conf``, ``key``, ``value``, ``dir``,
    and ``why``, the warning the state epilog gives on every apply and
    verify's [slurm-conf-old-chain]), and ``old_dirs`` those directories:
    after a rename of ``slurm_config_dir``, the old chain slurmd still runs,
    which no longer gets the pillar's updates. Only a slurm.conf that only root can write
    counts there, and only a directory that only root can write holding
    root's epilog-releases.

    CLI Example:

    .. code-block:: bash

        salt-call epilog.chain_wired
        salt-call epilog.chain_wired slurm_config_dir=/etc/slurm-old
    """
    with _front.common._one_call():
        return _front.slurmd._chain_wired(slurm_config_dir, _config(operators_optional=True))


def verify(expect=None, verbose=False):
    """
    Check, without changing anything, that the epilog chain on this node is
    what the state lays down and that it can run:

    - the current release (epilog-releases/current) matches the sha256
      manifest recorded when it was made current, and is the release the
      state lays down now; epilog.sh, prolog.sh and localusers.backup are
      the symlinks to it;

    - each managed file's content, owner and mode equal what ``state.apply
      epilog`` would lay down now (a ``test=True`` run of the state);
    - root owns each file, group and others cannot write it, scripts are
      executable and compile as the Python /usr/bin/python3 runs;
    - ``localusers.backup`` is readable and holds exactly the pillar list;
    - the slurm.conf this node's Slurm reads wires the chain (``Epilog=``,
      ``Prolog=``, ``PrologFlags``, ``SlurmdSpoolDir``, the timeouts), with
      warnings on ``ProctrackType`` and ``job_container/tmpfs``;
    - the node's cgroup version and layout (info), a problem under
      proctrack/cgroup when the chain cannot read it
      (``[cgroup-layout-unreadable]``);
    - sshd's PAM account stack agrees with ``epilog:ssh_access``;
    - the minion's schedule entries agree with ``epilog:schedule`` (a
      warning);
    - the ssh allow file's lines part 39 would never remove (a warning,
      ``[ssh-allow-line-never-revoked]``: the first 20 names and why);
    - the mode and the brake: ``[mode-observe]``, ``[parts-off]`` and
      ``[brake-on]`` are warnings (a rollout still passes); a stop file the
      chain ignores (``[stop-file-untrusted]``) or a place where none could
      be trusted (``[stop-file-dir]``) is a problem.

    Returns ``result`` (True when there is no problem), the ``release`` id
    that is current, the ``problems`` and the ``warnings``, each a sentence
    that opens with its code in brackets (``[slurm-conf-epilog] ...``: the
    codes are listed in docs/releases.md) and names its file. A minion that
    another state run holds answers ``[minion-busy]``: run it again when
    that run ends.

    expect
        The release id (or content digest) every node should run: another
        one is a problem.

    verbose
        Also return what was looked at: the release's ``content`` digest
        and ``manifest`` (path: sha256), the ``checked`` paths, the
        ``slurm_conf`` files judged, the ``schedule`` asked for and the
        minion's entries of it, and ``info``, what verify found that is
        neither a problem nor a warning.

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-*' epilog.verify
        salt 'slurm-work-*' epilog.verify expect=0123456789ab
        salt 'slurm-work-01' epilog.verify verbose=True
        salt 'slurm-work-*' epilog.verify | grep -F '[slurm-conf-epilog]'
    """
    with _front.common._one_call():
        return _front.checks._verify(expect, verbose, _given())


def pam_file(manage=None):
    """
    The text /etc/pam.d/sshd gets from the state epilog.pam: with
    ``epilog:pam_manage`` on, the file with the formula's account lines after
    its last account line: a pam_listfile line that admits root and the
    operators from ``pam_operators_file``, then, under ``ssh_access`` adopt,
    ``pam_adopt_module``, or, under listfile, a pam_listfile line that
    admits every other login only while ``ssh_allow_file`` names it. Off,
    the file without them. The stack it would lay down is judged first, as
    epilog.verify judges the live one: any problem (an operator that would
    not be admitted, a line that admits logins past the formula's gate, a
    pam_slurm_adopt line of the site's own under adopt, a module missing)
    is an error, and the state, which renders this, fails before anything
    is written. None: off, and nothing there to take out.

    manage
        True or False in place of ``epilog:pam_manage`` (epilog.clean asks
        for the file without the formula's lines whatever the pillar says).

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-01' epilog.pam_file
    """
    return _front.pampolicy.pam_file(_given(), manage)


def pam_clean():
    """
    What epilog.clean takes out of the PAM configuration, judged without
    changing anything: ``sshd``, the text of /etc/pam.d/sshd without the
    formula's account lines (None when it holds none; a block edited by
    hand is an error, and nothing is guessed at); ``operators_files``, the
    operators' lists epilog.pam laid down, each with the ``backup`` path in
    the minion's cache it is moved to (file.list_backups finds it there);
    and ``kept``, why a list found there stays. A list is the formula's when
    it holds exactly what epilog.pam lays down now (root, then
    ``localusers``), or is named by the formula's own lines; it stays when
    it is not a regular file of root's, or any PAM configuration outside
    the formula's lines names it.

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-01' epilog.pam_clean
    """
    return _front.pampolicy.pam_clean(_given(operators_optional=True))


def rollback(test=None, checkpoint=None):
    """
    Switch this node's epilog chain back to exactly the release that was
    current before the current one, with one rename: a job end that has
    started keeps the release it started with, the next one runs the
    previous release, complete. The release must still match the sha256
    manifest recorded when it was last made current.

    Only releases of the chain count (epilog-releases/ under
    slurm_config_dir; ``epilog.clean`` removes them all). With no previous
    release it says so and changes nothing. A second rollback switches
    forward again. The next ``state.apply epilog`` makes the pillar's
    release current again: fix the pillar or the formula first.

    Use it when a deploy must be undone at once (the SOP's triggers: a health
    check fails, a checksum is not the expected one, slurmd logs ``epilog
    failed`` or a node drains, a live display is wrongly removed).

    Returns ``result``, ``release`` (current before), ``to``, ``switched``,
    ``switch_seconds`` (the rename itself) and a ``comment``.

    test
        Name the release it would switch to, and change nothing. Defaults to
        the minion's ``test`` option.

    checkpoint
        Switch back to exactly the release that was current when the
        checkpoint of this name was taken (``epilog.checkpoint``; the staged
        rollout takes one per node), and change nothing when it is current.

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-*' epilog.rollback test=True
        salt -b 1 'slurm-work-*' epilog.rollback
        salt 'slurm-work-*' epilog.rollback checkpoint=rollout-20261201T1000-1a2b3c
    """
    return _front.releases.rollback(_given(), test, checkpoint)


def checkpoint(name, test=None):
    """
    Record, under NAME, the release that is current on this node, so that
    ``epilog.rollback checkpoint=NAME`` can return to exactly it, however
    many switches happen in between. The first record of a name is kept:
    taking it again changes nothing. The staged rollout
    (``salt-run state.orchestrate epilog.rollout``) takes one on each node
    before it applies there.

    Returns ``result``, ``checkpoint``, ``release`` (what the name records;
    None when no release was current), ``recorded`` and a ``comment``.

    name
        A letter, then up to 63 letters, digits and ``. _ -``.

    test
        Say what it would record, and change nothing.

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-*' epilog.checkpoint before-upgrade
    """
    return _front.releases.checkpoint(_given(), name, test)


def strays(kill=False, test=None, **kwargs):
    """
    List the processes on this node of accounts that have no job here: what
    a skipped, failed or timed-out job end left, or a login that got in
    another way. Root, system accounts and the operators in the current
    release's localusers.backup are left out. Whether an account has a job
    here is the chain's own decision, from the node's own evidence (the job
    marks under the user's lock, the spool's step sockets, root's
    slurmstepds; the controller only where a job end would ask it); an
    account whose lock a job end or prolog holds, whose name does not
    resolve, or that cannot be told, is ``unknown`` and never killed.

    Returns ``users``: each account told, with ``answer`` (``stray``,
    ``job``: a job of theirs runs here, ``unknown``), ``why``, its number of
    ``processes`` and, for a stray, the first ones (``pid``, ``command``,
    ``age`` in seconds, ``job_cgroup``) and, with ``kill``, what the kill
    did; and ``counts``. Unless ``test``, the look is a record of the record
    file (``epilog.report`` counts it).

    Held back as a job end is: under ``epilog:mode: observe`` the kill
    decides and kills nothing (each stray's ``kill`` says ``outcome:
    would``, and ``would_signal``); while the brake holds
    (``epilog:stop_file``) each stray's kill is ``stopped by`` the file; a
    part turned off (``epilog:parts``: 39, 40, and 42 for the IPC objects)
    does not run. ``mode``, ``stopped`` and ``off`` say which.

    kill
        Kill each stray account's processes with the chain's own kill (part
        40, under the user's lock, as at their last job end).

    test
        Say what would be killed, and kill, lock and write nothing.
        Defaults to the minion's ``test`` option.

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-*' epilog.strays --out=json
        salt 'slurm-work-17' epilog.strays kill=True test=True
        salt 'slurm-work-17' epilog.strays kill=True
    """
    return _front.between.strays(_given(), kill, test, **kwargs)


def explain(user, job=None):
    """
    Tell what the epilog would do for USER on this node if a job of USER
    ended now, and why, by asking the chain itself: the current release's
    own node program decides, in a dry run, everything a job end decides
    (the user's name and uid, whether USER has another job on this node and
    on what evidence, the localusers guard on the release's own list, each
    part's go or no-go) with the same code, and says what it decided instead
    of acting. Nothing is run, written, locked or logged. Answers "why was
    my session spared or killed". It gives the release's ``mode`` (under
    observe, each acting part ``would act``), the ``brake``, and a part the
    brake stops as ``stopped by`` its file.

    job
        The job whose end to explain: that job is not "another job" of
        USER. Without it, any job of USER on this node is one.

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-01' epilog.explain user=je.kim
        salt 'slurm-work-01' epilog.explain user=je.kim job=4711
    """
    return _front.support.explain(_given(), user, job)


def report(since=None, user=None, job=None):
    """
    Summarise what the epilog chain decided and did on this node, from the
    decision records the runner writes at every job end (``record_file``,
    and the ``.1`` before it):

    - ``job_ends`` (epilog) and ``prologs``; ``acted`` (job ends that ran the
      lastuserjob parts) and the ``users_acted_on``; ``spared`` and
      ``unknown`` job ends, each by reason; ``processes_signalled`` by part 40,
      and of them ``strays_signalled`` (outside any job: the chain's) and
      ``job_cgroup_processes_signalled`` (still in a Slurm job's cgroup under
      proctrack/cgroup: Slurm's to kill);
    - ``sweeps`` (part 45 runs) and the ``residue`` ``removed`` and ``kept``
      by kind (part 42's files as ``user_files``); ``warnings``;
    - the ``slowest`` chain (job, user, milliseconds, when);
    - ``would``: what observe mode (or, between jobs, the brake or a part
      turned off) would have done and did not, apart from what was done;
      ``stopped``: the job ends and looks the brake stopped; ``parts_off``;
      ``modes``;
    - only where not 0, what was left or done another way
      (``processes_left_saved_only``, ``kill_rounds_one_by_one``,
      ``parts_ran_in_runner``, ``parts_not_run_no_fork``, ``ipc_left``,
      ``ssh_lines_not_granted`` by why), each also a metric.

    since
        Only job ends since then: a duration back from now (30m, 12h, 1d,
        2w), an epoch, or a time (2026-12-01T10:00; the node's local time
        without a zone).

    user
        Only the job ends of this user.

    job
        The full records of this job on this node (its epilog and prolog).

    CLI Example:

    .. code-block:: bash

        salt 'slurm-work-*' epilog.report since=1d --out=json
        salt 'slurm-work-17' epilog.report since=12h user=je.kim
        salt 'slurm-work-17' epilog.report job=4711
    """
    return _front.support.report(_given(), since, user, job)
