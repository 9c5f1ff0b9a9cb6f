"""sshd's account lines under ssh_access listfile, in-process on a node laid
down by the real state: epilog.pam lays them down and takes them out again,
epilog.verify fails with its code while sshd does not consult the allow
file as the chain needs, and epilog.clean takes out the schedule entries
and the PAM lines the formula laid down. Each runs in a mount namespace
whose /etc/pam.d is a tmpfs copy of the machine's (Node.isolated): the
machine's own is never written. Logins through a real sshd:
tests/slurm/test_pam_listfile.py."""
import os
import stat
from pathlib import Path

import pytest
import yaml

from tests.helpers import CURRENT
from tests.salt.conftest import machine_pam
from tests.unit.conftest import node as node_program

pam = node_program("pam")
SSHD = Path("/etc/pam.d/sshd")


def pam_problems(report):
    return [p for p in report["problems"] if "pam" in p.lower()]


def test_epilog_pam_lays_down_the_listfile_lines_and_takes_them_out_again(node):
    node.apply()
    node.set_pillar(pam_manage=True)
    allow, operators = node.pillar["epilog"]["ssh_allow_file"], Path(node.pillar["epilog"]["pam_operators_file"])
    files = machine_pam()
    original = files["sshd"]

    def steps():
        preview = node.minion.apply("epilog.pam", test=True)
        assert not preview.errors and {"epilog-pam-operators-file-managed", "epilog-pam-sshd-file-managed"} <= {
            sid for sid, s in preview.states.items() if s["result"] is None and s["changes"]}, preview
        assert SSHD.read_bytes() == original and not operators.exists(), "test=True wrote something"

        applied = node.minion.apply("epilog.pam")
        assert applied.ok and "epilog-pam-sshd-file-managed" in applied.changed(), applied
        lines = SSHD.read_text().split("\n")
        # after the last account line of the machine's file (Debian's: @include common-account)
        at = max(i for i, line in enumerate(original.decode().split("\n"))
                 if line.split()[:1] == ["account"] or line.split()[:2] == ["@include", "common-account"])
        assert lines[at + 1:at + 5] == [
            pam.BEGIN,
            f"account sufficient pam_listfile.so item=user sense=allow onerr=fail file={operators}",
            f"account required pam_listfile.so item=user sense=allow onerr=fail file={allow}",
            pam.END], lines
        assert pam.unplace(SSHD.read_text()).encode() == original
        st = operators.stat()
        assert operators.read_text() == "root\nje.kim\n" and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0
        assert node.minion("file.list_backups", str(SSHD)), "no backup of the old file"
        again = node.minion.apply("epilog.pam")
        assert again.ok and not again.changed(), again
        assert pam_problems(node.minion("epilog.verify")) == []

        node.set_pillar(pam_manage=False)
        removed = node.minion.apply("epilog.pam")
        assert removed.ok and removed.changed() == {"epilog-pam-sshd-file-managed"}, removed
        assert SSHD.read_bytes() == original
        assert operators.exists(), "pam_manage off takes the lines out, and touches nothing else"
        return pam_problems(node.minion("epilog.verify"))

    problems = node.isolated(steps, pam=files)
    assert [p[:p.index("]") + 1] for p in problems] == ["[pam-listfile-missing]"], problems


def test_epilog_pam_refuses_a_listfile_stack_a_sufficient_line_would_skip(node):
    """RHEL's authselect stacks end the account stack for every local
    account (a sufficient pam_localuser): the allow file's line after them
    would gate nobody, so the render fails and nothing is written."""
    node.apply()
    node.set_pillar(pam_manage=True)
    files = machine_pam(sshd="account required pam_unix.so\naccount sufficient pam_localuser.so\n")

    def apply():
        ret = node.minion.apply("epilog.pam")
        return ret.ok, ret.text, SSHD.read_bytes(), os.path.exists(node.pillar["epilog"]["pam_operators_file"])

    ok, text, after, operators = node.isolated(apply, pam=files)
    assert not ok and "[pam-listfile-bypassed]" in text and "pam_localuser" in text, text
    assert after == files["sshd"] and not operators


