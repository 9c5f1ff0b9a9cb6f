"""epilog.verify, epilog.rollback, epilog.checkpoint, epilog.explain and
the state epilog.clean, in-process on a node laid down by the real state
(a minion's loaders with a pillar of its own; tests/salt/conftest.py); in a
mount namespace, or without root's capabilities, through a real salt-call
in it."""
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from salt.exceptions import CommandExecutionError

from tests.helpers import (
    CURRENT,
    LAYOUT,
    RELEASES,
    REPO,
    end,
    killed,
    laid_down,
    slurmd_env,
    still_running,
    stray,
)
from tests.salt.conftest import Minion, Node


def test_verify_passes_on_a_fresh_apply_and_changes_nothing(node):
    node.apply()
    before = node.snapshot()
    assert sorted(node.run("verify")) == ["problems", "release", "result", "warnings"]
    report = node.run("verify", verbose=True)
    assert report["result"] is True, report["problems"]
    assert str(node.release / "epilog.d/39-lastuserjob-ssh") in report["checked"]
    assert report["release"] == node.release.name
    manifest = {line.split("  ", 1)[1]: line.split("  ", 1)[0]
                for line in (node.release / "MANIFEST.sha256").read_text().splitlines()}
    assert report["manifest"] == manifest and "epilog.d/40-lastuserjob-processes" in manifest
    assert node.run("verify", expect=node.release.name)["result"] is True
    # the content digest answers too: equal on every node with equal files
    assert report["content"] and node.run("verify", expect=report["content"])["result"] is True
    wrong = node.run("verify", expect="0123456789ab")
    assert (f"[release-not-expected] the current release is {node.release.name} (content {report['content']}), "
            "not the expected 0123456789ab") in wrong["problems"]
    assert node.snapshot() == before


@pytest.mark.salt_line_independent
def test_verifys_answer_on_a_healthy_node_fits_thirty_lines_and_verbose_has_the_rest(node):
    """What a fleet reads: a healthy node's answer, rendered by Salt's
    default (nested) outputter as `salt '*' epilog.verify` prints it, is at
    most 30 lines; verbose=True gives the same four keys and what verify
    looked at. Every problem and warning opens with its code."""
    import salt.output  # pylint: disable=import-outside-toplevel

    node.apply()
    report = node.run("verify")
    assert report["result"] is True and sorted(report) == ["problems", "release", "result", "warnings"], report
    opts = dict(node.minion.loaders.opts, color=False)
    printed = salt.output.string_format({"slurm-work-17": report}, "nested", opts)
    assert len(printed.splitlines()) <= 30, printed
    assert "release:" in printed and report["release"] in printed, printed
    assert all(re.match(r"\[[a-z0-9-]+\] ", text) for text in report["warnings"]), report["warnings"]
    verbose = node.run("verify", verbose=True)
    assert {key: verbose[key] for key in report} == report
    assert {"content", "manifest", "checked", "slurm_conf", "schedule", "info"} <= set(verbose), sorted(verbose)
    assert str(node.conf_dir / "slurm.conf") in [entry["file"] for entry in verbose["slurm_conf"]], verbose
    assert any("kernel.shm_rmid_forced" in line for line in verbose["info"]), verbose["info"]
    assert len(salt.output.string_format({"slurm-work-17": verbose}, "nested", opts).splitlines()) > 100
    with pytest.raises(CommandExecutionError, match="verbose must be True or False"):
        node.run("verify", verbose="yes")


def test_verify_on_a_minion_another_state_run_holds_says_so(node):
    """A state run in progress on the minion, as Salt records one (its job
    file in the cachedir's proc/, naming a live process whose command line
    says salt): verify cannot run the state's preview, and says why, with
    the run's jid and pid, instead of "does not render"."""
    import salt.payload  # pylint: disable=import-outside-toplevel

    node.apply()
    holder = subprocess.Popen(["/usr/bin/python3", "-c", "import sys; sys.stdin.read()", "salt-minion-job"],
                              stdin=subprocess.PIPE)
    proc_dir = Path(node.minion.loaders.opts["cachedir"]) / "proc"
    proc_dir.mkdir(parents=True, exist_ok=True)
    jid = "20261205101500123456"
    job = proc_dir / jid
    try:
        job.write_bytes(salt.payload.dumps({"fun": "state.apply", "pid": holder.pid, "jid": jid, "arg": [],
                                            "tgt": "slurm-work-17", "user": "root"}))
        report = node.minion("epilog.verify")
        assert report["result"] is False, report
        assert report["problems"] == [f"[minion-busy] another state run (jid {jid}, pid {holder.pid}) holds this "
                                      "minion; run verify again when it ends"], report
    finally:
        job.unlink(missing_ok=True)
        holder.stdin.close()
        holder.wait(timeout=10)
    assert not any(p.startswith("[minion-busy]") for p in node.minion("epilog.verify")["problems"])


@pytest.mark.salt_line_independent
def test_verify_names_a_hand_edited_part(node):
    node.apply()
    part = node.release / "epilog.d/39-lastuserjob-ssh"
    part.write_text(part.read_text().replace("runner.part(__file__)", "runner.part(__file__) or os.system('true')"))
    edited = part.read_bytes()
    report = node.run("verify")
    assert report["result"] is False
    assert any(str(part) in p and "differs from what the state lays down now" in p for p in report["problems"]), report
    assert any(str(part) in p and "changed since the release was made" in p for p in report["problems"]), report
    assert part.read_bytes() == edited, "verify must not repair anything"


