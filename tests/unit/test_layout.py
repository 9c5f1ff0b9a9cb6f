"""layout.yaml names what the states lay down, once: the release tool, which
runs without Salt (a rollback runs it on its own), holds the releases'
directory and the current release's name as constants of its own, and this
keeps them equal to layout.yaml's."""
import importlib.util

from tests.helpers import LAYOUT, REPO


def load_release_tool():
    spec = importlib.util.spec_from_file_location("release_tool", REPO / "salt/_modules" /
                                                  LAYOUT["releases"]["tool"]["module"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_release_tool_names_the_releases_as_layout_does():
    tool = load_release_tool()
    assert tool.RELEASES == LAYOUT["releases"]["dir"]
    assert tool.CURRENT == LAYOUT["releases"]["current"]



def test_every_part_of_the_layout_has_an_action_and_every_action_a_part():
    """The runner runs a part of the formula's by its name: layout.yaml's
    parts and the node program's actions are the same names."""
    from tests.unit.conftest import node

    names = {script["path"].split("/")[-1] for script in LAYOUT["scripts"] if "/" in script["path"]}
    assert names == set(node("parts").ACTIONS)


def test_the_release_tool_imports_nothing_of_the_package():
    """release.py is laid down on its own beside the releases: it stands alone."""
    text = (REPO / "salt/_modules" / LAYOUT["releases"]["tool"]["module"]).read_text()
    assert "from ." not in text and "epilog_node" not in text.split('"""', 2)[2]
