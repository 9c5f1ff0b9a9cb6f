"""slurm.conf read the way Slurm reads it: a table of the forms Slurm
accepts, through the module's parser, then epilog.verify and epilog.clean
on a node laid down by the real state (the Node of test_operations)."""
from importlib.util import module_from_spec, spec_from_file_location

import pytest

from tests.functional.test_operations import node  # noqa: F401 - the fixture
from tests.helpers import REPO


def load_module():
    spec = spec_from_file_location("epilog_module_conf", REPO / "_modules/epilog.py")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EPILOG = "/etc/slurm/epilog.sh"
# (id, files {relative name: text}, the Epilog= values in order)
FORMS = [
    ("plain", {"slurm.conf": f"Epilog={EPILOG}\n"}, [EPILOG]),
    ("spaces-around-equals", {"slurm.conf": f"Epilog = {EPILOG}\n"}, [EPILOG]),
    ("quoted", {"slurm.conf": f'Epilog="{EPILOG}"\n'}, [EPILOG]),
    ("quoted-with-spaces", {"slurm.conf": 'Epilog = "/etc/slurm dir/epilog.sh"\n'}, ["/etc/slurm dir/epilog.sh"]),
    ("any-case", {"slurm.conf": f"EPILOG={EPILOG}\nepilog={EPILOG}.2\n"}, [EPILOG, f"{EPILOG}.2"]),
    ("several-pairs-on-a-line", {"slurm.conf": f"PrologFlags=Alloc Epilog={EPILOG} Prolog=/x\n"}, [EPILOG]),
    ("comment", {"slurm.conf": f"#Epilog=/old\nEpilog={EPILOG} # the runner\n"}, [EPILOG]),
    ("task-epilog-is-not-epilog", {"slurm.conf": "TaskEpilog=/x\nSrunEpilog=/y\n"}, []),
    ("include-relative", {"slurm.conf": "Include epilog.conf\n", "epilog.conf": f"Epilog={EPILOG}\n"}, [EPILOG]),
    ("include-glob-in-order", {"slurm.conf": "Epilog=/first\ninclude conf.d/*.conf\n",
                               "conf.d/10.conf": "Epilog=/second\n", "conf.d/20.conf": f"Epilog={EPILOG}\n"},
     ["/first", "/second", EPILOG]),
    ("include-absolute", {"slurm.conf": "Include {dir}/abs.conf\n", "abs.conf": f"Epilog={EPILOG}\n"}, [EPILOG]),
]


@pytest.mark.parametrize("files,epilogs", [(f, e) for _, f, e in FORMS], ids=[i for i, _, _ in FORMS])
def test_parser_reads_each_form_as_slurm_does(tmp_path, files, epilogs):
    epilog = load_module()
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text.replace("{dir}", str(tmp_path)))
    values, read, problems = epilog.parse_slurm_conf(str(tmp_path / "slurm.conf"))
    assert problems == []
    assert values.get("epilog", []) == epilogs
    assert len(read) == len(files)


def test_parser_reads_a_bounded_number_of_files_whatever_includes_what(tmp_path):
    """Files that include each other (a glob of themselves) are a problem
    named in the answer, not a loop: at most CONF_FILES_MAX reads."""
    epilog = load_module()
    for i in range(6):
        (tmp_path / f"{i}.conf").write_text(f"Include {tmp_path}/*.conf\nEpilog=/e{i}\n")
    (tmp_path / "slurm.conf").write_text("Include *.conf\n")
    _, read, problems = epilog.parse_slurm_conf(str(tmp_path / "slurm.conf"))
    assert len(read) == epilog.CONF_FILES_MAX, len(read)
    assert any(f"more than {epilog.CONF_FILES_MAX} files included" in p for p in problems), problems[:3]
    (tmp_path / "nul.conf").write_bytes(b"Include /etc/\x00passwd\n")
    _, _, problems = epilog.parse_slurm_conf(str(tmp_path / "nul.conf"))
    assert problems and "cannot be read" in problems[0], problems


def test_parser_names_an_include_it_cannot_read(tmp_path):
    epilog = load_module()
    (tmp_path / "slurm.conf").write_text("Include missing.conf\nInclude none-*.conf\n")
    _, _, problems = epilog.parse_slurm_conf(str(tmp_path / "slurm.conf"))
    assert len(problems) == 2 and all("names no file" in p or "cannot be read" in p for p in problems), problems


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
def test_clean_refuses_while_any_form_names_the_chain(node, text):  # noqa: F811 - the fixture
    node.apply()
    conf = node.conf_dir / "slurm.conf"
    link = node.base / "slurm-link"
    link.symlink_to(node.conf_dir)
    conf.write_text("ClusterName=x\n" + text.replace("{conf}", str(node.conf_dir)).replace("{link}", str(link)))
    (node.conf_dir / "extra.conf").write_text(f"Epilog={node.conf_dir}/epilog.sh\n")
    refused = node.call("state.apply", "epilog.clean")
    assert refused.returncode != 0 and "refusing to remove the chain" in refused.stdout, refused
    assert (node.conf_dir / "epilog.sh").is_symlink() and (node.conf_dir / "epilog-releases").is_dir()


def test_clean_refuses_when_it_cannot_tell(node):  # noqa: F811 - the fixture
    node.apply()
    conf = node.conf_dir / "slurm.conf"
    conf.write_text("ClusterName=x\nInclude gone.conf\n")
    refused = node.call("state.apply", "epilog.clean")
    assert refused.returncode != 0 and "gone.conf cannot be read" in refused.stdout, refused
    conf.unlink()  # and no other slurm.conf on this node: configless, or not there at all
    refused = node.call("state.apply", "epilog.clean")
    assert refused.returncode != 0 and "no slurm.conf found" in refused.stdout, refused
    assert (node.conf_dir / "epilog.sh").is_symlink()
    # configless: slurmd's cache in its spool is what it runs
    cache = node.base / "spool/conf-cache"
    cache.mkdir()
    (cache / "slurm.conf").write_text(f"Epilog = \"{node.conf_dir}/epilog.sh\"\n")
    report = node.run("verify")
    assert any("runs configless" in p for p in report["problems"]), report
    refused = node.call("state.apply", "epilog.clean")
    assert refused.returncode != 0 and "conf-cache/slurm.conf names" in refused.stdout, refused
    (cache / "slurm.conf").write_text("ClusterName=x\n")
    node.apply("epilog.clean")
    assert not (node.conf_dir / "epilog.sh").exists()


def test_verify_reads_includes_and_quotes_and_the_last_value(node):  # noqa: F811 - the fixture
    node.apply()
    conf = node.conf_dir / "slurm.conf"
    base = conf.read_text()
    conf.write_text(base.replace(f"Epilog={node.conf_dir}/epilog.sh", f'Epilog = "{node.conf_dir}/epilog.sh"'))
    assert node.run("verify")["result"] is True
    (node.conf_dir / "late.conf").write_text("Epilog=/usr/local/sbin/other-epilog\n")
    conf.write_text(conf.read_text() + "Include late.conf\n")
    problems = "\n".join(node.run("verify")["problems"])
    assert "gives Epilog= 2 times" in problems, problems
