"""epilog.schedule where no salt-minion runs, as a node is provisioned by
salt-call: the entries are written to the minion's minion.d/_schedule.conf
(Salt's offline mode), where the minion reads them when it starts, and a
running minion of the same configuration takes them over its event bus
instead. In-process: what is laid down, and the decision the state makes;
then, across the process boundary, a real salt-call with no daemon, the
daemon started afterwards, and the removal while it runs."""
import json
import subprocess
import tempfile
from pathlib import Path

import pytest
import salt.config

from tests.helpers import REPO, VENV_BIN, SaltCall, epilog_pillar, in_namespaces, wait_for

SCHEDULE = {"interval": 600, "splay": 30, "kill_strays": True}
ENTRIES = {"epilog-sweep": ("epilog.sweep", {}), "epilog-strays": ("epilog.strays", {"kill": True})}


def schedule_file(config_dir):
    return Path(config_dir) / "minion.d/_schedule.conf"


def as_the_minion_reads_them(config_dir):
    """The formula's entries in the schedule a salt-minion of CONFIG_DIR
    starts with: its configuration as salt.config reads it at start-up."""
    opts = salt.config.minion_config(str(Path(config_dir) / "minion"))
    held = opts.get("schedule") or {}
    return {name: (held[name]["function"], held[name].get("kwargs"), held[name]["seconds"], held[name]["splay"])
            for name in ENTRIES if name in held}


WANTED = {name: (function, kwargs, SCHEDULE["interval"], SCHEDULE["splay"])
          for name, (function, kwargs) in ENTRIES.items()}
# beside a real minion, strays that would only look, were the scheduler on
LOOK_ONLY = {**SCHEDULE, "kill_strays": False}
WANTED_LOOK_ONLY = {**WANTED, "epilog-strays": ("epilog.strays", {"kill": False}, *WANTED["epilog-strays"][2:])}


@pytest.fixture
def bare_minion(minion):
    """The session's minion, with no pidfile and no saved schedule, and
    left so."""
    pidfile, saved = Path(minion.loaders.opts["pidfile"]), schedule_file(minion.config_dir)
    for path in (pidfile, saved):
        path.unlink(missing_ok=True)
    yield minion
    for path in (pidfile, saved):
        path.unlink(missing_ok=True)


def test_with_no_minion_running_the_entries_go_where_the_minion_reads_them_at_start_and_go_again(bare_minion,
                                                                                                   tmp_path):
    pillar = epilog_pillar(tmp_path, schedule=SCHEDULE)
    applied = bare_minion.apply("epilog.schedule", pillar=pillar)
    assert applied.ok, applied
    assert {sid for sid in applied.changed()} == {f"epilog-schedule-{name}-present" for name in ENTRIES}, applied
    where = applied.states["epilog-schedule-where-test-nop"]["name"]
    assert str(schedule_file(bare_minion.config_dir)) in where and "which the minion reads when it starts" in where, where
    assert as_the_minion_reads_them(bare_minion.config_dir) == WANTED
    again = bare_minion.apply("epilog.schedule", pillar=pillar)
    assert again.ok and not again.changed(), again
    removed = bare_minion.apply("epilog.schedule", pillar=epilog_pillar(tmp_path, schedule={"interval": 0}))
    assert removed.ok, removed
    assert removed.changed() == {f"epilog-schedule-{name}-absent" for name in ENTRIES}, removed
    assert "taken out" in removed.states["epilog-schedule-where-test-nop"]["name"]
    assert as_the_minion_reads_them(bare_minion.config_dir) == {}
    none_left = bare_minion.apply("epilog.schedule", pillar=epilog_pillar(tmp_path, schedule={"interval": 0}))
    assert set(none_left.states) == {"epilog-schedule-test-nop"}, none_left


