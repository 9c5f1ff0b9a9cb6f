"""SlurmdSpoolDir's %n and %h, expanded as slurmd expands them: Slurm's
slurm_conf_expand_slurmd_path (src/common/read_config.c, the same from
22.05 to 26.05) replaces the first %h with the host name slurmd computed
(gethostname up to the first dot), then the first %n of the result with
slurmd's node name; a configless slurmd started without -N has no name yet
and %n goes. The node program's one expansion (system.slurmd_path), which
the job end, the looks between jobs and verify all call; and the pillar's
rule, which takes those two and no other %."""
import os

import pytest
import yaml

from tests.helpers import REPO
from tests.unit.conftest import node
from tests.unit.test_settings import render

system = node("system")
evidence = node("evidence")

# (id, path, node name, host name, what slurmd makes of it)
EXPANSIONS = [
    ("no-percent", "/var/spool/slurmd", "n01", "h01", "/var/spool/slurmd"),
    ("slurm-formula-node-name", "/tmp/slurmd.%n.spool", "n01", "h01", "/tmp/slurmd.n01.spool"),
    ("host-name", "/var/spool/slurmd-%h", "n01", "h01", "/var/spool/slurmd-h01"),
    ("both", "/var/spool/%h/%n", "n01", "h01", "/var/spool/h01/n01"),
    ("first-of-each-only", "/s/%n/%n/%h/%h", "n01", "h01", "/s/n01/%n/h01/%h"),
    ("host-first-then-node", "/s/%h", "n01", "a%nb", "/s/an01b"),
    ("other-percent-stays", "/s/%j.%x/%", "n01", "h01", "/s/%j.%x/%"),
    ("configless-without-N-drops-n", "/var/spool/slurmd.%n", "", "h01", "/var/spool/slurmd."),
    ("node-unknown", "/var/spool/%n", None, "h01", None),
    ("node-unknown-not-needed", "/var/spool/%h", None, "h01", "/var/spool/h01"),
    ("node-with-a-slash", "/var/spool/%n", "../etc", "h01", None),
    ("node-dotdot", "/var/spool/%n/x", "..", "h01", None),
    ("node-dot", "/var/spool/%n/x", ".", "h01", None),
    ("host-with-a-nul", "/var/spool/%h", "n01", "h\0", None),
]


@pytest.mark.parametrize("path,node_name,host_name,expanded", [row[1:] for row in EXPANSIONS],
                         ids=[row[0] for row in EXPANSIONS])
def test_slurmd_path_expands_n_and_h_as_slurmd_does(path, node_name, host_name, expanded):
    assert system.slurmd_path(path, node_name, host_name) == expanded


def test_h_is_this_hosts_short_name_when_none_is_given():
    short = os.uname().nodename.split(".", 1)[0]
    assert system.short_hostname() == short
    assert system.slurmd_path("/var/spool/%h", "n01") == f"/var/spool/{short}"


class Run:
    """What NodeFacts reads of a job end: its settings, its environment
    (SLURMD_NODENAME, slurmd's node name), its trust and its running Slurm
    (slurm.Slurm; none here: the spool alone is looked at)."""

    def __init__(self, spool, node_name):
        self.settings = {"run_dir": "/nonexistent/run", "slurmd_spool_dir": spool}
        self.env = {"SLURMD_NODENAME": node_name} if node_name is not None else {}
        self.marks_trusted = False
        self.trust = system.Trust()
        self.slurm = None


def test_a_job_end_looks_in_the_spool_slurmd_made_for_its_node(tmp_path):
    spool = tmp_path / "slurmd.n01.spool"
    spool.mkdir()
    facts = evidence.NodeFacts(Run(f"{tmp_path}/slurmd.%n.spool", "n01"), False, 0)
    assert facts.spool_dir == str(spool)
    # with no node name, no spool is looked in (nor trusted)
    facts = evidence.NodeFacts(Run(f"{tmp_path}/slurmd.%n.spool", None), False, 0)
    assert facts.spool_dir == "" and facts.spool_trusted is False


RULES = yaml.safe_load((REPO / "salt/epilog/rules.yaml").read_text())


@pytest.mark.parametrize("spool", ["/var/spool/slurmd", "/tmp/slurmd.%n.spool", "/var/spool/%h/%n",
                                   "/var/spool/slurmd-%h"])
def test_the_pillar_takes_n_and_h_in_slurmd_spool_dir(tmp_path, spool):
    assert render(tmp_path, {"epilog": {"slurmd_spool_dir": spool}})["settings"]["slurmd_spool_dir"] == spool


@pytest.mark.parametrize("spool", ["/var/spool/%j", "/var/spool/slurmd%", "/var/spool/%%n", "/var/spool/%N",
                                   "/var/spool/%n/../etc", "var/spool/%n", "/var/spool/%n x"])
def test_the_pillar_refuses_any_other_percent_or_path_in_slurmd_spool_dir(tmp_path, spool):
    import salt.exceptions  # pylint: disable=import-outside-toplevel

    with pytest.raises(salt.exceptions.SaltException) as caught:
        render(tmp_path, {"epilog": {"slurmd_spool_dir": spool}})
    assert f"epilog:slurmd_spool_dir ({spool!r}) must be an absolute path" in str(caught.value)
    assert "%n (node name) and %h (host name)" in str(caught.value)


def test_no_other_path_setting_takes_a_percent(tmp_path):
    import salt.exceptions  # pylint: disable=import-outside-toplevel

    assert RULES["slurmd_path_keys"] == ["slurmd_spool_dir"]
    for key in RULES["path_keys"]:
        with pytest.raises(salt.exceptions.SaltException, match=f"epilog:{key}"):
            render(tmp_path, {"epilog": {key: "/var/lib/%n/x"}})
