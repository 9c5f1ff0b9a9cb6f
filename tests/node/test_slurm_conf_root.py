"""A slurmd's slurm.conf in a mount namespace of its own, read as that
slurmd reads it: a real process whose /etc/slurm is its own (a fresh
tmpfs), its files read through /proc/PID/root, resolved and judged in that
root (an absolute Include and symlink from that root, every directory on
the way judged on the descriptor opened for it). Needs root: it makes a
mount namespace."""
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.helpers import REPO, load_file, mount_namespace
from tests.unit.conftest import node

epilog = load_file(REPO / "_modules/epilog.py", "epilog_module_conf_root")


def test_a_slurmd_in_another_mount_namespace_is_read_through_its_root(tmp_path):
    """A process in a mount namespace where /etc/slurm is another
    directory: its /etc/slurm/slurm.conf is read through /proc/PID/root; a
    file it shares with this one keeps its path."""
    with mount_namespace(fresh=("/etc/slurm",)) as ns:
        holder = int(ns[1].split("=", 1)[1])
        subprocess.run([*ns, "sh", "-c", "echo Epilog=/theirs > /etc/slurm/slurm.conf"], check=True)
        assert epilog.slurmd._as_slurmd_sees_it(holder, "/etc/slurm/slurm.conf") == f"/proc/{holder}/root/etc/slurm/slurm.conf"
        shared = tmp_path / "shared.conf"
        shared.write_text("x\n")
        assert epilog.slurmd._as_slurmd_sees_it(holder, str(shared)) == str(shared)


def test_a_root_only_slurm_conf_in_another_namespace_is_judged_and_read_there():
    """slurm.conf root's alone (0600) in the namespace's own /etc/slurm,
    with an absolute Include and an absolute symlink that exist only there:
    read and judged in that root, it is root's, and what it includes is
    the namespace's file; a file there that others can write is a problem
    that names it."""
    with mount_namespace(fresh=("/etc/slurm",)) as ns:
        holder = int(ns[1].split("=", 1)[1])
        subprocess.run([*ns, "sh", "-c", "cd /etc/slurm && echo Epilog=/inside/epilog.sh > inside.conf "
                        "&& ln -s /etc/slurm/inside.conf link.conf "
                        "&& printf 'Include /etc/slurm/inside.conf\\nInclude /etc/slurm/link.conf\\n' > slurm.conf "
                        "&& chmod 0600 slurm.conf"], check=True)
        conf = f"/proc/{holder}/root/etc/slurm/slurm.conf"
        parsed = epilog.slurmconf._parsed(conf)
        assert parsed["problems"] == [] and parsed["cuts"] == [], parsed
        assert parsed["values"] == {"epilog": ["/inside/epilog.sh", "/inside/epilog.sh"]}
        assert parsed["files"] == [conf, f"/proc/{holder}/root/etc/slurm/inside.conf",
                                   f"/proc/{holder}/root/etc/slurm/link.conf"]
        assert {trust for _, _, trust in parsed["sources"]} == {"root"}, parsed["sources"]
        assert epilog.slurmconf._trust_lines(parsed) == ([], [])
        assert epilog.common._root_only_in(f"/proc/{holder}/root/etc/slurm")
        subprocess.run([*ns, "chmod", "0666", "/etc/slurm/inside.conf"], check=True)
        problems, _ = epilog.slurmconf._trust_lines(epilog.slurmconf._parsed(conf))
        assert [p for p in problems if p.startswith(
            f"[slurm-conf-not-root-only] /proc/{holder}/root/etc/slurm/inside.conf, which slurmd reads")], problems


def _wired(monkeypatch, chain, conf):
    """chain_wired's answer for the chain laid down in CHAIN, with CONF the
    one slurm.conf found (a slurmd's, read through its root)."""
    monkeypatch.setattr(epilog, "_config", lambda validate=True, operators_optional=False: (
        {"slurm_config_dir": str(chain)}, {"path": "^/"}, {"releases": {"dir": "epilog-releases"}}))
    monkeypatch.setattr(epilog.slurmd, "_slurm_confs", lambda settings, also=(), running=True: [(conf, "slurmd")])
    return epilog.chain_wired(None)


def test_the_chain_a_slurmd_names_is_judged_in_its_root_by_identity(tmp_path, monkeypatch):
    """Epilog= and Prolog= of a slurmd in its own mount namespace name, in
    that namespace, the chain laid down here at a path that exists only
    there (its directory bound in at /etc/slurm/bound): chain_wired counts
    them wired and verify's check passes (resolved in slurmd's root, the
    file compared by device and inode); here that path names nothing."""
    chain = tmp_path / "chain"
    chain.mkdir()
    for name in ("epilog.sh", "prolog.sh"):
        (chain / name).write_text("#!/bin/sh\n")
    with mount_namespace(fresh=("/etc/slurm",)) as ns:
        holder = int(ns[1].split("=", 1)[1])
        subprocess.run([*ns, "sh", "-c", f"mkdir /etc/slurm/bound && mount --bind {chain} /etc/slurm/bound && "
                        "printf 'Epilog=/etc/slurm/bound/epilog.sh\\nProlog=bound/prolog.sh\\n' > "
                        "/etc/slurm/slurm.conf"], check=True)
        conf = f"/proc/{holder}/root/etc/slurm/slurm.conf"
        report = _wired(monkeypatch, chain, conf)
        assert report["known"] and report["wired"] == [
            f"{conf} names /etc/slurm/bound/epilog.sh (Epilog=)", f"{conf} names bound/prolog.sh (Prolog=)"], report
        assert epilog.checks._not_laid(conf, "epilog", "/etc/slurm/bound/epilog.sh", str(chain / "epilog.sh")) is None
        assert epilog.checks._not_laid(conf, "prolog", "bound/prolog.sh", str(chain / "prolog.sh")) is None
        assert not os.path.lexists("/etc/slurm/bound/epilog.sh") or not os.path.samefile(
            "/etc/slurm/bound/epilog.sh", str(chain / "epilog.sh"))


