"""The packages the parts need are named per os_family (osfamilymap.yaml):
the state rendered with each family's grains, and an unknown family refused
by name, with nothing laid down."""
import pytest
import yaml

from tests.helpers import REPO, Chain, local_minion

OSFAMILYMAP = yaml.safe_load((REPO / "salt/epilog/osfamilymap.yaml").read_text())


def rendered_pkgs(ret):
    chunk = ret.data["epilog-parts-tools-pkg-installed"]["pkg"]
    return next(item["pkgs"] for item in chunk if isinstance(item, dict) and "pkgs" in item)


def sandbox(tmp_path):
    return Chain(tmp_path / "slurm", tmp_path / "localusers", tmp_path / "epilog.log", tmp_path / "spool")


@pytest.mark.parametrize("family,pkgs", [
    ("Debian", ["python3", "procps", "perl-base"]),
    ("RedHat", ["python3", "procps-ng", "perl-interpreter"]),
    ("Suse", ["python3", "procps", "perl"]),
])
def test_each_family_gets_its_own_package_names(salt_factories, salt_line, tmp_path, family, pkgs):
    assert OSFAMILYMAP[family]["pkgs"] == pkgs
    call = local_minion(salt_factories, f"family-{family.lower()}", REPO / "pillar", salt_line=salt_line,
                        grains={"os_family": family})
    ret = call("state.show_sls", "epilog", pillar=sandbox(tmp_path).pillar())
    assert ret.returncode == 0 and isinstance(ret.data, dict), ret
    assert rendered_pkgs(ret) == pkgs, ret.data["epilog-parts-tools-pkg-installed"]


def test_an_unknown_family_is_refused_by_name_and_nothing_is_laid_down(salt_factories, salt_line, tmp_path):
    call = local_minion(salt_factories, "family-unknown", REPO / "pillar", salt_line=salt_line,
                        grains={"os_family": "Plan9"})
    c = sandbox(tmp_path)
    for fun in ("state.show_sls", "state.apply"):
        ret = call(fun, "epilog", pillar=c.pillar())
        assert ret.returncode != 0, ret
        assert "the os_family grain ('Plan9') is not a family the epilog formula knows" in ret.stdout, ret
        assert "epilog:lookup:pkgs" in ret.stdout
    assert not c.conf_dir.exists()
    # what needs no packages still renders there
    ret = call("state.show_sls", "epilog.clean", pillar=c.pillar())
    assert ret.returncode == 0 and isinstance(ret.data, dict), ret
    # a site that names the packages itself gets them
    pillar = c.pillar()
    pillar["epilog"]["lookup"] = {"pkgs": ["python3", "procps9", "perl"]}
    ret = call("state.show_sls", "epilog", pillar=pillar)
    assert ret.returncode == 0 and rendered_pkgs(ret) == ["python3", "procps9", "perl"], ret
    pillar["epilog"]["lookup"] = {"pkgs": ["python3", "procps; rm -rf /"]}
    ret = call("state.show_sls", "epilog", pillar=pillar)
    assert ret.returncode != 0 and "epilog:pkgs[1]" in ret.stdout, ret


def release_of(ret):
    chunk = ret.data["epilog-release-switch-cmd-run"]["cmd"]
    name = next(item["name"] for item in chunk if isinstance(item, dict) and "name" in item)
    return name.split(" activate ", 1)[1].split()[0]


def test_the_release_id_is_the_same_on_every_family(salt_factories, salt_line, tmp_path):
    """The package names are in no file of a release: one pillar and one
    formula give one release id on Debian and RedHat nodes alike, so
    epilog.verify expect=<id> holds fleet-wide."""
    pillar = sandbox(tmp_path).pillar()
    ids = set()
    for family in ("Debian", "RedHat", "Suse"):
        call = local_minion(salt_factories, f"family-{family.lower()}", REPO / "pillar", salt_line=salt_line,
                            grains={"os_family": family})
        ret = call("state.show_sls", "epilog", pillar=pillar)
        assert ret.returncode == 0, ret
        ids.add(release_of(ret))
    assert len(ids) == 1, ids