@pytest.mark.salt_line_independent
def test_verify_names_bad_owner_mode_and_syntax(node):
    node.apply()
    p40 = node.release / "epilog.d/40-lastuserjob-processes"
    p42 = node.release / "epilog.d/42-lastuserjob-cleanup"
    os.chmod(p40, 0o775)
    os.chown(p42, 1001, 0)
    p45 = node.release / "epilog.d/45-stale-x-display"
    p45.write_text(p45.read_text() + "\nif then; fi\n")
    problems = "\n".join(node.run("verify")["problems"])
    assert f"{p40} is writable by group or others (mode 0775)" in problems
    assert f"{p42} is owned by uid 1001, not root" in problems
    assert f"{p45} does not compile" in problems


@pytest.mark.salt_line_independent
def test_verify_checks_localusers_tools_and_slurm_conf(node):
    node.apply()
    (node.conf_dir / "localusers.backup").write_text("root\n")
    (node.conf_dir / "slurm.conf").write_text(f"ClusterName=x\nEpilog={node.conf_dir}/epilog.d/*\n")
    problems = "\n".join(node.run("verify")["problems"])
    assert f"{node.conf_dir}/localusers.backup does not hold exactly the pillar's localusers" in problems
    assert "Slurm runs a glob in reverse order" in problems
    (node.conf_dir / "slurm.conf").write_text(f"ClusterName=x\nEpilog={node.conf_dir}/epilog.sh  # the runner\n"
                                               f"Prolog={node.conf_dir}/prolog.sh\nPrologFlags=Alloc\n")
    node.apply()
    problems = "\n".join(node.run("verify")["problems"])
    assert "PrologFlags=Alloc: want Alloc,Contain" in problems
    assert f"SlurmdSpoolDir=/var/spool/slurmd, but epilog:slurmd_spool_dir is {node.base}/spool" in problems
    (node.conf_dir / "slurm.conf").write_text(
        f"ClusterName=x\nEpilog={node.conf_dir}/epilog.sh  # the runner\nProlog={node.conf_dir}/prolog.sh\n"
        f"PrologFlags=Contain SlurmdSpoolDir={node.base}/spool\n")  # Contain sets Alloc (as X11 does both)
    report = node.run("verify")
    assert report["result"] is True, report["problems"]


@pytest.mark.salt_line_independent
def test_verify_names_a_listed_operator_that_does_not_resolve_here(node):
    """The guard spares the uid of every listed name, so a listed name that
    does not resolve on the node makes every job end there unknown: verify
    says so, naming it."""
    node.set_pillar(localusers=["root", "je.kim", "nobody-of-this-name"])
    node.apply()
    problems = "\n".join(node.run("verify")["problems"])
    assert "epilog:localusers names 'nobody-of-this-name', which does not resolve on this node" in problems


def test_verify_names_the_allow_file_lines_part_39_never_removes(node):
    """Lines an earlier release granted (or a hand wrote) to accounts the
    guard spares stay for ever: verify warns of them, a listed operator, a
    system account (nobody, 65534, above UID_MAX), names that do not
    resolve (escaped), the first 20 and a count, and says how to remove
    them; alice's line goes at her last job end, and is not named. A
    symlink in the allow file's place is not followed."""
    node.apply()
    allow = node.base / "localusers"
    ghosts = [f"ghost{i:02d}" for i in range(25)]
    allow.write_text("\n".join(["je.kim", "nobody", "evil\x1b[2J", "alice", *ghosts]) + "\n")
    verified = node.run("verify")
    assert verified["result"] is True, verified["problems"]
    (warning,) = [text for text in verified["warnings"] if text.startswith("[ssh-allow-line-never-revoked]")]
    assert warning.startswith(f"[ssh-allow-line-never-revoked] 28 line(s) of {allow} name accounts the localusers "
                              "guard does not act for, so part 39 never removes them"), warning
    shown = ", ".join(["je.kim (listed)", "nobody (system account)", "evil\\x1b[2J (unknown user)",
                       *(f"{name} (unknown user)" for name in ghosts[:17])])
    assert f": {shown} ...; remove each by hand" in warning and "alice" not in warning, warning
    remove = "perl -ni -e 'BEGIN { $n = shift } print unless $_ eq \"$n\\n\"'"
    assert f"flock {node.conf_dir}/ssh_allow.lock {remove} NAME {allow}" in warning
    assert not [text for text in verified["warnings"] if text.startswith(("[ssh-allow-file", "[ssh-allow-line-too"))]
    # a line pam_listfile reads as several names, in a file its group can write
    allow.write_text("alice\n" + "a" * 253 + "bob\n")
    os.chmod(allow, 0o664)
    warnings = node.run("verify")["warnings"]
    (writable,) = [text for text in warnings if text.startswith("[ssh-allow-file-writable]")]
    assert f"{allow} is owned by uid 0, group 0, mode 0664: not root's alone" in writable, writable
    (too_long,) = [text for text in warnings if text.startswith("[ssh-allow-line-too-long]")]
    assert f"1 line(s) of {allow} are longer than the 255 bytes pam_listfile reads as one name" in too_long, too_long
    allow.unlink()
    allow.symlink_to(node.base / "records.jsonl")
    (warning,) = [text for text in node.run("verify")["warnings"] if text.startswith("[ssh-allow-line-never")]
    assert "without following a symlink" in warning, warning


def wired(node, extra=""):
    """A slurm.conf that wires the chain as verify wants it, plus EXTRA."""
    (node.conf_dir / "slurm.conf").write_text(
        f"ClusterName=x\nEpilog={node.conf_dir}/epilog.sh\nProlog={node.conf_dir}/prolog.sh\n"
        f"PrologFlags=Alloc,Contain\nSlurmdSpoolDir={node.base}/spool\n{extra}")


