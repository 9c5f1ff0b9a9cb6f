"""epilog.verify judges the slurm.conf the running slurmd reads, as slurmd
itself resolves it, for real: a real Slurm 22.05 whose slurmd finds its
configuration through SLURM_CONF in its environment, through -f, or
configless from slurmctld (the cache in its spool), each beside a stale
/etc/slurm/slurm.conf that says the opposite (in a private mount namespace
where salt-call runs verify: the node's own /etc/slurm is never touched).
verify finds no wiring problem exactly when the running slurmd's file wires
the chain, names the file it judged, and warns of the stale one."""
import subprocess
from pathlib import Path

import pytest

from tests.helpers import SaltCall, mount_namespace
from tests.salt.conftest import Minion
from tests.slurm.conftest import OPERATOR, running_slurm

WIRING = ("has no Epilog=", "has Prolog=", "Epilog cannot be checked", "not the laid-down")


def wiring_problems(report, read):
    """The wiring problems of the file this test's slurmd reads (a slurmd of
    the machine's own, if one runs, is judged too, and is not this test's)."""
    return [p for p in report["problems"] if str(read) in p and any(word in p for word in WIRING)]


@pytest.mark.parametrize("conf_via", ["env", "-f", "configless"])
def test_verify_judges_the_running_slurmds_slurm_conf(munge, accounts, salt_factories, tmp_path, conf_via):
    with running_slurm("22.05", conf_via=conf_via) as slurm, mount_namespace(fresh=("/etc/slurm",)) as ns:
        minion = Minion(salt_factories, tmp_path / "minion")
        minion.set_pillar(slurm.chain.pillar(localusers=["root", OPERATOR]))
        call = SaltCall(minion.config_dir)
        # the file slurmd reads: its own, or its configless cache
        read = slurm.conf if conf_via != "configless" else slurm.base / "spool/conf-cache/slurm.conf"
        assert read.is_file(), read
        wired = read.read_text()
        stale = "ClusterName=old\nEpilog=/usr/local/sbin/old-epilog\nProlog=/usr/local/sbin/old-prolog\n"

        def verify(etc_slurm_conf):
            subprocess.run([*ns, "sh", "-c", "cat > /etc/slurm/slurm.conf"], input=etc_slurm_conf, text=True,
                           check=True)
            ret = call("epilog.verify", "verbose=True", prefix=ns)
            assert isinstance(ret.data, dict), ret
            return ret.data

        # slurmd's file wires the chain, the stale one does not: no false stop
        report = verify(stale)
        assert wiring_problems(report, read) == [], report["problems"]
        assert {"file": str(read), "how": {"env": "SLURM_CONF", "-f": "-f", "configless": "configless"}[conf_via]} \
            in report["slurm_conf"], report
        assert any(w.startswith("[slurm-conf-stale] /etc/slurm/slurm.conf") for w in report["warnings"]), report
        assert not [w for w in report["warnings"] if str(read) in w and "after slurmd" in w], report["warnings"]
        # slurmd's file has no Epilog=, the stale one wires the chain: no false pass
        read.write_text("\n".join(line for line in wired.splitlines() if not line.startswith("Epilog=")) + "\n")
        try:
            report = verify(wired)
            assert any(p.startswith(f"[slurm-conf-epilog] {read} has no Epilog=") for p in report["problems"]), \
                report["problems"]
            assert report["result"] is False
            # slurmd read its own file before this change (a configless cache is slurmd's own to write)
            late = [w for w in report["warnings"]
                    if w.startswith(f"[slurm-conf-changed-since-start] {read} was created or changed at")]
            assert bool(late) == (conf_via != "configless"), report["warnings"]
        finally:
            read.write_text(wired)


def test_with_no_slurmd_verify_says_which_file_it_judged(munge, accounts, salt_factories, tmp_path):
    """No slurmd in sight (a pid namespace of its own) and no slurm.conf but
    the stale /etc/slurm one (a mount namespace of its own): verify judges
    it, and says no running slurmd confirmed it."""
    base = Path(tmp_path)
    minion = Minion(salt_factories, base / "minion")
    minion.set_pillar({"epilog": {"localusers": ["root"], "slurm_config_dir": str(base / "slurm"),
                                  "slurmd_spool_dir": str(base / "spool")}})
    with mount_namespace(fresh=("/etc/slurm",), pid=True) as ns:
        subprocess.run([*ns, "sh", "-c", "echo Epilog=/usr/local/sbin/old > /etc/slurm/slurm.conf"], check=True)
        ret = SaltCall(minion.config_dir)("epilog.verify", prefix=ns)
        assert isinstance(ret.data, dict), ret
        assert any(w.startswith("[slurmd-not-running] no slurmd runs here: judged /etc/slurm/slurm.conf")
                   for w in ret.data["warnings"]), ret
        assert any("/etc/slurm/slurm.conf has Epilog=/usr/local/sbin/old" in p for p in ret.data["problems"]), ret


def test_verify_judges_a_slurmd_in_a_mount_namespace_of_its_own_in_its_root(munge, accounts, salt_factories,
                                                                           tmp_path):
    """A real slurmd in a mount namespace of its own (a container's, a unit
    with a private /etc) whose /etc/slurm holds its slurm.conf, root's alone
    (0600), and, only there, the file an absolute Include of it names, with
    Epilog=, Prolog= and PrologFlags=: verify (in-process, in the node's own
    namespace) judges that slurm.conf in slurmd's root, finds it root's,
    reads the Include from there (its PrologFlags=Alloc is the one judged),
    and finds no wiring problem."""
    with mount_namespace(fresh=("/etc/slurm",)) as ns:
        def inside(slurm):
            lines = slurm.conf.read_text().splitlines()
            wiring = [line for line in lines if line.startswith(("Epilog=", "Prolog=", "PrologFlags="))]
            for name, text in (("wiring.conf", wiring),
                               ("slurm.conf", [line for line in lines if line not in wiring]
                                + ["Include /etc/slurm/wiring.conf"])):
                subprocess.run([*ns, "sh", "-c", f"umask 077 && cat > /etc/slurm/{name}"], input="\n".join(text) + "\n",
                               text=True, check=True)
            return ns, "/etc/slurm/slurm.conf"

        with running_slurm("22.05", conf_via="-f", place_slurmd=inside) as slurm:
            pid = int((slurm.base / "run/slurmd.pid").read_text())
            read = f"/proc/{pid}/root/etc/slurm/slurm.conf"
            minion = Minion(salt_factories, tmp_path / "minion")
            minion.set_pillar(slurm.chain.pillar(localusers=["root", OPERATOR]))
            report = minion("epilog.verify", verbose=True)
            assert {"file": read, "how": "-f"} in report["slurm_conf"], report["slurm_conf"]
            assert f"slurmd {pid} reads {read} (its -f): judged" in report["info"], report["info"]
            ours = [p for p in report["problems"] if f"/proc/{pid}/root" in p]
            assert not [p for p in ours if "[slurm-conf-not-root-only]" in p or "[slurm-conf-unreadable]" in p], ours
            assert wiring_problems(report, read) == [], report["problems"]
            # what only the namespace's Include gives is what verify judged
            assert [p for p in ours if p.startswith(f"[slurm-conf-prologflags] {read} has PrologFlags=Alloc:")], ours
