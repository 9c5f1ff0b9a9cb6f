"""The sweep's pure rules (epilog_node/sweep.py): the names it recognises,
the lock content it trusts, the scratch patterns, the arguments it refuses,
how a hostile name is shown; the log (epilog_node/log.py): syslog, its
bound, its rotation; part 45 (parts.sweep): the job it takes, the fact it
hands the record, a SIGTERM mid-sweep. No root, no Salt, no /tmp."""
import json
import os
import signal
import socket
import subprocess
import time

import pytest

from tests.helpers import REPO
from tests.unit.conftest import node

sweep = node("sweep")
sweep_names = node("sweep_names")
sweep_report = node("sweep_report")
sweep_holders = node("sweep_holders")
system = node("system")
logs = node("log")
parts = node("parts")


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
    assert system.show(name) == shown


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
        assert system.show(name) == escaped(name), repr(char)


@pytest.fixture
def syslog(tmp_path, monkeypatch):
    """A syslog socket of the test's own, in place of /dev/log."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "log"))
    sock.setblocking(False)
    monkeypatch.setattr(logs, "SYSLOG", str(tmp_path / "log"))
    yield sock
    sock.close()


def _datagrams(sock):
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


class Trusting:
    """A Trust that calls every directory root's own (the test runs without root)."""

    @staticmethod
    def root_only(directory):
        return True


def test_the_log_writes_each_line_at_once_and_to_syslog_at_its_flush(tmp_path, syslog):
    path = tmp_path / "epilog.log"
    log = logs.Log(str(path), Trusting(), job="7", user="-v", release="0123456789ab", source="45-stale-x-display")
    log.info("stale X display purged: :84")
    log.warning("kept /tmp/.X85-lock: malformed")
    assert _datagrams(syslog) == []
    lines = path.read_text().splitlines()
    assert [line.split(" ", 2)[1:] for line in lines] == [
        ["info", "45-stale-x-display job=7 user=-v release=0123456789ab: stale X display purged: :84"],
        ["warning", "45-stale-x-display job=7 user=-v release=0123456789ab: kept /tmp/.X85-lock: malformed"]]
    log.close()
    assert _datagrams(syslog) == [
        "<30>slurm-epilog: 45-stale-x-display job=7 user=-v release=0123456789ab: stale X display purged: :84",
        "<28>slurm-epilog: 45-stale-x-display job=7 user=-v release=0123456789ab: kept /tmp/.X85-lock: malformed"]
    assert log.warnings == 1


def test_syslog_gets_its_lines_in_batches_and_a_full_queue_drops_never_waits(tmp_path, syslog):
    path = tmp_path / "epilog.log"
    log = logs.Log(str(path), Trusting(), source="epilog.sweep")
    for i in range(logs.SYSLOG_BATCH + 1):
        log.info(f"line {i}")
    received = _datagrams(syslog)
    assert received and received[0].endswith("line 0") and len(received) <= logs.SYSLOG_BATCH
    lines = path.read_text().splitlines()
    # syslog got them too, as far as its queue took them (nobody reads it
    # here): the file says how many it dropped
    if len(received) < logs.SYSLOG_BATCH:
        assert any(line.endswith(f"{logs.SYSLOG_BATCH - len(received)} of these {logs.SYSLOG_BATCH} lines did not "
                                 "reach syslog (its queue was full)") for line in lines)
    log.close()
    assert path.read_text().count("line ") >= logs.SYSLOG_BATCH + 1


def test_a_preview_logs_nothing(tmp_path, syslog):
    log = logs.Log(str(tmp_path / "epilog.log"), Trusting(), source="epilog.sweep")
    residue = tmp_path / "tmp"
    residue.mkdir()
    report = sweep.run_sweep(test=True, log=log.line)
    log.close()
    assert report["test"] is True
    assert not (tmp_path / "epilog.log").exists() and _datagrams(syslog) == []


