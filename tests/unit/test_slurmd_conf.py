"""Which slurm.conf a running slurmd reads, as slurmd.c's
_establish_configuration resolves it from its own command line and
environment: a table of what sites run (a build under a prefix, a unit that
sets SLURM_CONF, -f, configless with --conf-server or with no local file,
24.11's re-exec on reconfigure). No slurmd, no root: a slurmd in a mount
namespace of its own is tests/node/test_slurm_conf_root.py's."""
import os
import time

import pytest

from tests.helpers import REPO, load_file

epilog = load_file(REPO / "_modules/epilog.py", "epilog_module_slurmd_conf")

DEFAULT = "/opt/slurm/etc/slurm.conf"


@pytest.mark.parametrize("argv, env, exists, expect", [
    (["slurmd"], {}, {DEFAULT}, (DEFAULT, "default")),
    (["slurmd", "-D"], {}, set(), (None, "configless")),
    (["slurmd", "-f", "/x/slurm.conf"], {"SLURM_CONF": "/y/slurm.conf"}, {DEFAULT}, ("/x/slurm.conf", "-f")),
    (["slurmd", "-f/x/slurm.conf"], {}, set(), ("/x/slurm.conf", "-f")),
    (["slurmd"], {"SLURM_CONF": "/y/slurm.conf"}, {DEFAULT}, ("/y/slurm.conf", "SLURM_CONF")),
    # SLURM_CONF counts whether or not the file exists: slurmd reads it (and fails) all the same
    (["slurmd"], {"SLURM_CONF": "/gone/slurm.conf"}, {DEFAULT}, ("/gone/slurm.conf", "SLURM_CONF")),
    (["slurmd", "--conf-server", "ctl:6817"], {"SLURM_CONF": "/y/slurm.conf"}, {DEFAULT}, (None, "configless")),
    (["slurmd", "--conf-server=ctl"], {}, {DEFAULT}, (None, "configless")),
    (["slurmd", "-N", "-f", "-f", "/x"], {}, set(), ("/x", "-f")),
    (["slurmd"], {"SLURMD_RECONF_CONF_CACHE": "/var/spool/slurmd/conf-cache", "SLURM_CONF": "/y"}, set(),
     ("/var/spool/slurmd/conf-cache/slurm.conf", "reconf-cache")),
    (["slurmd"], {}, {DEFAULT}, (DEFAULT, "default")),
], ids=["build-default", "no-file-configless", "f-over-env", "f-joined", "env", "env-missing-file",
        "conf-server-first", "conf-server-equals", "N-takes-its-argument", "reconf-cache", "default-again"])
def test_slurmd_resolves_its_slurm_conf_as_slurmd_does(argv, env, exists, expect):
    assert epilog.slurmd_resolves(argv, env, DEFAULT, exists.__contains__) == expect


def test_a_build_default_that_cannot_be_read_is_unknown_not_configless():
    assert epilog.slurmd_resolves(["slurmd"], {}, None, lambda path: True) == (None, "unknown")
    assert epilog.slurmd_resolves(["slurmd", "-f", "/x"], {}, None, lambda path: True) == ("/x", "-f")


@pytest.mark.parametrize("argv, short, long_", [
    (["slurmd", "-Df", "/x"], {"D": "", "f": "/x"}, {}),
    (["slurmd", "-sDf/x", "-N", "n1"], {"s": "", "D": "", "f": "/x", "N": "n1"}, {}),
    (["slurmd", "--conf-s=ctl:6817"], {}, {"conf-server": "ctl:6817"}),
    (["slurmd", "--conf-server", "ctl"], {}, {"conf-server": "ctl"}),
    (["slurmd", "--conf", "Feature=x", "-f", "/y"], {"f": "/y"}, {"conf": "Feature=x"}),
    (["slurmd", "--co=x"], {}, {}),  # ambiguous: conf or conf-server, as getopt_long refuses it
    (["slurmd", "--", "-f", "/x"], {}, {}),
    (["slurmd", "-L", "-f", "-N"], {"L": "-f"}, {}),
], ids=["clustered", "clustered-joined", "long-prefix", "long-separate", "conf-is-not-conf-server", "ambiguous",
        "end-of-options", "option-arguments-taken"])
