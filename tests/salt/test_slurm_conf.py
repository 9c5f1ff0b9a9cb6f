"""slurm.conf read the way Slurm reads it, by epilog.verify and epilog.clean
on a node laid down by the real state (the node fixture); the parser's
table of the forms Slurm accepts is in tests/unit."""
import os
import pwd
from collections import Counter

import pytest

from tests.helpers import RELEASES, mount_namespace

# How the module reads slurm.conf: the same on every Salt line
# (tests/salt/conftest.py); epilog.clean's refusal itself runs on each, in
# test_operations.py.
pytestmark = pytest.mark.salt_line_independent


@pytest.mark.parametrize("text", [
    'Epilog="{conf}/epilog.sh"\n',
    "epilog = {conf}/epilog.sh\n",
    "Include extra.conf\n",
    "PROLOG={conf}/prolog.sh\n",
    "Epilog=epilog.sh\n",
    "Epilog=/{conf}/epilog.sh\n",
    "Epilog={link}/epilog.sh\n",
    "Epilog={conf}/epi\\\nlog.sh\n",
    "Epilog={conf}/epi\\log.sh\n",
    "Epilog={conf}/epilog.d/*\n",
], ids=["quoted", "lowercase-spaces", "include", "prolog-upper", "relative", "double-slash", "symlinked-dir",
        "continued-line", "escaped", "glob"])
def test_clean_refuses_while_any_form_names_the_chain(node, text):
    node.apply()
    conf = node.conf_dir / "slurm.conf"
    link = node.base / "slurm-link"
    link.symlink_to(node.conf_dir)
    conf.write_text("ClusterName=x\n" + text.replace("{conf}", str(node.conf_dir)).replace("{link}", str(link)))
    (node.conf_dir / "extra.conf").write_text(f"Epilog={node.conf_dir}/epilog.sh\n")
    refused = node.minion.apply("epilog.clean")
    assert not refused.ok and "refusing to remove the chain" in refused.text, refused
    assert (node.conf_dir / "epilog.sh").is_symlink() and (node.conf_dir / RELEASES).is_dir()


def test_clean_refuses_when_it_cannot_tell(node):
    """Run where this node has no slurm.conf of its own and no slurmd (a
    mount and pid namespace of their own: a machine's own /etc/slurm and
    slurmd are never what the test assumes away)."""
    node.apply()
    conf = node.conf_dir / "slurm.conf"
    conf.write_text("ClusterName=x\nInclude gone.conf\n")
    with mount_namespace(fresh=("/etc/slurm",), pid=True) as alone:
        refused = node.call("state.apply", "epilog.clean", prefix=alone)
        assert refused.returncode != 0 and "gone.conf cannot be read" in refused.stdout, refused
        conf.unlink()  # and no other slurm.conf on this node: configless, or not there at all
        refused = node.call("state.apply", "epilog.clean", prefix=alone)
        assert refused.returncode != 0 and "no slurm.conf found" in refused.stdout, refused
        assert (node.conf_dir / "epilog.sh").is_symlink()
        # configless: slurmd's cache in its spool is what it runs
        cache = node.base / "spool/conf-cache"
        cache.mkdir()
        (cache / "slurm.conf").write_text(f"Epilog = \"{node.conf_dir}/epilog.sh\"\n")
        report = node.call("epilog.verify", "verbose=True", prefix=alone).data
        assert f"[slurmd-not-running] no slurmd runs here: judged {cache}/slurm.conf (found as configless), which " \
            "no running slurmd confirmed" in report["warnings"], report
        assert report["slurm_conf"] == [{"file": f"{cache}/slurm.conf", "how": "configless"}], report
        refused = node.call("state.apply", "epilog.clean", prefix=alone)
        assert refused.returncode != 0 and "conf-cache/slurm.conf names" in refused.stdout, refused
        (cache / "slurm.conf").write_text("ClusterName=x\n")
        ret = node.call("state.apply", "epilog.clean", prefix=alone)
        assert ret.returncode == 0, ret
    assert not (node.conf_dir / "epilog.sh").exists()


def test_verify_reads_includes_and_quotes_and_the_last_value(node):
    node.apply()
    conf = node.conf_dir / "slurm.conf"
    base = conf.read_text()
    conf.write_text(base.replace(f"Epilog={node.conf_dir}/epilog.sh", f'Epilog = "{node.conf_dir}/epilog.sh"'))
    assert node.run("verify")["result"] is True
    (node.conf_dir / "late.conf").write_text("Epilog=/usr/local/sbin/other-epilog\n")
    conf.write_text(conf.read_text() + "Include late.conf\n")
    problems = "\n".join(node.run("verify")["problems"])
    assert "gives Epilog= 2 times" in problems, problems


