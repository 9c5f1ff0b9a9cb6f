"""sshd's PAM account stack read as libpam reads it, and the verdicts
epilog.verify gives under each epilog:ssh_access (epilog_node/pam.py).
Pure: PAM files in tmp_path, no root."""
import os

import pytest

from tests.unit.conftest import node

pam = node("pam")

ALLOW = "/etc/localusers"
ADOPT = "account required /lib/security/pam_slurm_adopt.so action_adopt_failure=deny action_generic_failure=deny"
DEBIAN_COMMON = ("account [success=1 new_authtok_reqd=done default=ignore] pam_unix.so\n"
                 "account requisite pam_deny.so\naccount required pam_permit.so\n")


def stack(tmp_path, sshd, **others):
    (tmp_path / "common-account").write_text(DEBIAN_COMMON)
    for name, text in others.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "sshd").write_text(sshd)
    return pam.account_stack("sshd", pam_dir=str(tmp_path))


def operators_file(tmp_path, names, mode=0o644):
    path = tmp_path / "operators"
    path.write_text("".join(f"{name}\n" for name in names))
    os.chmod(path, mode)
    return path


def test_the_stack_is_read_in_order_with_its_includes(tmp_path):
    lines, problems = stack(tmp_path, "# sshd\nauth required pam_env.so\n@include common-account\n"
                                      "-account optional pam_systemd.so \\\n  debug\n"
                                      "account\tsubstack more\n" + ADOPT + "  # the adoption\n",
                            more="account [success=done default=ignore] pam_listfile.so item=user sense=allow "
                                 "file=/x\n")
    assert problems == []
    assert [(line.module, line.control) for line in lines] == [
        ("pam_unix", "[success=1 new_authtok_reqd=done default=ignore]"), ("pam_deny", "requisite"),
        ("pam_permit", "required"), ("pam_systemd", "optional"),
        ("pam_listfile", "[success=done default=ignore]"), ("pam_slurm_adopt", "required")]
    assert lines[3].args == ["debug"] and lines[3].where.endswith("sshd:4")
    # a success inside a substack ends only the substack: pam_slurm_adopt still runs
    assert lines[4].sub and not lines[4].ends_on_success and not lines[0].ends_on_success
    assert not pam.bypasses(lines)
    assert lines[5].arg("action_adopt_failure") == "deny"


def test_an_include_loop_or_a_missing_file_is_named_not_followed_forever(tmp_path):
    lines, problems = stack(tmp_path, "account include loop\naccount include missing\n",
                            loop="account include loop\naccount required pam_permit.so\n")
    assert any("nest too deep" in p for p in problems), problems
    assert any("missing cannot be read" in p for p in problems), problems
    assert len(lines) <= pam.MAX_FILES


LISTFILE_SUFFICIENT = f"account sufficient pam_listfile.so item=user sense=allow onerr=fail file={ALLOW}\n"


@pytest.mark.parametrize("sshd,problem", [
    # the DeepOps-style migration: the allow line lets every job user skip adoption
    (LISTFILE_SUFFICIENT + ADOPT, True),
    (LISTFILE_SUFFICIENT.replace("sufficient", "[success=done default=ignore]") + ADOPT, True),
    (ADOPT + "\n" + LISTFILE_SUFFICIENT, False),                       # after adoption: adoption decides
    (LISTFILE_SUFFICIENT.replace("sufficient", "required") + ADOPT, False),
    (LISTFILE_SUFFICIENT, False),                                       # no pam_slurm_adopt at all
    (LISTFILE_SUFFICIENT.replace(ALLOW, "/etc/other") + ADOPT, False),  # another list
])
def test_under_listfile_the_allow_file_must_not_skip_adoption(tmp_path, sshd, problem):
    lines, _ = stack(tmp_path, sshd)
    problems, _ = pam.judge(lines, "listfile", ALLOW, ["root"])
    skips = [p for p in problems if "skips adoption" in p]  # (whether the allow file gates: the tests below)
    assert bool(skips) is problem, problems
    if problem:
        assert ALLOW in skips[0]


def test_under_adopt_a_stack_without_pam_slurm_adopt_is_a_problem(tmp_path):
    lines, _ = stack(tmp_path, "@include common-account\n")
    problems, _ = pam.judge(lines, "adopt", ALLOW, ["root"])
    assert problems and "no pam_slurm_adopt" in problems[0]


