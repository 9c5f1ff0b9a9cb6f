"""Which directory the state refuses for the log, the records, the metrics
and the ssh allow file is the node program's rule, system.Trust's: the
program writes them only inside a directory only root can write. The state
epilog.config judges it at its render, in Jinja (a node's first apply has
no module of ours to call: the state syncs it later in the same apply), so
its check is rendered here, through Salt's Jinja, over a grid of what lstat
finds on the way down to the directory, and must refuse exactly what
Trust.root_dir refuses, naming the first entry from the top that fails it.
A directory still missing passes: the state makes it root's, 0755."""
import collections
import itertools
import stat

import pytest

from tests.helpers import REPO
from tests.unit.conftest import node
from tests.unit.test_settings import render_text

system = node("system")
salt_exceptions = pytest.importorskip("salt.exceptions")

Stat = collections.namedtuple("Stat", "st_mode st_uid")
# what lstat may find at one place on the way down
FOUND = {
    "root 0755": Stat(stat.S_IFDIR | 0o755, 0),
    "root 0775": Stat(stat.S_IFDIR | 0o775, 0),
    "root 0757": Stat(stat.S_IFDIR | 0o757, 0),
    "root 1777": Stat(stat.S_IFDIR | stat.S_ISVTX | 0o777, 0),
    "root 1755": Stat(stat.S_IFDIR | stat.S_ISVTX | 0o755, 0),
    "slurm 0755": Stat(stat.S_IFDIR | 0o755, 64030),
    "slurm 1777": Stat(stat.S_IFDIR | stat.S_ISVTX | 0o777, 64030),
    "symlink": Stat(stat.S_IFLNK | 0o777, 0),
    "file": Stat(stat.S_IFREG | 0o644, 0),
}
PLACES = ["/", "/a", "/a/b", "/a/b/c"]
LOG = "/a/b/c/epilog.log"


def cases():
    """Each place with each finding, the others root 0755; each depth from
    which on nothing exists yet; and sticky ancestors above a bad or good
    last directory."""
    for i, found in itertools.product(range(len(PLACES)), FOUND):
        yield {p: "root 0755" for p in PLACES} | {PLACES[i]: found}
    for i in range(1, len(PLACES)):
        yield {p: "root 0755" if j < i else None for j, p in enumerate(PLACES)}
    for last in ("root 0755", "root 0775", "root 1777"):
        yield {"/": "root 0755", "/a": "root 1777", "/a/b": "root 1755", "/a/b/c": last}


def refused_by_trust(found):
    """The first place (from the top) whose lstat system.Trust's rule refuses."""
    for place in PLACES:
        if found[place] is not None and not system.Trust.root_dir(FOUND[found[place]], place == PLACES[-1]):
            return place
    return None


@pytest.mark.parametrize("found", list(cases()), ids=lambda found: ",".join(str(v) for v in found.values()))
def test_the_state_refuses_exactly_what_the_node_programs_trust_refuses(tmp_path, found):
    def lstat(path):
        name = found.get(path, "root 0755")
        return {} if name is None else dict(FOUND[name]._asdict())

    pillar = {"epilog": {"log_file": LOG, "record_file": "/a/b/c/records.jsonl",
                         "ssh_allow_file": "/a/b/c/localusers", "stop_file": "/a/b/c/epilog.stop"}}
    template = (REPO / "salt/epilog/config.sls").read_text()
    expected = refused_by_trust(found)
    if expected is None:
        text = render_text(tmp_path, template, pillar, salt_more={"file.lstat": lstat})
        assert "epilog-config-log-directory-file-directory" in text
        return
    with pytest.raises(salt_exceptions.SaltException) as caught:
        render_text(tmp_path, template, pillar, salt_more={"file.lstat": lstat})
    st = FOUND[found[expected]]
    assert (f"epilog:log_file ({LOG!r}): {expected} is a symlink, not owned by root, or writable by its group or "
            f"others (uid {st.st_uid}, mode {st.st_mode:o}); the epilog runs as root") in str(caught.value)