@pytest.mark.salt_line_independent
def test_verify_reports_a_chain_that_cannot_finish_within_its_deadline_or_slurms(node):
    """Promise 6: the chain's worst case (parts x (part_timeout + 2), plus
    the squeue fallback) must fit in chain_timeout, and chain_timeout must be
    below slurm.conf's EpilogTimeout (PrologEpilogTimeout before 25.05), or
    slurmd kills a slow epilog and drains the node. The old defaults gave
    about 146 s, above a common 120 s; the runner keeps 5 s for itself."""
    node.apply()
    wired(node, "PrologEpilogTimeout=120\n")
    report = node.run("verify")
    assert report["result"] is True, report["problems"]  # the defaults: 4 x (12 + 2) + 10 + 5 + 1 + 5 = 77 <= 110 < 120
    # two site parts of its own fit the defaults (105 s); a third does not
    site = [node.conf_dir / "epilog.d" / f"{n}-site" for n in (20, 30, 60)]
    for part in site:
        part.write_text("#!/bin/sh\nexit 0\n")
        part.chmod(0o755)
        report = node.run("verify")
        if part != site[-1]:
            assert report["result"] is True, report["problems"]
    assert report["problems"] == ["[chain-worst-case-too-long] the epilog chain's worst case is 119 s (7 parts x "
                                  "(part_timeout 12 + 2) + 10 for the user's lock + squeue_timeout 5 + 1 + 5), above "
                                  "epilog:chain_timeout 110: the last parts would be cut off"], report
    for part in site:
        part.unlink()
    wired(node, "PrologEpilogTimeout=90\n")
    problems = "\n".join(node.run("verify")["problems"])
    assert "epilog:chain_timeout (110 s) is not below slurm.conf's prologepilogtimeout (90 s)" in problems
    node.set_pillar(part_timeout=30)
    node.apply()
    wired(node, "EpilogTimeout=120\n")
    problems = "\n".join(node.run("verify")["problems"])
    assert ("the epilog chain's worst case is 149 s (4 parts x (part_timeout 30 + 2) + 10 for the user's lock "
            "+ squeue_timeout 5 + 1 + 5), above epilog:chain_timeout 110") in problems


@pytest.mark.salt_line_independent
def test_verify_reports_a_log_directory_another_account_can_write(node):
    """Promise 7: the scripts write the log only where root alone can; if
    the log's directory has been handed to slurm since the state laid it
    down, verify says so, naming the entry (and the scripts log to syslog
    only)."""
    node.apply()
    wired(node)
    shutil.chown(node.base, "slurm", "slurm")
    try:
        problems = node.run("verify")["problems"]
    finally:
        shutil.chown(node.base, "root", "root")
    assert problems == [f"[state-not-rendering] the state epilog does not render: epilog:log_file "
                        f"('{node.base}/epilog.log'): {node.base} is a symlink, not owned by root, or writable by its "
                        "group or others (uid 64030, mode 40755); the epilog runs as root and writes only where no "
                        "other account can plant a symlink: choose a directory only root can write, e.g. "
                        "/var/log/slurm-epilog"], problems


@pytest.mark.salt_line_independent
def test_verify_names_a_missing_python(node):
    """The node's /usr/bin/python3, which every entry point runs, made
    unusable for real: /dev/null bind-mounted over it in a private mount
    namespace, where salt-call runs (with the venv's own python)."""
    node.apply()
    ns = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
          'mount --bind /dev/null /usr/bin/python3 && exec "$@"', "sh"]
    ret = node.call("epilog.verify", prefix=ns)
    assert ret.returncode == 1, ret
    assert "/usr/bin/python3 is not installed: every entry point of the chain runs it" in "\n".join(ret.data["problems"])


@pytest.mark.salt_line_independent
def test_verify_reads_the_sshd_pam_stack_under_each_ssh_access(node):
    """The node's own /etc/pam.d/sshd, replaced for real in a private mount
    namespace (a tmpfs over /etc/pam.d), where salt-call runs: under
    listfile, the allow file as a sufficient line before pam_slurm_adopt is a
    problem; under adopt, a stack without pam_slurm_adopt is one (the
    decisions' every case: tests/unit/test_pam_stack.py)."""
    node.apply()
    allow = node.pillar["epilog"]["ssh_allow_file"]

    def verify(sshd):
        ns = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
              'mount -t tmpfs epilog-pam /etc/pam.d && printf "%s" "$1" > /etc/pam.d/sshd && shift && exec "$@"',
              "sh", sshd]
        ret = node.call("epilog.verify", prefix=ns)
        assert isinstance(ret.data, dict), ret
        return "\n".join(ret.data["problems"])

    line = f"account sufficient pam_listfile item=user sense=allow onerr=fail file={allow}"
    skips = verify(line.replace("pam_listfile", "pam_listfile.so") + "\naccount required pam_slurm_adopt.so\n")
    assert f"/etc/pam.d/sshd:1: {line}" in skips and "skips adoption" in skips, skips
    node.set_pillar(ssh_access="adopt")
    unguarded = verify("account required pam_unix.so\n")
    assert "epilog:ssh_access is adopt, but sshd's PAM stack has no pam_slurm_adopt" in unguarded, unguarded


