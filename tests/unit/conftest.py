"""The unit tier: the node program's decisions and rules, called directly
(no root, no render, no Salt loader), and the formula's rules through
Salt's own Jinja. node(name) imports epilog_node.<name> from the formula."""
import importlib
import sys

from tests.helpers import REPO

MODULES = str(REPO / "salt/_modules")


def node(name):
    """The node program's module NAME (epilog_node.NAME), imported from the
    formula's salt/_modules, as a release holds it."""
    if MODULES not in sys.path:
        sys.path.insert(0, MODULES)
    return importlib.import_module(f"epilog_node.{name}")
