"""Which of a site's parts the chain runs as root (runner.admit_site_part),
decided in one place: the runner runs what it admits, and epilog.verify
names what it does not, in the same words. Pure: facts in, an admission
out; then the reader (runner.site_parts) and verify's check on a directory
of real files."""
import os
import stat
import types

import pytest

from tests.helpers import LAYOUT, REPO, load_file
from tests.unit.conftest import node

runner = node("runner")
system = node("system")

SITE = "/etc/slurm/epilog.d"
TAKEN = ["39-lastuserjob-ssh", "40-lastuserjob-processes", "41-lastuserjob-ssh"]


def lstat(kind=stat.S_IFREG, mode=0o755, uid=0):
    """An lstat result of a file of KIND, MODE and owner UID."""
    return os.stat_result((kind | mode, 1, 1, 1, uid, 0, 10, 0, 0, 0))


ROWS = [
    # (id, name, lstat, runnable, directory only root's) -> (runs, kind, words in why)
    ("roots-alone", "10-site", lstat(), True, True, (True, None, None)),
    ("roots-alone-no-group-x", "10-site", lstat(mode=0o700), True, True, (True, None, None)),
    ("dashes-and-underscores", "99-a_b-C9", lstat(), True, True, (True, None, None)),
    ("symlink-to-roots", "10-site", lstat(stat.S_IFLNK, 0o777), True, True,
     (False, "symlink", f"{SITE}/10-site is a symlink: the chain runs only regular files of root's as site parts")),
    ("symlink-in-a-bad-directory", "10-site", lstat(stat.S_IFLNK, 0o777), True, False, (False, "symlink", "symlink")),
    ("group-writable", "11-site", lstat(mode=0o775), True, True,
     (False, "owner", f"{SITE}/11-site is owned by uid 0 or writable by group or others (mode 0775): that account "
                      "could run code as root at every job end")),
    ("others-writable", "11-site", lstat(mode=0o757), True, True, (False, "owner", "(mode 0757)")),
    ("slurms", "12-site", lstat(uid=64030), True, True, (False, "owner", "owned by uid 64030")),
    ("slurms-in-a-bad-directory", "12-site", lstat(uid=64030), True, False, (False, "owner", "uid 64030")),
    ("a-fifo", "12-site", lstat(stat.S_IFIFO), True, True, (False, "owner", "")),
    ("roots-in-a-bad-directory", "10-site", lstat(), True, False,
     (False, "directory", f"{SITE} is not a directory only root can write")),
    ("not-executable", "10-site", lstat(mode=0o644), False, True, None),
    ("dangling-symlink", "10-site", lstat(stat.S_IFLNK, 0o777), False, True, None),
    ("gone", "10-site", None, True, True, None),
    ("the-formulas-name", "40-lastuserjob-processes", lstat(mode=0o777), True, True, None),
    ("a-retired-name", "41-lastuserjob-ssh", lstat(uid=64030), True, True, None),
    ("package-leftover", "10-site.dpkg-old", lstat(mode=0o777), True, True, None),
    ("editor-leftover", "10-site~", lstat(mode=0o777), True, True, None),
    ("one-digit", "1-site", lstat(mode=0o777), True, True, None),
    ("other-scripts-digits", "\u0661\u0662-site", lstat(mode=0o777), True, True, None),
    ("no-name-after-the-dash", "10-", lstat(mode=0o777), True, True, None),
    ("no-dash", "10site", lstat(mode=0o777), True, True, None),
    ("a-dot", "10-site.sh", lstat(mode=0o777), True, True, None),
]


@pytest.mark.parametrize("row", ROWS, ids=[row[0] for row in ROWS])
def test_which_site_parts_run_as_root_and_why_not(row):
    _, name, st, runnable, dir_ok, want = row
    got = runner.admit_site_part(f"{SITE}/{name}", st, runnable, dir_ok, TAKEN)
    if want is None:
        assert got is None, got
        return
    runs, kind, words = want
    assert (got.runs, got.kind) == (runs, kind), got
    assert got.why is None if runs else words in got.why, got


def part(directory, name, mode=0o755, target=None):
    path = directory / name
    if target is not None:
        path.symlink_to(target)
        return path
    path.write_text("#!/bin/sh\n")
    os.chmod(path, mode)
    return path


@pytest.fixture
def site(tmp_path):
    """A slurm_config_dir with the site's epilog.d and prolog.d: in each a
    file the chain would run if it were root's alone, one anybody can write,
    a symlink to the first, and files it takes for no part."""
    for stage in ("epilog", "prolog"):
        directory = tmp_path / f"{stage}.d"
        directory.mkdir()
        part(directory, "10-site")
        part(directory, "11-open", 0o777)
        part(directory, "12-link", target=directory / "10-site")
        part(directory, "13-plain", 0o644)
        part(directory, "14-dangling", target=directory / "none")
        part(directory, "15-open.bak", 0o777)
    part(tmp_path / "epilog.d", "40-lastuserjob-processes", 0o777)
    part(tmp_path / "prolog.d", "50-exclusive-ssh", 0o777)
    return tmp_path