def test_epilog_pam_fails_before_writing_a_stack_that_would_lock_logins_out(node):
    """A required pam_slurm_adopt that is not there denies every login,
    root's too: the state's render fails, naming the entry, and nothing is
    laid down (test=True here: the node's own /etc/pam.d is this machine's;
    the real applies run in a namespace, tests/slurm/test_pam_adopt.py).
    Off, with none of the formula's lines in the file, there is nothing to do."""
    node.apply()
    node.set_pillar(ssh_access="adopt", pam_manage=True, pam_adopt_module="/nonexistent/security/pam_slurm_adopt.so")
    ret = node.minion.apply("epilog.pam", test=True)
    assert not ret.ok and "epilog:pam_adopt_module ('/nonexistent/security/pam_slurm_adopt.so') is not a file" \
        in ret.text, ret
    node.set_pillar(ssh_access="adopt")
    off = node.minion.apply("epilog.pam", test=True)
    assert off.ok and not off.changed(), off


def test_the_module_answers_right_after_the_first_apply(salt_factories, accounts, tmp_path):
    """A minion that has only what it synced (no module_dirs), through
    salt-call (each a new process, as a minion's job is): the first apply
    syncs the epilog module, so verify answers at once; the node program
    synced beside it, which the module runs, is the laid-down one, byte for
    byte. (It is not about ssh: ssh_access none asks nothing of sshd's PAM
    stack.)"""
    fresh = Node(Minion(salt_factories, tmp_path / "fresh-minion", module_dirs=[]))
    fresh.set_pillar(ssh_access="none")
    try:
        before = fresh.call("epilog.verify")
        assert before.returncode != 0 and "is not available" in before.stdout + before.stderr, before
        ret = fresh.call("state.apply", "epilog")
        assert ret.returncode == 0 and ret.states["epilog-module-saltutil-sync_modules"]["changes"], ret
        report = fresh.call("epilog.verify")
        assert report.data["problems"] == ["[slurm-conf-missing] no slurm.conf found here ($SLURM_CONF, "
                                           "slurm_config_dir, /etc/slurm, the configless cache), and no slurmd runs: "
                                           "Epilog= cannot be checked"] or \
            report.data["result"] is True or all("slurm.conf" in p for p in report.data["problems"]), report
        extmods = sorted(Path(fresh.minion.config_dir).parent.rglob("extmods/modules"))
        assert extmods and (extmods[0] / "epilog.py").is_file(), "the module was not synced"
        for path in (fresh.release / LAYOUT["package"]).glob("*.py"):
            assert (extmods[0] / LAYOUT["package"] / path.name).read_bytes() == path.read_bytes(), path
        again = fresh.call("state.apply", "epilog")
        assert not again.states["epilog-module-saltutil-sync_modules"]["changes"], again
    finally:
        shutil.rmtree(fresh.base, ignore_errors=True)


def test_rollback_switches_to_exactly_the_previous_release_and_back(node):
    node.set_pillar(localusers=["root"], part_timeout=19)
    node.apply()
    first = node.release
    first_files = {p: p.read_bytes() for p in first.rglob("*") if p.is_file()}
    node.set_pillar(localusers=["root", "je.kim"], part_timeout=18)
    node.apply()
    second = node.release
    assert second != first
    before = node.snapshot()
    preview = node.run("rollback", test=True)
    assert (preview["release"], preview["to"], preview["switched"]) == (second.name, first.name, False), preview
    assert node.snapshot() == before, "test=True changed something"
    report = node.run("rollback")
    assert (report["to"], report["switched"]) == (first.name, True), report
    assert node.release == first
    assert os.path.realpath(node.conf_dir / "epilog.sh") == str(first / "epilog.sh")
    assert (node.conf_dir / "localusers.backup").read_text() == "root\n"
    assert {p: p.read_bytes() for p in first.rglob("*") if p.is_file()} == first_files, "the release must be exact"
    problems = node.run("verify")["problems"]
    assert f"[release-not-current] the release the state lays down now ({second.name}) is not current (current: " \
        f"{first.name})" in problems
    # a second rollback rolls forward again, and a third back
    assert node.run("rollback")["to"] == second.name and node.release == second
    assert node.run("rollback")["to"] == first.name and node.release == first
    # the next apply makes the pillar's release current again
    node.apply()
    report = node.run("verify")
    assert node.release == second and report["result"] is True, report["problems"]


@pytest.mark.salt_line_independent
def test_rollback_goes_back_one_deploy_only(node):
    """Three deploys: the rollback goes to the second, not the first; a
    deploy that changed nothing on the node is not a deploy to undo."""
    releases = []
    for timeout in (30, 31, 32):
        node.set_pillar(part_timeout=timeout)
        node.apply()
        releases.append(node.release.name)
    node.apply()  # unchanged: the same release
    assert node.run("rollback", test=True)["to"] == releases[1]


@pytest.mark.salt_line_independent
def test_rollback_with_nothing_to_go_back_to_says_so_and_changes_nothing(node):
    node.apply()
    before = node.snapshot()
    for args in ({"test": True}, {}):
        report = node.run("rollback", **args)
        assert report["result"] is False and report["switched"] is False, report
        assert "nothing to roll back to" in report["comment"], report
    assert node.snapshot() == before


def test_rollback_never_crosses_a_clean_or_the_minion_cache(node):
    """Releases live under slurm_config_dir: clearing Salt's cache leaves
    them; epilog.clean removes them all, so nothing from before a clean is
    ever offered."""
    node.set_pillar(part_timeout=30)
    node.apply()
    first = node.release.name
    node.set_pillar(part_timeout=31)
    node.apply()
    assert node.minion("saltutil.clear_cache")
    assert node.run("rollback", test=True)["to"] == first
    (node.conf_dir / "slurm.conf").write_text("ClusterName=x\n")
    node.apply("epilog.clean")
    assert not (node.conf_dir / RELEASES).exists()
    node.set_pillar(part_timeout=30)
    node.apply()
    report = node.run("rollback", test=True)
    assert report["result"] is False and "nothing to roll back to" in report["comment"], report


