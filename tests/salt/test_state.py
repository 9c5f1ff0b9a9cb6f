"""The state `epilog`, applied in-process (a minion's loaders, file_client:
local) to a sandbox slurm_config_dir: preview, idempotence, backups, the
compile gate, ownership and modes, and every bad-pillar case; and, through
a real salt-call, the operator's masterless run from the repo root."""
import json
import os
import shutil
import subprocess

import pytest

from tests.helpers import CURRENT, LAYOUT, RELEASES, REPO, VENV_BIN, Chain, SaltCall, laid_down, require_tools
from tests.release import lay_down, package_files
from tests.salt.conftest import Minion

SCRIPTS = [script["path"] for script in LAYOUT["scripts"]]
PACKAGE = [f"{LAYOUT['package']}/{name}" for name in package_files()]
RELEASE_FILES = SCRIPTS + [data["path"] for data in LAYOUT["release_data"]] + PACKAGE
# the directories and the releases' directory, the log directory, the data
# files, the packages and the release tool, the release's directory and
# subdirectories, its data files, the node program, its entry points, the
# switch, the module sync, the check for an old chain, the retired files'
# removal, pam.sls's one state (pam_manage off: nothing to take out) and
# schedule.sls's (interval 0 and no entry held: nothing to take out)
STATE_COUNT = (len(LAYOUT["directories"]) + 1 + 1 + len(LAYOUT["data"]) + 1 + 1 + 1 + len(LAYOUT["release_directories"])
               + len(LAYOUT["release_data"]) + 1 + len(SCRIPTS) + 1 + 1 + 1 + len(LAYOUT["retired"]) + 1 + 1)
# the module sync changes only when the minion's synced copy is older
SYNC = "epilog-module-saltutil-sync_modules"
# never "pending" on a node that has them: the packages, and the absence of
# files no earlier version laid down here; the old-chain check never changes
ALREADY_THERE = {"epilog-parts-tools-pkg-installed", "epilog-slurm-conf-old-chain-test", "epilog-pam-sshd-test-nop",
                 "epilog-schedule-test-nop"} | {
    f"epilog-{f['id']}-retired-file-absent" for f in LAYOUT["retired"]}


def sandbox(tmp_path):
    return Chain(tmp_path / "slurm", tmp_path / "localusers", tmp_path / "epilog.log", tmp_path / "spool")


def test_preview_lays_down_nothing_and_predicts_what_apply_changes(minion, tmp_path):
    c = sandbox(tmp_path)
    preview = minion.apply(test=True, pillar=c.pillar())
    assert not preview.errors, preview
    assert len(preview.states) == STATE_COUNT, preview
    pending = {sid for sid, s in preview.states.items() if s["result"] is None and s["changes"]}
    assert not c.conf_dir.exists(), "test=True laid something down"
    applied = minion.apply(pillar=c.pillar())
    assert applied.ok, applied
    changed = {sid for sid, s in applied.states.items() if s["result"] is True and s["changes"]} - {SYNC}
    assert pending == changed and len(changed) == STATE_COUNT - len(ALREADY_THERE) - 1
    for path in RELEASE_FILES:
        assert (c.release / path).is_file()
    for name in LAYOUT["entries"]:
        assert os.readlink(c.conf_dir / name) == f"{CURRENT}/{name}"


def test_second_apply_changes_nothing(minion, tmp_path):
    c = sandbox(tmp_path)
    assert minion.apply(pillar=c.pillar()).ok
    again = minion.apply(pillar=c.pillar())
    assert again.ok, again
    assert len(again.states) == STATE_COUNT
    assert all(s["result"] is True and not s["changes"] for s in again.states.values()), again


def test_changed_pillar_is_a_new_release_and_the_old_one_stays_whole(minion, tmp_path):
    c = sandbox(tmp_path)
    assert minion.apply(pillar=c.pillar(localusers=["root"])).ok
    old, old_files = c.release, {p: (c.release / p).read_bytes() for p in RELEASE_FILES}
    ret = minion.apply(pillar=c.pillar(localusers=["root", "je.kim"]))
    assert ret.ok, ret
    changed = {sid for sid, s in ret.states.items() if s["changes"]}
    # a new release is laid down whole, beside the old one, then switched to
    assert "epilog-release-switch-cmd-run" in changed and "epilog-release-file-directory" in changed
    assert c.release != old
    assert c.localusers.read_text() == "root\nje.kim\n"
    assert {p: (old / p).read_bytes() for p in RELEASE_FILES} == old_files
    assert os.readlink(c.conf_dir / f"{RELEASES}/previous") == old.name