def test_the_laid_down_path_that_is_another_file_in_slurmds_root_is_not_the_chain(tmp_path, monkeypatch):
    """A slurmd whose mount namespace has another directory at the chain's
    path (a fresh tmpfs there: another epilog.sh, no prolog.sh): its
    Epilog= and Prolog= give the laid-down paths, yet name nothing of the
    chain's where it runs them. chain_wired counts neither; verify's check
    says so for each; the same slurm.conf read here judges by path, as
    before."""
    chain = tmp_path / "chain"
    chain.mkdir()
    for name in ("epilog.sh", "prolog.sh"):
        (chain / name).write_text("#!/bin/sh\n")
    with mount_namespace(fresh=("/etc/slurm", str(chain))) as ns:
        holder = int(ns[1].split("=", 1)[1])
        subprocess.run([*ns, "sh", "-c", f"echo '#!/bin/sh' > {chain}/epilog.sh && "
                        f"printf 'Epilog={chain}/epilog.sh\\nProlog={chain}/prolog.sh\\n' > /etc/slurm/slurm.conf"],
                       check=True)
        conf = f"/proc/{holder}/root/etc/slurm/slurm.conf"
        report = _wired(monkeypatch, chain, conf)
        assert report["known"] and report["wired"] == [], report
        for key in ("epilog", "prolog"):
            assert epilog.checks._not_laid(conf, key, f"{chain}/{key}.sh", str(chain / f"{key}.sh")) == (
                f"{conf} has {key.capitalize()}={chain}/{key}.sh, which in slurmd's root (its own mount namespace) "
                f"is not the laid-down {chain}/{key}.sh (another file there, or none)")
        here = str(tmp_path / "slurm.conf")
        assert epilog.checks._not_laid(here, "epilog", f"{chain}/epilog.sh", str(chain / "epilog.sh")) is None


def test_job_containers_base_path_and_spool_are_listed_in_slurmds_root():
    """job_container/tmpfs of a slurmd in its own mount namespace: its
    job_container.conf, its BasePath and its spool exist only there (a
    fresh /etc/slurm): the job directory no step in the spool owns is
    stale, the one a step socket names is not, each read in that root."""
    with mount_namespace(fresh=("/etc/slurm",)) as ns:
        holder = int(ns[1].split("=", 1)[1])
        subprocess.run([*ns, "sh", "-c", "cd /etc/slurm && echo BasePath=/etc/slurm/jobs > job_container.conf "
                        "&& mkdir -p jobs/123 jobs/456 spool && /usr/bin/python3 -c 'import socket; "
                        "socket.socket(socket.AF_UNIX).bind(\"/etc/slurm/spool/n1_456.0\")'"], check=True)
        conf = f"/proc/{holder}/root/etc/slurm/slurm.conf"
        info, warnings = epilog.slurmd._job_container(conf, {"jobcontainertype": "job_container/tmpfs"},
                                               {"slurmd_spool_dir": "/etc/slurm/spool"}, "n1")
        assert info and warnings == [
            "[job-container-stale-dirs] 1 job directory under BasePath /etc/slurm/jobs that no running job owns (no "
            "step of theirs in /etc/slurm/spool), left by a failed launch or teardown: /etc/slurm/jobs/123"], warnings


def test_a_directory_in_a_sticky_one_is_judged_as_trust_judges_it(tmp_path):
    """roots.Root judges a directory as system.Trust does: one of root's
    that only root can write is root-only in a sticky directory (such as
    /var/tmp: nobody else can rename or remove it there), a file there is
    not (squeue's SLURM_CONF directory under /var/tmp, the tests' own)."""
    roots, system = node("roots"), node("system")
    here = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="epilog-sticky-"))
    try:
        here.chmod(0o755)
        (here / "slurm.conf").write_text("")
        root = roots.Root(None)
        try:
            for path in ("/var/tmp", str(here), str(here / "slurm.conf")):
                assert root.root_only(path) == system.Trust().root_only(path), path
            assert root.root_only(str(here)) and not root.root_only("/var/tmp")
        finally:
            root.close()
        assert node("slurm").conf_dir_root_only(str(here)) and node("slurm").conf_dir_root_only(str(here / "none"))
        assert not node("slurm").conf_dir_root_only("/var/tmp/epilog-none-such")
    finally:
        shutil.rmtree(here)
