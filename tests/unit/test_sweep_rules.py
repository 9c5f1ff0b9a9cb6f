"""The sweep's pure rules (epilog_sweep.py, standard library only): the
names it recognises, the lock content it trusts, the scratch patterns, the
arguments it refuses, how it shows a hostile name, and its log's batching.
No root, no Salt, no /tmp."""
import json
import os
import signal
import socket
import subprocess

import pytest

from tests.helpers import REPO, load_file

sweep = load_file(REPO / "_modules/epilog_sweep.py", "epilog_sweep_unit")


@pytest.mark.parametrize("name,display", [
    ("X0", 0), ("X12", 12), ("X99999", 99999),
    ("X012", None), ("X100000", None), ("X-1", None), ("X1\n", None), ("X", None), ("x1", None), ("X1 ", None),
])
def test_x_socket_names_are_displays_written_as_the_x_server_writes_them(name, display):
    match = sweep.X_SOCKET_NAME.match(name)
    assert (int(match.group(1)) if match else None) == display


@pytest.mark.parametrize("name,display", [
    (".X0-lock", 0), (".X80-lock", 80), (".X080-lock", None), (".X80-lock\n", None), (".X80-lock.bak", None),
])
def test_x_lock_names(name, display):
    match = sweep.X_LOCK_NAME.match(name)
    assert (int(match.group(1)) if match else None) == display
    # anything lock-like that is not a lock name is kept and reported, never removed
    assert bool(sweep.X_LOCK_LIKE.match(name)) == name.endswith("-lock")


@pytest.mark.parametrize("name,user,pid", [
    ("clsbd.alice.1234", "alice", "1234"),
    ("clsbd.unknownUser.7", "unknownUser", "7"),
    ("clsbd.a.b.99", "a.b", "99"),        # the pid is the last field, whatever the user name holds
    ("clsbd.-v.5", "-v", "5"),            # a name is data
    ("clsbd.alice.12\n", None, None),
    ("clsbd.alice.", None, None),
    ("clsbd.alice.x1", None, None),
])
def test_clsbd_names_give_user_and_pid(name, user, pid):
    match = sweep.CLSBD_NAME.match(name)
    assert (match.groups() if match else (None, None)) == (user, pid)


@pytest.mark.parametrize("data,pid", [
    (b"      1234\n", 1234), (b"         1\n", 1), (b"4294967295\n", 4294967295),
    (b"      1234", None), (b"     -1234\n", None), (b"      12a4\n", None), (b"      1234\n\n", None),
    (b"\n      1234", None),
])
def test_lock_content_is_the_x_servers_own_format_only(data, pid):
    match = sweep.LOCK_CONTENT.match(data)
    assert (int(match.group(1)) if match else None) == pid


@pytest.mark.parametrize("pattern,name,matches", [
    ("slurm{jobid}*", "slurm12", True),
    ("slurm{jobid}*", "slurm12.out", True),
    ("slurm{jobid}*", "slurm123", False),          # another job's
    ("slurm{jobid}*", "slurm112", False),
    ("vcs*{jobid}*", "vcs_sim_12", True),
    ("vcs*{jobid}*", "vcs_sim_120", False),
    ("vcs*{jobid}*", "vcs_sim_212", False),
    ("slurm{jobid}*", "slurm12\nx", True),         # a newline is part of the name, not its end
    ("slurm{jobid}?", "slurm12", False),
    ("slurm{jobid}?", "slurm12x", True),
])
def test_scratch_patterns_match_the_job_and_only_that_job(pattern, name, matches):
    assert bool(sweep._scratch_regex(pattern, "12").match(name)) == matches