def test_under_adopt_listed_operators_must_be_admitted_before_it(tmp_path):
    ops = operators_file(tmp_path, ["je.kim", "s.shin"])
    admit = f"account sufficient pam_listfile.so item=user sense=allow onerr=fail file={ops}\n"
    lines, _ = stack(tmp_path, admit + ADOPT)
    assert pam.judge(lines, "adopt", ALLOW, ["root", "je.kim", "s.shin"]) == ([], [])
    # one missing from the list: named
    problems, _ = pam.judge(lines, "adopt", ALLOW, ["root", "je.kim", "opal"])
    assert len(problems) == 1 and "opal" in problems[0] and "je.kim" not in problems[0], problems
    # pam_listfile refuses a list others can write, or a symlink (it lstats): nobody is admitted
    for bad in ("writable", "symlink"):
        if bad == "writable":
            os.chmod(ops, 0o666)
        else:
            os.chmod(ops, 0o644)
            os.rename(ops, tmp_path / "real")
            ops.symlink_to(tmp_path / "real")
        problems, _ = pam.judge(lines, "adopt", ALLOW, ["je.kim"])
        assert problems and "je.kim" in problems[0], (bad, problems)
    # after pam_slurm_adopt it admits nobody in time
    ops.unlink()
    operators_file(tmp_path, ["je.kim"])
    lines, _ = stack(tmp_path, ADOPT + "\n" + admit)
    problems, _ = pam.judge(lines, "adopt", ALLOW, ["je.kim"])
    assert problems and "je.kim" in problems[0]


def test_root_is_pam_slurm_adopts_own_exception_unless_ignore_root_is_off(tmp_path):
    lines, _ = stack(tmp_path, ADOPT)
    assert pam.judge(lines, "adopt", ALLOW, ["root"]) == ([], [])
    lines, _ = stack(tmp_path, ADOPT + " ignore_root=0")
    problems, _ = pam.judge(lines, "adopt", ALLOW, ["root"])
    assert problems and "root" in problems[0]


def test_a_sufficient_line_it_cannot_read_is_a_note_not_a_verdict(tmp_path):
    lines, _ = stack(tmp_path, "account sufficient pam_access.so\n" + ADOPT)
    problems, notes = pam.judge(lines, "adopt", ALLOW, ["root", "je.kim"])
    assert problems == [] and len(notes) == 2, notes
    assert "admits whom it accepts without adopting them" in notes[0]
    assert "je.kim" in notes[1] and "cannot tell" in notes[1]


def test_pam_slurm_adopts_testing_defaults_are_noted(tmp_path):
    lines, _ = stack(tmp_path, "account required pam_slurm_adopt.so action_adopt_failure=deny\n")
    problems, notes = pam.judge(lines, "adopt", ALLOW, ["root"])
    assert problems == [] and len(notes) == 1 and "action_generic_failure is unset" in notes[0], notes


# -- the lines epilog.pam lays down -----------------------------------------------
DEBIAN_SSHD = ("# PAM configuration for the Secure Shell service\n@include common-auth\n"
               "account    required     pam_nologin.so\n@include common-account\n"
               "session [success=ok ignore=ignore module_unknown=ignore default=bad] pam_selinux.so close\n"
               "@include common-session\n@include common-password\n")
BLOCK = pam.block("/etc/security/slurm-operators", "/lib/security/pam_slurm_adopt.so")


def test_the_block_goes_after_the_last_account_line_and_comes_out_again_byte_for_byte():
    placed = pam.place(DEBIAN_SSHD, BLOCK)
    lines = placed.split("\n")
    at = lines.index("@include common-account")
    assert lines[at + 1:at + 5] == BLOCK and lines[at + 5].startswith("session")
    assert pam.place(placed, BLOCK) == placed, "placing again changes nothing"
    assert pam.unplace(placed) == DEBIAN_SSHD
    moved = pam.place(placed, pam.block("/etc/security/ops", "/lib/security/pam_slurm_adopt.so"))
    assert moved.count(pam.BEGIN) == 1 and "file=/etc/security/ops" in moved


def test_the_placed_stack_admits_the_operators_and_adopts_everyone_else(tmp_path):
    (tmp_path / "common-account").write_text(DEBIAN_COMMON)
    for name in ("common-auth", "common-session", "common-password"):
        (tmp_path / name).write_text("")
    lines, problems = pam.account_stack("sshd", pam_dir=str(tmp_path), text=pam.place(DEBIAN_SSHD, BLOCK))
    assert problems == [] and [line.module for line in lines][-2:] == ["pam_listfile", "pam_slurm_adopt"]
    ops = ["root", "opal"]
    assert pam.judge(lines, "adopt", ALLOW, ops, lists={"/etc/security/slurm-operators": ops}) == ([], [])
    judged, _ = pam.judge(lines, "adopt", ALLOW, [*ops, "je.kim"], lists={"/etc/security/slurm-operators": ops})
    assert judged and "je.kim" in judged[0]


