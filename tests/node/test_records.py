"""The decision record of every job end (record_file) and the metrics
textfile (metrics_file), written by the runner of a laid-down chain, through
real job ends: real accounts, real stray processes, real files."""
import os
import stat
import subprocess
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import end, killed, owned_file, slurmd_env, still_running, stray, uid_of
from tests.node.conftest import add_part


def epilog(chain, user, **env):
    ret = chain.run(chain.conf_dir / "epilog.sh", slurmd_env(user, **env))
    assert ret.returncode == 0, ret
    return ret


def parts_of(record):
    return {part["part"]: part for part in record["parts"]}


def test_a_job_end_records_what_it_decided_and_what_each_part_did(own_chain):
    c = own_chain()
    ret = c.run(c.conf_dir / "prolog.sh", slurmd_env("alice"))
    assert ret.returncode == 0, ret
    proc, residue = stray("alice"), owned_file("alice")
    try:
        epilog(c, "alice")
        assert killed(proc) and not residue.exists()
    finally:
        end(proc)
        residue.unlink(missing_ok=True)
    st = os.lstat(c.record_file)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o600
    prolog, record = c.records()
    assert prolog["stage"] == "prolog" and prolog["guard"] is None and prolog["other"] is None
    assert parts_of(prolog)["50-exclusive-ssh"]["facts"] == {"allow": {"op": "add", "change": "added"}}
    assert {key: record[key] for key in ("v", "stage", "job", "user", "uid", "release", "node")} == {
        "v": 1, "stage": "epilog", "job": 4242, "user": "alice", "uid": uid_of("alice"), "release": c.release_id,
        "node": slurmd_env("alice")["SLURMD_NODENAME"]}
    assert abs(record["start"] - time.time()) < 120 and record["ms"] >= sum(p.get("ms", 0) for p in record["parts"])
    assert record["other"]["answer"] == "no" and record["other"]["why"].startswith("node-local")
    assert record["guard"] == {"answer": "act", "why": f"not listed in {c.localusers}; acting for uid {uid_of('alice')}",
                               "listed": "not listed", "system": False}
    parts = parts_of(record)
    assert list(parts) == ["39-lastuserjob-ssh", "40-lastuserjob-processes", "42-lastuserjob-cleanup",
                           "45-stale-x-display"]
    assert all(part["ran"] and part["rc"] == 0 and part["ms"] >= 0 for part in parts.values())
    assert parts["39-lastuserjob-ssh"]["facts"] == {"allow": {"op": "remove", "change": "removed"}}
    assert parts["40-lastuserjob-processes"]["facts"]["kill"]["outcome"] == "done"
    assert parts["40-lastuserjob-processes"]["facts"]["kill"]["signalled"] >= 1
    assert parts["42-lastuserjob-cleanup"]["facts"]["cleanup"]["removed"] >= 1


def test_a_spared_and_an_unknown_job_end_are_recorded_with_their_reasons(own_chain):
    c = own_chain()
    proc = stray("je.kim")
    try:
        epilog(c, "je.kim")
        assert still_running(proc)
        # a uid that is not the user's: who the user is cannot be told
        epilog(c, "alice", uid=uid_of("je.kim"), job=4243)
    finally:
        end(proc)
    spared, unknown = c.records()
    assert spared["guard"] == {"answer": "spare", "why": f"listed in {c.localusers}; doing nothing", "listed": "listed",
                               "system": False}
    for name in ("39-lastuserjob-ssh", "40-lastuserjob-processes", "42-lastuserjob-cleanup"):
        assert parts_of(spared)[name] == {"part": name, "ran": False, "why": "the localusers guard"}
    assert unknown["job"] == 4243 and unknown["other"]["answer"] == "unknown" and unknown["other"]["why"]
    assert unknown["guard"] == {"answer": "not asked", "why": ""}
    assert parts_of(unknown)["40-lastuserjob-processes"] == {
        "part": "40-lastuserjob-processes", "ran": False, "why": "other jobs: unknown"}
    # a lookup failed: the line prolog 50 granted stays, and 39 says until when
    assert parts_of(unknown)["39-lastuserjob-ssh"]["why"] == (
        f"other jobs: unknown; the user's line in {c.allow_file}, if any, stays until a job end of theirs here at "
        "which the lookups succeed, or until removed by hand")[:256]


@pytest.mark.parametrize("name", ['x"y', "back\\slash", "new\nline", "-v", "\x1b[2J", "é\udcff", '"\\' * 1500])
def test_a_name_never_breaks_the_record(own_chain, name):
    """Names are data: whatever SLURM_JOB_USER holds, the record is one line
    of JSON, with what is not printable ASCII shown as ?, as in the log, and
    at most 256 characters of it (the record stays one write)."""
    c = own_chain()
    env = slurmd_env("nobody-here", uid=4000)
    env["SLURM_JOB_USER"] = name.encode("utf-8", "surrogateescape")
    ret = subprocess.run([str(c.conf_dir / "epilog.sh")], env={k.encode(): v if isinstance(v, bytes) else v.encode()
                                                               for k, v in env.items()}, capture_output=True)
    assert ret.returncode == 0, ret
    (record,) = c.records()
    raw = name.encode("utf-8", "surrogateescape").decode("latin-1")[:256]
    shown = "".join(ch if " " <= ch <= "~" else "?" for ch in raw)
    assert record["user"] == shown and record["other"]["answer"] == "unknown"
    assert len(c.record_file.read_bytes()) < 4000