def process(argv0, zombie=False, nobody=False):
    """A live process whose command line is ARGV0's (or, ZOMBIE, one that
    has exited and is not reaped yet: no command line); NOBODY: of the
    account nobody, as any user could start one."""
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if nobody else []
    proc = subprocess.Popen([*as_nobody, "bash", "-c", f"exec -a {argv0} sleep {0 if zombie else 300}"])
    if zombie:
        wait_for(lambda: Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z", 10,
                 what="the process to exit")
    else:
        wait_for(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(argv0.encode() + b"\0"), 10,
                 what=f"the process to be {argv0}")
    return proc


def offline_args(rendered):
    """{state id: its offline argument} of the rendered schedule states."""
    out = {}
    for sid, body in rendered.items():
        for args in (value for key, value in body.items() if key == "schedule"):
            out[sid] = next(arg["offline"] for arg in args if isinstance(arg, dict) and "offline" in arg)
    return out


@pytest.mark.parametrize("pidfile_names, running", [
    (None, False),
    ("salt-minion", True),
    ("sleep", False),  # a live process of another program at a pid the pidfile once held
    ("salt-minion zombie", False),  # exited, not reaped
    ("salt-minion nobody", False),  # a user's process that took the pid and a minion's name
])
def test_the_state_asks_the_running_minion_only_when_its_pidfile_names_a_live_salt_minion(
        bare_minion, tmp_path, pidfile_names, running):
    pidfile = Path(bare_minion.loaders.opts["pidfile"])
    proc = None
    if pidfile_names:
        proc = process(pidfile_names.split()[0], zombie=pidfile_names.endswith("zombie"),
                       nobody=pidfile_names.endswith("nobody"))
        pidfile.parent.mkdir(parents=True, exist_ok=True)
        pidfile.write_text(f"{proc.pid}\n")
    try:
        for interval in (SCHEDULE["interval"], 0):
            if not interval:  # an entry to take out: in the file the offline removal reads, and in the
                # minion's options, which a running minion's are
                schedule_file(bare_minion.config_dir).parent.mkdir(exist_ok=True)
                schedule_file(bare_minion.config_dir).write_text(
                    "schedule:\n  epilog-sweep: {function: epilog.sweep, seconds: 600}\n")
            bare_minion.set_pillar(epilog_pillar(tmp_path, schedule={**SCHEDULE, "interval": interval}))
            if not interval:  # (set_pillar reloads the loaders from the minion's first options)
                bare_minion.loaders.opts["schedule"] = {"epilog-sweep": {"function": "epilog.sweep", "seconds": 600}}
            rendered = bare_minion("state.show_sls", "epilog.schedule")
            assert isinstance(rendered, dict), rendered
            assert set(offline_args(rendered).values()) == {not running}, rendered
            where = rendered["epilog-schedule-where-test-nop"]["test"][0]["name"]
            assert (f"salt-minion's scheduler (pid {proc.pid})" in where) if running else \
                ("which the minion reads when it starts" in where and str(pidfile) in where), where
    finally:
        bare_minion.loaders.opts.pop("schedule", None)
        if proc is not None:
            proc.kill()
            proc.wait()


def masterless_node(base, venv_bin):
    """A node's masterless minion configuration under BASE (file_client
    local, no master), serving this repo's salt/ and the epilog module:
    (its config directory, a salt-call on it, its pillar file). Its
    scheduler is off (in _schedule.conf, which the formula's writes keep):
    it holds entries and runs none. A minion compiles its pillar only from
    a master, so a run here would take the formula's defaults, and they
    name this machine's /etc/slurm and /tmp."""
    conf, pillar = base / "conf", base / "pillar"
    (conf / "minion.d").mkdir(parents=True)
    pillar.mkdir()
    (conf / "minion").write_text(
        f"id: epilog-masterless\nfile_client: local\nmaster_type: disable\nroot_dir: {base}/root\n"
        f"file_roots: {{base: [{REPO}/salt]}}\npillar_roots: {{base: [{pillar}]}}\nmodule_dirs: [{REPO}]\n")
    schedule_file(conf).write_text("schedule: {enabled: false}\n")
    (pillar / "top.sls").write_text("base:\n  '*':\n    - epilog\n")
    return conf, SaltCall(conf, bin_dir=venv_bin), pillar / "epilog.sls"


