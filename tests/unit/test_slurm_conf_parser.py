"""The slurm.conf reader (the module's parse_slurm_conf), read the way Slurm
reads it: a table of the forms Slurm accepts, and its bounds. Pure: files in
tmp_path, no root, no Salt loader."""
import os

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
    ("include-any-case-and-blanks", {"slurm.conf": "  INCLUDE\t  epilog.conf \t\n", "epilog.conf": f"Epilog={EPILOG}\n"},
     [EPILOG]),
    ("include-alone-is-no-include", {"slurm.conf": f"include\nIncludes=x\nEpilog={EPILOG}\n"}, [EPILOG]),
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
    assert len(read) == epilog.slurmconf.CONF_FILES_MAX, len(read)
    assert any(f"more than {epilog.slurmconf.CONF_FILES_MAX} files included" in p for p in problems), problems[:3]
    (tmp_path / "nul.conf").write_bytes(b"Include /etc/\x00passwd\n")
    _, _, problems = epilog.parse_slurm_conf(str(tmp_path / "nul.conf"))
    assert problems and "cannot be read" in problems[0], problems


def test_an_include_line_of_a_million_blanks_is_read_in_one_pass(tmp_path):
    """A user who can write an included file wrote one Include line whose
    value is followed by a long run of blanks and one more character: a
    lazy regular expression retried the run at every character (hours at
    4 MiB). The line is split instead; its value is all of it."""
    (tmp_path / "slurm.conf").write_text("Include x" + " " * 1_000_000 + "y\n")
    _, _, problems = epilog.parse_slurm_conf(str(tmp_path / "slurm.conf"))
    assert len(problems) == 1 and problems[0].endswith("cannot be read: File name too long"), problems[0][-80:]


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


def test_a_thousand_include_globs_are_cut_and_said(tmp_path):
    """1,000 glob Include lines over a tree of directories (the /proc/*/*
    attack, on a temp dir) are answered within the parse's bounds: the
    globs past CONF_GLOBS_MAX and the lines past CONF_INCLUDES_MAX are not
    looked at, each bound reached is one [slurm-conf-cut] line, and what the
    files say outside the Includes is still read."""
    for i in range(10):
        for j in range(10):
            (tmp_path / f"x{i}" / f"y{j}").mkdir(parents=True)
    (tmp_path / "inc.conf").write_text(f"Include {tmp_path}/*/*/nonexist*\n" * 1000 + "Epilog=/after\n")
    (tmp_path / "slurm.conf").write_text("Include inc.conf\n")
    values, read, problems = epilog.parse_slurm_conf(str(tmp_path / "slurm.conf"))
    assert values["epilog"] == ["/after"]
    assert read == [str(tmp_path / "slurm.conf"), str(tmp_path / "inc.conf")]
    cuts = [p for p in problems if p.startswith(f"[slurm-conf-cut] {tmp_path}/slurm.conf is read only in part: ")]
    assert any(f"more than {epilog.slurmconf.CONF_GLOBS_MAX} Include globs" in p for p in cuts), problems
    assert any(f"more than {epilog.slurmconf.CONF_INCLUDES_MAX} Include lines" in p for p in cuts), problems
    # a line that names no file, given a thousand times, is said once
    assert len(problems) == len(set(problems)) and len(problems) <= 2 + len(epilog.slurmconf._CUT), problems


@pytest.mark.parametrize("bound, what", [("CONF_ENTRIES_MAX", "directory entries listed"),
                                         ("CONF_MATCHES_MAX", "files matched"), ("CONF_SECONDS", "more than 0 s"),
                                         ("CONF_FILES_MAX", "files included")])
def test_each_bound_of_a_parse_is_said_when_reached(tmp_path, monkeypatch, bound, what):
    """Each bound, reached, is one [slurm-conf-cut] line that names it (the
    bound set low here, so that a small tree reaches it)."""
    monkeypatch.setattr(epilog.slurmconf, bound, 0)
    (tmp_path / "conf.d").mkdir()
    for i in range(3):
        (tmp_path / f"conf.d/{i}.conf").write_text(f"Prolog=/p{i}\n")
    (tmp_path / "slurm.conf").write_text("Include conf.d/*.conf\n")
    _, _, problems = epilog.parse_slurm_conf(str(tmp_path / "slurm.conf"))
    assert [p for p in problems if p.startswith("[slurm-conf-cut]") and what in p], problems


