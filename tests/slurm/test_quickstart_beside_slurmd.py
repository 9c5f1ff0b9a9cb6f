"""The README's quickstart on a machine that already runs a slurmd, whose
slurm.conf names another chain (the test Slurm's): the quickstart judges its
sandbox alone, and passes, where the image's accounts alone resolve."""
import tempfile

from tests.salt.test_quickstart import quickstart


def test_the_quickstart_passes_beside_a_slurmd_that_runs_another_chain(slurm):
    assert str(slurm.chain.conf_dir) in slurm.conf.read_text()
    with tempfile.TemporaryDirectory(prefix="epilog-qs-", dir="/var/tmp") as sandbox:
        out = quickstart(sandbox)
    assert "does nothing: listed in" in out[out.index("== 4."):out.index("== 5.")], out
