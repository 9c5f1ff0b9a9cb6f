"""The step sockets in slurmd's spool (<node>_<job>.<step>): which jobs run
here, read in one place (evidence.step_name, evidence.step_jobs over
system.entries_in). A job end's evidence and epilog.verify's look at
job_container/tmpfs's BasePath read them the same way. Pure: names and
modes in, job ids out; then the readers on a directory of real sockets."""
import os
import socket
import stat
import types

import pytest

from tests.helpers import REPO, load_file
from tests.unit.conftest import node

evidence = node("evidence")
system = node("system")

SOCK, REG, LNK, DIR = stat.S_IFSOCK | 0o755, stat.S_IFREG | 0o644, stat.S_IFLNK | 0o777, stat.S_IFDIR | 0o755

ROWS = [
    # (name, lstat mode) -> the job id it gives, or None
    ("n01_12.0", SOCK, "12"),
    ("n01_12.batch", SOCK, "12"),
    ("n01_12.extern", SOCK, "12"),
    ("n01_12.4294967292", SOCK, "12"),
    ("node_a_13.0", SOCK, "13"),  # a node name with _ in it: the last _ counts
    ("n01.cluster_14.0", SOCK, "14"),
    ("n01_15.0", REG, None),  # a regular file is no step
    ("n01_15.1", LNK, None),  # nor a symlink to one
    ("n01_15.2", DIR, None),
    ("cred_state", REG, None),
    ("n0116.0", SOCK, None),  # no node part
    ("n01_16", SOCK, None),  # no step part
]


@pytest.mark.parametrize("row", ROWS, ids=[row[0] for row in ROWS])
def test_a_step_socket_names_its_job(row):
    name, mode, job = row
    assert evidence.step_jobs([(name, mode)]) == ([job] if job else [])
    if job:
        assert evidence.step_name(name)


def test_the_jobs_of_a_spool_come_in_its_order_one_per_step():
    entries = [(name, mode) for name, mode, _ in ROWS]
    assert evidence.step_jobs(entries) == ["12", "12", "12", "12", "13", "14"]
    assert evidence.step_jobs([]) == []


@pytest.fixture
def spool(tmp_path):
    """A spool directory as slurmd keeps it while jobs 7 and 8 run: their
    steps' sockets, its cred_state, and what is no step: a regular file and
    a symlink named as steps, a socket of no step's name."""
    held = []
    for name in ("n01_7.batch", "n01_7.0", "n01_8.extern", "slurmd.sock"):
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(tmp_path / name))
        held.append(sock)
    (tmp_path / "cred_state").write_bytes(b"")
    (tmp_path / "n01_9.0").write_bytes(b"")
    (tmp_path / "n01_10.0").symlink_to(tmp_path / "n01_7.0")
    yield tmp_path
    for sock in held:
        sock.close()


def test_the_listing_gives_the_wanted_names_with_their_lstat_modes(spool):
    fd = os.open(spool, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        found = dict(system.entries_in(fd, evidence.step_name))
        assert sorted(found) == ["n01_10.0", "n01_7.0", "n01_7.batch", "n01_8.extern", "n01_9.0"]
        assert stat.S_ISSOCK(found["n01_7.0"]) and stat.S_ISLNK(found["n01_10.0"]) and stat.S_ISREG(found["n01_9.0"])
        assert len(system.entries_in(fd, lambda name: True)) == 7
        assert len(system.entries_in(fd, lambda name: True, limit=3)) == 3
        assert system.entries_in(fd, lambda name: False) == []
    finally:
        os.close(fd)
    fd = os.open(spool / "cred_state", os.O_RDONLY | os.O_CLOEXEC)
    try:
        with pytest.raises(OSError):  # no directory
            system.entries_in(fd, evidence.step_name)
    finally:
        os.close(fd)


def test_a_job_end_and_verify_read_the_same_jobs_from_the_spool(spool):
    """NodeFacts.spool_jobs (a job end's evidence) and the front's
    reading through slurmd's root (verify's job_container/tmpfs check)
    give the same jobs; a spool that cannot be read gives none to a job
    end, and OSError to verify (which says so)."""
    run = types.SimpleNamespace(settings={"run_dir": str(spool), "slurmd_spool_dir": str(spool)},
                                env={"SLURMD_NODENAME": "n01"}, slurm=None, marks_trusted=False,
                                trust=system.Trust())
    facts = evidence.NodeFacts(run, False, 0)
    assert sorted(facts.spool_jobs()) == ["7", "7", "8"]
    front = load_file(REPO / "_modules/epilog.py", "epilog_module_spool_steps")
    names = front.slurmd._entries_in(None, str(spool), None, front._node.evidence.step_name, strict=True)
    assert sorted(front._node.evidence.step_jobs(names)) == ["7", "7", "8"]
    facts.spool_dir = str(spool / "none")
    assert facts.spool_jobs() == []
    with pytest.raises(OSError):
        front.slurmd._entries_in(None, str(spool / "none"), None, front._node.evidence.step_name, strict=True)
