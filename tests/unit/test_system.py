"""The tools the node program keeps to itself so that a job end imports
little (system.py): JSON through json's C layer, fields() for namedtuple,
guard.name_chars for a regex; each held to what it stands in for. And the
job end's imports themselves, on the system python3 a node runs."""
import ast
import errno
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO
from tests.unit.conftest import MODULES, node

system = node("system")
guard = node("guard")

VALUES = [
    {"v": 1, "stage": "epilog", "parts": [{"part": "39-lastuserjob-ssh", "ran": True, "rc": 0, "ms": 2,
                                            "facts": {"allow": {"op": "remove", "change": "removed"}}}]},
    ["log", "warning", "a name with \n a newline, a \x00, \u00e9, \U0001f600 and \\ \" quotes"],
    {"z": 1, "a": [None, True, False, -0.0, 1e300, 2**70, -5]},
    {"settings": {"localusers": ["root", "-v"], "chain_timeout": 110}, "rules": {"seconds": {"min": 1}}},
    [], {}, "", 0, 3.25,
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_json_through_the_c_layer_is_what_json_writes_and_reads(value):
    for sort_keys in (False, True):
        text = system.dumps(value, sort_keys=sort_keys)
        assert text == json.dumps(value, separators=(",", ":"), sort_keys=sort_keys)
        assert text.isascii()
    pretty = json.dumps(value, indent=2)
    assert system.loads(" \n" + pretty + "\r\n\t") == json.loads(pretty)


def test_json_constants_read_as_json_reads_them():
    read = system.loads('[NaN, Infinity, -Infinity, 1.5e3, 12345678901234567890]')
    assert math.isnan(read[0]) and read[1:3] == [math.inf, -math.inf] and read[3:] == [1500.0, 12345678901234567890]
    assert system.dumps([math.inf]) == json.dumps([math.inf])


@pytest.mark.parametrize("text", ["", "   ", "{", "{}x", "[1,]", '"open', "nul", "{'a': 1}", "[1] [2]", "\x00"])
def test_text_that_is_not_one_json_value_is_a_value_error(text):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        system.loads(text)


def test_what_json_cannot_write_is_a_type_error():
    with pytest.raises(TypeError, match="not JSON serializable"):
        system.dumps({"a": object()})


def test_fields_behave_as_a_namedtuple():
    Point = system.fields("Point", "x y z")
    p = Point(1, z=3, y=2)
    assert (p.x, p.y, p.z) == (1, 2, 3) and p == (1, 2, 3) and list(p) == [1, 2, 3]
    assert repr(p) == "Point(x=1, y=2, z=3)" and Point._fields == ("x", "y", "z")
    with pytest.raises(AttributeError):
        p.x = 5
    for bad in [(1, 2), (1, 2, 3, 4)]:
        with pytest.raises(TypeError):
            Point(*bad)
    with pytest.raises(TypeError):
        Point(1, 2, w=3)


def test_the_name_check_takes_exactly_what_the_rules_regex_takes():
    chars = yaml.safe_load((REPO / "salt/epilog/rules.yaml").read_text())["account_chars"]
    allowed = guard.name_chars(chars)
    pattern = re.compile(f"[{chars}]+\\Z")
    for code in [*range(0x300), 0x2028, 0x2212, 0xFF0D, 0x1D7CE]:
        char = chr(code)
        assert (char in allowed) == bool(pattern.match(char)), repr(char)
    assert guard.name_chars("a-c-") == frozenset("abc-")


def test_a_job_end_imports_none_of_the_heavy_modules():
    """What the entry points import, on the system python3 a node runs
    (python -ISB, as they are started): none of the modules that would cost
    every job end milliseconds, and the package whole."""
    probe = (f"import sys; sys.path.insert(0, {MODULES!r}); from epilog_node import runner; "
             "print(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run(["/usr/bin/python3", "-ISB", "-c", probe], capture_output=True, text=True,
                                check=True).stdout.split())
    heavy = {"re", "enum", "collections", "signal", "socket", "datetime", "json", "functools", "subprocess",
             "argparse"}
    assert loaded & heavy == set()
    assert {"epilog_node.guard", "epilog_node.evidence", "epilog_node.parts", "epilog_node.record"} <= loaded
    # the metrics come with the textfile (epilog:metrics_file), at the record's end
    assert "epilog_node.metrics" not in loaded
    assert "epilog_node.reader" not in loaded, "the reader is epilog.report's and epilog.explain's alone"
    # the parts' own modules come with the first part that runs them (parts.action): a prolog never
    # imports the kill, a job end that leaves the user alone neither the kill nor the allow file's edit
    assert not loaded & {"epilog_node.allow", "epilog_node.kill", "epilog_node.reach"}


