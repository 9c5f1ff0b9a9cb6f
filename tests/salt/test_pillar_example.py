"""pillar.example, the one an operator copies: it lists every setting at its
default (the unit tier holds it to defaults.yaml), and the formula applies
it as it is, previewed and for real, on this Salt line. The node's own
/etc/slurm, /var/log and /run are tmpfs in a mount namespace of the test's,
so the real apply lays the chain where a node has it, and touches nothing
of this machine's. On every family it knows, the formula renders it as
copied, in-process (this machine installs no other family's packages), and
each family keeps its own osfamilymap.yaml values."""
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, SaltCall, mount_namespace
from tests.salt.conftest import Minion

OSFAMILYMAP = yaml.safe_load((REPO / "salt/epilog/osfamilymap.yaml").read_text())


def test_pillar_example_applies_as_it_is_previewed_and_for_real(salt_factories, accounts, tmp_path):
    minion = Minion(salt_factories, tmp_path / "minion")
    (minion.base / "pillar/epilog.sls").write_text((REPO / "pillar.example").read_text())
    call = SaltCall(minion.config_dir)
    with mount_namespace(fresh=("/etc/slurm", "/var/log", "/run")) as ns:
        preview = call("state.apply", "epilog", "test=True", prefix=ns)
        assert preview.returncode == 0 and preview.states, preview
        assert all(s["result"] is not False for s in preview.states.values()), preview
        applied = call("state.apply", "epilog", prefix=ns)
        assert applied.returncode == 0 and all(s["result"] is True for s in applied.states.values()), applied
        listed = call("cmd.run", "ls /etc/slurm /etc/slurm/epilog-releases; readlink /etc/slurm/epilog.sh", prefix=ns)
        assert "epilog.sh" in listed.data and "epilog-releases/current" in listed.data, listed
        again = call("state.apply", "epilog", prefix=ns)
        assert again.returncode == 0 and not [k for k, s in again.states.items() if s["changes"]], again
    assert not Path("/etc/slurm/epilog.sh").exists(), "the node's own /etc/slurm was written"


# Debian is this machine's: the test above applies it there for real
@pytest.mark.parametrize("family", sorted(set(OSFAMILYMAP) - {"Debian"}))
def test_pillar_example_as_copied_renders_on_every_family_with_its_own_values(salt_factories, tmp_path, family):
    minion = Minion(salt_factories, tmp_path / "minion", grains={"os_family": family})
    minion.set_pillar(yaml.safe_load((REPO / "pillar.example").read_text()))
    data = minion("state.show_sls", "epilog")
    assert isinstance(data, dict) and "epilog-release-switch-cmd-run" in data, data
    settings = minion("slsutil.renderer", path="salt://epilog/settings.jinja", default_renderer="jinja|json",
                      tpldir="epilog", validate=True, family=True)
    assert {key: settings["family"][key] for key in OSFAMILYMAP[family]} == OSFAMILYMAP[family], settings["family"]
