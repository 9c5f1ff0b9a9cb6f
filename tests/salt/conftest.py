"""The Salt side, in-process: a minion's loaders (pytest-salt-factories'
Loaders, as Salt's own tests/pytests/functional use them) serving this
repo's salt/ with file_client local, the epilog module from _modules/ and a
pillar of its own. States and module functions are called as Python
functions, no salt-call process: what is tested is the state or the
function. The fleet (a real master and minions) and the quickstart are the
tests where the process boundary is what is tested.

This directory runs once per Salt line: in the README's test command, under
.venv (3008) with the rest of the suite, then under .venv-3006. A test
marked salt_line_independent runs on the line requirements.txt pins (3008)
alone: it checks what the node program decides, reached through a module
call on a node the state laid down, and Salt's part in it (the render, the
loader, the call's arguments) is what the unmarked tests check on each
line. docs/testing.md lists both kinds."""
import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.helpers import REPO, SaltCall, epilog_pillar, live_spool, require_root

_ids = itertools.count()


def pinned_salt_major():
    """The Salt line requirements.txt pins (.venv's: the suite's main line)."""
    pin = next(line for line in (REPO / "requirements.txt").read_text().splitlines() if line.startswith("salt=="))
    return int(pin.split("==")[1].split(".")[0])


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "salt_line_independent: the same on every Salt line (the node program's decision, reached "
        "through a module call); runs on the line requirements.txt pins alone (tests/salt/conftest.py)")


def pytest_collection_modifyitems(config, items):
    """On any Salt line but the pinned one, the salt_line_independent tests
    are deselected (the run's summary counts them): they ran on the pinned
    line, where the README's command runs them first."""
    from salt.version import __saltstack_version__  # pylint: disable=import-outside-toplevel

    if __saltstack_version__.major == pinned_salt_major():
        return
    independent = [item for item in items if item.get_closest_marker("salt_line_independent")]
    if independent:
        config.hook.pytest_deselected(items=independent)
        items[:] = [item for item in items if not item.get_closest_marker("salt_line_independent")]


class Applied:
    """A state run's return: STATES {state id: its result}, or ERRORS (the
    render failed: Salt's messages)."""

    def __init__(self, raw):
        self.raw = raw
        if isinstance(raw, dict):
            self.states = {key.split("_|-")[1]: value for key, value in raw.items()}
            self.errors = [f"{sid}: {state.get('comment')}" for sid, state in self.states.items()
                           if state.get("result") is False]
        else:
            self.states, self.errors = {}, [str(item) for item in raw]

    @property
    def ok(self):
        return bool(self.states) and not self.errors

    @property
    def text(self):
        """Everything the run said, to look for a message in."""
        return json.dumps(self.raw, default=str)

    def changed(self):
        return {sid for sid, state in self.states.items() if state.get("changes")}

    def __repr__(self):
        return f"Applied({self.text[:3000]})"


class Minion:
    """A masterless minion in this process: loaders on a configuration made
    by pytest-salt-factories (never started), with file_roots FILE_ROOTS
    (this repo's salt/ by default), the epilog module from _modules/ (unless
    MODULE_DIRS says otherwise: [] for a minion that has only what it
    synced), GRAINS over its own, and the pillar it is given (set_pillar)."""

    def __init__(self, salt_factories, base, file_roots=None, module_dirs=None, grains=None, minion_id=None):
        from saltfactories.utils.functional import Loaders  # pylint: disable=import-outside-toplevel

        self.base = Path(base)
        (self.base / "pillar").mkdir(parents=True, exist_ok=True)
        (self.base / "pillar/top.sls").write_text("base:\n  '*':\n    - epilog\n")
        (self.base / "pillar/epilog.sls").write_text("{}\n")
        factory = salt_factories.salt_minion_daemon(
            minion_id or f"inproc-{next(_ids)}",
            overrides={
                "file_client": "local",
                "local": True,
                "file_roots": {"base": [str(p) for p in (file_roots or [REPO / "salt"])]},
                "pillar_roots": {"base": [str(self.base / "pillar")]},
                "module_dirs": [str(REPO)] if module_dirs is None else list(module_dirs),
                **({"grains": dict(grains)} if grains else {}),
                "pytest-minion": {"log": {"disabled": True}},
            },
        )
        self.config_dir = factory.config_dir
        opts = factory.config.copy()
        # the synced modules outside the cache: a pillar refresh (reload_all)
        # wipes the cache, and a sync would then be a change at every apply
        opts.update(file_client="local", local=True, extension_modules=str(self.base / "extmods"))
        self.loaders = Loaders(opts)

    def set_pillar(self, pillar):
        """The minion's pillar from now on (written, then every loader
        reloaded, as a minion does on a pillar refresh)."""
        self.pillar = pillar
        (self.base / "pillar/epilog.sls").write_text(json.dumps(pillar))
        self.loaders.reload_all()

    def apply(self, sls="epilog", test=False, pillar=None):
        """state.apply SLS. PILLAR: over the minion's own for this run (as
        the CLI's pillar= is; written to its pillar file and put back after:
        Salt 3006 keeps an inline pillar for the next run in-process)."""
        if pillar is None:
            return Applied(self.loaders.modules.state.apply(sls, test=test).raw)
        own = getattr(self, "pillar", {})
        self.set_pillar({**own, **pillar})
        try:
            return Applied(self.loaders.modules.state.apply(sls, test=test).raw)
        finally:
            self.set_pillar(own)

    def __call__(self, fun, *args, **kwargs):
        """The module function FUN's return (its errors raise)."""
        module, name = fun.split(".", 1)
        return getattr(getattr(self.loaders.modules, module), name)(*args, **kwargs)


