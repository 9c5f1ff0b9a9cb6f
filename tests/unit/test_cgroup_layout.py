"""What verify says of the node's cgroups (cgroups.cgroup_layout): the
version, the layout the chain reads, and a problem only where
proctrack/cgroup runs on a layout the chain cannot read. Pure: facts in,
words out; and the reader, on a cgroup2 tree made of plain directories."""
import os
import types

import pytest

from tests.unit.conftest import node

system = node("system")
cgroups = node("cgroups")

V1 = ["cpuset", "freezer", "memory"]
CG = "proctrack/cgroup"
SCOPE = "/system.slice/slurmstepd.scope"
DEBIAN = "/system.slice/cg2node_slurmstepd.scope"
SLUID = "sEKNKTV3WPV500"

ROWS = [
    # (name, v1, v2, v1_slurm, scope, proctrack, plugin) -> (version, layout has, problem has)
    ("debian-22.05-multiple-slurmd", [], True, None, (DEBIAN, True, ["system", "job_3"]), CG, "cgroup/v2",
     "v2", f"{DEBIAN}, job directories job_<id>", None),
    ("upstream-24.11", [], True, None, (SCOPE, True, ["system", "job_12", "job_13"]), CG, None,
     "v2", f"{SCOPE}, job directories job_<id>", None),
    ("26.05-sluid", [], True, None, (SCOPE, True, ["system", SLUID]), CG, "cgroup/v2",
     "v2", "job directories SLUID", None),
    ("26.05-cgroupjobidpaths", [], True, None, (SCOPE, True, ["system", "job_7"]), CG, None,
     "v2", "job directories job_<id>", None),
    ("26.05-both-after-a-change", [], True, None, (SCOPE, True, ["job_7", SLUID]), CG, None,
     "v2", "job_<id> and SLUID", None),
    ("v2-scope-no-job-yet", [], True, None, (SCOPE, True, ["system"]), CG, None,
     "v2", "job_<id> or SLUID, none now", None),
    # slurmd started by hand (no systemd) lives in the scope's slurmd/ (what 22.05 and 26.05 made here)
    ("22.05-slurmd-by-hand", [], True, None, (DEBIAN, True, ["job_1", "system", "slurmd"]), CG, "cgroup/v2",
     "v2", f"{DEBIAN}, job directories job_<id>", None),
    ("26.05-sluid-slurmd-by-hand", [], True, None, (SCOPE, True, [SLUID, "system", "slurmd"]), CG, "cgroup/v2",
     "v2", f"{SCOPE}, job directories SLUID", None),
    ("slurmd-by-hand-no-job-yet", [], True, None, (SCOPE, True, ["system", "slurmd"]), CG, None,
     "v2", "job_<id> or SLUID, none now", None),
    ("container-parent", [], True, None, ("/docker-x.scope/system.slice/n1_slurmstepd.scope", True, ["job_1"]), CG,
     None, "v2", "/docker-x.scope/system.slice/n1_slurmstepd.scope", None),
    ("v2-no-scope-yet", [], True, None, None, CG, None, "v2", "no [<node>_]slurmstepd.scope", None),
    ("v1-only", V1, False, "slurm", None, CG, "cgroup/v1", "v1", "v1 (/slurm/uid_<uid>/job_<id>)", None),
    ("v1-multiple-slurmd", V1, False, "slurm_n1", None, CG, None, "v1", "/slurm_n1/uid_<uid>/job_<id>", None),
    ("v1-no-job-yet", V1, False, None, None, CG, None, "v1", "no /slurm[_<host>]", None),
    ("hybrid-v1-slurm", V1, True, "slurm", None, CG, "cgroup/v1", "hybrid", "v1 (/slurm/", None),
    ("hybrid-v2-scope", ["memory"], True, None, (SCOPE, True, ["job_2"]), CG, None, "hybrid", "v2 (", None),
    ("nothing-linuxproc", [], False, None, None, "proctrack/linuxproc", None, "none", "unknown: no cgroup2", None),
    ("nothing-cgroup", [], False, None, None, CG, None, "none", "unknown: no cgroup2", "no cgroup2 mount"),
    ("nothing-no-slurm-conf", [], False, None, None, None, None, "none", "unknown:", None),
    ("v1-without-freezer", ["memory"], False, None, None, CG, None, "v1", "unknown:", "no cgroup v1 freezer"),
    ("odd-job-dirs", [], True, None, (SCOPE, True, ["system", "job_1", "mine"]), CG, None,
     "v2", "unknown:", "neither job_<id> nor a SLUID"),
    ("odd-job-dirs-linuxproc", [], True, None, (SCOPE, True, ["mine"]), "proctrack/linuxproc", None,
     "v2", "unknown:", None),
    ("scope-not-roots", [], True, None, ("/user.slice/u.slice/slurmstepd.scope", False, ["job_1"]), "PROCTRACK/CGROUP",
     None, "v2", "unknown:", "not root's alone"),
]