def test_include_globs_match_as_glob3_does(tmp_path):
    """The module's own glob (names listed through descriptors, fnmatch)
    finds what glob(3) finds: sorted, a dotted name only by a dotted
    pattern, through a symlinked directory, in several directories."""
    for name in ("a/1.conf", "a/2.conf", "a/.hidden.conf", "b/3.conf", "b/x.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(f"Prolog=/{name}\n")
    (tmp_path / "c").symlink_to("a")
    (tmp_path / "slurm.conf").write_text("Include */[12].conf\nInclude b/*.conf\nInclude a/.*.conf\n")
    values, _, problems = epilog.parse_slurm_conf(str(tmp_path / "slurm.conf"))
    assert problems == []
    assert values["prolog"] == ["/a/1.conf", "/a/2.conf", "/a/1.conf", "/a/2.conf", "/b/3.conf", "/a/.hidden.conf"]


def test_a_parse_is_made_once_per_call_and_never_kept_across_calls(tmp_path, monkeypatch):
    """Within one call of the module (verify's chain_wired, its judging and
    its stale-file look) a slurm.conf is read once; a file changed since is
    read again; outside a call, and in the next call, it is read afresh."""
    reads = []
    real = epilog._node.roots.Root.read
    monkeypatch.setattr(epilog._node.roots.Root, "read", staticmethod(lambda fd, limit: reads.append(fd) or real(fd, limit)))
    (tmp_path / "inc.conf").write_text("Epilog=/e\n")
    conf = tmp_path / "slurm.conf"
    conf.write_text("Include inc.conf\n")
    with epilog.common._one_call():
        for _ in range(3):
            assert epilog.parse_slurm_conf(str(conf))[0] == {"epilog": ["/e"]}
        assert len(reads) == 2
        (tmp_path / "inc.conf").write_text("Epilog=/changed\n")
        assert epilog.parse_slurm_conf(str(conf))[0] == {"epilog": ["/changed"]}
        assert len(reads) == 4
    epilog.parse_slurm_conf(str(conf))
    with epilog.common._one_call():
        epilog.parse_slurm_conf(str(conf))
    assert len(reads) == 8


HOSTILE = "a\x07\nFORGED: result True, no problems\x1b[2J.conf"


def test_a_hostile_file_name_reaches_no_answer_raw(tmp_path):
    """A file named with a BEL, a line break, a forged line and a terminal
    sequence, in a directory an Include glob lists: every name in the
    parse's answer, and every line verify would give of it, is one
    printable line (system.show's escaping); and a line that reached the
    answer unescaped is escaped whole there."""
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / HOSTILE).write_text("Prolog=/p\n")
    (tmp_path / "conf.d" / "bad\nname.conf").mkdir()  # not a regular file: a problem that names it
    (tmp_path / "slurm.conf").write_text("Include conf.d/*.conf\n")
    parsed = epilog.slurmconf._parsed(str(tmp_path / "slurm.conf"))
    lines = parsed["files"] + parsed["problems"] + [name for name, _, _ in parsed["sources"]]
    lines += [line for group in epilog.slurmconf._trust_lines(parsed) for line in group]
    assert any("FORGED" in line for line in parsed["files"]) and any("bad" in line for line in parsed["problems"])
    assert all(line.isprintable() for line in lines), lines
    assert f"{tmp_path}/conf.d/a\\x07\\nFORGED: result True, no problems\\x1b[2J.conf" in parsed["files"]
    answer = epilog.checks._answer(["[x] a\nb"], ["[y] \x1b[2J"], None, True, {"info": ["c\rd"]})
    assert answer["problems"] == ["[x] a\\nb"] and answer["warnings"] == ["[y] \\x1b[2J"] \
        and answer["info"] == ["c\\rd"], answer


def test_a_directory_an_include_lists_that_others_can_write_is_a_problem(tmp_path):
    """An Include glob's directory that another account can write (here
    group and others) could hold any file slurmd reads: a coded problem
    that names it, as a file of slurm.conf's another account can write is."""
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d").chmod(0o777)
    (tmp_path / "slurm.conf").write_text("Include conf.d/*.conf\n")
    problems, _ = epilog.slurmconf._trust_lines(epilog.slurmconf._parsed(str(tmp_path / "slurm.conf")))
    assert any(p.startswith(f"[slurm-conf-include-dir-not-root-only] {tmp_path}/conf.d, a directory an Include")
               for p in problems), problems


LINKS = {"abs": "{dir}/a/file", "rel": "a/file", "chain": "a/../abs", "dir": "a", "loop": "loop",
         "dangling": "none", "above-root": "/../../../{dir}/a/file"}
PATHS = ["abs", "rel", "chain", "dir/file", "dir/../a/file", "loop", "dangling", "a/file/x", "none/file",
         "above-root"]


@pytest.mark.parametrize("name", PATHS)
def test_a_path_is_resolved_in_a_root_as_the_kernel_resolves_it(tmp_path, name):
    """The module's walk (one name at a time, symlinks resolved in the
    root, .. never above it) and the kernel (openat2's RESOLVE_IN_ROOT,
    and a plain stat) name the same file, or fail alike."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a/file").write_text("x\n")
    for link, target in LINKS.items():
        (tmp_path / link).symlink_to(target.replace("{dir}", str(tmp_path)))
    path = f"{tmp_path}/{name}"

    def ident(how):
        try:
            st = how(path)
            return st.st_dev, st.st_ino
        except OSError as exc:
            return exc.errno

    def walked(path):
        fd, st, _ = root.resolve(path)
        os.close(fd)
        return st

    root = epilog._node.roots.Root()
    try:
        assert ident(os.stat) == ident(root.stat) == ident(walked)
    finally:
        root.close()


def test_a_root_whose_process_has_ended_is_a_problem_not_an_error():
    """A slurmd that ended between the look at /proc and the read: its
    slurm.conf cannot be read, said as such."""
    _, read, problems = epilog.parse_slurm_conf("/proc/999999999/root/etc/slurm/slurm.conf")
    assert read == [] and problems == ["[slurm-conf-unreadable] /proc/999999999/root/etc/slurm/slurm.conf cannot be "
                                       "read: No such file or directory"], problems


def test_a_path_of_too_many_names_is_refused_not_walked(tmp_path):
    """An Include of a path of a million names (within the 4 MiB a file
    may give) is refused after _STEPS_MAX of them, as the kernel refuses a
    path longer than PATH_MAX."""
    (tmp_path / "slurm.conf").write_text("Include " + "./" * 1000000 + "x.conf\n")
    _, read, problems = epilog.parse_slurm_conf(str(tmp_path / "slurm.conf"))
    assert len(read) == 1 and len(problems) == 1 and "File name too long" in problems[0], problems
    assert len(problems[0]) < 5000, len(problems[0])