def test_the_log_goes_on_without_syslog(tmp_path, monkeypatch):
    monkeypatch.setattr(logs, "SYSLOG", str(tmp_path / "no-such-socket"))
    log = logs.Log(str(tmp_path / "epilog.log"), Trusting(), source="epilog.sweep")
    log.info("one")
    log.close()
    assert (tmp_path / "epilog.log").read_text().endswith("epilog.sweep job=none user=none: one\n")


def test_a_run_logs_at_most_lines_max_lines_and_says_how_many_more(tmp_path, monkeypatch):
    """Whatever floods (a part, thousands of names), a job end writes a
    bounded log: LINES_MAX lines, then one line with the count of the rest."""
    monkeypatch.setattr(logs, "SYSLOG", str(tmp_path / "no-such-socket"))
    log = logs.Log(str(tmp_path / "epilog.log"), Trusting(), source="epilog.sh")
    for i in range(logs.LINES_MAX + 500):
        log.warning(f"line {i}")
    log.close()
    lines = (tmp_path / "epilog.log").read_text().splitlines()
    assert len(lines) == logs.LINES_MAX + 1
    assert lines[-1].endswith(f"500 more lines of this run were not logged (at most {logs.LINES_MAX} a run)")
    assert log.warnings == logs.LINES_MAX + 500


def test_the_log_is_renamed_to_dot_1_past_its_bound_and_a_new_one_begins(tmp_path, monkeypatch):
    monkeypatch.setattr(logs, "SYSLOG", str(tmp_path / "no-such-socket"))
    path = tmp_path / "epilog.log"
    path.write_text("old\n" * 5000)
    log = logs.Log(str(path), Trusting(), source="epilog.sh", max_bytes=16 * 1024)
    log.info("new")
    log.close()
    assert (tmp_path / "epilog.log.1").read_text() == "old\n" * 5000
    assert path.read_text().endswith(": new\n") and path.read_text().count("\n") == 1


def test_the_log_is_never_opened_through_a_symlink_or_in_a_directory_another_account_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(logs, "SYSLOG", str(tmp_path / "no-such-socket"))
    target = tmp_path / "target"
    target.write_text("keep\n")
    (tmp_path / "epilog.log").symlink_to(target)
    log = logs.Log(str(tmp_path / "epilog.log"), Trusting(), source="epilog.sh")
    log.info("x")
    log.close()
    assert target.read_text() == "keep\n"
    log = logs.Log(str(tmp_path / "other.log"), system.Trust(), source="epilog.sh")  # pytest's dir: not root-only
    log.info("x")
    log.close()
    assert not (tmp_path / "other.log").exists() or os.geteuid() == 0


def test_the_budget_without_a_pillar_is_the_formulas_default():
    import yaml

    defaults = yaml.safe_load((REPO / "salt/epilog/defaults.yaml").read_text())["epilog"]
    assert sweep.DEFAULT_BUDGET == defaults["sweep_budget"]


class Ctx:
    """What the runner hands part 45, as plain data: the log and the facts
    are kept here."""

    def __init__(self, env, patterns=("slurm{jobid}*",)):
        self.settings = {"scratch_patterns": list(patterns), "sweep_budget": 10}
        self.env = env
        self.job = env.get("SLURM_JOB_ID") or None
        self.deadline = time.monotonic() + 30  # the part's time, as the runner gives it
        self.lines, self.facts = [], {}

    def log(self, level, line):
        self.lines.append((level, line))

    def fact(self, key, value):
        self.facts[key] = value


def residue_dir(tmp_path, monkeypatch, names):
    residue = tmp_path / "tmp"
    residue.mkdir()
    for name in names:
        (residue / name).write_bytes(b"")
    monkeypatch.setattr(sweep_names, "TMP", str(residue))
    return residue


def dead_pid():
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid  # reaped: no such process