@pytest.mark.parametrize("access, sshd, code", [
    ("listfile", "", "[pam-listfile-missing]"),
    ("listfile", None, "[pam-sshd-missing]"),  # no /etc/pam.d/sshd at all: libpam reads other
    ("listfile", "{gate}", None),
    ("listfile", "{gate:sufficient}", "[pam-listfile-not-gating]"),
    ("listfile", "account sufficient pam_localuser.so\n{gate}", "[pam-listfile-bypassed]"),
    ("none", "", None),
])
@pytest.mark.salt_line_independent
def test_verify_fails_under_listfile_until_sshd_consults_the_allow_file(node, access, sshd, code):
    node.set_pillar(ssh_access=access)
    node.apply()
    allow = node.pillar["epilog"]["ssh_allow_file"]
    gate = f"account required pam_listfile.so item=user sense=allow onerr=fail file={allow}\n"
    files = machine_pam()
    if sshd is None:
        del files["sshd"]
    else:
        files["sshd"] += sshd.replace("{gate}", gate).replace("{gate:sufficient}", gate.replace("required",
                                                                                                "sufficient")).encode()
    report = node.isolated(lambda: node.minion("epilog.verify"), pam=files)
    found = pam_problems(report)
    assert [p[:p.index("]") + 1] for p in found] == ([code] if code else []), found
    assert report["result"] is (code is None), report["problems"]
    if code in ("[pam-listfile-missing]", "[pam-listfile-not-gating]", "[pam-sshd-missing]"):
        assert gate.strip() in found[0] and ("epilog:pam_manage: true" in found[0] or sshd is None), found[0]


def test_clean_takes_out_the_schedule_entries_and_the_pam_lines_it_laid_down(node):
    node.apply()
    node.set_pillar(pam_manage=True)
    operators = Path(node.pillar["epilog"]["pam_operators_file"])
    conf = node.conf_dir / "slurm.conf"
    # the minion's schedule as epilog.schedule leaves it (saved: the file a
    # minion reads when it starts), beside an entry of the site's
    schedule_conf = Path(node.minion.config_dir) / "minion.d/_schedule.conf"
    schedule_conf.parent.mkdir(exist_ok=True)
    entry = {"seconds": 600, "splay": 300, "maxrunning": 1, "return_job": False, "enabled": True}
    schedule_conf.write_text(yaml.safe_dump({"schedule": {
        "epilog-sweep": {"function": "epilog.sweep", "job_kwargs": {}, **entry},
        "epilog-strays": {"function": "epilog.strays", "job_kwargs": {"kill": False}, **entry},
        "site-backup": {"function": "test.ping", **entry}}}))
    files = machine_pam()

    def held():
        return sorted(yaml.safe_load(schedule_conf.read_text())["schedule"])

    def steps():
        assert node.minion.apply("epilog.pam").ok
        laid = SSHD.read_bytes()
        assert pam.BEGIN.encode() in laid and operators.is_file()
        assert node.minion("epilog.schedule_held") == {"entries": ["epilog-strays", "epilog-sweep"]}
        # slurm.conf still names the chain: nothing is removed, not the schedule, not sshd's lines
        refused = node.minion.apply("epilog.clean")
        assert not refused.ok and "refusing to remove the chain" in refused.text, refused
        assert SSHD.read_bytes() == laid and operators.is_file()
        assert held() == ["epilog-strays", "epilog-sweep", "site-backup"]
        conf.write_text("ClusterName=x\n")
        preview = node.minion.apply("epilog.clean", test=True)
        pending = {sid for sid, s in preview.states.items() if s["result"] is None}
        assert {"epilog-clean-pam-sshd-file-managed", "epilog-clean-pam-operators-file-1-moved-to-backup"} \
            <= pending, preview
        for name in ("epilog-sweep", "epilog-strays"):  # (Salt's schedule.absent previews as a comment)
            assert "would be deleted" in str(preview.states[f"epilog-clean-schedule-{name}-absent"]["comment"])
        assert SSHD.read_bytes() == laid and operators.is_file() and len(held()) == 3, "test=True removed something"

        cleaned = node.minion.apply("epilog.clean")
        assert cleaned.ok, cleaned
        assert SSHD.read_bytes() == files["sshd"] and not operators.exists()
        assert held() == ["site-backup"]
        assert node.minion("file.list_backups", str(SSHD)) and node.minion("file.list_backups", str(operators)), \
            "no backup of what clean took out"
        assert not (node.conf_dir / CURRENT).exists()
        again = node.minion.apply("epilog.clean")
        assert again.ok and not again.changed(), again
        assert not any(sid.startswith(("epilog-clean-schedule", "epilog-clean-pam")) for sid in again.states), again
        # a site's list of its own at that path, and an entry of another function under the formula's name, stay
        operators.write_text("root\nsomeone.else\n")
        schedule_conf.write_text(yaml.safe_dump({"schedule": {"epilog-sweep": {"function": "test.ping", **entry}}}))
        kept = node.minion.apply("epilog.clean")
        assert kept.ok and operators.read_text() == "root\nsomeone.else\n" and held() == ["epilog-sweep"], kept
        assert "does not hold what epilog.pam lays down" in kept.text, kept

    try:
        node.isolated(steps, pam=files)
    finally:
        schedule_conf.unlink(missing_ok=True)
