"""The sweep's decision table (epilog_node/sweep.py's docstring), row by row, with its
inputs stubbed: which socket files the kernel's diagnostics call bound,
whether a listener answers on a socket file, and which pids are alive as
their file's owner. The entries are real (socket files, locks, clsbd files)
in a directory of the test's own standing in for /tmp, judged and removed by
the real sweep. No root, no Salt, no /tmp: /tmp/.X11-unix must be root's,
and here the test's own uid stands in (sweep_names.X11_DIR_OWNER). The node tier runs
the same table with real X servers and real processes
(tests/sweep_scenarios.py). judge_display, the display rows as a function
of their facts, is called directly too."""
import os
import socket

import pytest

from tests.unit.conftest import node

sweep = node("sweep")
names = node("sweep_names")
holders = node("sweep_holders")

LIVE, DEAD = 4242, 4343
# the owner of the entries: the test's own uid, or, run as root, an ordinary one
JOB_UID = os.getuid() or 4000


def lock(pid):
    return b"%10d\n" % pid


# id, the entries (name under /tmp: a socket, or file content), the stubbed
# inputs (bound: the socket names the diagnostics call bound, or None when
# they cannot be read; answers: the socket names a listener answers on),
# then what is removed and what is kept with a word of its reason.
ROWS = [
    ("orphan-socket-stale-lock", {".X11-unix/X80": "socket", ".X80-lock": lock(DEAD)}, {}, {},
     {".X11-unix/X80", ".X80-lock"}, {}),
    ("orphan-socket-no-lock", {".X11-unix/X81": "socket"}, {}, {}, {".X11-unix/X81"}, {}),
    ("bound-socket-kept-with-its-lock", {".X11-unix/X82": "socket", ".X82-lock": lock(DEAD)}, {"bound": {"X82"}}, {},
     set(), {".X11-unix/X82": "held: a live socket is bound to it", ".X82-lock": "its socket is held"}),
    ("a-listener-answers", {".X11-unix/X83": "socket"}, {"answers": {"X83"}}, {},
     set(), {".X11-unix/X83": "held: a listener answers on it"}),
    ("orphan-socket-live-lock-pid", {".X11-unix/X84": "socket", ".X84-lock": lock(LIVE)}, {}, {},
     set(), {".X11-unix/X84": f"lock pid {LIVE} alive", ".X84-lock": f"lock pid {LIVE} alive"}),
    ("stale-lock-alone", {".X85-lock": lock(DEAD)}, {}, {}, {".X85-lock"}, {}),
    ("live-lock-alone", {".X86-lock": lock(LIVE)}, {}, {}, set(), {".X86-lock": f"lock pid {LIVE} alive"}),
    ("malformed-lock", {".X11-unix/X87": "socket", ".X87-lock": b"not-a-pid\n"}, {}, {},
     set(), {".X11-unix/X87": "cannot tell whether the display is in use", ".X87-lock": "malformed content"}),
    ("diagnostics-unreadable", {".X11-unix/X88": "socket", ".X88-lock": lock(DEAD)}, {"bound": None}, {},
     set(), {".X11-unix/X88": "unknown", ".X88-lock": "unknown"}),
    ("clsbd-live", {f"clsbd.alice.{LIVE}": b""}, {}, {}, set(), {f"clsbd.alice.{LIVE}": f"pid {LIVE} alive"}),
    ("clsbd-dead", {f"clsbd.alice.{DEAD}": b""}, {}, {}, {f"clsbd.alice.{DEAD}"}, {}),
    ("clsbd-malformed", {"clsbd.alice": b""}, {}, {}, set(), {"clsbd.alice": "malformed name"}),
    ("malformed-socket-name", {".X11-unix/X080": "socket"}, {}, {}, set(), {".X11-unix/X080": "malformed name"}),
    ("not-a-socket", {".X11-unix/X89": b"plain file"}, {}, {}, set(), {".X11-unix/X89": "not a socket"}),
    ("job-scratch", {"slurm77.out": b"x", "slurm771.out": b"x"}, {}, {"job": "77"}, {"slurm77.out"}, {}),
]


