"""epilog.report and explain's last job end, through a minion, over the
records that real job ends of the laid-down chain wrote."""
import concurrent.futures
import fcntl
import json
import os
import subprocess
import time

import pytest
from salt.exceptions import CommandExecutionError

from tests.helpers import as_user, end, in_namespaces, killed, owned_file, slurmd_env, stray, uid_of

# What the node program reads out of its records: the same on every Salt
# line (tests/salt/conftest.py); the fleet's report runs on each.
pytestmark = pytest.mark.salt_line_independent


def job_end(n, user, job, **env):
    ret = subprocess.run([str(n.conf_dir / "epilog.sh")], env=slurmd_env(user, job=job, **env), capture_output=True)
    assert ret.returncode == 0, ret


def records_of(n):
    return [json.loads(line) for line in (n.base / "records.jsonl").read_text().splitlines()]


def test_report_counts_the_job_ends_and_gives_one_in_full(node):
    node.apply()
    proc, residue = stray("alice"), owned_file("alice")
    try:
        job_end(node, "alice", 10)
        assert killed(proc)
    finally:
        end(proc)
        residue.unlink(missing_ok=True)
    job_end(node, "je.kim", 11)
    job_end(node, "alice", 12, uid=uid_of("je.kim"))
    summary = node.run("report")
    assert summary["problems"] == [] and summary["records"] == 3 and summary["job_ends"] == 3
    assert summary["acted"] == 1 and summary["users_acted_on"] == ["alice"]
    assert summary["spared"] == {"listed in localusers": 1}
    assert sum(summary["unknown"].values()) == 1 and summary["processes_signalled"] >= 1
    assert summary["residue"]["removed"]["user_files"] >= 1
    assert summary["slowest"]["ms"] == max(record["ms"] for record in records_of(node))
    assert summary["sweeps"] == sum(1 for r in records_of(node) for p in r["parts"] if "sweep" in p.get("facts", {}))
    assert summary["reaches_since"] is None and summary["oldest_record"] is not None
    week = node.run("report", since="7d")  # the node holds minutes of records, not a week's
    assert week["records"] == 3 and week["reaches_since"] is False and week["oldest_record"] == summary["oldest_record"]
    one = node.run("report", job=10)
    assert one["records"] == [records_of(node)[0]]
    assert one["what_was_done"][0]["decision"] == "acted"
    assert one["what_was_done"][0]["parts"]["40-lastuserjob-processes"].startswith("ran, exit 0")
    assert node.run("report", user="je.kim")["job_ends"] == 1
    assert node.run("report", since="1h")["job_ends"] == 3
    future = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 3600))
    assert node.run("report", since=future)["job_ends"] == 0
    with pytest.raises(CommandExecutionError, match="since must be a duration"):
        node.run("report", since="yesterday-ish")


def test_explain_adds_the_users_last_recorded_job_end(node):
    node.apply()
    proc = stray("alice")
    try:
        job_end(node, "alice", 20)
        assert killed(proc)
    finally:
        end(proc)
    report = node.run("explain", user="alice")
    last = report["last_job_end"]
    assert last["job"] == 20 and last["decision"] == "acted" and last["release"] == node.release.name
    said = last["parts"]["40-lastuserjob-processes"]
    assert said.startswith("ran, exit 0"), said
    assert json.loads(said.split(": ", 1)[1])["kill"]["signalled"] >= 1, said
    assert last["localusers"]["answer"] == "act" and last["other_jobs"]["answer"] == "no"
    assert node.run("explain", user="s.shin")["last_job_end"].startswith("no job end of 's.shin' recorded")


def _held_elsewhere(path, mine):
    """Something else than this process's descriptor MINE has the file at
    PATH open (the report runs in this process, in a thread)."""
    want = os.stat(path)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            if int(pid) == os.getpid() and int(fd) == mine:
                continue
            try:
                if os.path.samestat(os.stat(f"/proc/{pid}/fd/{fd}"), want):
                    return True
            except OSError:
                continue
    return False