@pytest.mark.parametrize("kwargs,message", [
    ({"job": "12a", "uid": 50101}, "numeric Slurm job id"),
    ({"job": "12"}, "only with the job's user"),
    ({"job": "12", "uid": 0}, "only with the job's user"),
    # str.isdigit takes other scripts' digits, which int() reads as numbers
    ({"job": "\u0661\u0662"}, "a numeric Slurm job id"),
    ({"job": "12", "uid": "\u0661\u0662"}, "only with the job's user"),
    ({"job": "12", "uid": 4294967295}, "only with the job's user"),
    ({"patterns": ["*{jobid}"]}, "may not start with a wildcard or a dot"),
    ({"patterns": [".x{jobid}"]}, "may not start with a wildcard or a dot"),
    ({"patterns": ["slurm*"]}, "must hold {jobid} once"),
    ({"patterns": ["a/{jobid}"]}, "must hold {jobid} once"),
    ({"patterns": ["{jobid}{jobid}"]}, "must hold {jobid} once"),
    ({"budget": "0"}, "a positive number of seconds"),
    ({"budget": "-1"}, "a positive number of seconds"),
    ({"budget": "inf"}, "a positive number of seconds"),
    ({"budget": "nan"}, "a positive number of seconds"),
    ({"budget": "ten"}, "a number of seconds"),
])
def test_the_sweep_refuses_what_it_cannot_run_safely(kwargs, message):
    args = {"job": None, "patterns": [], "budget": 10, "uid": None, **kwargs}
    with pytest.raises(sweep.SweepError, match=message.replace("{", r"\{").replace("}", r"\}")):
        sweep._check_args(args["job"], args["patterns"], args["budget"], args["uid"])


def test_the_sweep_takes_a_plain_job_with_its_uid():
    assert sweep._check_args("12", ["slurm{jobid}*"], "2.5", "50101") == ("12", ["slurm{jobid}*"], 2.5, 50101)


@pytest.mark.parametrize("name,shown", [
    ("/tmp/a\nb", "/tmp/a\\nb"), ("/tmp/a\\nb", "/tmp/a\\\\nb"), ("/tmp/\t\r", "/tmp/\\t\\r"),
    (os.fsdecode(b"/tmp/\xff"), "/tmp/\\\\xff"),
    # any character that is not printable: a terminal sequence never reaches
    # an operator's terminal through the log or a report
    ("/tmp/\x1b[2J", "/tmp/\\x1b[2J"), ("/tmp/a\x7fb\x85", "/tmp/a\\x7fb\\x85"),
    ("/tmp/u\u2028v\u202e", "/tmp/u\\u2028v\\u202e"), ("/tmp/\x00\x01", "/tmp/\\x00\\x01"),
])
def test_a_name_is_shown_on_one_line_whatever_it_holds(name, shown):
    assert sweep._show(name) == shown


def test_a_plain_name_is_shown_as_the_escaping_would_show_it():
    """_show returns a printable name without a backslash at once: the
    escaping would leave it as it is. Every character class that can be in
    a file name agrees."""
    def escaped(name):
        text = os.fsencode(name).decode("utf-8", "backslashreplace")
        text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
        return "".join(char if char.isprintable() or char == "\\" else ascii(char)[1:-1] for char in text)

    samples = [chr(c) for c in range(1, 0x3000)] + ["\udcff", "\U0001f600", "\u2028", "\x7f", "\x85", "\ufeff"]
    for char in samples:
        name = f"/tmp/clsbd.u{char}x.12"
        assert sweep._show(name) == escaped(name), repr(char)