@pytest.mark.parametrize("text, why", [
    ("auth required pam_env.so\n", "no account line"),
    (DEBIAN_SSHD + "account required pam_slurm_adopt.so\n", "pam_slurm_adopt line of its own"),
    (DEBIAN_SSHD + "account required /usr/lib64/security/pam_slurm_adopt.so \\\n  action_no_jobs=deny\n",
     "pam_slurm_adopt line of its own"),
    (pam.BEGIN + "\n" + DEBIAN_SSHD, "not one whole block"),
    (DEBIAN_SSHD + pam.END + "\n" + pam.BEGIN + "\n", "not one whole block"),
    ("\n".join(BLOCK * 2) + "\n" + DEBIAN_SSHD, "not one whole block"),
])
def test_a_file_that_cannot_take_the_block_safely_is_refused(text, why):
    with pytest.raises(pam.PlaceError, match=why):
        pam.place(text, BLOCK)


def test_a_continued_account_line_is_not_split():
    text = "account required pam_access.so \\\n  accessfile=/etc/x\nsession required pam_unix.so\n"
    assert pam.place(text, BLOCK).split("\n")[2:6] == BLOCK


def test_adoption_says_whose_sessions_pam_slurm_adopt_takes_into_the_job(tmp_path):
    ops = operators_file(tmp_path, ["opal"], mode=0o600)
    listfile = f"account sufficient pam_listfile.so item=user sense=allow onerr=fail file={ops}\n"
    lines, _ = stack(tmp_path, "@include common-account\n" + listfile + ADOPT + "\n")
    assert pam.adoption(lines, "opal")[0] is False and "admitted before" in pam.adoption(lines, "opal")[1]
    assert pam.adoption(lines, "alice")[0] is True
    assert pam.adoption(lines, "root")[0] is False
    rootless, _ = stack(tmp_path, ADOPT + " ignore_root=0\n")
    assert pam.adoption(rootless, "root")[0] is True
    unreadable, _ = stack(tmp_path, "account sufficient pam_access.so\n" + ADOPT + "\n")
    assert pam.adoption(unreadable, "opal")[0] is None
    none, _ = stack(tmp_path, "@include common-account\n")
    assert pam.adoption(none, "alice")[0] is False



@pytest.mark.parametrize("before, bypass", [
    # RHEL's authselect password-auth: every local account skips adoption
    ("account required pam_unix.so\naccount sufficient pam_localuser.so\n"
     "account sufficient pam_usertype.so issystem\n", True),
    ("account [default=done] pam_access.so\n", True),
    ("ACCOUNT SUFFICIENT pam_access.so\n", True),
    ("account [success=2 default=ignore] pam_access.so\naccount required pam_deny.so\n", True),
    ("account [success=1 default=ignore] pam_unix.so\naccount requisite pam_deny.so\n"
     "account required pam_permit.so\n", False),
    ("account Substack more\n", False),
    ("account required pam_unix.so\n", False),
])
def test_lines_that_admit_a_login_past_pam_slurm_adopt_are_found(tmp_path, before, bypass):
    lines, problems = stack(tmp_path, before + ADOPT + "\n", more="account sufficient pam_permit.so\n")
    assert problems == []
    assert bool(pam.bypasses(lines)) == bypass, pam.bypasses(lines)
    assert (pam.adoption(lines, "alice")[0] is not True) == bypass


def test_a_continued_last_account_line_ending_on_a_blank_line_is_refused():
    with pytest.raises(pam.PlaceError, match="continued"):
        pam.place("account required pam_access.so \\\n\nsession required pam_unix.so\n", BLOCK)


@pytest.mark.parametrize("kind", ["fifo", "big", "dir"])
def test_a_pam_file_that_is_no_small_regular_file_is_named_not_read(tmp_path, kind):
    path = tmp_path / "sshd"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "big":
        path.write_text("#" * (pam.MAX_BYTES + 1))
    else:
        path.mkdir()
    lines, problems = pam.account_stack("sshd", pam_dir=str(tmp_path))
    assert lines == [] and len(problems) == 1 and "cannot be read" in problems[0]


# -- under listfile: the allow file must gate every login ------------------------
GATE = f"account required pam_listfile.so item=user sense=allow onerr=fail file={ALLOW}"


def codes(problems):
    return [p[:p.index("]") + 1] for p in problems if p.startswith("[")]