def test_report_reads_both_generations_of_one_moment(node):
    """The runner rotates the record file only under an exclusive lock on it.
    A report that meets a rotation under way waits for it, then reads the two
    generations after it: every record once (the generation the rotation
    dropped is gone), and a last line still being written is no problem."""
    node.apply()
    job_end(node, "je.kim", 30)
    job_end(node, "je.kim", 31)
    current = node.base / "records.jsonl"
    older = json.loads(current.read_text().splitlines()[0])
    # each generation tells itself apart in the counts: 29's 100 warnings
    # (dropped by the rotation), 32's 7 (written after it)
    warned = sum(record["warnings"] for record in records_of(node))
    (node.base / "records.jsonl.1").write_text(json.dumps({**older, "job": 29, "warnings": 100}) + "\n")
    (node.base / "records.jsonl.1").chmod(0o600)
    rotating = os.open(current, os.O_RDONLY)
    try:
        fcntl.flock(rotating, fcntl.LOCK_EX)  # as the runner does, to rotate
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(node.run, "report")
            deadline = time.monotonic() + 120
            while not _held_elsewhere(current, rotating):
                assert not pending.done(), f"the report did not wait for the rotation: {pending.result()}"
                assert time.monotonic() < deadline, "the report never opened the record file"
                time.sleep(0.05)
            os.rename(current, node.base / "records.jsonl.1")
            fd = os.open(current, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, (json.dumps({**older, "job": 32, "warnings": 7}) + "\n" + '{"v":1,"stage":"epi').encode())
            os.close(fd)
            fcntl.flock(rotating, fcntl.LOCK_UN)
            summary = pending.result(timeout=300)
    finally:
        os.close(rotating)
    assert summary["problems"] == [] and summary["records"] == 3, summary
    assert summary["warnings"] == warned + 7, summary  # 30, 31 and 32, each once
    assert {r["job"] for r in node.run("report", user="je.kim", job=30)["records"]} == {30}
    assert node.run("report", job=29)["records"] == []
    assert [r["job"] for r in node.run("report", job=32)["records"]] == [32]


def test_the_sweep_reports_the_ipc_objects_of_accounts_with_no_job_and_removes_them_only_when_asked(node):
    """epilog.sweep in-process, in an IPC namespace of the test's own:
    alice's crashed job left a segment and a queue and she has no job here;
    je.kim's (an operator's) segment stays. The record, epilog.report and the
    metrics count what went."""
    node.apply()

    def ipcmk(user, *args):
        return int(subprocess.run([*as_user(user), "ipcmk", *args], capture_output=True, text=True,
                                  check=True).stdout.split()[-1])

    def ids():
        return {int(line.split()[1]) for kind in ("shm", "msg")
                for line in open(f"/proc/sysvipc/{kind}", encoding="ascii").read().splitlines()[1:] if line.split()}

    def inside():
        mine = {ipcmk("alice", "-M", "65536"), ipcmk("alice", "-Q")}
        operators = ipcmk("je.kim", "-M", "4096")
        listed = node.run("sweep")
        before = ids()
        removed = node.run("sweep", remove_ipc=True)
        return mine, operators, before, listed, removed, ids()

    mine, operators, before, listed, removed, after = in_namespaces(inside, pid=False, ipc=True)
    assert mine | {operators} <= before, before
    users = {user["user"]: user for user in listed["ipc"]["users"]}
    assert users["alice"]["answer"] == "stray" and "je.kim" not in users, listed["ipc"]
    assert users["alice"]["ipc"]["remove"] == {"shm": 1, "sem": 0, "msg": 1}, users
    assert listed["ipc"]["counts"] == {"users": 1, "objects": 2, "bytes": 65536, "removed": 0, "bytes_removed": 0,
                                       "would_remove": 0, "bytes_would_remove": 0}
    assert removed["ipc"]["counts"]["removed"] == 2 and removed["ipc"]["counts"]["bytes_removed"] == 65536
    assert not mine & after and operators in after, after
    summary = node.run("report")["between_jobs"]
    assert summary["ipc_removed"] == {"shm": 1, "sem": 0, "msg": 1} and summary["ipc_bytes_removed"] == 65536
    with pytest.raises(CommandExecutionError, match="remove_ipc must be True or False"):
        node.run("sweep", remove_ipc="yes")