@pytest.mark.parametrize("row", ROWS, ids=[row[0] for row in ROWS])
def test_the_layout_verify_names_and_when_it_is_a_problem(row):
    _, v1, v2, v1_slurm, scope, proctrack, plugin, version, layout, problem = row
    got = cgroups.cgroup_layout(v1, v2, v1_slurm, scope, proctrack, plugin)
    assert got[0] == version
    assert layout in got[1], got
    assert (plugin is None) == ("CgroupPlugin=" not in got[1])
    if problem is None:
        assert got[2] is None, got
    else:
        assert problem in got[2] and got[1] == "unknown: " + got[2] + (f", CgroupPlugin={plugin}" if plugin else "")


def test_a_name_that_cannot_print_is_escaped():
    got = cgroups.cgroup_layout([], True, None, ("/a\nb/slurmstepd.scope", True, ["job_1"]), CG)
    assert "\n" not in got[1] and got[2] is None


def mountinfo(where):
    return (f"40 1 0:99 / {where} rw - cgroup2 cgroup2 rw\n").encode()


def test_the_reader_finds_the_scope_by_descriptor_and_skips_symlinks_and_files(tmp_path, monkeypatch):
    """A tree of plain directories stands in for the cgroup2 mount (its
    device is what mountinfo gives): the reader finds Debian's scope two
    levels down, lists its directories alone, and follows no symlink."""
    root = tmp_path / "cg"
    scope = root / "system.slice" / "n1_slurmstepd.scope"
    for name in ("system", "job_4", SLUID):
        (scope / name).mkdir(parents=True)
    (scope / "memory.max").write_text("max\n")
    (scope / "link").symlink_to(tmp_path)
    (root / "user.slice").mkdir()
    (root / "user.slice" / "slurmstepd.scope").symlink_to(scope)
    os.chmod(tmp_path, 0o755)
    device = os.stat(root).st_dev
    monkeypatch.setattr(system, "cgroup2_mounts", lambda text: [(str(root), device)])
    monkeypatch.setattr(cgroups, "CGROUP_OWNER", os.geteuid())
    v1, v2, v1_slurm, found = cgroups.cgroup_facts(mountinfo(root))
    assert (v1, v2, v1_slurm) == ([], True, None)
    assert found[0] == "/system.slice/n1_slurmstepd.scope"
    assert sorted(found[2]) == sorted(["system", "job_4", SLUID])
    assert found[1] is True
    # the scope itself writable by others, in a directory root's alone: found, and not root's alone
    os.chmod(scope, 0o777)
    assert cgroups.cgroup_facts(mountinfo(root))[3][:2] == ("/system.slice/n1_slurmstepd.scope", False)