@pytest.mark.salt_line_independent
def test_rollback_to_a_checkpoint_returns_to_exactly_that_release(node):
    """What the staged rollout relies on: the checkpoint records the release
    current before the rollout; rolling back to it is exact however many
    switches came between, does nothing when nothing switched, and a name
    is recorded once."""
    assert node.run("checkpoint", "before-anything")["recorded"] is False  # no releases yet
    node.set_pillar(part_timeout=30)
    node.apply()
    first = node.release.name
    before = node.snapshot()
    preview = node.run("checkpoint", "rollout-1", test=True)
    assert (preview["recorded"], preview["release"]) == (False, first) and node.snapshot() == before, preview
    report = node.run("checkpoint", "rollout-1")
    assert (report["recorded"], report["release"]) == (True, first), report
    # nothing switched since: nothing to do
    report = node.run("rollback", checkpoint="rollout-1")
    assert report["result"] is True and report["switched"] is False and node.release.name == first, report
    for timeout in (31, 32):
        node.set_pillar(part_timeout=timeout)
        node.apply()
    # taken again, the first record stands
    again = node.run("checkpoint", "rollout-1")
    assert (again["recorded"], again["release"]) == (False, first), again
    preview = node.run("rollback", checkpoint="rollout-1", test=True)
    assert preview["to"] == first and preview["switched"] is False and node.release.name != first, preview
    report = node.run("rollback", checkpoint="rollout-1")
    assert (report["to"], report["switched"]) == (first, True) and node.release.name == first, report
    for bad in ("no-such-checkpoint", "-v", "../x", "a b"):
        report = node.run("rollback", checkpoint=bad)
        assert report["result"] is False and report["switched"] is False, (bad, report)
        assert node.release.name == first
    for bad in ("-v", "../x", "a\nb", "x" * 65):
        report = node.run("checkpoint", name=bad)
        assert report["result"] is False and report["recorded"] is False, (bad, report)
    # a node whose release.py predates checkpoints (the first rollout of this
    # version): the formula's own release.py records it
    tool = node.conf_dir / laid_down("release-tool")
    current_tool = tool.read_bytes()
    tool.write_bytes(subprocess.run(["git", "-C", str(REPO), "show", "4bbfd50:salt/epilog/files/release.py"],
                                    capture_output=True, check=True).stdout)
    report = node.run("checkpoint", "rollout-2")
    assert (report["recorded"], report["release"]) == (True, first), report
    # and the rollback an apply that never switched runs there
    report = node.run("rollback", checkpoint="rollout-2")
    assert report["result"] is True and report["switched"] is False and node.release.name == first, report
    tool.write_bytes(current_tool)
    # the CLI reads 0123 as a number, 12:30 as 750 and null as None: a name must be a string
    for bad in (123, 750, None):
        with pytest.raises(CommandExecutionError, match="is not a string"):
            node.run("checkpoint", name=bad)
        if bad is not None:
            with pytest.raises(CommandExecutionError, match="is not a string"):
                node.run("rollback", checkpoint=bad)
    lines = (node.conf_dir / f"{RELEASES}/checkpoints").read_text().splitlines()
    assert [line.split()[1:] for line in lines] == [["rollout-1", first], ["rollout-2", first]], lines


@pytest.mark.salt_line_independent
def test_rollback_refuses_a_previous_release_that_changed_since_it_was_made(node):
    node.set_pillar(part_timeout=30)
    node.apply()
    first = node.release
    node.set_pillar(part_timeout=31)
    node.apply()
    second = node.release
    part = first / "epilog.d/40-lastuserjob-processes"
    part.write_text(part.read_text() + "\n# edited\n")
    report = node.run("rollback")
    assert report["result"] is False and report["switched"] is False, report
    assert f"{part} changed since the release was made" in report["comment"], report
    assert node.release == second
    part.write_text(part.read_text().replace("\n# edited\n", ""))
    os.chmod(first / "epilog.sh", 0o644)  # slurmd could not run it: the node would drain
    report = node.run("rollback")
    assert report["result"] is False and f"{first}/epilog.sh has mode 0644, not the release's 0755" in report["comment"]
    assert node.release == second
    os.chmod(first / "epilog.sh", 0o755)
    (first / "epilog.d/45-stale-x-display").unlink()
    report = node.run("rollback")
    assert report["result"] is False and f"{first}/epilog.d/45-stale-x-display is missing" in report["comment"], report
    assert node.release == second


def test_clean_removes_what_the_formula_laid_down_and_nothing_else(node):
    node.apply()
    (node.conf_dir / "slurm.conf").write_text(f"ClusterName=x\nEpilog={node.conf_dir}/epilog.sh\n")
    refused = node.minion.apply("epilog.clean")
    assert not refused.ok
    assert "refusing to remove the chain" in refused.text and "scontrol reconfigure" in refused.text
    assert (node.conf_dir / "epilog.sh").exists(), "clean removed the runner slurm.conf still names"
    own = node.conf_dir / "epilog.d/99-site-own-part"
    own.write_text("#!/bin/bash\nexit 0\n")
    (node.conf_dir / "slurm.conf").write_text("ClusterName=x\n")
    preview = node.apply("epilog.clean", test=True)
    assert any(s["changes"] or s["result"] is None for s in preview.states.values())
    assert (node.conf_dir / "epilog.sh").exists(), "test=True removed something"
    node.apply("epilog.clean")
    left = sorted(str(p.relative_to(node.conf_dir)) for p in node.conf_dir.rglob("*"))
    assert left == ["epilog.d", "epilog.d/99-site-own-part", "slurm.conf"]
    own.unlink()
    node.apply("epilog.clean")
    assert sorted(p.name for p in node.conf_dir.iterdir()) == ["slurm.conf"]