def test_the_runners_sigterm_ends_the_sweep_with_what_it_did_in_the_log(tmp_path, monkeypatch):
    """Part 45 stopped mid-sweep by the runner (SIGTERM, its time is up):
    every entry it removed before is in the log, and so is why it stopped.
    The sweep runs on a directory of the test's own in place of /tmp, and a
    real SIGTERM arrives after its third removal."""
    dead = dead_pid()
    residue = residue_dir(tmp_path, monkeypatch, [f"clsbd.user{i}.{dead}" for i in range(10)])
    removals = []
    remove = sweep._Sweep.remove

    def remove_then_sigterm(self, *args):
        done = remove(self, *args)
        removals.append(args[3])
        if len(removals) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return done

    monkeypatch.setattr(sweep._Sweep, "remove", remove_then_sigterm)
    ctx = Ctx({})
    before = signal.getsignal(signal.SIGTERM)
    try:
        parts.sweep(ctx)
    finally:
        signal.signal(signal.SIGTERM, before)
        sweep_report._SIGTERM.clear()
    gone = sorted(f"{residue}/{name}" for name in {f"clsbd.user{i}.{dead}" for i in range(10)}
                  - set(os.listdir(residue)))
    assert len(gone) == 3 and sorted(removals) == gone
    text = "\n".join(line for _, line in ctx.lines)
    for removed in gone:
        assert f"stale clsbd purged: {removed}" in text, text
    assert "sweep stopped by SIGTERM: the chain's time for part 45 ran out" in text, text


