"""layout.yaml names what the states lay down, once: the release tool, which
runs without Salt (a rollback runs it on its own), holds the releases'
directory and the current release's name as constants of its own, and this
keeps them equal to layout.yaml's."""
import importlib.util

from tests.helpers import LAYOUT, REPO


def load_release_tool():
    spec = importlib.util.spec_from_file_location("release_tool", REPO / "salt/epilog/files" /
                                                  LAYOUT["releases"]["tool"]["source"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_release_tool_names_the_releases_as_layout_does():
    tool = load_release_tool()
    assert tool.RELEASES == LAYOUT["releases"]["dir"]
    assert tool.CURRENT == LAYOUT["releases"]["current"]

