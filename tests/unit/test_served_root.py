"""salt/ is what a site serves (file_roots, or gitfs with root: salt), beside
its own states: it holds no top file. With several roots in one
environment Salt reads the first top.sls it finds, so one of the formula's
could hide the site's own top file, or stand in for it."""
from tests.helpers import REPO


def test_the_served_root_holds_no_top_file():
    assert not sorted((REPO / "salt").rglob("top.sls"))