ARABIC = str.maketrans("0123456789", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669")


@pytest.mark.parametrize("job,uid,scratch", [
    ("77", "owner", True),
    # digits of another script are digits to str.isdigit, not a job id
    ("77".translate(ARABIC), "owner", False),
    ("77", "owner-in-other-digits", False),
    ("77", "0", False),
    ("77; rm -rf /", "owner", False),
], ids=["plain", "job-in-other-digits", "uid-in-other-digits", "uid-0", "job-not-a-number"])
def test_part_45_takes_the_job_from_slurmd_only_as_plain_numbers(tmp_path, monkeypatch, job, uid, scratch):
    """The job's scratch goes only with a plain job id and a plain uid of
    1 to 4294967294 from slurmd (and only the entries that uid owns); the
    residue of every user goes all the same."""
    owner = os.getuid() or 1001
    dead = dead_pid()
    residue = residue_dir(tmp_path, monkeypatch, [f"clsbd.user.{dead}", "slurm77.out"])
    if os.geteuid() == 0:
        for name in os.listdir(residue):
            os.chown(residue / name, owner, -1)
    uid = {"owner": str(owner), "owner-in-other-digits": str(owner).translate(ARABIC)}.get(uid, uid)
    ctx = Ctx({"SLURM_JOB_ID": job, "SLURM_JOB_UID": uid, "SLURM_JOB_USER": "alice"})
    parts.sweep(ctx)
    assert f"clsbd.user.{dead}" not in os.listdir(residue)
    assert ("slurm77.out" not in os.listdir(residue)) == scratch
    assert ctx.facts["sweep"]["counts"]["clsbd"] == {"removed": 1, "kept": 0}


def test_part_45_on_a_node_without_residue_never_imports_the_sweep(tmp_path, monkeypatch):
    """An idle node's /tmp: part 45 looks and is done, no fact, no sweep."""
    residue_dir(tmp_path, monkeypatch, ["other-file", ".ICE-unix"])
    ctx = Ctx({"SLURM_JOB_ID": "77", "SLURM_JOB_UID": "1001"})
    parts.sweep(ctx)
    assert ctx.facts == {} and ctx.lines == []


@pytest.mark.parametrize("name", ['/tmp/clsbd."quoted"', "/tmp/back\\slash", "/tmp/new\nline", "/tmp/\x1b[31mred",
                                  "/tmp/bytes\udcff\udcfe", "/tmp/astral\U0001f600", "/tmp/u\u2028sep"])
def test_the_sweeps_fact_is_one_line_of_json_whatever_the_names(name):
    """Names in /tmp are a user's: the fact the runner sends down its pipe
    stays one line of printable ASCII that parses back to the very names the
    sweep reported."""
    report = {"counts": {kind: {"removed": 0, "kept": 0} for kind in sweep_names.KINDS},
              "removed": [system.show(name)],
              "kept": [{"path": system.show(name + "k"), "kind": "clsbd", "reason": "x"}]}
    line = json.dumps(["fact", "sweep", sweep_report.fact(report)])
    assert "\n" not in line and line.isascii() and line.isprintable()
    fact = json.loads(line)[2]
    assert fact["removed"] == [system.show(name)] and fact["kept"] == [system.show(name + "k")]


def test_the_sweeps_fact_is_bounded_however_much_was_removed():
    names = [f"/tmp/clsbd.user{i:04d}.{'x' * 80}" for i in range(500)]
    report = {"counts": {kind: {"removed": 0, "kept": 0} for kind in sweep_names.KINDS}, "removed": names,
              "kept": [{"path": n, "kind": "clsbd", "reason": "x"} for n in names]}
    fact = sweep_report.fact(report)
    assert len(json.dumps(fact)) < sweep_report.FACT_PATH_CHARS + 400
    assert fact["removed"] == names[:len(fact["removed"])] and fact["removed_more"] == 500 - len(fact["removed"]) > 0
    assert fact["kept_more"] == 500 - len(fact["kept"]) > 0


def test_what_users_can_create_is_logged_summed_up(tmp_path, monkeypatch):
    """A user's 5,000 malformed locks make one line of the sweep's, with the
    first few names and the count, not 5,000."""
    residue = residue_dir(tmp_path, monkeypatch, [])
    for i in range(5000):
        (residue / f".X{i}-lock").write_bytes(b"nonsense")
    monkeypatch.setattr(sweep_names, "X11_DIR_OWNER", os.getuid())
    lines = []
    report = sweep.run_sweep(log=lambda level, line: lines.append((level, line)))
    assert report["counts"]["x_lock"]["kept"] == 5000
    warnings = [line for level, line in lines if level == "warning"]
    assert len(warnings) == 1, lines[:5]
    assert warnings[0].startswith("kept X displays and locks whose lock is malformed or unreadable: 5000 entries; "
                                  f"the first {sweep_report.FEW}: ")


class _LateClock:
    """time for the sweep's books: the real clock until the sweep has set
    its deadline, then 100 s later (a /tmp of 800,000 names a user made
    takes seconds to list; a test cannot make one cheaply)."""

    def __init__(self):
        self.calls = 0

    def monotonic(self):
        self.calls += 1
        return time.monotonic() + (100 if self.calls > 1 else 0)


def test_a_tmp_filled_with_names_holds_the_sweep_no_longer_than_its_budget(tmp_path, monkeypatch):
    """A user's 3,000 malformed lock names in /tmp (a directory of the
    test's own stands in for it), and the sweep's time runs out while it
    lists them: it stops in the listing, at the first check of its budget
    (every CHECK_EVERY names), says where, and reports the budget spent,
    not the names it never read."""
    residue = residue_dir(tmp_path, monkeypatch, [f".X{i}\x01\x01-lock" for i in range(3000)])
    monkeypatch.setattr(sweep_names, "X11_DIR_OWNER", os.getuid())
    monkeypatch.setattr(sweep_report, "time", _LateClock())
    lines = []
    report = sweep.run_sweep(budget=5, log=lambda level, line: lines.append((level, line)))
    assert report["budget_exhausted"] is True, report["counts"]
    assert report["listing_cut"] == {"path": str(residue), "names_read": sweep_report.CHECK_EVERY}, report["listing_cut"]
    assert report["counts"]["x_lock"]["kept"] == sweep_report.CHECK_EVERY - 1, report["counts"]
    assert any(f"while listing {residue} ({sweep_report.CHECK_EVERY} names read)" in line for _, line in lines), lines


def test_the_report_holds_at_most_report_max_entries_a_list_and_counts_the_rest(tmp_path, monkeypatch):
    """1,200 malformed lock names, with REPORT_MAX 1,000 (10,000 on a node):
    the counts are whole, the report's list of kept entries stops at
    REPORT_MAX and says how many more there were, and the record's fact
    counts them too."""
    monkeypatch.setattr(sweep_report, "REPORT_MAX", 1000)
    residue = residue_dir(tmp_path, monkeypatch, [])
    for i in range(sweep_report.REPORT_MAX + 200):
        (residue / f".X{i}.bad-lock").write_bytes(b"")
    monkeypatch.setattr(sweep_names, "X11_DIR_OWNER", os.getuid())
    report = sweep.run_sweep()
    assert report["counts"]["x_lock"]["kept"] == sweep_report.REPORT_MAX + 200
    assert len(report["kept"]) == sweep_report.REPORT_MAX and report["more"] == {"kept": 200}, report["more"]
    fact = sweep_report.fact(report)
    assert fact["kept_more"] == sweep_report.REPORT_MAX + 200 - len(fact["kept"]), fact


def test_the_runners_sigterm_stops_the_looks_at_every_process_and_socket(monkeypatch):
    """Part 45's SIGTERM flag set (its time is up): the look at every
    network namespace's sockets ends at its next check (here every pid, as
    CHECK_EVERY 1 makes it) with Terminated, and the look for the holders
    of X sockets ends at once, with none named."""
    monkeypatch.setattr(sweep_report, "CHECK_EVERY", 1)
    mine, theirs = socket.socketpair()
    with mine, theirs:
        inode = os.fstat(mine.fileno()).st_ino
        procs = sweep_holders.Processes(time.monotonic() + 60)
        assert procs.holders([inode]) == {inode: (os.getpid(), procs.comm(os.getpid()))}
        monkeypatch.setattr(sweep_report, "_SIGTERM", [signal.SIGTERM])
        with pytest.raises(sweep_report.Terminated):
            sweep_holders.bound_socket_files(time.monotonic() + 60)
        assert sweep_holders.Processes(time.monotonic() + 60).holders([inode]) == {}


def test_the_clsbd_files_and_the_scratch_are_judged_before_x11_unix_is_listed(tmp_path, monkeypatch):
    """A /tmp/.X11-unix a user filled with 600 names, and the sweep's time
    runs out while it lists them (the clock moved 100 s on once its
    listing begins: such a directory cannot be had cheaply): the dead
    clsbd file is removed all the same, for it was judged before, and the
    sweep says where it stopped, with the lock it did not judge left."""
    dead = dead_pid()
    residue = residue_dir(tmp_path, monkeypatch, [f"clsbd.user.{dead}", ".X7-lock"])
    (residue / ".X11-unix").mkdir()
    for i in range(600):
        (residue / ".X11-unix" / f"bad{i}").write_bytes(b"")
    monkeypatch.setattr(sweep_names, "X11_DIR_OWNER", os.getuid())
    late, entries = [0], sweep._Sweep._x11_entries

    def listing_late(self, tmp_fd):
        late[0] = 100
        return entries(self, tmp_fd)

    class Clock:
        @staticmethod
        def monotonic():
            return time.monotonic() + late[0]

    monkeypatch.setattr(sweep._Sweep, "_x11_entries", listing_late)
    monkeypatch.setattr(sweep_report, "time", Clock)
    report = sweep.run_sweep(budget=5)
    assert f"clsbd.user.{dead}" not in os.listdir(residue), report
    assert report["budget_exhausted"] and report["listing_cut"]["path"] == f"{residue}/.X11-unix", report
    assert report["left"] == 1 and sweep_report.fact(report)["left"] == 1, report
