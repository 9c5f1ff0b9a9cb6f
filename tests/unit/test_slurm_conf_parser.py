"""The slurm.conf reader (the module's parse_slurm_conf), read the way Slurm
reads it: a table of the forms Slurm accepts, and its bounds. Pure: files in
tmp_path, no root, no Salt loader."""
import pytest

from tests.helpers import REPO, load_file

epilog = load_file(REPO / "_modules/epilog.py", "epilog_module_unit")

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
    (tmp_path / "slurm.conf").write_text("Include missing.conf\nInclude none-*.conf\n")
    _, _, problems = epilog.parse_slurm_conf(str(tmp_path / "slurm.conf"))
    assert len(problems) == 2 and all("names no file" in p or "cannot be read" in p for p in problems), problems


# PrologFlags= as Slurm reads it: (value, whether the chain has what it needs,
# Alloc and Contain)
PROLOG_FLAGS = [
    ("Alloc,Contain", True),
    ("Contain", True),                   # Contain sets Alloc
    ("X11", True),                       # X11 sets Alloc and Contain
    ("RunInJob", True),                  # and so does RunInJob
    ("contain,serial", True),            # any case, with others
    (" Alloc , Contain ", True),
    ("x11,NoHold", True),
    ("Alloc", False),
    ("DeferBatch", False),               # sets Alloc only
    ("ForceRequeueOnFail,Serial", False),
    ("", False),
    ("Containment", False),              # a flag Slurm does not know sets nothing
]


@pytest.mark.parametrize("value,enough", PROLOG_FLAGS, ids=[v or "empty" for v, _ in PROLOG_FLAGS])
def test_prolog_flags_are_read_with_the_flags_each_sets(value, enough):
    assert ({"alloc", "contain"} <= epilog.prolog_flags(value)) is enough


SLURM_UID = 64030


# (id, owner uid, mode, regular file, in directories only root can write, slurm's uid, verdict)
TRUST = [
    ("root-0644", 0, 0o100644, True, True, SLURM_UID, "root"),
    ("root-0600", 0, 0o100600, True, True, SLURM_UID, "root"),
    ("slurm-formula-slurm-0644", SLURM_UID, 0o100644, True, True, SLURM_UID, "slurm"),
    ("slurm-0600", SLURM_UID, 0o100600, True, True, SLURM_UID, "slurm"),
    ("slurm-group-writable", SLURM_UID, 0o100664, True, True, SLURM_UID, "untrusted"),
    ("slurm-others-writable", SLURM_UID, 0o100646, True, True, SLURM_UID, "untrusted"),
    ("root-group-writable", 0, 0o100664, True, True, SLURM_UID, "untrusted"),
    ("another-account", 1001, 0o100644, True, True, SLURM_UID, "untrusted"),
    ("no-slurm-account", SLURM_UID, 0o100644, True, True, None, "untrusted"),
    ("slurm-in-a-directory-another-account-writes", SLURM_UID, 0o100644, True, False, SLURM_UID, "untrusted"),
    ("root-in-a-directory-another-account-writes", 0, 0o100644, True, False, SLURM_UID, "untrusted"),
    ("not-a-regular-file", 0, 0o010644, False, True, SLURM_UID, "untrusted"),
    ("a-slurm-account-of-uid-0-is-root-only", 0, 0o100644, True, True, 0, "root"),
]


@pytest.mark.parametrize("uid,mode,regular,placed,slurm_uid,verdict", [row[1:] for row in TRUST],
                         ids=[row[0] for row in TRUST])
def test_a_slurm_conf_is_trusted_as_roots_or_the_slurm_accounts_alone(uid, mode, regular, placed, slurm_uid,
                                                                       verdict):
    """One rule for every slurm.conf and file it includes: root's, or the
    slurm account's (slurm-formula's slurm:root 0644), writable by its owner
    alone, in directories only root can write; anything else proves
    nothing."""
    assert epilog.conf_trust(uid, mode, regular, placed, slurm_uid) == verdict