def test_a_renamed_slurm_config_dir_is_reported_until_the_old_chain_is_unwired_and_cleaned(node):
    old, new = node.conf_dir, node.base / "slurm-new"
    node.apply()
    wired(node)
    node.conf_dir = new
    node.set_pillar()
    new.mkdir()
    # the site's slurm.conf (in the new directory) still runs the old chain
    (new / "slurm.conf").write_text((old / "slurm.conf").read_text())
    ret = node.apply()
    check = ret.states["epilog-slurm-conf-old-chain-test"]
    assert check["result"] is True and str(old) in check["name"], check
    warnings = "\n".join(check.get("warnings", []))
    assert f"Epilog={old}/epilog.sh" in warnings and f"Prolog={old}/prolog.sh" in warnings, check
    assert f'"epilog_clean": {{"slurm_config_dir": "{old}"}}' in warnings, check
    assert (new / "epilog.sh").exists() and (old / "epilog.sh").exists(), "the old chain slurmd runs must stay"
    report = node.run("verify")
    assert report["result"] is False, report
    assert any(p.startswith(f"[slurm-conf-old-chain] {new}/slurm.conf has Epilog={old}/epilog.sh: slurmd runs the "
                            f"chain in {old}")
               for p in report["problems"]), report["problems"]
    # cleaning the old directory refuses while a slurm.conf names it
    clean_old = {"epilog_clean": {"slurm_config_dir": str(old)}}
    refused = node.minion.apply("epilog.clean", pillar=clean_old)
    assert not refused.ok and "refusing to remove the chain" in refused.text, refused
    assert (old / "epilog.sh").exists()
    # the operator repoints slurm.conf (and the old directory's copy goes)
    (new / "slurm.conf").write_text((new / "slurm.conf").read_text().replace(str(old), str(new)))
    (old / "slurm.conf").unlink()
    cleaned = node.minion.apply("epilog.clean", pillar=clean_old)
    assert cleaned.ok, cleaned
    assert not (old / "epilog.sh").exists() and not (old / RELEASES).exists()
    assert (new / f"{CURRENT}/epilog.sh").is_file(), "cleaning the old chain touched the new one"
    ret = node.apply()
    assert "warnings" not in ret.states["epilog-slurm-conf-old-chain-test"], ret.states
    report = node.run("verify")
    assert report["result"] is True, report["problems"]
    for bad in ("relative/dir", f"{old}/../slurm", "/etc/slurm;rm", ["/etc/slurm"], f"{new}/{RELEASES}"):
        ret = node.minion.apply("epilog.clean", pillar={"epilog_clean": {"slurm_config_dir": bad}})
        assert not ret.ok and "epilog_clean:slurm_config_dir" in ret.text, (bad, ret)
    assert (new / f"{CURRENT}/epilog.sh").is_file()


def test_a_slurm_conf_another_account_writes_never_points_at_an_old_chain(node):
    """Debian's slurmd spool belongs to slurm, which can write a configless
    cache there. What it says may refuse a clean, never name a directory
    as an old chain to clean: not the live one behind a glob and .., not a
    previous release, not a NUL byte that breaks the render."""
    node.set_pillar(part_timeout=19)
    node.apply()
    wired(node)
    previous = node.release.name
    node.set_pillar(part_timeout=18)
    node.apply()
    spool = node.base / "spool"
    cache = spool / "conf-cache"
    cache.mkdir()
    slurm = pwd.getpwnam("slurm")
    for path in (spool, cache):
        os.chown(path, slurm.pw_uid, slurm.pw_gid)
    hostile = cache / "slurm.conf"
    hostile.write_bytes(
        f"Epilog=/nonexist*/../{str(node.conf_dir).lstrip('/')}/epilog.sh\n"
        f"Prolog={node.conf_dir}/{RELEASES}/{previous}/prolog.sh\n".encode()
        + b"Epilog=/x\x00y\nEpilog=/var/tmp/\x7f/epilog.sh\n")
    os.chown(hostile, slurm.pw_uid, slurm.pw_gid)
    # a real old chain, root's: named from slurm's file it is not one...
    old = node.base / "slurm-old"
    (old / RELEASES).mkdir(parents=True)
    with hostile.open("a") as handle:
        handle.write(f"Prolog={old}/prolog.sh\n")
    assert node.run("chain_wired")["elsewhere"] == []
    # ... named from root's own slurm.conf, it is
    conf = node.conf_dir / "slurm.conf"
    wired_conf = conf.read_text()
    conf.write_text(wired_conf + f"Include {node.base}/old.conf\n")
    (node.base / "old.conf").write_text(f"Prolog={old}/prolog.sh\n")
    found = node.run("chain_wired")["elsewhere"]
    assert [(item["key"], item["dir"]) for item in found] == [("Prolog", str(old))], found
    conf.write_text(wired_conf)
    ret = node.apply()
    check = ret.states["epilog-slurm-conf-old-chain-test"]
    assert "warnings" not in check, check
    wired_now = node.run("chain_wired")
    assert wired_now["elsewhere"] == [] and wired_now["known"] is False, wired_now
    assert any("epilog.sh" in item for item in wired_now["wired"]), wired_now
    report = node.run("verify")
    assert not any("slurmd runs the chain in" in p for p in report["problems"]), report["problems"]
    refused = node.minion.apply("epilog.clean")
    assert not refused.ok and (node.conf_dir / "epilog.sh").exists()


