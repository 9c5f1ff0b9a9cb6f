"""The README's quickstart, run as a new user would (bash .ci/quickstart),
into a sandbox of its own, with the Salt of this run (EPILOG_SALT_VENV), on
a machine that holds the image's accounts alone: none of the tests'."""
import hashlib
import subprocess
import tempfile
from pathlib import Path

from tests.helpers import ACCOUNTS, CURRENT, LAYOUT, REPO, VENV_BIN, in_namespaces

# what a first apply lays down: the directories and the releases' directory,
# the log directory, the data files and the release tool, the release's
# directories and files, the node program, the switch to it and the
# module's sync (the packages are there, the retired files are not)
LAID_DOWN = (len(LAYOUT["directories"]) + 1 + 1 + len(LAYOUT["data"]) + 1 + 1 + len(LAYOUT["release_directories"])
             + len(LAYOUT["scripts"]) + len(LAYOUT["release_data"]) + 1 + 1 + 1)
# what the quickstart must leave as it found it, and compare before and after
HOST_FILES = ("/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow", "/etc/pam.d/sshd")


def login_def(key, default):
    for line in Path("/etc/login.defs").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == key:
            return int(fields[1])
    return default


def image_accounts(copies):
    """Bind over /etc/passwd, group, shadow and gshadow copies (written in
    COPIES, a tmpfs of this mount namespace) that hold only what a fresh
    image holds: the system accounts (below UID_MIN) and nobody, and their
    groups. The accounts of the tests, and any other ordinary account of
    this machine, do not resolve here."""
    uid_min = login_def("UID_MIN", 1000)
    kept = {}
    for name, keep in (("passwd", lambda f: int(f[2]) < uid_min or f[0] == "nobody"),
                       ("group", lambda f: int(f[2]) < uid_min or f[0] == "nogroup")):
        lines = [line for line in Path(f"/etc/{name}").read_text().splitlines() if line and keep(line.split(":"))]
        kept[name] = {line.split(":")[0] for line in lines}
        Path(copies, name).write_text("".join(line + "\n" for line in lines))
    for name, names in (("shadow", kept["passwd"]), ("gshadow", kept["group"])):
        if Path(f"/etc/{name}").exists():
            lines = Path(f"/etc/{name}").read_text().splitlines()
            Path(copies, name).write_text("".join(line + "\n" for line in lines if line.split(":")[0] in names))
            Path(copies, name).chmod(0o640)
    for name in ("passwd", "group", "shadow", "gshadow"):
        if Path(copies, name).exists():
            subprocess.run(["mount", "--bind", str(Path(copies, name)), f"/etc/{name}"], check=True)
    return kept["passwd"]


def run_quickstart(sandbox, copies):
    """In this fork's mount namespace: the image's accounts alone, then the
    quickstart. Its exit status, stdout and stderr, and which of the tests'
    accounts resolved here."""
    image_accounts(copies)
    seen = [name for name in ACCOUNTS if subprocess.run(["getent", "passwd", name], capture_output=True).returncode == 0]
    proc = subprocess.run(["bash", str(REPO / ".ci/quickstart")], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "EPILOG_QUICKSTART_DIR": sandbox,
                                            "EPILOG_SALT_VENV": str(VENV_BIN.parent)})
    return proc.returncode, proc.stdout, proc.stderr, seen


def digests():
    return {path: hashlib.sha256(Path(path).read_bytes()).hexdigest() if Path(path).exists() else None
            for path in HOST_FILES}


def quickstart(sandbox):
    """bash .ci/quickstart into SANDBOX, as the README gives it, where only
    the image's accounts resolve: its stdout, once it has exited 0, its
    verify has passed, and the machine's accounts and sshd's PAM file are
    as they were."""
    before = digests()
    with tempfile.TemporaryDirectory(prefix="epilog-qs-etc-", dir="/var/tmp") as copies:
        rc, out, err, seen = in_namespaces(run_quickstart, sandbox, copies, pid=False, fresh=(copies,), timeout=600)
    assert seen == [], f"the tests' accounts {seen} must not resolve where the quickstart runs"
    assert rc == 0, out[-3000:] + err[-3000:]
    assert "result:\n        True" in out[out.index("== 3."):out.index("== 4.")], "verify must pass after the apply"
    assert digests() == before, "the quickstart must leave the machine's accounts and /etc/pam.d/sshd as they were"
    return out


def test_quickstart_makes_its_operator_in_its_own_namespace_previews_applies_and_sweeps():
    etc_slurm_before = sorted(p.name for p in Path("/etc/slurm").iterdir()) if Path("/etc/slurm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="epilog-qs-", dir="/var/tmp") as sandbox:
        out = quickstart(sandbox)
        for step in ("== 0. accounts", "== 1. preview", "== 2. apply", "== 3. health check", "== 4. why would",
                     "== 6. salt-call epilog.sweep test=True", "== 7. salt-call epilog.sweep"):
            assert step in out, step
        accounts = out[out.index("== 0."):out.index("== 1.")]
        assert "demo.operator" in accounts and "mount namespace alone" in accounts, accounts
        assert "the machine's are never written" in accounts, accounts
        assert (Path(sandbox) / "pillar/epilog.sls").read_text().count("ssh_access: none") == 1
        preview = out[out.index("== 1."):out.index("== 2.")]
        assert preview.count("Result: Differs") == LAID_DOWN, preview
        applied = out[out.index("== 2."):out.index("== 3.")]
        assert applied.count("Result: Changed") == LAID_DOWN, applied
        explained = out[out.index("== 4."):out.index("== 5.")]
        assert "does nothing: listed in" in explained and "epilog:ssh_access is none" in explained, explained
        assert (Path(sandbox) / f"slurm/{CURRENT}/epilog.d/45-stale-x-display").is_file()
        assert b"demo.operator" in (Path(sandbox) / f"slurm/{CURRENT}/localusers.backup").read_bytes()
        log = (Path(sandbox) / "log/epilog.log").read_text()
        assert "stale X display purged: :42" in log and "stale clsbd purged: /tmp/clsbd.unknownUser." in log
        sweep = out[out.index("== 7."):]
        assert "- /tmp/.X11-unix/X42" in sweep and "- /tmp/.X42-lock" in sweep
        assert not list(Path(sandbox).glob("etc-*")), "the namespace's copies leave nothing in the sandbox"
    assert subprocess.run(["getent", "passwd", "demo.operator"], capture_output=True).returncode != 0
    etc_slurm_after = sorted(p.name for p in Path("/etc/slurm").iterdir()) if Path("/etc/slurm").is_dir() else None
    assert etc_slurm_after == etc_slurm_before, "the quickstart must not touch /etc/slurm"