def test_slurmds_command_line_is_read_as_its_getopt_reads_it(argv, short, long_):
    assert epilog.slurmd_argv(argv) == (short, long_)


def test_the_slurmd_of_the_chains_spool_is_told_by_its_slurm_conf(tmp_path):
    """Of several slurmds, the strays and explain view takes the one whose
    SlurmdSpoolDir is epilog:slurmd_spool_dir: the last value, Slurm's
    default when none is given, None when the file cannot be read."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("SlurmdSpoolDir=/var/spool/a/\nslurmdspooldir = /var/spool/b\n")
    assert epilog.slurmconf._conf_spool(str(conf)) == "/var/spool/b"
    conf.write_text("ClusterName=x\n")
    assert epilog.slurmconf._conf_spool(str(conf)) == "/var/spool/slurmd"
    assert epilog.slurmconf._conf_spool(str(tmp_path / "none")) is None


def test_slurm_confs_spool_and_the_pillars_are_compared_as_slurmd_expands_them():
    """SlurmdSpoolDir and epilog:slurmd_spool_dir name one directory when
    their words are the same, or once %n and %h are expanded for the
    slurmd's node name (the node program's expansion)."""
    host = os.uname().nodename.split(".", 1)[0]
    assert epilog.slurmconf._same_spool("/tmp/slurmd.%n.spool", "/tmp/slurmd.n01.spool", "n01")
    assert epilog.slurmconf._same_spool("/tmp/slurmd.n01.spool/", "/tmp/slurmd.%n.spool", "n01")
    assert epilog.slurmconf._same_spool("/var/spool/%h", f"/var/spool/{host}", "n01")
    assert epilog.slurmconf._same_spool("/tmp/slurmd.%n.spool", "/tmp/slurmd.%n.spool", None)
    assert not epilog.slurmconf._same_spool("/tmp/slurmd.%n.spool", "/tmp/slurmd.n02.spool", "n01")
    assert not epilog.slurmconf._same_spool("/var/spool/%n", "/var/spool/slurmd", None)
    assert not epilog.slurmconf._same_spool(None, "/var/spool/slurmd", "n01")


def test_a_slurm_conf_changed_after_slurmd_started_is_a_warning(tmp_path):
    """This process stands for slurmd: a file written now is newer than it;
    a configless cache (slurmd's own to write) never is a warning."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("Epilog=/x\n")
    late = epilog.slurmd._changed_since_start(str(conf), "-f", os.getpid())
    assert late and late.startswith(f"[slurm-conf-changed-since-start] {conf} was created or changed at") \
        and "scontrol reconfigure" in late
    assert epilog.slurmd._changed_since_start(str(conf), "configless", os.getpid()) is None
    assert epilog.slurmd._changed_since_start(str(conf), "-f", None) is None
    old = time.time() - 10 * 365 * 86400
    os.utime(conf, (old, old))  # the ctime moves all the same: still after
    assert epilog.slurmd._changed_since_start(str(conf), "default", os.getpid())


def test_one_file_by_two_paths_is_one_and_slurmds_own_view_counts(tmp_path):
    """A symlink and its target are one file; in this process's own mount
    namespace a path is read as it is."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("x\n")
    (tmp_path / "link.conf").symlink_to(conf)
    assert epilog.slurmd._file_id(str(tmp_path / "link.conf")) == epilog.slurmd._file_id(str(conf))
    assert epilog.slurmd._file_id(str(tmp_path / "none")) == str(tmp_path / "none")
    assert epilog.slurmd._as_slurmd_sees_it(os.getpid(), str(conf)) == str(conf)
    assert epilog.slurmd._as_slurmd_sees_it(os.getpid(), None) is None