def test_release_id_is_the_render_not_the_time(minion, tmp_path):
    """The same settings give the same release id (so every node of one
    pillar runs the same id); a setting the release holds gives another."""
    c = sandbox(tmp_path)
    assert minion.apply(pillar=c.pillar()).ok
    first = c.release_id
    assert minion.apply(pillar=c.pillar(part_timeout=21)).ok
    assert c.release_id != first
    again = minion.apply(pillar=c.pillar())
    assert again.ok, again
    assert c.release_id == first, "the same settings must give the same release"
    # the release was there already: only the switch back changed anything
    assert {sid for sid, s in again.states.items() if s["changes"]} == {"epilog-release-switch-cmd-run"}


def test_a_change_to_the_module_alone_changes_no_release(minion, salt_factories, tmp_path):
    """The epilog module's operations (verify, rollback, explain) are not
    laid down: a formula whose epilog.py differs, and nothing else, gives
    the same release and changes no file on the node."""
    c = sandbox(tmp_path)
    assert minion.apply(pillar=c.pillar()).ok
    first, before = c.release_id, {p: p.read_bytes() for p in c.release.rglob("*") if p.is_file()}
    changed = tmp_path / "changed"
    shutil.copytree(REPO / "salt", changed / "salt", symlinks=True)
    module = changed / "salt/_modules/epilog.py"
    module.write_text(module.read_text().replace('"""', '"""A docstring edit. ', 1))
    other = Minion(salt_factories, tmp_path / "other-minion", file_roots=[changed / "salt"], module_dirs=[])
    ret = other.apply(pillar=c.pillar())
    assert ret.ok, ret
    assert c.release_id == first
    assert {p: p.read_bytes() for p in c.release.rglob("*") if p.is_file()} == before
    assert not [sid for sid, s in ret.states.items() if s["changes"] and sid != "epilog-module-saltutil-sync_modules"], ret.states


def test_a_render_that_does_not_compile_is_refused_and_the_old_file_stays(minion, salt_factories, tmp_path):
    c = sandbox(tmp_path)
    assert minion.apply(pillar=c.pillar()).ok
    part = c.part("40-lastuserjob-processes")
    before, release = part.read_bytes(), c.release
    broken_tree = tmp_path / "salt-tree"
    shutil.copytree(REPO / "salt", broken_tree)
    template = broken_tree / "epilog/files/epilog.d/40-lastuserjob-processes.jinja"
    template.write_text(template.read_text().replace("import sys\n", "import sys\nif then; fi\n"))
    other = Minion(salt_factories, tmp_path / "broken-minion", file_roots=[broken_tree])
    ret = other.apply(pillar=c.pillar())
    assert not ret.ok, ret
    state = ret.states["epilog-part-40-lastuserjob-processes-file-managed"]
    assert state["result"] is False and "check_cmd" in state["comment"], state
    assert part.read_bytes() == before
    compile(part.read_bytes(), str(part), "exec")
    # the broken release was never switched to: the chain runs the old one
    assert c.release == release and ret.states["epilog-release-switch-cmd-run"]["result"] is False
    assert os.path.realpath(c.conf_dir / "epilog.sh") == str(release / "epilog.sh")


def test_scripts_are_root_owned_0755_and_not_writable_by_slurm(minion, tmp_path):
    require_tools("setpriv")
    c = sandbox(tmp_path)
    assert minion.apply(pillar=c.pillar()).ok
    slurm = subprocess.run(["id", "-u", "slurm"], capture_output=True, text=True)
    assert slurm.returncode == 0, "the slurm account (from the slurm packages) is missing"
    release = c.release
    dirs = [c.conf_dir / "epilog.d", c.conf_dir / "prolog.d", c.conf_dir / RELEASES, release,
            release / "epilog.d", release / "prolog.d", release / LAYOUT["package"],
            release / LAYOUT["package"] / "__pycache__"]
    for path in [release / s for s in SCRIPTS] + [c.conf_dir / laid_down("release-tool")] + dirs:
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (0, 0), path
        assert st.st_mode & 0o7777 == 0o755, (path, oct(st.st_mode))
        writable = subprocess.run(["setpriv", f"--reuid={slurm.stdout.strip()}", "--clear-groups", "test", "-w", str(path)])
        assert writable.returncode != 0, f"{path} is writable by the slurm user"
    for path in [*PACKAGE, "settings.json"]:
        st = (release / path).stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o644), path
    st = c.localusers.stat()
    assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o600)