def test_the_reader_looks_no_deeper_than_its_bound(tmp_path, monkeypatch):
    root = tmp_path / "cg"
    (root / "a.slice" / "b.slice" / "c.slice" / "d.slice" / "slurmstepd.scope").mkdir(parents=True)
    (root / "a.slice" / "b.slice" / "c.slice" / "slurmstepd.scope").mkdir()
    device = os.stat(root).st_dev
    monkeypatch.setattr(system, "cgroup2_mounts", lambda text: [(str(root), device)])
    monkeypatch.setattr(cgroups, "CGROUP_OWNER", os.geteuid())
    assert cgroups.cgroup_facts(b"")[3][0] == "/a.slice/b.slice/c.slice/slurmstepd.scope"
    (root / "a.slice" / "b.slice" / "c.slice" / "slurmstepd.scope").rmdir()
    assert cgroups.cgroup_facts(b"")[1:] == (True, None, None)
    monkeypatch.setattr(system, "cgroup2_mounts", lambda text: [(str(root), device + 1)])
    assert cgroups.cgroup_facts(b"")[1:] == (False, None, None)


def test_verify_names_the_layout_and_a_problem_under_proctrack_cgroup_alone(tmp_path, monkeypatch):
    """verify's check: the judged slurm.conf's ProctrackType and the
    cgroup.conf beside it reach the decision; its info line always, its
    problem only under proctrack/cgroup."""
    from tests.helpers import REPO, load_file
    checks = load_file(REPO / "_modules/epilog.py", "epilog_module_cgroup_layout").checks
    (tmp_path / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1 # old\nCgroupPlugin=cgroup/v2\n")
    monkeypatch.setattr(checks._node.cgroups, "cgroup_facts", lambda text: ([], False, None, None))

    V = types.SimpleNamespace(info=[], problems=[], judged=[(str(tmp_path / "slurm.conf"), {}, "path", "n1")])
    checks._cgroup_layout(V)
    assert V.info == ["cgroup none: unknown: no cgroup2 mount of the namespace's root could be read, and no cgroup "
                      "v1 freezer is mounted, CgroupPlugin=cgroup/v2, ProctrackType=proctrack/cgroup"]
    assert len(V.problems) == 1 and V.problems[0].startswith("[cgroup-layout-unreadable] cgroup none, ")
    V.info, V.problems = [], []
    V.judged = [(str(tmp_path / "slurm.conf"), {"proctracktype": "proctrack/linuxproc"}, "path", "n1")]
    checks._cgroup_layout(V)
    assert len(V.info) == 1 and V.problems == []


@pytest.mark.parametrize("slurms", [None, "system.slice", "x.slice/y.slice/z.slice"],
                         ids=["no-scope-of-slurms", "slurms-above-hers", "slurms-as-deep-as-hers"])
def test_a_scope_a_user_makes_in_her_delegated_subtree_is_not_slurms(tmp_path, monkeypatch, slurms):
    """systemd delegates user@<uid>.service to its user, who makes any name
    below it (mkdir in her own cgroup2 subtree): a [<node>_]slurmstepd.scope
    there, four levels down, is not the node's layout. Before Slurm's own
    scope is there (a hybrid node whose Slurm is v1's, a slurmd not yet
    started) it made verify fail with [cgroup-layout-unreadable] under
    proctrack/cgroup; the reader enters only directories root's alone, as
    the job end's v2_job judges a path, so hers is never listed, and Slurm's
    own scope is found wherever it is within the bound."""
    monkeypatch.setattr(cgroups, "CGROUP_OWNER", os.geteuid())
    root = tmp_path / "cg"
    hers = root / "user.slice" / "user-50101.slice" / "user@50101.service"
    (hers / "n1_slurmstepd.scope" / "job_1").mkdir(parents=True)
    # delegated: hers (another account's, writable by her), whatever its owner here
    os.chmod(hers, 0o777)
    if os.geteuid() == 0:
        os.chown(hers, 50101, 50101)
    if slurms:
        (root / slurms / "slurmstepd.scope" / "job_2").mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    device = os.stat(root).st_dev
    monkeypatch.setattr(system, "cgroup2_mounts", lambda text: [(str(root), device)])
    found = cgroups.cgroup_facts(mountinfo(root))[3]
    if slurms:
        assert found == (f"/{slurms}/slurmstepd.scope", True, ["job_2"])
    else:
        assert found is None
    version, layout, problem = cgroups.cgroup_layout(["freezer"], True, "slurm", found, CG)
    assert version == "hybrid" and problem is None and "n1_slurmstepd" not in layout, layout
