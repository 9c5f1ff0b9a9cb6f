"""The PAM policy the chain needs (epilog_node/pam.py judges a stack): the
pam_access module's presence, the operators' file and the PAM files that
name it (pam_file, pam_clean), and the ssh sessions a user holds."""

import os
import re

from salt.exceptions import CommandExecutionError

from . import NODE as _node
from .common import _root_only


def _ssh_access(settings):
    """(problems, warnings) of sshd's PAM stack under epilog:ssh_access
    (see epilog_node/pam.py)."""
    access = settings.get("ssh_access", "listfile")
    if access == "none":
        return [], []
    pam = _node.pam
    service = os.path.join(pam.PAM_DIR, "sshd")
    if not os.path.exists(service):
        if access == "adopt":
            why = "pam_slurm_adopt governs no ssh login"
        else:
            why = (f"libpam gives sshd the stack of {pam.PAM_DIR}/other, so the lines prolog 50 adds to "
                   "epilog:ssh_allow_file and part 39 removes govern no ssh login; lay the file down with the line "
                   f"'{pam.ALLOW_LINE % settings['ssh_allow_file']}' after its account lines, or set "
                   "epilog:ssh_access none where the site governs ssh itself")
        return [f"[pam-sshd-missing] epilog:ssh_access is {access}, but {service} is missing: {why}"], []
    lines, problems = pam.account_stack("sshd")
    judged, warnings = pam.judge(lines, access, settings["ssh_allow_file"], settings["localusers"])
    for line in lines:
        if line.module in (pam.ADOPT, pam.LISTFILE) and not _pam_module_found(line.path):
            judged.append(f"[pam-module-missing] {line!r}: {line.path} is not on this node: libpam fails a "
                          f"{line.control} line whose module is missing, and denies every login, root's too")
    return problems + judged, warnings


# where libpam looks for a module named without a directory
PAM_MODULE_DIRS = ("/lib/security", "/lib64/security", "/usr/lib/security", "/usr/lib64/security",
                   "/lib/x86_64-linux-gnu/security", "/usr/lib/x86_64-linux-gnu/security",
                   "/lib/aarch64-linux-gnu/security", "/usr/lib/aarch64-linux-gnu/security")


def _pam_module_found(path):
    if os.path.isabs(path):
        return os.path.isfile(path)
    name = path if path.endswith(".so") else path + ".so"
    return any(os.path.isfile(os.path.join(directory, name)) for directory in PAM_MODULE_DIRS)


def _pam_operators(localusers):
    """The names the operators' list holds (pam.sls lays down the same):
    root first (pam_slurm_adopt passes root over only while ignore_root is
    on), then LOCALUSERS."""
    return ["root"] + [name for name in localusers if name != "root"]


def _check_operators_file(path, rules):
    """PATH may become the operators' list: not a PAM configuration, and,
    when it exists, a regular file of account names alone (a list this
    formula laid down), so that no other file (/etc/shadow) is overwritten."""
    if os.path.dirname(path).rstrip("/") in (_node.pam.PAM_DIR, "/etc/pam.d"):
        raise CommandExecutionError(f"epilog:pam_operators_file ({path!r}) is in {_node.pam.PAM_DIR}: a list of "
                                    "names is no PAM configuration")
    if not _root_only(os.path.dirname(path)):
        raise CommandExecutionError(
            f"epilog:pam_operators_file ({path!r}): its directory is not one only root can write, and "
            "pam_listfile would read whatever another account put there")
    try:
        data = _node.pam._read(path)  # pylint: disable=protected-access
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandExecutionError(f"epilog:pam_operators_file ({path!r}) exists and is not a list this formula "
                                    f"laid down ({exc}): it is left alone") from None
    chars = re.compile("[" + rules["account_chars"] + "]+")
    if os.path.islink(path) or not all(chars.fullmatch(line) for line in data.split("\n") if line):
        raise CommandExecutionError(f"epilog:pam_operators_file ({path!r}) exists and is not a list of account "
                                    "names (a file of another use?): it is left alone; name another path")


def _pam_files_naming(path, sshd):
    """The PAM configuration files that name PATH, /etc/pam.d/sshd as SSHD
    (without the formula's lines) when it is given."""
    pam = _node.pam
    out = []
    try:
        names = sorted(os.listdir(pam.PAM_DIR))
    except OSError:
        return out
    for name in names:
        full = os.path.join(pam.PAM_DIR, name)
        try:
            text = sshd if name == "sshd" and sshd is not None else pam._read(full)  # pylint: disable=W0212
        except (OSError, UnicodeDecodeError):
            continue
        if path in text:
            out.append(full)
    return out


def _ssh_sessions(settings, user, verdict):
    """What becomes of USER's ssh sessions at the end of their job here:
    pam_slurm_adopt (in sshd's PAM stack) adopts them into the job, and
    Slurm then ends them with it, whatever the chain decides."""
    pam = _node.pam
    if not os.path.exists(os.path.join(pam.PAM_DIR, "sshd")):
        return "no sshd PAM service here: no ssh session is adopted"
    lines, problems = pam.account_stack("sshd")
    adopted, why = pam.adoption(lines, user)
    if problems:
        return f"cannot tell: {'; '.join(problems)}"
    if adopted is None:
        return f"cannot tell whether pam_slurm_adopt adopts them: {why}"
    if not adopted:
        return f"not adopted ({why}): the chain's decision alone reaches them"
    spared = verdict is not None and verdict.answer == "spare"
    return (f"{why}: Slurm ends them with the job" + (", although the chain spares this user" if spared else "")
            + ("" if settings.get("ssh_access") == "adopt" else " (epilog:ssh_access is not adopt)"))