class DefaultPathNode(Node):
    """A node whose chain is at the default slurm_config_dir, /etc/slurm:
    every call is a salt-call in a private mount namespace with a tmpfs
    over /etc/slurm (the host's is never touched); conf_dir is that
    directory as seen from here."""

    def __init__(self, minion, holder_pid):
        self.prefix = ["nsenter", f"--target={holder_pid}", "--mount"]
        self.root = Path(f"/proc/{holder_pid}/root")
        super().__init__(minion)
        self.conf_dir = self.root / "etc/slurm"

    def set_pillar(self, localusers=("root", "je.kim"), **extra):
        super().set_pillar(localusers, **extra)
        path = self.minion.base / "pillar/epilog.sls"
        data = json.loads(path.read_text())
        del data["epilog"]["slurm_config_dir"]  # the default, from defaults.yaml
        path.write_text(json.dumps(data))

    def call(self, fun, *args, prefix=(), **kwargs):
        return super().call(fun, *args, prefix=[*self.prefix, *prefix], **kwargs)

    def apply(self, sls="epilog", test=False):
        ret = self.call("state.apply", sls, *(["test=True"] if test else []))
        assert ret.returncode == 0, ret
        return ret


@pytest.fixture
def default_path_node(salt_factories, accounts, tmp_path):
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         "mkdir -p /etc/slurm && mount -t tmpfs -o mode=0755 epilog-test /etc/slurm && echo ready && exec sleep 86400"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        n = DefaultPathNode(Minion(salt_factories, tmp_path / "default-minion"), holder.pid)
        yield n
        shutil.rmtree(n.base, ignore_errors=True)
    finally:
        holder.kill()
        holder.wait()


DROP_DAC = ["setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]
LIST = b"root\nje.kim\ns.shin\n"
RUNNER_LINE = re.compile(r"(info|warning) epilog\.sh job=4242 user=\S+ release=[0-9a-f]+: (.*)\Z")


def _runner_lines(lines):
    """A job end's own decisions out of explain's: without the parts it
    would start (a job end logs what they do, not that they start), the
    guard's answer where a job end does not ask it, and explain mode's own
    notes."""
    out, skip = [], False
    for line in lines:
        text = line.split(": ", 1)[1]
        if skip:
            skip = False
        elif text == "the localusers guard, not asked at this job end, would say:":
            skip = True
        elif not text.startswith(("running ", "explain mode: ")):
            out.append(line)
    return out


def _state_of(*paths):
    """Every file under PATHS (names, contents, modes): what explain must leave as it was."""
    out = {}
    for top in paths:
        for path in [top, *top.rglob("*")] if top.exists() else []:
            st = path.lstat()
            out[str(path)] = (st.st_mode, path.read_bytes() if path.is_file() and not path.is_symlink() else None)
    return out


# The first seed's decision matrix, every row, and a system account: explain
# (the runner's explain mode) and a real job end, run the same way.
@pytest.mark.parametrize("path,user,listing,drop,acts,answer", [
    ("default", "je.kim", LIST, False, False, "listed"),
    ("custom", "je.kim", LIST, False, False, "listed"),
    ("custom", "alice", LIST, False, True, "not listed"),
    ("custom", "alice", None, False, False, "lookup error"),
    ("custom", "alice", LIST, True, False, "lookup error"),
    ("custom", "je.kim", b"root\njeXkim\n", False, True, "not listed"),
    ("custom", "daemon", b"je.kim\n", False, False, "not listed"),
], ids=["listed-default-path", "listed-custom-path", "definite-nonmatch", "lookup-failed-absent",
        "lookup-failed-unreadable", "regex-wildcard", "system-account"])
@pytest.mark.salt_line_independent
def test_explain_and_a_real_job_end_agree_on_the_seed_matrix(request, path, user, listing, drop, acts, answer):
    """explain runs the current release's node program in its dry run; then
    the same release's epilog.sh runs as at a real job end of the same job,
    with a real stray process of the user. Both decide the same, line for
    line, and the stray lives or dies as explain said. Unreadable: the list
    has mode 000, and both run without root's DAC capabilities (a real
    EACCES; explain through a salt-call run so)."""
    node = request.getfixturevalue("default_path_node" if path == "default" else "node")
    prefix = DROP_DAC if drop else []
    node.apply()
    backup = node.release / "localusers.backup"
    shown = Path("/etc/slurm") / backup.relative_to(node.conf_dir) if path == "default" else backup
    if listing is None:
        backup.unlink()
    else:
        backup.write_bytes(listing)
    if drop:
        os.chmod(backup, 0o000)
    log = node.base / "epilog.log"
    before = len(log.read_text(errors="replace").splitlines()) if log.exists() else 0
    untouched = _state_of(node.base / "run", log, node.base / "localusers", node.conf_dir)
    if prefix or path == "default":
        ret = node.call("epilog.explain", f"user={user}", "job=4242", prefix=prefix)
        assert ret.returncode == 0 and isinstance(ret.data, dict), ret
        report = ret.data
    else:
        report = node.run("explain", user=user, job=4242)
    assert _state_of(node.base / "run", log, node.base / "localusers", node.conf_dir) == untouched, \
        "explain wrote, created or removed something"
    assert report["localusers"]["answer"] == answer, report
    assert report["localusers"]["file"] == str(shown), report
    assert report["other_jobs"]["answer"] == "no" and "node-local" in report["other_jobs"]["why"], report
    verdict = report["parts"]["40-lastuserjob-processes"]
    assert verdict.startswith("acts") == acts, report
    assert report["parts"]["45-stale-x-display"].startswith("acts: sweeps"), report
    if user == "daemon":
        assert "system account" in verdict and report["system_account"] is True, report
    proc = stray(user)
    try:
        runner = "/etc/slurm/epilog.sh" if path == "default" else str(node.conf_dir / "epilog.sh")
        prefix_run = [*getattr(node, "prefix", []), *prefix]
        run = subprocess.run([*prefix_run, runner], env=slurmd_env(user, SLURM_CONF="/nonexistent"),
                             capture_output=True)
        assert run.returncode == 0, run
        logged = [line.split(" ", 1)[1] for line in log.read_text(errors="replace").splitlines()[before:]]
        assert killed(proc) if acts else still_running(proc), (logged, report)
    finally:
        end(proc)
    # The runner's own lines of that job end, as explain gives them.
    decided = [f"{m.group(1)}: {m.group(2)}" for m in map(RUNNER_LINE.match, logged) if m]
    assert decided == _runner_lines(report["decisions"]), (decided, report["decisions"])


@pytest.mark.salt_line_independent
def test_explain_and_a_job_end_agree_when_another_job_of_the_user_is_marked(node):
    """A job of alice's whose prolog marked it here 5 s ago: explain (about
    the end of job 4242) and the real end of job 4242 both find it in the
    run directory, without the controller, and both spare alice."""
    node.apply()
    run = node.base / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    (run / f"{pwd.getpwnam('alice').pw_uid}.4343").write_text(f"running {int(time.time()) - 5}\n")
    report = node.run("explain", user="alice", job=4242)
    assert report["other_jobs"]["answer"] == "yes" and "node-local: job 4343 of uid" in report["other_jobs"]["why"], report
    assert report["parts"]["40-lastuserjob-processes"] == "skipped: other jobs of this user on this node: yes", report
    log = node.base / "epilog.log"
    before = len(log.read_text(errors="replace").splitlines()) if log.exists() else 0
    proc = stray("alice")
    try:
        run_ = subprocess.run([str(node.conf_dir / "epilog.sh")], env=slurmd_env("alice", SLURM_CONF="/nonexistent"),
                              capture_output=True)
        assert run_.returncode == 0, run_
        assert still_running(proc)
    finally:
        end(proc)
    logged = [line.split(" ", 1)[1] for line in log.read_text(errors="replace").splitlines()[before:]]
    seconds = re.compile(r"started here [0-9]+ s ago")
    decided = [seconds.sub("started here N s ago", f"{m.group(1)}: {m.group(2)}") for m in map(RUNNER_LINE.match, logged) if m]
    assert decided == [seconds.sub("started here N s ago", line) for line in _runner_lines(report["decisions"])], \
        (decided, report["decisions"])


@pytest.mark.salt_line_independent
def test_explain_refuses_a_release_from_before_the_node_program(node):
    """A release from before the node program has no dry run to ask (its
    runner would end a job for real): explain refuses it, and alice's stray
    lives."""
    node.apply()
    program = node.release / LAYOUT["package"]
    program.rename(program.with_name("hidden"))
    proc = stray("alice")
    try:
        with pytest.raises(CommandExecutionError, match="predates the node program"):
            node.run("explain", user="alice")
        assert still_running(proc)
    finally:
        end(proc)
        program.with_name("hidden").rename(program)


def test_explain_refuses_a_name_with_a_nul_byte_with_a_clear_error(node):
    """YAML's "\\0" gives a NUL byte, which no account name and no
    environment can hold: a clear error, not a traceback, and nothing runs."""
    node.apply()
    with pytest.raises(CommandExecutionError, match=r"user must be an account name, got 'al\\x00ice': a NUL byte"):
        node.run("explain", user="al\0ice")


@pytest.mark.salt_line_independent
def test_explain_says_unknown_when_other_jobs_cannot_be_told(node):
    node.apply()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(node.base / "spool" / "node_424242.0"))
    try:
        report = node.run("explain", user="alice")
    finally:
        sock.close()
    # Another job's step socket, no slurmstepd, no controller to ask.
    assert report["other_jobs"]["answer"] == "unknown", report
    assert report["parts"]["39-lastuserjob-ssh"].startswith("skipped: other jobs of this user on this node: unknown")