@pytest.mark.parametrize("sshd", [
    "@include common-account\n" + GATE + "\n",                                  # the line the docs show, last
    GATE + "\n@include common-account\n",                                       # or first: it gates all the same
    "@include common-account\n" + GATE.replace("required", "requisite") + "\n",
    "@include common-account\n" + GATE.replace("required", "[success=ok default=bad]") + "\n",
    "@include common-account\n" + GATE.replace(" onerr=fail", "") + "\n",       # onerr=fail is pam_listfile's default
    "account substack more\n",                                                 # a failure in a substack fails the stack
    # a jump of 1 over a substack (counted as one line) lands on the gate
    "account [success=1 default=ignore] pam_access.so\naccount substack two\n" + GATE + "\n",
    # a success that ends a substack ends only the substack
    "account substack done\n" + GATE + "\n",
])
def test_under_listfile_a_line_that_refuses_whom_the_allow_file_does_not_list_passes(tmp_path, sshd):
    lines, problems = stack(tmp_path, sshd, more=GATE + "\n", two="account required pam_unix.so\n" * 2,
                            done="account sufficient pam_permit.so\n")
    assert problems == []
    assert pam.judge(lines, "listfile", ALLOW, ["root"])[0] == []


@pytest.mark.parametrize("sshd, code, words", [
    ("@include common-account\n", "[pam-listfile-missing]", "no account line"),
    ("@include common-account\n" + GATE.replace(ALLOW, "/etc/other") + "\n", "[pam-listfile-missing]",
     "file=/etc/other"),
    ("@include common-account\n" + GATE.replace("sense=allow", "sense=deny") + "\n", "[pam-listfile-missing]",
     "sense=deny"),
    ("@include common-account\n" + GATE.replace("item=user", "item=ruser") + "\n", "[pam-listfile-missing]",
     "item=ruser"),
    ("@include common-account\n" + GATE.replace("required", "sufficient") + "\n", "[pam-listfile-not-gating]",
     "its control (sufficient) lets a login the file does not list go on"),
    ("@include common-account\n" + GATE.replace("required", "optional") + "\n", "[pam-listfile-not-gating]",
     "(optional)"),
    ("@include common-account\n" + GATE.replace("required", "[success=ok default=ignore]") + "\n",
     "[pam-listfile-not-gating]", "lets a login the file does not list go on"),
    ("@include common-account\n" + GATE.replace("onerr=fail", "onerr=succeed") + "\n", "[pam-listfile-not-gating]",
     "onerr=succeed admits every login while the file is missing"),
    ("@include common-account\n" + GATE.replace("required", "[service_err=ignore default=bad]") + "\n",
     "[pam-listfile-not-gating]", "lets every login go on while the file is missing"),
    ("@include common-account\n" + GATE + " apply=@staff\n", "[pam-listfile-not-gating]", "apply=@staff"),
    # RHEL's authselect stacks: every local account ends the stack before the gate
    ("account required pam_unix.so\naccount sufficient pam_localuser.so\n" + GATE + "\n",
     "[pam-listfile-bypassed]", "pam_localuser"),
    ("account [success=2 default=ignore] pam_access.so\naccount required pam_unix.so\n" + GATE + "\n",
     "[pam-listfile-bypassed]", "pam_access"),
    ("account [default=done] pam_unix.so\n" + GATE + "\n", "[pam-listfile-bypassed]", "pam_unix"),
    # a success inside the substack that holds the gate skips the rest of it
    ("account substack both\n", "[pam-listfile-bypassed]", "pam_permit"),
])
def test_under_listfile_a_stack_that_does_not_gate_by_the_allow_file_fails_with_its_code(tmp_path, sshd, code, words):
    lines, problems = stack(tmp_path, sshd, both="account sufficient pam_permit.so\n" + GATE + "\n")
    assert problems == []
    judged, _ = pam.judge(lines, "listfile", ALLOW, ["root"])
    assert codes(judged) == [code] and words in judged[0], judged
    # each says how to fix it: the exact line, or the pillar key
    if code != "[pam-listfile-bypassed]":
        assert pam.ALLOW_LINE % ALLOW in judged[0] and "epilog:pam_manage: true" in judged[0], judged[0]
    # under none nothing is asked of the stack, and under adopt not this
    assert pam.judge(lines, "none", ALLOW, ["root"]) == ([], [])
    assert not [p for p in pam.judge(lines, "adopt", ALLOW, ["root"])[0] if "pam-listfile" in p]