@pytest.fixture(scope="session")
def shared_minion(salt_factories, accounts):
    """The session's minion (its loaders built once); each test sets the
    pillar it needs."""
    require_root()
    base = Path(tempfile.mkdtemp(prefix="epilog-minion-", dir="/var/tmp"))
    yield Minion(salt_factories, base, minion_id="slurm-work-test")
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def minion(shared_minion):
    """The session's minion, with an empty pillar."""
    shared_minion.set_pillar({})
    return shared_minion


class Node:
    """A node laid down by the state, with a pillar of its own under BASE
    (in /var/tmp: a namespace with a /tmp of its own still sees it), on the
    session's minion or on MINION."""

    def __init__(self, minion):
        self.base = Path(tempfile.mkdtemp(prefix="epilog-node-", dir="/var/tmp"))
        live_spool(self.base / "spool")
        self.conf_dir = self.base / "slurm"
        self.minion = minion
        self.set_pillar()

    def set_pillar(self, localusers=("root", "je.kim"), **extra):
        self.pillar = epilog_pillar(self.base, **{"slurm_config_dir": self.conf_dir, "localusers": list(localusers),
                                                  **extra})
        self.minion.set_pillar(self.pillar)

    def apply(self, sls="epilog", test=False):
        ret = self.minion.apply(sls, test=test)
        assert ret.ok or (test and not ret.errors), ret
        # slurm.conf as the chain wants it, unless a test wrote its own
        conf = self.conf_dir / "slurm.conf"
        if sls == "epilog" and not test and not conf.exists():
            conf.write_text(f"ClusterName=x\nEpilog={self.conf_dir}/epilog.sh\nProlog={self.conf_dir}/prolog.sh\n"
                            f"PrologFlags=Alloc,Contain\nSlurmdSpoolDir={self.base}/spool\n")
        return ret

    def run(self, fun, *args, **kwargs):
        """epilog.FUN's return, in-process; verify in isolated() (so it
        judges this node's slurm.conf whatever the machine runs). Under
        ssh_access listfile (the default) that node's sshd admits users by
        its allow file, as a site that wires listfile has it: its
        /etc/pam.d is the machine's, with the line the docs show."""
        if fun == "verify":
            pam = None
            if self.pillar["epilog"].get("ssh_access", "listfile") == "listfile":
                pam = machine_pam(gated_by=self.pillar["epilog"].get("ssh_allow_file", "/etc/localusers"))
            return self.isolated(lambda: self.minion(f"epilog.{fun}", *args, **kwargs), pam=pam)
        return self.minion(f"epilog.{fun}", *args, **kwargs)

    def isolated(self, fn, pam=None):
        """FN() as on a node of its own with no slurmd running: in a fork of
        this process (its loaders come along) in a pid namespace of its own
        (no slurmd of the machine's is in sight) and a mount namespace with
        an empty /etc/slurm (nor its slurm.conf). PAM ({name: bytes}): its
        /etc/pam.d holds these files alone, on a tmpfs (the machine's is
        never written). What FN returns, or raises, comes back here; a
        pillar FN sets is set here again after it."""
        from tests.helpers import in_namespaces  # pylint: disable=import-outside-toplevel

        def run():
            for name, data in (pam or {}).items():
                Path("/etc/pam.d", name).write_bytes(data)
            return fn()

        pillar_file = self.minion.base / "pillar/epilog.sls"
        before = pillar_file.read_text()
        try:
            return in_namespaces(run, fresh=("/etc/slurm", *(("/etc/pam.d",) if pam is not None else ())))
        finally:
            if pillar_file.read_text() != before:
                self.minion.set_pillar(self.pillar)

    def call(self, *args, prefix=(), pillar=None):
        """A real salt-call on this minion's configuration, after PREFIX (a
        namespace to run in, capabilities to drop): where the process is
        what the test needs."""
        return SaltCall(self.minion.config_dir)(*args, prefix=prefix, pillar=pillar)

    @property
    def release(self):
        from tests.helpers import CURRENT, RELEASES  # pylint: disable=import-outside-toplevel

        return self.conf_dir / RELEASES / os.readlink(self.conf_dir / CURRENT)

    def snapshot(self):
        return {p: (p.read_bytes(), p.stat().st_mode, p.stat().st_mtime_ns)
                for p in self.conf_dir.rglob("*") if p.is_file()}


def machine_pam(gated_by=None, sshd=None):
    """This machine's /etc/pam.d ({name: bytes}: its regular files), its
    sshd's as SSHD when given; GATED_BY: sshd's then ends with the account
    line that admits users by that allow file as the chain needs under
    ssh_access listfile, written as docs/site-configurations.md shows it
    (not by the formula: what verify is to recognise)."""
    files = {path.name: path.read_bytes() for path in Path("/etc/pam.d").iterdir()
             if path.is_file() and not path.is_symlink()}
    if sshd is not None:
        files["sshd"] = sshd.encode()
    if gated_by is not None:
        line = f"account required pam_listfile.so item=user sense=allow onerr=fail file={gated_by}\n"
        files["sshd"] = files.get("sshd", b"@include common-account\n") + line.encode()
    return files


@pytest.fixture
def node(shared_minion):
    n = Node(shared_minion)
    yield n
    shutil.rmtree(n.base, ignore_errors=True)