def test_the_node_program_is_the_modules_own_verbatim_and_its_settings_the_modules(minion, tmp_path):
    """Part 45 and epilog.sweep run one implementation, and the runner and
    epilog.explain one set of decisions: the release holds the very files of
    salt/_modules/epilog_node, byte for byte, and settings.json the very
    settings the module reads (settings.jinja, map.jinja's merge)."""
    c = sandbox(tmp_path)
    pillar = c.pillar()
    assert minion.apply(pillar=pillar).ok
    for path in PACKAGE:
        assert (c.release / path).read_bytes() == (REPO / "_modules" / path).read_bytes(), path
    minion.set_pillar(pillar)
    rendered = minion("slsutil.renderer", path="salt://epilog/settings.jinja", default_renderer="jinja|json",
                      tpldir="epilog")
    assert json.loads((c.release / "settings.json").read_text()) == json.loads(json.dumps(rendered))


def test_a_release_without_salt_is_the_states(minion, tmp_path):
    """The node tier lays chains down without Salt (tests/release.py): the
    same files, byte for byte, as the state lays down for the same
    settings, but the settings' own JSON formatting."""
    c = sandbox(tmp_path)
    assert minion.apply(pillar=c.pillar()).ok
    other = Chain(tmp_path / "by-hand", c.allow_file, c.log_file, c.spool_dir)
    settings = {**c.pillar()["epilog"], "slurm_config_dir": str(other.conf_dir)}
    by_hand = lay_down(**settings)
    state_files = {p.relative_to(c.release): p for p in c.release.rglob("*") if p.is_file()}
    hand_files = {p.relative_to(by_hand): p for p in by_hand.rglob("*") if p.is_file()}
    assert set(state_files) == set(hand_files)
    for rel, path in state_files.items():
        # the bytecode holds its source's path; the manifest the settings' hash
        if rel.name in ("settings.json", "MANIFEST.sha256") or "__pycache__" in rel.parts:
            continue
        assert path.read_bytes() == hand_files[rel].read_bytes(), rel
    state_settings = json.loads((c.release / "settings.json").read_text())
    hand_settings = json.loads((by_hand / "settings.json").read_text())
    state_settings["settings"]["slurm_config_dir"] = str(other.conf_dir)
    state_settings["settings"]["stop_file"] = str(other.conf_dir / "epilog.stop")  # beside each chain
    assert state_settings == hand_settings


def test_localusers_backup_is_exactly_the_pillar_list(minion, tmp_path):
    c = sandbox(tmp_path)
    users = ["root", "je.kim", "s.shin", "alice-admin", "alice.b", "-v", "op@site"]
    assert minion.apply(pillar=c.pillar(localusers=users)).ok
    assert c.localusers.read_text() == "".join(u + "\n" for u in users)


BAD_LOCALUSERS = [
    ("empty", "", "epilog:localusers[1] ('') is empty"),
    ("space", "bad user", "epilog:localusers[1] ('bad user') holds whitespace or a newline"),
    ("tab", "bad\tuser", "holds whitespace or a newline"),
    ("newline", "bad\nuser", "holds whitespace or a newline"),
    ("slash", "a/b", "epilog:localusers[1] ('a/b') holds a character other than"),
    ("colon", "a:b", "epilog:localusers[1] ('a:b') holds a character other than"),
    ("command-substitution", "$(reboot)", "epilog:localusers[1] ('$(reboot)') holds a character other than"),
    ("semicolon", "a;b", "holds a character other than"),
    ("backtick", "a`id`", "holds a character other than"),
    ("quote", "a'b", "holds a character other than"),
    ("glob", "a*", "holds a character other than"),
    ("integer", 1234, "epilog:localusers[1] (1234) is not a string"),
    ("boolean", True, "epilog:localusers[1] (True) is not a string"),
    ("null", None, "epilog:localusers[1] (None) is not a string"),
    ("list", ["root"], "epilog:localusers[1] (['root']) is not a string"),
]


@pytest.mark.parametrize("value,message", [(v, m) for _, v, m in BAD_LOCALUSERS], ids=[i for i, _, _ in BAD_LOCALUSERS])
def test_bad_localusers_entry_fails_the_state_naming_it_and_lays_down_nothing(minion, tmp_path, value, message):
    c = sandbox(tmp_path)
    ret = minion.apply(pillar=c.pillar(localusers=["root", value]))
    assert not ret.ok, ret
    assert message in "\n".join(ret.errors), ret
    assert not c.conf_dir.exists()