# schedule.list's question to the running minion (manage_schedule on its
# event bus, then its reply), with a short wait for each reply: the minion
# takes a moment to listen after it starts, and schedule.list waits 30 s
# for a reply that never comes then
ASK = """
import json, sys
import salt.config, salt.utils.event
opts = salt.config.minion_config(sys.argv[1])
with salt.utils.event.get_event("minion", opts=opts, listen=True) as bus:
    reply = None
    if bus.fire_event({"func": "list", "where": None}, "manage_schedule"):
        reply = bus.get_event(tag="/salt/minion/minion_schedule_list_complete", wait=1)
print(json.dumps(reply["schedule"] if reply and reply.get("complete") else None, default=str))
"""


def held_by_the_running_minion(conf, venv_bin, timeout):
    """The running minion's scheduler: (whether it is on, the formula's entries in it)."""
    def ask():
        proc = subprocess.run([str(Path(venv_bin) / "python"), "-c", ASK, str(Path(conf) / "minion")],
                              capture_output=True, text=True, timeout=60, cwd="/")
        held = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else None
        if held is None:
            return None
        return [held.get("enabled", True), {name: (held[name]["function"], held[name].get("kwargs"),
                                                   held[name]["seconds"], held[name]["splay"])
                                            for name in ENTRIES if name in held}]

    return wait_for(ask, timeout, what="the running minion to answer for its schedule")


def provision_then_start_the_minion(base, venv_bin):
    """In a pid namespace of its own (the minion dies with it) with a /tmp
    of its own: salt-call state.apply with no daemon, then salt-minion,
    then the removal by salt-call while it runs. What each step saw."""
    conf, call, pillar = masterless_node(Path(base), venv_bin)
    pillar.write_text(json.dumps(epilog_pillar(Path(base) / "node", schedule=LOOK_ONLY)))
    seen = {}
    applied = call("state.apply", "epilog.schedule")
    seen["applied"] = (applied.returncode, applied.states)
    seen["saved"] = as_the_minion_reads_them(conf)
    daemon = subprocess.Popen([str(Path(venv_bin) / "salt-minion"), f"--config-dir={conf}", "--log-level=quiet"],
                              cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen["held"] = held_by_the_running_minion(conf, venv_bin, 60)
    pillar.write_text(json.dumps(epilog_pillar(Path(base) / "node", schedule={"interval": 0})))
    removed = call("state.apply", "epilog.schedule")
    seen["removed"] = (removed.returncode, removed.states)
    seen["held_after"] = held_by_the_running_minion(conf, venv_bin, 10)
    seen["saved_after"] = as_the_minion_reads_them(conf)
    seen["daemon_alive"] = daemon.poll() is None
    return seen


def test_a_masterless_salt_call_lays_the_entries_for_the_minion_started_after_it_and_the_running_minion_drops_them():
    with tempfile.TemporaryDirectory(prefix="epilog-masterless-", dir="/var/tmp") as base:
        seen = in_namespaces(provision_then_start_the_minion, base, str(VENV_BIN), fresh=("/tmp",), timeout=240)
    rc, states = seen["applied"]
    assert rc == 0 and all(s["result"] is True for s in states.values()), states
    assert "which the minion reads when it starts" in states["epilog-schedule-where-test-nop"]["name"], states
    assert seen["saved"] == WANTED_LOOK_ONLY
    assert seen["held"] == [False, WANTED_LOOK_ONLY], seen
    rc, states = seen["removed"]
    assert rc == 0 and {sid for sid, s in states.items() if s["changes"]} == {
        f"epilog-schedule-{name}-absent" for name in ENTRIES}, states
    assert "the running salt-minion's scheduler" in states["epilog-schedule-where-test-nop"]["name"], states
    assert seen["held_after"] == [False, {}] and seen["saved_after"] == {}, seen
    assert seen["daemon_alive"], "the minion ran throughout"
