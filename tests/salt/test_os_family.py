"""The packages the node program needs are named per os_family
(osfamilymap.yaml): the state rendered with each family's grains (a minion
of its own, in-process), and an unknown family refused by name, with
nothing laid down."""
import pytest
import yaml

from tests.helpers import REPO, Chain
from tests.salt.conftest import Minion

OSFAMILYMAP = yaml.safe_load((REPO / "salt/epilog/osfamilymap.yaml").read_text())


def rendered_pkgs(data):
    chunk = data["epilog-parts-tools-pkg-installed"]["pkg"]
    return next(item["pkgs"] for item in chunk if isinstance(item, dict) and "pkgs" in item)


def family_minion(salt_factories, tmp_path, family):
    return Minion(salt_factories, tmp_path / f"family-{family.lower()}", grains={"os_family": family})


def show(minion, sls, pillar):
    """state.show_sls's data, or the render's errors (a list)."""
    return minion("state.show_sls", sls, pillar=pillar)


def sandbox(tmp_path):
    return Chain(tmp_path / "slurm", tmp_path / "localusers", tmp_path / "epilog.log", tmp_path / "spool")


@pytest.mark.parametrize("family,pkgs", [
    ("Debian", ["python3"]),
    ("RedHat", ["python3"]),
    ("Suse", ["python3"]),
])
def test_each_family_gets_its_own_package_names(salt_factories, tmp_path, family, pkgs):
    assert OSFAMILYMAP[family]["pkgs"] == pkgs
    data = show(family_minion(salt_factories, tmp_path, family), "epilog", sandbox(tmp_path).pillar())
    assert isinstance(data, dict), data
    assert rendered_pkgs(data) == pkgs, data["epilog-parts-tools-pkg-installed"]


def test_an_unknown_family_is_refused_by_name_and_nothing_is_laid_down(salt_factories, tmp_path):
    minion = family_minion(salt_factories, tmp_path, "Plan9")
    c = sandbox(tmp_path)
    data = show(minion, "epilog", c.pillar())
    applied = minion.apply(pillar=c.pillar())
    for said in ("\n".join(data) if isinstance(data, list) else str(data), "\n".join(applied.errors)):
        assert "the os_family grain ('Plan9') is not a family the epilog formula knows" in said, said
        assert "epilog:lookup:pkgs" in said
    assert not isinstance(data, dict) and not applied.ok
    assert not c.conf_dir.exists()
    # what needs no packages still renders there
    assert isinstance(show(minion, "epilog.clean", c.pillar()), dict)
    # a site that names the packages itself gets them
    pillar = c.pillar()
    pillar["epilog"]["lookup"] = {"pkgs": ["python3", "procps9", "perl"]}
    data = show(minion, "epilog", pillar)
    assert isinstance(data, dict) and rendered_pkgs(data) == ["python3", "procps9", "perl"], data
    pillar["epilog"]["lookup"] = {"pkgs": ["python3", "procps; rm -rf /"]}
    data = show(minion, "epilog", pillar)
    assert not isinstance(data, dict) and "epilog:pkgs[1]" in "\n".join(data), data


def release_of(data):
    for kind in ("cmd", "test"):
        chunk = data["epilog-release-switch-cmd-run"].get(kind)
        if chunk:
            name = next(item["name"] for item in chunk if isinstance(item, dict) and "name" in item)
            return name.split(" activate ", 1)[1].split()[0]
    raise AssertionError(data["epilog-release-switch-cmd-run"])


def test_the_release_id_is_the_same_on_every_family(salt_factories, tmp_path):
    """The package names are in no file of a release: one pillar and one
    formula give one release id on Debian and RedHat nodes alike, so
    epilog.verify expect=<id> holds fleet-wide."""
    pillar = sandbox(tmp_path).pillar()
    ids = set()
    for family in ("Debian", "RedHat", "Suse"):
        data = show(family_minion(salt_factories, tmp_path, family), "epilog", pillar)
        assert isinstance(data, dict), data
        ids.add(release_of(data))
    assert len(ids) == 1, ids
