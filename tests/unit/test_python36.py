"""What a node runs without Salt (the node program and its entry points, at
every job end, deploy and rollback) runs on the system python3, which is 3.6
on RHEL/Rocky/Alma 8 and SLES 15. No Python 3.6 exists on this Debian 12
machine, so this reads the code as 3.6 would: its grammar, and the calls
that 3.7 added keywords to."""
import ast

import pytest

from tests.helpers import REPO

FILES = sorted((REPO / "salt/_modules/epilog_node").glob("*.py")) + sorted(
    p for p in (REPO / "salt/epilog/files").rglob("*.jinja") if p.read_text().startswith("#!/usr/bin/python3"))
# keywords added after 3.6 to calls these files make
NEWER = {"run": {"capture_output", "text"}, "Popen": {"text"}, "check_output": {"text"},
         "add_subparsers": {"required"}}
# calls of what 3.7 and later added
NEWER_NAMES = {"isascii", "scandir_fd", "breakpoint", "fromisoformat", "pidfd_open", "removeprefix", "removesuffix"}


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_node_side_python_reads_as_python_3_6(path):
    tree = ast.parse(path.read_text(), filename=str(path), feature_version=(3, 6))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            for keyword in node.keywords:
                if keyword.arg in NEWER.get(name, ()):
                    found.append(f"{path.name}:{node.lineno} {name}({keyword.arg}=) needs Python 3.7")
        if isinstance(node, ast.NamedExpr):
            found.append(f"{path.name}:{node.lineno} := needs Python 3.8")
        if isinstance(node, ast.Attribute) and node.attr in NEWER_NAMES:
            found.append(f"{path.name}:{node.lineno} .{node.attr} needs Python 3.7 or later")
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            found.append(f"{path.name}:{node.lineno} from __future__ import")
    assert found == []