@pytest.mark.parametrize("entries,inputs,call,removed,kept", [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_the_decision_table_row_by_row(tmp_path, monkeypatch, entries, inputs, call, removed, kept):
    tmp = tmp_path / "tmp"
    (tmp / ".X11-unix").mkdir(parents=True)
    for name, content in entries.items():
        if content == "socket":
            with socket.socket(socket.AF_UNIX) as sock:  # closed: the file stays, nobody behind it
                sock.bind(str(tmp / name))
        else:
            (tmp / name).write_bytes(content)
        if os.getuid() == 0:
            os.chown(tmp / name, JOB_UID, -1, follow_symlinks=False)  # a job's uid is never root's
    monkeypatch.setattr(names, "TMP", str(tmp))
    monkeypatch.setattr(names, "X11_DIR_OWNER", os.getuid())
    bound = inputs.get("bound", set())

    def bound_socket_files(deadline=None):
        if bound is None:
            return None
        out = {}
        for name in bound:
            st = os.lstat(tmp / ".X11-unix" / name)
            out[(st.st_dev, st.st_ino & 0xFFFFFFFF)] = 1000 + len(out)
        return out

    monkeypatch.setattr(holders, "bound_socket_files", bound_socket_files)
    monkeypatch.setattr(holders.Processes, "listener_answers", lambda self, x_fd, name, st: name in inputs.get("answers", ()))
    monkeypatch.setattr(holders.Processes, "alive_as", lambda self, pid, uid: pid == LIVE)
    monkeypatch.setattr(holders.Processes, "holders", lambda self, inodes: {})
    monkeypatch.setattr(holders.Processes, "comm", staticmethod(lambda pid: "stub"))
    job = call.get("job")
    report = sweep.run_sweep(job=job, uid=JOB_UID if job else None, patterns=["slurm{jobid}*"] if job else [])
    assert set(report["removed"]) == {f"{tmp}/{name}" for name in removed}, report
    for name in removed:
        assert not os.path.lexists(tmp / name), name
    got = {k["path"]: k["reason"] for k in report["kept"]}
    for name, word in kept.items():
        assert os.path.lexists(tmp / name), name
        assert word in got.get(f"{tmp}/{name}", ""), (name, word, report)
    assert not report["errors"], report


def facts(**given):
    base = dict(display=80, socket=True, bound=False, holder=None, listening=lambda: False, lock=True,
                lock_path="/tmp/.X80-lock", lock_problem=None, lock_pid=4343, lock_alive=False, comm=lambda pid: "Xvfb")
    base.update(given)
    return sweep.Display(**base)


def asked():
    raise AssertionError("the connect probe is asked only when nothing is bound")


# id, the facts, then each entry's action (and a word of the reason), and the log's line
DISPLAYS = [
    ("orphan-stale-lock", {}, {"x_socket": "remove", "x_lock": "remove"}, None),
    ("orphan-no-lock", {"lock": False}, {"x_socket": "remove"}, None),
    ("unknown-keeps-both", {"bound": None, "listening": asked}, {"x_socket": "keep unknown", "x_lock": "keep unknown"},
     None),
    ("bound", {"bound": True, "holder": (42, "Xvfb"), "listening": asked},
     {"x_socket": "keep held by pid 42 (Xvfb)", "x_lock": "keep its socket is held by pid 42"}, None),
    ("listener-answers", {"listening": lambda: True}, {"x_socket": "keep a listener answers", "x_lock": "keep held"},
     None),
    ("malformed-lock", {"lock_problem": "malformed content"},
     {"x_socket": "keep cannot tell whether the display is in use", "x_lock": "keep malformed content"},
     "kept display :80: lock /tmp/.X80-lock is malformed content"),
    ("live-lock-pid", {"lock_alive": True}, {"x_socket": "keep orphan socket, but lock pid 4343 alive (Xvfb)",
                                             "x_lock": "keep lock pid 4343 alive"}, None),
    ("stale-lock-alone", {"socket": False, "listening": None}, {"x_lock": "remove"}, None),
    ("live-lock-alone", {"socket": False, "lock_alive": True}, {"x_lock": "keep lock pid 4343 alive"}, None),
    ("malformed-lock-alone", {"socket": False, "lock_problem": "unreadable (Permission denied)"},
     {"x_lock": "keep unreadable"}, "kept /tmp/.X80-lock: unreadable (Permission denied)"),
]


@pytest.mark.parametrize("given,expect,line", [row[1:] for row in DISPLAYS], ids=[row[0] for row in DISPLAYS])
def test_the_display_rows_as_a_function_of_their_facts(given, expect, line):
    verdict, (level, said) = sweep.judge_display(facts(**given))
    got = {kind: f"{action} {reason}" for kind, action, reason in verdict}
    assert set(got) == set(expect)
    for kind, words in expect.items():
        action, _, word = words.partition(" ")
        assert got[kind].startswith(action) and word in got[kind], (kind, got[kind])
    assert said == line and (level == "warning") == (line is not None)
