"""layout.yaml names what the states lay down, once: the release tool, which
runs without Salt (a rollback runs it on its own), holds the releases'
directory and the current release's name as constants of its own, and this
keeps them equal to layout.yaml's."""
import importlib.util

import yaml

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



def test_the_layouts_parts_are_the_registrys():
    """layout.yaml lays each of the formula's parts down under the name and
    in the stage the node program's registry gives it (part-NAME, at
    STAGE.d/NAME, from files/STAGE.d/NAME.jinja), in the same order, and no
    other: the two cannot drift."""
    from tests.unit.conftest import node

    registry = node("registry")
    laid = [script for script in LAYOUT["scripts"] if script["id"].startswith("part-")]
    assert [(script["id"], script["path"], script["source"], script["stage"]) for script in laid] == [
        (f"part-{part.name}", f"{part.stage}.d/{part.name}", f"{part.stage}.d/{part.name}.jinja", part.stage)
        for part in registry.PARTS]
    others = [script for script in LAYOUT["scripts"] if script not in laid]
    assert all("/" not in script["path"] for script in others), others
    assert all((REPO / "salt/epilog/files" / script["source"]).is_file() for script in laid)


def test_every_part_of_the_registry_has_an_action_and_a_switch():
    """The runner runs a part of the formula's by its name: each registry
    entry's action is a function of a module of the package, and each part
    has its switch in epilog:parts (defaults.yaml), and no other name."""
    from tests.unit.conftest import node

    registry, parts = node("registry"), node("parts")
    package = REPO / "salt/_modules" / LAYOUT["package"]
    for part in registry.PARTS:
        assert (package / f"{part.action[0]}.py").is_file(), part
        assert callable(parts.action(part.name)), part
        assert parts.action(part.name).__name__ == part.action[1], part
    defaults = yaml.safe_load((REPO / "salt/epilog/defaults.yaml").read_text())
    assert list(defaults["epilog"]["parts"]) == list(registry.NAMES)
    assert registry.NAMES == tuple(sorted(registry.NAMES)) and len(set(registry.NAMES)) == len(registry.NAMES)


def test_what_the_program_knows_of_a_part_is_derived_from_its_entry():
    """Each role of a part is read off its registry entry: the strays' kill
    runs the revoke, then the kill; the allow file's parts are the revoke
    and the grant, of two stages; the grant acts on nobody's things."""
    from tests.unit.conftest import node

    registry = node("registry")
    by = registry.BY_NAME
    assert registry.KILL_PARTS == (registry.REVOKE, registry.KILL_PART)
    assert by[registry.REVOKE].allow == "remove" and by[registry.GRANT].allow == "add"
    assert {by[registry.REVOKE].stage, by[registry.GRANT].stage} == {"epilog", "prolog"}
    assert set(registry.ALLOW_FILE_PARTS) == {registry.REVOKE, registry.GRANT}
    assert registry.GRANT not in registry.ACTING and registry.KILL_PART in registry.ENDS_WORKER
    assert set(registry.IN_PROCESS) == {registry.REVOKE, registry.KILL_PART, registry.GRANT}
    assert set(registry.DOES) == {part.name for part in registry.PARTS if part.stage == "epilog"}
    assert by[registry.IPC_PART].action == ("parts", "cleanup") and by[registry.SWEEP_PART].action == ("parts", "sweep")


def test_a_lastuserjob_part_is_one_by_its_name_the_formulas_or_a_sites():
    """registry.lastuserjob is the one rule: the formula's 39, 40 and 42,
    and a site's part named so, run only at the user's last job here; 45,
    the prolog's 50 and any other name do not; a record's part that is no
    name (an old or damaged record) is none."""
    from tests.unit.conftest import node

    registry = node("registry")
    assert [name for name in registry.NAMES if registry.lastuserjob(name)] == [
        "39-lastuserjob-ssh", "40-lastuserjob-processes", "42-lastuserjob-cleanup"]
    assert registry.lastuserjob("60-lastuserjob-scratch")
    assert not any(registry.lastuserjob(name) for name in ("60-site-lastuserjob", "lastuserjob-60", "60-x", "", None))


def test_the_release_tool_imports_nothing_of_the_package():
    """release.py is laid down on its own beside the releases: it stands alone."""
    text = (REPO / "salt/_modules" / LAYOUT["releases"]["tool"]["module"]).read_text()
    assert "from ." not in text and "epilog_node" not in text.split('"""', 2)[2]