def test_the_reader_admits_each_file_the_chain_takes_for_a_part(site):
    """runner.site_parts gives each file of a site directory the chain
    takes for a part (none of the formula's names, no leftover, no file it
    could not run) with its admission, judged on the real files."""
    directory = site / "epilog.d"
    found = {name: admitted for name, _, admitted in runner.site_parts(str(directory), TAKEN, system.Trust())}
    assert sorted(found) == ["10-site", "11-open", "12-link"]
    mine = os.getuid() == 0 and system.Trust().root_only(str(directory))
    assert found["10-site"].runs is mine and found["10-site"].kind in ((None,) if mine else ("owner", "directory"))
    assert found["11-open"].kind == "owner" and "(mode 0777)" in found["11-open"].why
    assert found["12-link"].kind == "symlink" and found["12-link"].why.startswith(f"{directory}/12-link is a symlink")


def test_verify_names_each_site_part_the_runner_skips_in_the_runners_words(site):
    """verify's check asks the runner's rule of each stage's site directory
    and says what the runner would log: the part's own defects, each with
    its code; a directory another account can write is named by its own
    checks. The formula's names in a site directory are no site's parts."""
    module = load_file(REPO / "_modules/epilog.py", "epilog_module_site_parts")
    checks, chain = module.checks, module.common._Chain(str(site), LAYOUT)
    assert chain.formula_names["epilog"][:4] == ["39-lastuserjob-ssh", "40-lastuserjob-processes",
                                                 "42-lastuserjob-cleanup", "45-stale-x-display"]
    assert "50-exclusive-ssh" in chain.formula_names["prolog"] and "41-lastuserjob-ssh" in chain.formula_names["epilog"]
    V = types.SimpleNamespace(problems=[], chain=chain)
    checks._site_parts(V)
    want = []
    for stage in ("epilog", "prolog"):
        directory = str(site / f"{stage}.d")
        said = {name: admitted for name, _, admitted in runner.site_parts(directory, chain.formula_names[stage],
                                                                          system.Trust())}
        want += [f"[site-part-not-root-only] {said['11-open'].why}; the runner skips it",
                 f"[site-part-symlink] {said['12-link'].why}; the runner skips it"]
        if said["10-site"].kind == "owner":  # an account other than root made it
            want.insert(-2, f"[site-part-not-root-only] {said['10-site'].why}; the runner skips it")
    assert V.problems == want


def test_verifys_chain_budget_counts_the_parts_the_runner_would_run(site):
    """[chain-worst-case-too-long] counts the parts the runner runs, by its
    rules: the current release's executable parts of layout.yaml's names
    that the settings leave in (registry.not_run), and the site's parts it
    admits (runner.site_parts); not a part turned off, one ssh_access
    leaves out, a file of another name in the release, a site file it
    skips or takes for no part, nor the formula's name in the site's
    directory."""
    module = load_file(REPO / "_modules/epilog.py", "epilog_module_chain_budget")
    checks, chain = module.checks, module.common._Chain(str(site), LAYOUT)
    budget = node("budget")
    own = site / chain.current / chain.parts_dirs["epilog"]
    own.mkdir(parents=True)
    for name in chain.own_names["epilog"]:
        part(own, name)
    part(own, "10-not-the-formulas")
    part(own, "45-stale-x-display.dpkg-old")
    settings = {"chain_timeout": 1, "part_timeout": 20, "squeue_timeout": 5, "ssh_access": "adopt",
                "parts": {"42-lastuserjob-cleanup": False}}
    # as the runner admits the site's 10-site: root's alone, in a directory only root can write
    mine = os.getuid() == 0 and system.Trust().root_only(str(site / "epilog.d"))
    runs = ["40-lastuserjob-processes", "45-stale-x-display"] + (["10-site"] if mine else [])
    assert checks._chain_parts(settings, chain) == sorted(runs)
    problems = checks._chain_time_problems(settings, chain, {})
    assert problems == [f"[chain-worst-case-too-long] the epilog chain's worst case is "
                        f"{budget.worst_case(len(runs), 20, 5)} s ({budget.shown(len(runs), 20, 5)}), above "
                        "epilog:chain_timeout 1: the last parts would be cut off"]
    # a chain_timeout at the worst case of the parts that run is enough, however many files lie there
    settings["chain_timeout"] = budget.worst_case(len(runs), 20, 5)
    assert checks._chain_time_problems(settings, chain, {}) == []
    del settings["ssh_access"], settings["parts"]
    assert checks._chain_parts(settings, chain) == sorted([*runs, "39-lastuserjob-ssh", "42-lastuserjob-cleanup"])
    os.chmod(own / "39-lastuserjob-ssh", 0o644)
    assert "39-lastuserjob-ssh" not in checks._chain_parts(settings, chain)