def test_under_listfile_a_list_before_the_gate_may_admit_the_operators_and_no_one_else(tmp_path):
    ops = operators_file(tmp_path, ["root", "opal"], mode=0o600)
    admit = f"account sufficient pam_listfile.so item=user sense=allow onerr=fail file={ops}\n"
    lines, _ = stack(tmp_path, "@include common-account\n" + admit + GATE + "\n")
    assert pam.judge(lines, "listfile", ALLOW, ["root", "opal"])[0] == []
    # opal, not an operator now, skips the allow file: part 39's revoke would not reach her
    judged, _ = pam.judge(lines, "listfile", ALLOW, ["root"])
    assert codes(judged) == ["[pam-listfile-bypassed]"] and "admits opal (not in epilog:localusers)" in judged[0]
    # as the list will be (the state's), not as it is
    judged, _ = pam.judge(lines, "listfile", ALLOW, ["root"], lists={str(ops): ["root"]})
    assert judged == []
    # a list that cannot be read here: a note, not a verdict
    ops.write_bytes(b"root\n\xff\n")
    judged, notes = pam.judge(lines, "listfile", ALLOW, ["root"])
    assert judged == [] and any("cannot tell" in n for n in notes), notes


def test_operators_the_stack_would_refuse_are_found(tmp_path):
    allow = tmp_path / "allow"
    ops = operators_file(tmp_path, ["root", "opal"], mode=0o600)
    admit = f"account sufficient pam_listfile.so item=user sense=allow onerr=fail file={ops}\n"
    gate = pam.ALLOW_LINE % allow
    alone, _ = stack(tmp_path, "@include common-account\n" + gate + "\n")
    # the allow file missing: pam_listfile fails (onerr=fail), and refuses everyone
    assert sorted(pam.refused(alone, ["root", "opal"])) == ["opal", "root"]
    allow.write_text("opal\nalice\n")
    assert sorted(pam.refused(alone, ["root", "opal"])) == ["root"]
    # the operators' list first: they are in, whatever the allow file says
    allow.unlink()
    first, _ = stack(tmp_path, "@include common-account\n" + admit + gate + "\n")
    assert pam.refused(first, ["root", "opal"]) == {}
    # a gate of the site's before the operators' list shuts them out: sufficient does not undo a failure
    after, _ = stack(tmp_path, "@include common-account\n" + gate + "\n" + admit)
    assert sorted(pam.refused(after, ["root", "opal"])) == ["opal", "root"]
    judged, notes = pam.judge(after, "listfile", str(allow), ["root", "opal"])
    assert judged == [] and any("listed operators opal, root: their ssh logins are refused" in n for n in notes), notes
    # a line before whose success this cannot read (every local account, here): it cannot tell
    unknown, _ = stack(tmp_path, "account sufficient pam_localuser.so\n" + gate + "\n")
    assert pam.refused(unknown, ["root", "opal"]) == {}


def test_the_listfile_block_goes_after_the_last_account_line_and_comes_out_again(tmp_path):
    ops = "/etc/security/slurm-operators"
    block = pam.block(ops, allow_file=ALLOW)
    assert block[1:3] == [f"account sufficient pam_listfile.so item=user sense=allow onerr=fail file={ops}",
                          f"account required pam_listfile.so item=user sense=allow onerr=fail file={ALLOW}"]
    placed = pam.place(DEBIAN_SSHD, block)
    lines = placed.split("\n")
    at = lines.index("@include common-account")
    assert lines[at + 1:at + 5] == block and pam.unplace(placed) == DEBIAN_SSHD
    assert pam.place(placed, block) == placed
    # from adopt to listfile and back: one block, replaced
    adopt = pam.place(placed, BLOCK)
    assert adopt.count(pam.BEGIN) == 1 and "pam_slurm_adopt" in adopt and pam.place(adopt, block) == placed
    # a site's own pam_slurm_adopt line stays the site's: listfile's block lays down no second one
    own = DEBIAN_SSHD + "account required pam_slurm_adopt.so\n"
    assert pam.unplace(pam.place(own, block)) == own
    with pytest.raises(ValueError):
        pam.block(ops)
    # the stack it makes: the operators admitted, everyone else gated by the allow file
    for name in ("common-auth", "common-session", "common-password"):
        (tmp_path / name).write_text("")
    (tmp_path / "common-account").write_text(DEBIAN_COMMON)
    lines, problems = pam.account_stack("sshd", pam_dir=str(tmp_path), text=placed)
    assert problems == [] and [line.module for line in lines][-2:] == ["pam_listfile", "pam_listfile"]
    operators = ["root", "opal"]
    assert pam.judge(lines, "listfile", ALLOW, operators, lists={ops: operators}) == ([], [])
    assert pam.refused(lines, operators, lists={ops: operators}) == {}