def test_a_slurm_conf_of_the_slurm_accounts_alone_is_a_warning_any_other_a_problem(node):
    """slurm-formula lays slurm.conf down as slurm:root 0644: verify judges
    it (the chain is wired) and warns that the slurm account can run
    anything as root; writable by its group, or another account's, it is a
    problem, and what it says proves nothing."""
    node.apply()
    conf = node.conf_dir / "slurm.conf"
    slurm = pwd.getpwnam("slurm")
    os.chown(conf, slurm.pw_uid, 0)
    os.chmod(conf, 0o644)
    report = node.run("verify")
    assert report["result"] is True, report["problems"]
    assert [w for w in report["warnings"] if w.startswith("[slurm-conf-owned-by-slurm]")] == [
        f"[slurm-conf-owned-by-slurm] {conf}, which slurmd reads, is owned by the slurm account: that account can run "
        "anything as root through Epilog= or Prolog= (slurmd runs them as root). Make it root's (chown root) unless "
        "the site accepts that (slurm-formula lays slurm.conf down as slurm's)"], report["warnings"]
    os.chmod(conf, 0o664)
    problems = node.run("verify")["problems"]
    assert any(p.startswith(f"[slurm-conf-not-root-only] {conf}, which slurmd reads") for p in problems), problems
    os.chmod(conf, 0o644)
    os.chown(conf, pwd.getpwnam("nobody").pw_uid, 0)
    report = node.run("verify")
    assert report["result"] is False and any(p.startswith("[slurm-conf-not-root-only]") for p in report["problems"])
    assert not any(w.startswith("[slurm-conf-owned-by-slurm]") for w in report["warnings"]), report


def test_an_include_glob_over_a_directory_others_can_write_and_a_hostile_name_in_it(node):
    """slurm.conf includes conf.d/*.conf, a directory another account can
    write, which holds a file named with a BEL, a line break, a forged
    verdict and a terminal sequence: verify says the directory is not root's
    alone, and the file too (it sits there), and every line of verify's and
    chain_wired's answers is one printable line, the name escaped as the
    records escape it."""
    node.apply()
    conf = node.conf_dir / "slurm.conf"
    (node.conf_dir / "conf.d").mkdir()
    (node.conf_dir / "conf.d").chmod(0o777)
    name = "x\x07\nFORGED: result True, no problems\x1b[2J.conf"
    (node.conf_dir / "conf.d" / name).write_text("ClusterName=x\n")
    conf.write_text(conf.read_text() + "Include conf.d/*.conf\n")
    shown = f"{node.conf_dir}/conf.d/x\\x07\\nFORGED: result True, no problems\\x1b[2J.conf"
    report = node.run("verify", verbose=True)
    wired = node.run("chain_wired")
    lines = [*report["problems"], *report["warnings"], *report["info"], *wired["read"], *wired["wired"],
             *wired["unknown"]]
    assert all(line.isprintable() for line in lines), [line for line in lines if not line.isprintable()]
    assert report["result"] is False
    assert f"[slurm-conf-include-dir-not-root-only] {node.conf_dir}/conf.d, a directory an Include of slurm.conf " \
        "lists, is not one only root (or the slurm account alone) can write: another account could put a file " \
        "there that slurmd then reads, naming any Epilog=" in report["problems"], report["problems"]
    assert any(p.startswith(f"[slurm-conf-not-root-only] {shown}, which slurmd reads") for p in report["problems"])
    assert shown in wired["read"], wired


def test_one_call_reads_each_slurm_conf_once(node):
    """verify reads slurm.conf for the state run it makes (parts.sls asks
    chain_wired), for its own chain_wired, to judge it and to look for
    stale files: one call, one read of each file (counted as the opens of
    its name, in-process, where no slurmd is in sight); the next call reads
    them afresh."""
    node.apply()
    conf = node.conf_dir / "slurm.conf"
    (node.conf_dir / "extra.conf").write_text("ClusterName=x\n")
    conf.write_text(conf.read_text() + "Include extra.conf\n")

    def counted():
        opened, real = Counter(), os.open

        def counting(path, *args, **kwargs):
            if kwargs.get("dir_fd") is not None and path in ("slurm.conf", "extra.conf"):
                opened[path] += 1
            return real(path, *args, **kwargs)

        os.open = counting
        try:
            report = node.minion("epilog.verify", verbose=True)
            once = dict(opened)
            node.minion("epilog.chain_wired")
        finally:
            os.open = real
        return once, dict(opened), report

    once, twice, report = node.isolated(counted)
    assert {"file": str(conf), "how": "slurm_config_dir"} in report["slurm_conf"], report
    assert once == {"slurm.conf": 1, "extra.conf": 1}, once
    assert twice == {"slurm.conf": 2, "extra.conf": 2}, twice