@pytest.mark.parametrize("key,value,message", [
    ("localusers", "root", "epilog:localusers must be a list of account names"),
    ("slurm_config_dir", "etc/slurm", "epilog:slurm_config_dir ('etc/slurm') must be an absolute path"),
    ("slurm_config_dir", "/etc/slurm; rm -rf /", "epilog:slurm_config_dir"),
    ("ssh_allow_file", "/etc/$(id)", "epilog:ssh_allow_file"),
    ("log_file", "/var/log/../../etc/shadow", "epilog:log_file"),
    ("slurmd_spool_dir", "/var/lib/slurm d", "epilog:slurmd_spool_dir"),
    ("part_timeout", "30", "epilog:part_timeout ('30') must be a whole number of seconds"),
    ("part_timeout", 0, "epilog:part_timeout (0) must be a whole number"),
    ("scratch_patterns", "slurm{jobid}*", "epilog:scratch_patterns must be a list of patterns"),
    ("scratch_patterns", ["slurm*"], "epilog:scratch_patterns[0] ('slurm*') must hold {jobid} once"),
    ("scratch_patterns", ["../x{jobid}"], "epilog:scratch_patterns[0] ('../x{jobid}') must hold {jobid}"),
    ("scratch_patterns", ["$(id){jobid}"], "epilog:scratch_patterns[0]"),
    ("scratch_patterns", ["*{jobid}*"], "may not start with a wildcard or a dot"),
    ("scratch_patterns", [".X{jobid}*"], "may not start with a wildcard or a dot"),
    ("sweep_budget", 12, "epilog:sweep_budget (12) must be below epilog:part_timeout (12)"),
    ("chain_timeout", 34, "epilog:chain_timeout (34) must leave room for the decision, one part and the runner: "
                          "at least epilog:part_timeout (12) + epilog:squeue_timeout (5) + 18"),
    ("chain_timeout", 3601, "epilog:chain_timeout (3601) must be a whole number of seconds from 1 to 3600"),
    # the epilog runs as root and writes only where no other account can plant a symlink
    ("log_file", "/var/log/slurm/epilog.log", "epilog:log_file ('/var/log/slurm/epilog.log'): /var/log/slurm is "),
    ("log_file", "/tmp/epilog.log", "epilog:log_file ('/tmp/epilog.log'): /tmp is "),
    ("log_max_kb", 15, "epilog:log_max_kb (15) must be a whole number of KiB from 16 to 65536"),
    ("ssh_allow_file", "/var/tmp/localusers", "epilog:ssh_allow_file ('/var/tmp/localusers'): /var/tmp is "),
])
def test_bad_setting_fails_the_state_naming_it(minion, tmp_path, key, value, message):
    c = sandbox(tmp_path)
    pillar = c.pillar()
    pillar["epilog"][key] = value
    ret = minion.apply(pillar=pillar)
    assert not ret.ok, ret
    assert message in "\n".join(ret.errors), ret
    assert not c.conf_dir.exists()


def test_bad_pillar_keeps_the_chain_already_laid_down(minion, tmp_path):
    c = sandbox(tmp_path)
    assert minion.apply(pillar=c.pillar()).ok
    before = {p: p.read_bytes() for p in c.conf_dir.rglob("*") if p.is_file()}
    ret = minion.apply(pillar=c.pillar(localusers=["root", "bad user"]))
    assert not ret.ok
    assert {p: p.read_bytes() for p in c.conf_dir.rglob("*") if p.is_file()} == before


def test_readme_test_command_is_what_ci_runs():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci/run").read_text()
    command = next(line.strip() for line in ci.splitlines() if line.strip().startswith("bash .ci/setup &&"))
    assert command in readme


# The README's masterless command per Salt line: salt 3006 reads the
# Saltfile's file_root and pillar_root as one path each (3008 as lists) and
# fails on the lists, so there the README gives them as options.
MASTERLESS = {"3008": [], "3006": ["--file-root=salt", "--pillar-root=pillar", "--module-dirs=."]}


