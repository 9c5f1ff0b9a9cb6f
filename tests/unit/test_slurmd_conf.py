"""Which slurm.conf a running slurmd reads, as slurmd.c's
_establish_configuration resolves it from its own command line and
environment: a table of what sites run (a build under a prefix, a unit that
sets SLURM_CONF, -f, configless with --conf-server or with no local file,
24.11's re-exec on reconfigure). Pure: no slurmd, no root."""
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
