"""epilog.verify's answer, as a fleet reads it: every problem and warning
opens with a code, each code names one check and is in docs/releases.md's
table; a message without one is marked; a minion busy with another state
run is told by Salt's own words, as both Salt lines word them. Pure: the
sources and the docs read as text, the module loaded without Salt."""
import ast
import inspect
import re

import pytest

from tests.helpers import REPO, load_file, require

epilog = load_file(REPO / "_modules/epilog.py", "epilog_module_verify_answer")

# What verify and the node program it passes problems on from say: the
# module, and every file of the node program (release.py's status, pam.py's
# judge). A code opens a string: "[lowercase-kebab] ...".
SOURCES = [REPO / "salt/_modules/epilog.py", *sorted((REPO / "salt/_modules/epilog_front").glob("*.py")),
           *sorted((REPO / "salt/_modules/epilog_node").glob("*.py"))]
OPENING = re.compile(r"""(?<=["'])\[([^\]\s"']+)\] """)
CODE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*\Z")
ROW = re.compile(r"^\| `\[([^\]]+)\]` \| (problem|warning|problem or warning) \| .+ \|$")


def codes_in_sources():
    """{code: [file:line, ...]}: where each code is written."""
    found = {}
    for path in SOURCES:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for code in OPENING.findall(line):
                found.setdefault(code, []).append(f"{path.relative_to(REPO)}:{number}")
    return found


def codes_in_table():
    rows = [ROW.match(line) for line in (REPO / "docs/releases.md").read_text().splitlines()]
    return [row.group(1) for row in rows if row]


def test_every_code_is_lowercase_kebab():
    bad = {code: where for code, where in codes_in_sources().items() if not CODE.match(code)}
    assert not bad, bad


def test_each_code_is_written_in_one_place_so_no_two_checks_share_one():
    found = codes_in_sources()
    assert len(found) >= 60, sorted(found)
    shared = {code: where for code, where in found.items() if len(where) > 1}
    assert not shared, shared


def test_every_code_verify_can_give_is_in_the_table_once_and_the_table_has_no_other():
    table = codes_in_table()
    assert len(table) == len(set(table)), sorted(code for code in table if table.count(code) > 1)
    written = set(codes_in_sources())
    assert written - set(table) == set(), "codes missing from docs/releases.md's table"
    assert set(table) - written == set(), "codes in docs/releases.md's table that nothing gives"


@pytest.mark.parametrize("check, codes", epilog.checks.CHECKS, ids=[row[0].__name__ for row in epilog.checks.CHECKS])
def test_each_check_of_verifys_table_gives_the_codes_its_row_names(check, codes):
    """checks.CHECKS is what a reader scans for a check: each row names
    exactly the codes its function writes itself, and says what it checks."""
    assert sorted(set(OPENING.findall(inspect.getsource(check)))) == sorted(codes)
    assert check.__doc__


def test_a_message_without_a_code_is_marked_and_a_coded_one_kept():
    answer = epilog.checks._answer(["[release-drift] /x changed", "an old tool's sentence"], ["[slurmd-not-running] x"],
                            "0123456789ab", False, {"manifest": {"a": "b"}})
    assert answer == {"result": False, "release": "0123456789ab", "warnings": ["[slurmd-not-running] x"],
                      "problems": ["[release-drift] /x changed", "[uncoded] an old tool's sentence"]}
    assert epilog.checks._answer([], [], "0123456789ab", False, {})["result"] is True
    verbose = epilog.checks._answer([], [], "0123456789ab", True, {"manifest": {"a": "b"}, "info": []})
    assert verbose["manifest"] == {"a": "b"} and verbose["info"] == [] and verbose["result"] is True


def salt_running_words(venv):
    """The message salt/modules/state.py's running() gives for a state run
    that holds the minion, in the Salt of VENV, read from its source."""
    found = sorted((REPO / venv).glob("lib/python3*/site-packages/salt/modules/state.py"))
    require(found, f"{venv}'s Salt (bash .ci/setup)")
    tree = ast.parse(found[0].read_text())
    running = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "running")
    formats = [node.func.value.value for node in ast.walk(running)
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
               and isinstance(node.func.value, ast.Constant)]
    assert len(formats) == 1, formats
    return formats[0]


@pytest.mark.parametrize("venv", [".venv", ".venv-3006"])
def test_a_minion_held_by_another_state_run_is_told_by_salts_own_words(venv):
    words = salt_running_words(venv)
    # the arguments in running()'s order: the function, its pid, when it started, its jid
    ret = [words.format("state.highstate", 31337, "2026, Dec 05 10:00:00.123456", "20261205100000123456")]
    assert epilog.checks._held_by(ret) == ("20261205100000123456", 31337)
    assert epilog.checks._render_error(ret) == ("[minion-busy] another state run (jid 20261205100000123456, pid 31337) "
                                         "holds this minion; run verify again when it ends")


def test_a_state_that_does_not_render_is_not_taken_for_a_busy_minion():
    ret = ["Rendering SLS 'base:epilog.parts' failed: Jinja error: epilog:localusers[1] ('bad user') must not hold "
           "whitespace\n... the context ..."]
    assert epilog.checks._held_by(ret) is None
    assert epilog.checks._render_error(ret) == ("[state-not-rendering] the state epilog does not render: "
                                         "epilog:localusers[1] ('bad user') must not hold whitespace")