@pytest.fixture
def log_sinks(tmp_path):
    """A log file and a syslog socket of the test's own."""
    fd = os.open(tmp_path / "epilog.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    syslog = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    syslog.bind(str(tmp_path / "log"))
    syslog.setblocking(False)
    yield tmp_path / "epilog.log", fd, syslog
    os.close(fd)
    syslog.close()


def _datagrams(sock):
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


def test_the_log_writes_its_lines_together_at_a_flush_and_each_to_syslog(log_sinks, monkeypatch):
    path, fd, syslog = log_sinks
    log = sweep._Log(None, "45-stale-x-display", job="7", user="-v", log_fd=fd, release="0123456789ab")
    monkeypatch.setattr(log, "SYSLOG", syslog.getsockname())
    log("info", "stale X display purged: :84")
    log("warning", "kept /tmp/.X85-lock: malformed")
    assert path.read_text() == "" and _datagrams(syslog) == []
    log.flush()
    lines = path.read_text().splitlines()
    assert [line.split(" ", 2)[1:] for line in lines] == [
        ["info", "45-stale-x-display job=7 user=-v release=0123456789ab: stale X display purged: :84"],
        ["warning", "45-stale-x-display job=7 user=-v release=0123456789ab: kept /tmp/.X85-lock: malformed"]]
    assert _datagrams(syslog) == [
        "<30>slurm-epilog: 45-stale-x-display job=7 user=-v release=0123456789ab: stale X display purged: :84",
        "<28>slurm-epilog: 45-stale-x-display job=7 user=-v release=0123456789ab: kept /tmp/.X85-lock: malformed"]


def test_the_log_flushes_by_itself_every_flush_lines(log_sinks, monkeypatch):
    path, fd, syslog = log_sinks
    log = sweep._Log(None, "epilog.sweep", log_fd=fd)
    monkeypatch.setattr(log, "SYSLOG", syslog.getsockname())
    for i in range(log.FLUSH_LINES + 1):
        log("info", f"line {i}")
    lines = path.read_text().splitlines()
    assert [line.rsplit(" ", 1)[-1] for line in lines[:log.FLUSH_LINES]] == [str(i) for i in range(log.FLUSH_LINES)]
    # syslog got them too, as far as its queue took them (nobody reads it
    # here): a full queue drops lines, never holds the sweep up, and the
    # file says how many it dropped
    received = _datagrams(syslog)
    assert received and received[0].endswith("line 0")
    assert lines[log.FLUSH_LINES:] == [] if len(received) == log.FLUSH_LINES else lines[log.FLUSH_LINES].endswith(
        f"{log.FLUSH_LINES - len(received)} of these {log.FLUSH_LINES} lines did not reach syslog (its queue was full)")
    log.flush()
    assert path.read_text().splitlines()[-1].endswith(f"line {log.FLUSH_LINES}")


def test_a_preview_logs_nothing(log_sinks, monkeypatch):
    path, fd, syslog = log_sinks
    log = sweep._Log(None, "epilog.sweep", log_fd=fd, enabled=False)
    monkeypatch.setattr(log, "SYSLOG", syslog.getsockname())
    log("info", "would be purged")
    log.flush()
    assert path.read_text() == "" and _datagrams(syslog) == []


def test_the_log_goes_on_without_syslog(log_sinks, monkeypatch, tmp_path):
    path, fd, _ = log_sinks
    log = sweep._Log(None, "epilog.sweep", log_fd=fd)
    monkeypatch.setattr(log, "SYSLOG", str(tmp_path / "no-such-socket"))
    log("info", "one")
    log.flush()
    assert path.read_text().endswith("epilog.sweep job=none user=none: one\n")


def test_the_budget_without_a_pillar_is_the_formulas_default():
    import yaml

    defaults = yaml.safe_load((REPO / "salt/epilog/defaults.yaml").read_text())["epilog"]
    assert sweep.DEFAULT_BUDGET == defaults["sweep_budget"]


def test_the_runners_sigterm_ends_the_sweep_with_what_it_did_in_the_log(tmp_path, monkeypatch, log_sinks):
    """Part 45 stopped mid-sweep by the runner (SIGTERM, its time is up):
    every entry it removed before is in the log, and so is why it stopped.
    The sweep runs on a directory of the test's own in place of /tmp, and a
    real SIGTERM arrives after its third removal."""
    path, fd, syslog = log_sinks
    residue = tmp_path / "tmp"
    residue.mkdir()
    gone_child = subprocess.Popen(["true"])
    gone_child.wait()
    dead = gone_child.pid  # reaped: no such process
    for i in range(10):
        (residue / f"clsbd.user{i}.{dead}").write_bytes(b"")
    monkeypatch.setattr(sweep, "TMP", str(residue))
    monkeypatch.setattr(sweep._Log, "SYSLOG", syslog.getsockname())
    for name in ("SLURM_JOB_ID", "SLURM_JOB_UID", "SLURM_JOB_USER"):
        monkeypatch.delenv(name, raising=False)
    removals = []
    remove = sweep._Sweep.remove

    def remove_then_sigterm(self, *args):
        done = remove(self, *args)
        removals.append(args[3])
        if len(removals) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return done

    monkeypatch.setattr(sweep._Sweep, "remove", remove_then_sigterm)
    before = signal.getsignal(signal.SIGTERM)
    try:
        assert sweep.part([f"--log-fd={fd}"]) == 0
    finally:
        signal.signal(signal.SIGTERM, before)
        sweep._SIGTERM.clear()
    gone = sorted(f"{residue}/{name}" for name in {f"clsbd.user{i}.{dead}" for i in range(10)}
                  - set(os.listdir(residue)))
    assert len(gone) == 3 and sorted(removals) == gone
    log = path.read_text()
    for removed in gone:
        assert f"stale clsbd purged: {removed}\n" in log, log
    assert "sweep stopped by SIGTERM: the chain's time for part 45 ran out" in log, log


def run_part(tmp_path, monkeypatch, log_sinks, argv, job, uid):
    """part() with ARGV, the job (SLURM_JOB_ID=JOB, SLURM_JOB_UID=UID, user
    alice) and the log's fd, over a directory of the test's own standing in
    for /tmp that holds one dead clsbd file. Returns (that directory, the
    clsbd file's name, the log's text)."""
    path, fd, syslog = log_sinks
    residue = tmp_path / "tmp"
    residue.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    name = f"clsbd.user.{dead.pid}"
    (residue / name).write_bytes(b"")
    monkeypatch.setattr(sweep, "TMP", str(residue))
    monkeypatch.setattr(sweep._Log, "SYSLOG", syslog.getsockname())
    monkeypatch.setenv("SLURM_JOB_ID", job)
    monkeypatch.setenv("SLURM_JOB_UID", uid)
    monkeypatch.setenv("SLURM_JOB_USER", "alice")
    before = signal.getsignal(signal.SIGTERM)
    try:
        assert sweep.part([*argv, f"--log-fd={fd}"]) == 0
    finally:
        signal.signal(signal.SIGTERM, before)
    return residue, name, path.read_text()


@pytest.mark.parametrize("argv,said", [
    # an option part 45 never passes: nothing is swept, the log says why, 0
    (["--budget=5", "--json"], "sweep could not run: unknown arguments ['--json']"),
    (["--budget", "5"], "sweep could not run: unknown arguments ['--budget', '5']"),
    (["--budget=nope"], "sweep could not run: budget must be a number of seconds, got 'nope'"),
], ids=["unknown-option", "not-opt=value", "bad-budget"])
def test_the_part_entry_takes_only_its_own_options_and_never_fails(tmp_path, monkeypatch, log_sinks, argv, said):
    """part(), what part 45 runs at every job end, parses its pillar
    arguments itself (no argparse at a job end): anything but --opt=value
    of its own options is refused, the refusal is logged, nothing is swept,
    and it still returns 0 (a failing epilog drains the node)."""
    residue, name, log = run_part(tmp_path, monkeypatch, log_sinks, [*argv, "--release=0123456789ab"], "77", "1001")
    assert os.listdir(residue) == [name]
    assert f" warning 45-stale-x-display job=77 user=alice release=0123456789ab: {said}" in log


@pytest.mark.parametrize("job,uid,release,prefix", [
    ("77", "1001", "0123456789ab", "job=77 user=alice release=0123456789ab"),
    # digits of another script are digits to str.isdigit, not a job id
    ("\u0667\u0667", "1001", "0123456789ab", "job=none user=alice release=0123456789ab"),
    ("77", "\u0661\u0660\u0660\u0661", "0123456789ab", "job=none user=alice release=0123456789ab"),
    ("77", "0", "0123456789ab", "job=none user=alice release=0123456789ab"),
    ("77", "1001", "0123456789ab; rm", "job=77 user=alice"),
], ids=["plain", "job-in-other-digits", "uid-in-other-digits", "uid-0", "release-not-an-id"])
def test_the_part_entry_takes_the_job_from_slurmd_only_as_plain_numbers(tmp_path, monkeypatch, log_sinks, job, uid,
                                                                        release, prefix):
    residue, name, log = run_part(tmp_path, monkeypatch, log_sinks, [f"--release={release}", "--pattern=slurm{jobid}*"],
                                  job, uid)
    assert os.listdir(residue) == []
    assert f" info 45-stale-x-display {prefix}: stale clsbd purged: {residue}/{name}\n" in log


def test_the_part_hands_its_counts_and_paths_to_the_runner_on_its_fact_fd(tmp_path, monkeypatch, log_sinks):
    """Under the runner, part 45 gets --fact-fd=3: one line 'fact sweep
    JSON' with the counts per kind and the paths, which the runner puts in
    the job end's record."""
    read_end, write_end = os.pipe()
    try:
        residue, name, _ = run_part(tmp_path, monkeypatch, log_sinks, [f"--fact-fd={write_end}"], "77", "1001")
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            lines = pipe.read().splitlines()
    finally:
        for fd in (read_end, write_end):
            try:
                os.close(fd)
            except OSError:
                pass
    assert len(lines) == 1 and lines[0].startswith(b"fact sweep ")
    fact = json.loads(lines[0][len(b"fact sweep "):])
    assert fact["counts"]["clsbd"] == {"removed": 1, "kept": 0}
    assert fact["removed"] == [f"{residue}/{name}"] and fact["removed_more"] == 0 and fact["kept"] == []


@pytest.mark.parametrize("name", ['/tmp/clsbd."quoted"', "/tmp/back\\slash", "/tmp/new\nline", "/tmp/\x1b[31mred",
                                  "/tmp/bytes\udcff\udcfe", "/tmp/astral\U0001f600", "/tmp/u\u2028sep"])
def test_the_sweeps_fact_is_one_line_of_json_whatever_the_names(name):
    """Names in /tmp are a user's: the fact stays one line of printable
    ASCII that parses back to the very names the sweep reported."""
    report = {"counts": {kind: {"removed": 0, "kept": 0} for kind in sweep.KINDS},
              "removed": [sweep._show(name)], "kept": [{"path": sweep._show(name + "k"), "kind": "clsbd", "reason": "x"}]}
    line = sweep.fact_line(report)
    assert line.endswith("\n") and "\n" not in line[:-1] and line.isascii() and line[:-1].isprintable()
    fact = json.loads(line[len("fact sweep "):])
    assert fact["removed"] == [sweep._show(name)] and fact["kept"] == [sweep._show(name + "k")]


def test_the_sweeps_fact_is_bounded_however_much_was_removed():
    names = [f"/tmp/clsbd.user{i:04d}.{'x' * 80}" for i in range(500)]
    report = {"counts": {kind: {"removed": 0, "kept": 0} for kind in sweep.KINDS}, "removed": names,
              "kept": [{"path": n, "kind": "clsbd", "reason": "x"} for n in names]}
    line = sweep.fact_line(report)
    fact = json.loads(line[len("fact sweep "):])
    assert len(line) < sweep.FACT_PATH_CHARS + 400
    assert fact["removed"] == names[:len(fact["removed"])] and fact["removed_more"] == 500 - len(fact["removed"]) > 0
    assert fact["kept_more"] == 500 - len(fact["kept"]) > 0