@pytest.mark.salt_line_independent
def test_verify_names_what_root_would_run_that_another_account_can_write(node):
    node.apply()
    wired(node)
    part = node.conf_dir / "prolog.d/20-site"
    part.write_text("#!/bin/bash\nexit 0\n")
    os.chmod(part, 0o777)
    shutil.chown(part, "slurm")
    # in the runner's words (runner.admit_site_part), with verify's code
    assert (f"[site-part-not-root-only] {part} is owned by uid {pwd.getpwnam('slurm').pw_uid} or writable by group or "
            "others (mode 0777): that account could run code as root at every job end; the runner skips it"
            in node.run("verify")["problems"])
    part.unlink()
    os.chmod(node.conf_dir, 0o775)
    try:
        problems = "\n".join(node.run("verify")["problems"])
    finally:
        os.chmod(node.conf_dir, 0o755)
    assert f"{node.conf_dir} (epilog:slurm_config_dir) or one of its ancestors is" in problems


def test_an_apply_repairs_the_current_release_and_clears_leftovers(node):
    """A file left in the current release (Salt's temporary copy after a
    crash, say) or a hand edit makes verify fail; the next apply puts the
    release back as its manifest says, without a new release."""
    node.apply()
    release = node.release
    leftover = release / "epilog.d/40-lastuserjob-processesa8Xk2q"
    leftover.write_text("half a copy")
    os.chmod(leftover, 0o600)
    problems = node.run("verify")["problems"]
    assert f"[release-drift] {leftover} is not in the release's manifest" in problems, problems
    node.apply()
    assert node.release == release and not leftover.exists()
    assert node.run("verify")["result"] is True