def test_a_warm_imports_the_rooms_of_the_parts_the_settings_run_and_no_other():
    """parts.warm, what a worker imports ahead: each named part's room,
    but not one of a part the settings leave out (epilog:ssh_access, not
    listfile: 39 edits no allow file), and 42's IPC only while
    epilog:ipc_cleanup is on. The spare worker names the parts after its
    own by stage and order alone."""
    def warmed(settings, names):
        probe = (f"import sys; sys.path.insert(0, {MODULES!r}); from epilog_node import parts; "
                 f"parts.warm({settings!r}, {names!r}); print(' '.join(sorted(sys.modules)))")
        return set(subprocess.run(["/usr/bin/python3", "-ISB", "-c", probe], capture_output=True, text=True,
                                  check=True).stdout.split())
    first = ["39-lastuserjob-ssh", "40-lastuserjob-processes"]
    loaded = warmed({}, first)
    assert {"epilog_node.allow", "epilog_node.kill"} <= loaded
    loaded = warmed({"ssh_access": "adopt"}, first)
    assert "epilog_node.kill" in loaded and "epilog_node.allow" not in loaded
    loaded = warmed({"parts": {"40-lastuserjob-processes": False}, "ssh_access": "none"}, first)
    assert not loaded & {"epilog_node.allow", "epilog_node.kill"}
    assert "epilog_node.ipc" in warmed({}, ["42-lastuserjob-cleanup"])
    assert "epilog_node.ipc" not in warmed({"ipc_cleanup": False}, ["42-lastuserjob-cleanup"])


def test_nothing_below_the_runner_imports_it_or_its_worker():
    """The hubs split by audience: the evidence asks the running Slurm
    (slurm.py), the parts get their Context from context.py, and the
    record's writer, metrics and reader import neither the runner nor the
    worker; the writer and the metrics import no reader."""
    def imports(name):
        tree = ast.parse((REPO / f"salt/_modules/epilog_node/{name}.py").read_text())
        out = set()
        for item in ast.walk(tree):
            if isinstance(item, ast.ImportFrom) and item.level == 1:
                out |= {item.module} if item.module else {alias.name for alias in item.names}
        return out

    for name in ("evidence", "slurm", "context", "parts", "registry", "allow", "kill", "reach", "guard", "record", "metrics",
                 "reader", "worker"):
        assert not imports(name) & {"runner", "strays"}, name
    assert not imports("worker") & {"evidence", "slurm", "record", "metrics", "reader"}
    assert not imports("record") & {"metrics", "reader"} and "reader" not in imports("metrics")


def test_what_is_read_through_a_process_descriptor_is_that_process_or_nothing():
    """strays.processes reads a process's status, stat and cgroup through
    one descriptor of its /proc/PID (system.open_proc): once that process
    has ended, every read through it fails, so none of them can be of a
    process that took its pid since. Its zombie reads as not alive."""
    child = subprocess.Popen(["sleep", "60"])
    proc = system.open_proc(child.pid)
    try:
        assert proc is not None
        assert system.alive(system.status_in(proc))
        assert system.stat_text(child.pid, proc).startswith(b"%d (sleep) " % child.pid)
        child.kill()
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # a zombie now, not reaped
        zombie = system.status_in(proc)
        assert zombie is not None and not system.alive(zombie)
        child.wait()
        assert system.status_in(proc) is None
        assert system.stat_text(child.pid, proc) == b""
        assert system.job_cgroup(child.pid, proc=proc) is None
    finally:
        if proc is not None:
            os.close(proc)
        child.kill()
        child.wait()
    assert system.open_proc("no-such-pid") is None


def test_a_process_look_that_cannot_be_taken_is_an_error_never_no_process():
    """With no descriptor left (EMFILE), open_proc raises: only a process
    that is gone (ENOENT, ESRCH) reads as None, so a failed look is never
    taken for "no such process" (ipc.live_uid would call an object unused)."""
    import resource  # pylint: disable=import-outside-toplevel

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        with pytest.raises(OSError) as caught:
            while True:
                held.append(os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        assert caught.value.errno == errno.EMFILE
        os.close(held.pop())
        held.append(os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))  # none left again
        with pytest.raises(OSError) as caught:
            system.open_proc(os.getpid())
        assert caught.value.errno == errno.EMFILE not in system.GONE
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_slurmstepd_that_cannot_be_read_is_no_evidence_of_none():
    """The job end's look for root's slurmstepds (NodeFacts.stepds): a
    process named slurmstepd whose status cannot be read for want of a
    descriptor makes the look unreadable (2), never "no slurmstepd" (1),
    which lets a job end answer "no other job" and kill."""
    import resource  # pylint: disable=import-outside-toplevel
    import types  # pylint: disable=import-outside-toplevel

    evidence = node("evidence")
    # not root's (nobody's when the tier runs as root): a job end beside
    # this one never sees a slurmstepd of root's made by the tests
    home = Path(tempfile.mkdtemp(prefix="epilog-fake-stepd-", dir="/var/tmp"))
    home.chmod(0o755)
    stepd = home / "slurmstepd"
    stepd.write_bytes(Path("/bin/sleep").read_bytes())
    stepd.chmod(0o755)
    child = subprocess.Popen([str(stepd), "60"], user=65534 if os.geteuid() == 0 else None)
    run = types.SimpleNamespace(settings={"run_dir": str(home), "slurmd_spool_dir": str(home)},
                                env={"SLURMD_NODENAME": "n01"}, marks_trusted=False, trust=system.Trust(),
                                slurm=types.SimpleNamespace(real_stepd=lambda pid, proc=None: False))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = []
    try:
        facts = evidence.NodeFacts(run, False, 0)
        assert facts.stepds("7")[0] in (0, 1)  # with descriptors: read (0: the machine's own Slurm runs one)
        facts = evidence.NodeFacts(run, False, 0)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        with pytest.raises(OSError):
            while True:
                held.append(os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        os.close(held.pop())  # one left: /proc is listed and each comm read, no more
        assert facts.stepds("7")[0] == 2
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        child.kill()
        child.wait()
        shutil.rmtree(home)
