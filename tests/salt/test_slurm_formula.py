"""The chain beside saltstack-formulas/slurm-formula, as docs/slurm-formula.md
wires it: the site's state, read from that page, includes epilog and a
stand-in of slurm-formula (its state ID slurm_config, laying slurm.conf down
as it does: slurm:root 0644, from a template with #Epilog= and #Prolog=
commented out and SlurmdSpoolDir=.../slurmd.%n.spool) and points
slurm_config at the site's copy of the template, after the chain's release.
In-process, on a node of its own."""
import pwd
import re
import shutil
import stat

import pytest

from tests.helpers import HOST, REPO, epilog_pillar, live_spool
from tests.salt.conftest import Minion, Node

# slurm-formula's slurm/init.sls, reduced to what this test needs of it: the
# state ID, the file's owner, group and mode, and a template source
STANDIN_INIT = """\
slurm_config:
  file.managed:
    - name: {{ salt['pillar.get']('slurm_standin:etcdir') }}/slurm.conf
    - user: slurm
    - group: root
    - mode: '644'
    - template: jinja
    - source: salt://slurm/files/slurm.conf
"""
# its template's lines that matter here
STANDIN_TEMPLATE = """\
ClusterName=standin
#Epilog=
#Prolog=
SlurmdSpoolDir={{ salt['pillar.get']('slurm_standin:spool') }}
"""


def site_state():
    """The site's state as docs/slurm-formula.md gives it, its includes in
    the other order (slurm.node first): the require alone, not the order
    the states are written in, must keep slurm.conf after the chain."""
    page = (REPO / "docs/slurm-formula.md").read_text()
    found = re.search(r"```yaml\n\s*# salt/site/slurm-epilog.sls\n(.*?)```", page, re.S)
    assert found, "docs/slurm-formula.md has no salt/site/slurm-epilog.sls block"
    lines = found.group(1).splitlines()
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    text = "\n".join(line[indent:] for line in lines) + "\n"
    includes = "include:\n  - epilog\n  - slurm.node\n"
    assert text.startswith(includes), text
    return "include:\n  - slurm.node\n  - epilog\n" + text[len(includes):]


@pytest.fixture
def beside(salt_factories, accounts, tmp_path):
    """A node whose minion serves the formula's salt/ and a site tree with
    the stand-in and the site's state."""
    site = tmp_path / "site-roots"
    (site / "slurm/files").mkdir(parents=True)
    (site / "slurm/init.sls").write_text(STANDIN_INIT)
    (site / "slurm/node.sls").write_text("include:\n  - slurm\n")
    (site / "slurm/files/slurm.conf").write_text(STANDIN_TEMPLATE)
    (site / "site/slurm").mkdir(parents=True)
    (site / "site/slurm-epilog.sls").write_text(site_state())
    minion = Minion(salt_factories, tmp_path / "minion", file_roots=[REPO / "salt", site])
    node = Node(minion)
    yield node, site
    shutil.rmtree(node.base, ignore_errors=True)


def test_beside_slurm_formula_slurm_conf_names_the_chain_after_it_is_laid_down_and_verify_passes_with_a_warning(
        beside):
    node, site = beside
    # the site's copy of the template: the chain's lines set
    conf_dir = node.conf_dir
    (site / "site/slurm/slurm.conf").write_text(
        STANDIN_TEMPLATE.replace("#Epilog=", f"Epilog={conf_dir}/epilog.sh")
        .replace("#Prolog=", f"Prolog={conf_dir}/prolog.sh") + "PrologFlags=Alloc,Contain\n")
    # the spool as the template names it, and as slurmd makes it for this node
    spool = f"{node.base}/slurmd.%n.spool"
    live_spool(f"{node.base}/slurmd.{HOST}.spool")
    pillar = epilog_pillar(node.base, slurm_config_dir=conf_dir, localusers=["root", "je.kim"], slurmd_spool_dir=spool)
    node.minion.set_pillar({**pillar, "slurm_standin": {"etcdir": str(conf_dir), "spool": spool}})

    ret = node.minion.apply("site.slurm-epilog")
    assert ret.ok, ret
    states = {key.split("_|-")[1]: value for key, value in ret.raw.items()}
    # slurm.conf was laid down after the release was switched to, never before
    assert states["slurm_config"]["__run_num__"] > states["epilog-release-switch-cmd-run"]["__run_num__"], states
    conf = conf_dir / "slurm.conf"
    st = conf.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (pwd.getpwnam("slurm").pw_uid, 0, 0o644)
    assert f"Epilog={conf_dir}/epilog.sh\n" in conf.read_text()
    assert (conf_dir / "epilog.sh").is_symlink()

    report = node.run("verify")
    assert report["result"] is True, report["problems"]
    assert [w for w in report["warnings"] if w.startswith("[slurm-conf-owned-by-slurm]")], report["warnings"]
    assert not [w for w in report["warnings"] if w.startswith("[spool-not-root-only]")], report["warnings"]
    # between jobs the node program looks in the spool slurmd made for this node
    explained = node.run("explain", user="alice")
    assert explained["other_jobs"] == {"answer": "no", "why": f"node-local: no step of another job in "
                                                              f"{node.base}/slurmd.{HOST}.spool"}, explained

    # another spool in slurm.conf than the pillar's, once both are expanded: a problem
    node.minion.set_pillar({**pillar, "slurm_standin": {"etcdir": str(conf_dir), "spool": "/var/spool/%h"}})
    assert node.minion.apply("site.slurm-epilog").ok
    problems = node.run("verify")["problems"]
    assert [p for p in problems if p.startswith("[slurm-conf-spool-dir]")] == [
        f"[slurm-conf-spool-dir] {conf} has SlurmdSpoolDir=/var/spool/%h (/var/spool/{HOST} on {HOST}), but "
        f"epilog:slurmd_spool_dir is {spool} ({node.base}/slurmd.{HOST}.spool on {HOST})"], problems
