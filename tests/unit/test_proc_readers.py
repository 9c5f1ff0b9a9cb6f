"""One reader of /proc per fact: a process's /proc/PID/stat is read by
system.stat_text, its parent and its start told from that text (the name
in it may hold anything: the fields after its last ") " count), and the
module's view of a slurmd's start (slurmd._started) asks the same readers."""
import os
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO, load_file
from tests.unit.conftest import node

system = node("system")


@pytest.fixture
def child(tmp_path):
    """A sleeping child of this process whose name (its comm) holds
    ") ", spaces and digits, as any user may name a process."""
    odd = tmp_path / "x) 1 2 (y"
    odd.symlink_to(sys.executable)
    before = time.time()
    proc = subprocess.Popen([str(odd), "-c", "import time; time.sleep(60)"])
    try:
        yield proc, before
    finally:
        proc.kill()
        proc.wait()


def test_the_stat_text_is_the_processs_and_empty_for_none(child):
    proc, _ = child
    text = system.stat_text(proc.pid)
    assert text.startswith(f"{proc.pid} (x) 1 2 (y) ".encode()), text
    assert system.stat_text(0) == b"" and system.stat_text("none") == b""


def test_the_parent_and_the_start_are_told_past_any_name(child):
    proc, before = child
    assert system.ppid(proc.pid) == os.getpid()
    assert system.ppid(os.getpid()) == os.getppid()
    assert system.ppid(0) is None
    started = system.started(system.stat_text(proc.pid))
    # the clock's ticks and the boot's whole second: within a second of the spawn
    assert before - 1.5 <= started <= time.time() + 1.5, (before, started)
    assert system.started(b"") is None


def test_the_modules_view_of_a_start_is_the_node_programs(child):
    proc, _ = child
    slurmd = load_file(REPO / "_modules/epilog.py", "epilog_module_proc_readers").slurmd
    assert slurmd._started(proc.pid) == system.started(system.stat_text(proc.pid))
    assert slurmd._started(0) is None
