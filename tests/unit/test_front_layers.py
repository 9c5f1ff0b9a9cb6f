"""The execution module's layers: epilog.py is a thin front over the Salt
side's rooms (salt/_modules/epilog_front/), which import only the rooms
below them, read no Salt dunder, and are in no release; the node program
imports none of them, and its system layer is its floor; no file of the
module is over 700 lines."""
import ast
import re

import pytest

from tests.helpers import LAYOUT, REPO

MODULES = REPO / "salt/_modules"
FRONT = MODULES / "epilog_front"
ROOMS = re.search(r"FRONT_ROOMS = \(([^)]*)\)", (MODULES / "epilog.py").read_text()).group(1)
ORDER = [name.strip().strip('"') for name in ROOMS.split(",") if name.strip()]


def imports(path):
    """The relative imports of PATH: [(module or None for the package, names)]."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def test_every_room_is_loaded_and_every_file_is_a_room():
    assert sorted(ORDER) == sorted(p.stem for p in FRONT.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("room", ORDER)
def test_a_room_imports_only_the_rooms_below_it(room):
    below = ORDER[:ORDER.index(room)]
    for module, names in imports(FRONT / f"{room}.py"):
        if module is None:
            assert set(names) <= {"NODE", "PACKAGE", "GRAINS_HOST"}, names
        else:
            assert module in below, f"{room} imports {module}, which is not below it ({below})"


@pytest.mark.parametrize("room", ORDER)
def test_a_room_reads_no_salt_dunder_and_never_the_front(room):
    text = (FRONT / f"{room}.py").read_text()
    tree = ast.parse(text)
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert not names & {"__salt__", "__opts__", "__grains__", "__pillar__", "__context__", "__utils__"}, room
    assert not [node for node in ast.walk(tree) if isinstance(node, ast.Import)
                and any(alias.name.split(".")[0] in ("epilog", "epilog_node") for alias in node.names)], room


def test_the_node_program_imports_no_room_and_no_release_holds_one():
    for path in (MODULES / "epilog_node").glob("*.py"):
        assert "epilog_front" not in path.read_text(), path
    assert LAYOUT["package"] == "epilog_node"
    assert "epilog_front" not in LAYOUT["release_directories"]


def test_the_node_programs_system_layer_is_its_floor():
    """system.py imports none of its siblings; cgroups.py (verify's reading
    of the cgroup layout) imports system.py alone, and no job end reaches it:
    no module of the node program imports it."""
    node = MODULES / "epilog_node"
    assert imports(node / "system.py") == []
    assert imports(node / "cgroups.py") == [(None, ["system"])]
    importers = [path.name for path in node.glob("*.py")
                 if any("cgroups" in names or module == "cgroups" for module, names in imports(path))]
    assert importers == []


def test_no_file_of_the_module_is_over_700_lines():
    files = [MODULES / "epilog.py", *FRONT.glob("*.py"), *(MODULES / "epilog_node").glob("*.py")]
    lines = {path.name: len(path.read_text().splitlines()) for path in files}
    assert {name: n for name, n in lines.items() if n > 700} == {}
