"""The execution module loads only what a call uses: loading it (Salt does
for a call of any of its functions) imports the node program's and the
rooms' __init__.py alone; a room, or a module of the node program, is
imported at its first use, the rooms it imports with it and no other. A
module loaded anew (verify's state run loads it inside verify's call)
leaves an earlier load's later imports its own. Pure: the module loaded
without Salt, as the other unit tests load it."""
import sys

import pytest

from tests.helpers import REPO, load_file

NODE, FRONT = "_epilog_node_synced", "_epilog_front_synced"


def loaded(package):
    """The modules of PACKAGE now in sys.modules."""
    return {key.split(".", 1)[1] for key in sys.modules if key.startswith(package + ".")}


def test_loading_the_module_imports_no_room_and_no_module_of_the_node_program():
    epilog = load_file(REPO / "_modules/epilog.py", "epilog_module_lazy_load")
    assert epilog.__virtual__() == "epilog"
    assert sys.modules[NODE] is epilog._node and sys.modules[FRONT] is epilog._front
    assert loaded(NODE) == set() and loaded(FRONT) == set()


def test_a_room_at_its_first_use_brings_the_rooms_it_imports_and_no_other():
    epilog = load_file(REPO / "_modules/epilog.py", "epilog_module_lazy_room")
    between = epilog.between
    assert between is epilog._front.between is sys.modules[f"{FRONT}.between"]
    # the sweep's room: common beneath it; the release's and the slurmds'
    # rooms only once a look runs the release's program
    assert loaded(FRONT) == {"between", "common"}
    assert loaded(NODE) == {"system"}
    assert epilog.slurmconf.prolog_flags("contain") == {"alloc", "contain"}
    assert loaded(FRONT) == {"between", "common", "slurmconf"}


def test_every_room_and_module_of_the_node_program_loads_at_its_first_use():
    epilog = load_file(REPO / "_modules/epilog.py", "epilog_module_lazy_all")
    for room in epilog.FRONT_ROOMS:
        assert getattr(epilog, room) is sys.modules[f"{FRONT}.{room}"], room
    for name in epilog.PACKAGE_MODULES + epilog.PACKAGE_LATER:
        assert getattr(epilog._node, name) is sys.modules[f"{NODE}.{name}"], name
    assert loaded(FRONT) == set(epilog.FRONT_ROOMS)
    assert set(epilog.PACKAGE_MODULES + epilog.PACKAGE_LATER) <= loaded(NODE)


@pytest.mark.parametrize("owner, name", [("module", "nothing"), ("module", "_front_rooms"), ("front", "sweep"),
                                         ("node", "nothing"), ("node", "strays")])
def test_a_name_that_is_no_room_and_no_module_it_loads_is_no_attribute(owner, name):
    epilog = load_file(REPO / "_modules/epilog.py", "epilog_module_lazy_names")
    target = {"module": epilog, "front": epilog._front, "node": epilog._node}[owner]
    with pytest.raises(AttributeError):
        getattr(target, name)
    assert loaded(FRONT) == set()


def test_a_load_inside_another_leaves_the_earlier_loads_imports_its_own():
    outer = load_file(REPO / "_modules/epilog.py", "epilog_module_lazy_outer")
    first = outer.common
    inner = load_file(REPO / "_modules/epilog.py", "epilog_module_lazy_inner")
    assert sys.modules[FRONT] is inner._front and loaded(FRONT) == set()
    # the outer load's rooms and node modules imported after the inner load:
    # its own, each importing its own, and the inner load's left in place
    checks, runner = outer.checks, outer._node.runner
    assert checks._node is outer._node and checks.SCHEDULE_ENTRIES is first.SCHEDULE_ENTRIES
    assert runner.system is outer._node.system and runner.parts is outer._node.parts
    assert checks.__name__ == f"{FRONT}.checks"
    assert sys.modules[FRONT] is inner._front and sys.modules[NODE] is inner._node
    assert loaded(FRONT) == set() and loaded(NODE) == set()
    assert inner.checks is not checks and inner.checks._node is inner._node
    assert inner._node.runner is not runner


def test_every_module_of_the_node_program_is_one_the_front_may_load_and_every_use_of_one_names_what_it_has():
    """The lazy package answers only the modules it lists: a module of the
    node program left out of PACKAGE_MODULES and PACKAGE_LATER is no
    attribute of the package, so a room's _node.<module> would fail at the
    call (verify's check of the socket diagnostics did, once sweep.py was
    split). And every _node.<module>.<name> the rooms and the module write
    names something that module has (a name moved to another module is
    caught here, not on a node)."""
    import ast
    epilog = load_file(REPO / "_modules/epilog.py", "epilog_module_lazy_names")
    files = {path.stem for path in (REPO / "salt/_modules/epilog_node").glob("*.py")} - {"__init__"}
    listed = set(epilog.PACKAGE_MODULES + epilog.PACKAGE_LATER)
    missing = []
    for source in [REPO / "salt/_modules/epilog.py", *sorted((REPO / "salt/_modules/epilog_front").glob("*.py"))]:
        for found in ast.walk(ast.parse(source.read_text())):
            if (isinstance(found, ast.Attribute) and isinstance(found.value, ast.Attribute)
                    and isinstance(found.value.value, ast.Name) and found.value.value.id == "_node"
                    and found.value.attr in files):
                if found.value.attr not in listed:
                    missing.append(f"{source.name}:{found.lineno} _node.{found.value.attr}: not in PACKAGE_LATER")
                    continue
                module = getattr(epilog._node, found.value.attr)
                if not hasattr(module, found.attr):
                    missing.append(f"{source.name}:{found.lineno} _node.{found.value.attr}.{found.attr}")
    assert not missing, missing