def test_misbehaving_site_parts_are_recorded_and_the_record_stays_small(own_chain):
    """A site's part that hangs is stopped (rc 124), one that prints
    megabytes and forks a daemon is only a part that ran: its output is not
    the record's, and the record stays one line."""
    c = own_chain(part_timeout=2, sweep_budget=1)
    add_part(c, "30-hang", "sleep 120")
    add_part(c, "31-chatty", "head -c 5000000 /dev/zero | tr '\\0' x; printf 'fact kill {\"outcome\":\"forged\"}\\n' >&3; "
                             "setsid sleep 301 </dev/null >/dev/null 2>&1 &")
    try:
        epilog(c, "je.kim")
        (record,) = c.records()
        parts = parts_of(record)
        assert parts["30-hang"]["ran"] and parts["30-hang"]["rc"] == 124 and parts["30-hang"]["ms"] >= 2000
        assert parts["31-chatty"]["ran"] and parts["31-chatty"]["facts"] == {}, "a site part has no fd 3 to hand facts"
        assert len(c.record_file.read_bytes()) < 4000
        assert record["warnings"] >= 1
    finally:
        subprocess.run(["pkill", "-f", "^sleep 301$"], check=False)


def test_the_record_is_never_written_through_a_symlink_a_fifo_or_an_open_directory(own_chain, tmp_path):
    c = own_chain()
    target = tmp_path / "target"
    target.write_text("keep\n")
    c.record_file.symlink_to(target)
    epilog(c, "je.kim")
    assert target.read_text() == "keep\n" and c.record_file.is_symlink()
    c.record_file.unlink()
    os.mkfifo(c.record_file)
    started = time.monotonic()
    epilog(c, "je.kim")  # a FIFO would block an open(2) with no reader: the runner never opens it
    assert time.monotonic() - started < 30 and stat.S_ISFIFO(os.lstat(c.record_file).st_mode)
    c.record_file.unlink()
    # a directory another account can write: nothing is written in it at all
    os.chmod(c.record_file.parent, 0o777)
    try:
        epilog(c, "je.kim")
        assert not c.record_file.exists()
    finally:
        os.chmod(c.record_file.parent, 0o700)
    epilog(c, "je.kim")
    assert len(c.records()) == 1


def test_records_rotate_past_record_max_kb_keeping_the_newest(own_chain):
    c = own_chain(record_max_kb=16)
    rotated = c.record_file.with_name(c.record_file.name + ".1")
    job = 100
    while not rotated.exists():
        job += 1
        assert job < 400, "never rotated"
        epilog(c, "je.kim", job=job)
    first_rotation = job
    for job in range(first_rotation + 1, first_rotation + 60):
        epilog(c, "je.kim", job=job)
    for path in (rotated, c.record_file):
        assert path.stat().st_size <= 16 * 1024 + 4000 and stat.S_IMODE(path.stat().st_mode) == 0o600
    jobs = [record["job"] for record in c.records()]
    assert jobs == sorted(jobs) and jobs[-1] == job, "the newest record must be kept, last"
    assert jobs[0] > 101, "the oldest records go first"


def test_concurrent_job_ends_each_write_one_whole_record_and_count_once(own_chain, tmp_path):
    metrics = tmp_path / "metrics" / "epilog.prom"
    c = own_chain(metrics_file=str(metrics))
    procs = [subprocess.Popen([str(c.conf_dir / "epilog.sh")], env=slurmd_env("je.kim", job=job),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for job in range(500, 508)]
    assert all(proc.wait(timeout=120) == 0 for proc in procs)
    assert sorted(record["job"] for record in c.records()) == list(range(500, 508))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(metrics.read_text()) for s in family.samples}
    assert samples[("epilog_job_ends_total", (("stage", "epilog"),))] == 8
    assert samples[("epilog_spares_total", ())] == 8, [(r["job"], r.get("other"), r.get("guard")) for r in c.records()]


def test_the_metrics_textfile_counts_job_ends_and_parses_as_prometheus_exposition(own_chain, tmp_path):
    metrics = tmp_path / "metrics" / "epilog.prom"
    c = own_chain(metrics_file=str(metrics))
    assert c.run(c.conf_dir / "prolog.sh", slurmd_env("alice")).returncode == 0
    proc, residue = stray("alice"), owned_file("alice")
    try:
        epilog(c, "alice")
        assert killed(proc)
    finally:
        end(proc)
        residue.unlink(missing_ok=True)
    epilog(c, "je.kim", job=4300)
    epilog(c, "alice", uid=uid_of("je.kim"), job=4301)
    families = {family.name: family for family in text_string_to_metric_families(metrics.read_text())}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert families["epilog_job_ends"].type == "counter" and families["epilog_last_chain_seconds"].type == "gauge"
    assert samples[("epilog_job_ends_total", (("stage", "epilog"),))] == 3
    assert samples[("epilog_job_ends_total", (("stage", "prolog"),))] == 1
    assert samples[("epilog_acts_total", ())] == 1
    assert samples[("epilog_spares_total", ())] == 1
    assert samples[("epilog_unknowns_total", ())] == 1
    assert samples[("epilog_residue_removed_total", (("kind", "user_files"),))] >= 1
    assert samples[("epilog_warnings_total", ())] == sum(r["warnings"] for r in c.records())
    last = c.records()[-1]
    assert samples[("epilog_last_chain_seconds", (("stage", "epilog"),))] == pytest.approx(last["ms"] / 1000)
    assert ("epilog_last_chain_seconds", (("stage", "prolog"),)) in samples
    st = metrics.stat()
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o644
    assert sorted(p.name for p in metrics.parent.iterdir()) == [".epilog.prom.lock", "epilog.prom"], \
        "a rewrite leaves no temporary file"
