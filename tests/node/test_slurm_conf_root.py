"""A slurmd's slurm.conf in a mount namespace of its own, read as that
slurmd reads it: a real process whose /etc/slurm is its own (a fresh
tmpfs), its files read through /proc/PID/root, resolved and judged in that
root (an absolute Include and symlink from that root, every directory on
the way judged on the descriptor opened for it). Needs root: it makes a
mount namespace."""
import subprocess

from tests.helpers import REPO, load_file, mount_namespace

epilog = load_file(REPO / "_modules/epilog.py", "epilog_module_conf_root")


def test_a_slurmd_in_another_mount_namespace_is_read_through_its_root(tmp_path):
    """A process in a mount namespace where /etc/slurm is another
    directory: its /etc/slurm/slurm.conf is read through /proc/PID/root; a
    file it shares with this one keeps its path."""
    with mount_namespace(fresh=("/etc/slurm",)) as ns:
        holder = int(ns[1].split("=", 1)[1])
        subprocess.run([*ns, "sh", "-c", "echo Epilog=/theirs > /etc/slurm/slurm.conf"], check=True)
        assert epilog._as_slurmd_sees_it(holder, "/etc/slurm/slurm.conf") == f"/proc/{holder}/root/etc/slurm/slurm.conf"
        shared = tmp_path / "shared.conf"
        shared.write_text("x\n")
        assert epilog._as_slurmd_sees_it(holder, str(shared)) == str(shared)


def test_a_root_only_slurm_conf_in_another_namespace_is_judged_and_read_there():
    """slurm.conf root's alone (0600) in the namespace's own /etc/slurm,
    with an absolute Include and an absolute symlink that exist only there:
    read and judged in that root, it is root's, and what it includes is
    the namespace's file; a file there that others can write is a problem
    that names it."""
    with mount_namespace(fresh=("/etc/slurm",)) as ns:
        holder = int(ns[1].split("=", 1)[1])
        subprocess.run([*ns, "sh", "-c", "cd /etc/slurm && echo Epilog=/inside/epilog.sh > inside.conf "
                        "&& ln -s /etc/slurm/inside.conf link.conf "
                        "&& printf 'Include /etc/slurm/inside.conf\\nInclude /etc/slurm/link.conf\\n' > slurm.conf "
                        "&& chmod 0600 slurm.conf"], check=True)
        conf = f"/proc/{holder}/root/etc/slurm/slurm.conf"
        parsed = epilog._parsed(conf)
        assert parsed["problems"] == [] and parsed["cuts"] == [], parsed
        assert parsed["values"] == {"epilog": ["/inside/epilog.sh", "/inside/epilog.sh"]}
        assert parsed["files"] == [conf, f"/proc/{holder}/root/etc/slurm/inside.conf",
                                   f"/proc/{holder}/root/etc/slurm/link.conf"]
        assert {trust for _, _, trust in parsed["sources"]} == {"root"}, parsed["sources"]
        assert epilog._trust_lines(parsed) == ([], [])
        assert epilog._root_only_in(f"/proc/{holder}/root/etc/slurm")
        subprocess.run([*ns, "chmod", "0666", "/etc/slurm/inside.conf"], check=True)
        problems, _ = epilog._trust_lines(epilog._parsed(conf))
        assert [p for p in problems if p.startswith(
            f"[slurm-conf-not-root-only] /proc/{holder}/root/etc/slurm/inside.conf, which slurmd reads")], problems