def test_saltfile_makes_salt_call_work_from_the_repo_root(tmp_path, accounts):
    """The operator's masterless run: from the repo root, the Saltfile alone
    wires salt-call to salt/, pillar/ and _modules/ (no --config-dir); on
    salt 3006, with the options the README gives."""
    import salt.version  # pylint: disable=import-outside-toplevel

    line = str(salt.version.__version__).split(".")[0]
    readme = (REPO / "README.md").read_text()
    assert all(option in readme for option in MASTERLESS[line])
    salt_call = [str(VENV_BIN / "salt-call"), *MASTERLESS[line]]
    c = sandbox(tmp_path)
    pillar = json.dumps(c.pillar())
    ret = subprocess.run([*salt_call, "--out=json", "state.apply", "epilog", f"pillar={pillar}"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert ret.returncode == 0, ret.stderr[-2000:]
    states = json.loads(ret.stdout)["local"]
    assert len(states) == STATE_COUNT and all(s["result"] for s in states.values())
    for path in PACKAGE:
        assert (c.release / path).read_bytes() == (REPO / "_modules" / path).read_bytes(), path
    # the repo's pillar/ (top.sls: slurm-work-*) is a minion's of that name
    sweep = subprocess.run([*salt_call, "--id=slurm-work-newcomer", "--out=json", "epilog.sweep", "test=True"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    assert json.loads(sweep.stdout)["local"]["test"] is True
    # any other minion has no epilog pillar: the sweep refuses, naming it
    # (it never runs on the defaults), and verify says the same; a function
    # whose result is False makes salt-call exit 1 (a rollout's batch stops
    # on it)
    missing = "no epilog pillar on this minion: the top file assigns it none"
    sweep = subprocess.run([*salt_call, "--id=epilog-newcomer", "--out=json", "epilog.sweep", "test=True"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert sweep.returncode != 0 and missing in sweep.stdout + sweep.stderr, (sweep.stdout + sweep.stderr)[-2000:]
    verify = subprocess.run([*salt_call, "--id=epilog-newcomer", "--out=json", "epilog.verify"], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    answer = json.loads(verify.stdout)["local"]
    assert answer["result"] is False and verify.returncode == 1, verify.stdout[-2000:]
    assert answer["problems"][0].startswith(f"[pillar-invalid] the epilog settings do not render: {missing}"), answer


# the last commit that laid the chain down in place, before releases
IN_PLACE = "8278322"


def test_upgrade_from_the_in_place_layout_keeps_site_parts_and_no_old_copy(minion, salt_factories, tmp_path):
    """A node laid down by the formula before releases (the chain written
    in place in slurm_config_dir) is upgraded by one apply: the entry paths
    become symlinks by rename (never missing), the old copies of the
    formula's parts go once the release is current, a site's part stays and
    still runs."""
    require_tools("git", "tar")
    c = sandbox(tmp_path)
    old = tmp_path / "old"
    old.mkdir()
    subprocess.run(f"git -C {REPO} archive {IN_PLACE} salt _modules | tar -x -C {old}", shell=True, check=True)
    shutil.move(old / "_modules", old / "salt/_modules")
    # that version ran on Salt 3008 only: it lays the old chain down there,
    # through a minion of its own (its file lists are the old formula's)
    old_minion = Minion(salt_factories, tmp_path / "old-minion")
    ret = SaltCall(old_minion.config_dir, REPO / ".venv/bin")("state.apply", "epilog", f"--file-root={old}/salt",
                                                              pillar=c.pillar())
    assert ret.returncode == 0, ret
    assert (c.conf_dir / "epilog.d/40-lastuserjob-processes").is_file() and not (c.conf_dir / "epilog.sh").is_symlink()
    marker = tmp_path / "site-part-ran"
    site = c.conf_dir / "epilog.d/30-site-part"
    site.write_text(f"#!/bin/bash\ntouch {marker}\n")
    os.chmod(site, 0o755)
    ret = minion.apply(pillar=c.pillar())
    assert ret.ok, ret
    for name in LAYOUT["entries"]:
        assert os.readlink(c.conf_dir / name) == f"{CURRENT}/{name}"
    # the old copies stay while a job end of the old chain may still run
    # them (the new runner never runs a site part named as its own) ...
    assert (c.conf_dir / "epilog.d/40-lastuserjob-processes").is_file()
    # ... and go at the first apply once the switch is older than that
    history = c.conf_dir / f"{RELEASES}/history"
    os.utime(history, (history.stat().st_atime - 600, history.stat().st_mtime - 600))
    ret = minion.apply(pillar=c.pillar())
    assert ret.ok, ret
    assert sorted(p.name for p in (c.conf_dir / "epilog.d").iterdir()) == ["30-site-part"]
    assert not list((c.conf_dir / "prolog.d").iterdir())
    assert not (c.conf_dir / "epilog_sweep.py").exists()
    run = subprocess.run([str(c.conf_dir / "epilog.sh")], env={"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "31",
                         "SLURM_JOB_USER": "root", "SLURM_JOB_UID": "0"}, capture_output=True, timeout=120)
    assert run.returncode == 0 and marker.exists()
    assert f"epilog.sh job=31 user=root release={c.release_id}: end" in c.log_text()
