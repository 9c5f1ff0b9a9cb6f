"""The PAM policy the chain needs (epilog_node/pam.py judges a stack): the
pam_access module's presence, the operators' file and the PAM files that
name it (pam_file, pam_clean), and the ssh sessions a user holds."""

import os
import re
import stat
import time

from salt.exceptions import CommandExecutionError

from . import NODE as _node
from .common import _root_file, _root_only


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


def _operators(settings):
    """The operators' list epilog.pam lays down (root first, then
    localusers): map.jinja's, as settings.jinja gives it to the module;
    from a formula tree whose settings.jinja gives none (the master's,
    older than the module synced here), map.jinja's rule applied to the
    settings' localusers (a unit test holds the two equal)."""
    listed = settings.get("operators")
    if listed is None:
        listed = ["root"] + [name for name in settings["localusers"] if name != "root"]
    return listed


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


def pam_file(salt, manage=None):
    """epilog.pam_file's work (its docstring in epilog.py)."""
    settings, rules, _ = salt.config()
    pam = _node.pam
    service = os.path.join(pam.PAM_DIR, "sshd")
    manage = settings["pam_manage"] if manage is None else bool(manage)
    if os.path.islink(service):
        if not manage:
            return None
        raise CommandExecutionError(f"{service} is a symlink: the formula writes only a file of its own there; "
                                    "replace the link with the file it names, or leave epilog:pam_manage off")
    try:
        text = pam._read(service)  # pylint: disable=protected-access
    except FileNotFoundError:
        if not manage:
            return None
        raise CommandExecutionError(f"epilog:pam_manage is on, but {service} is missing (is openssh-server "
                                    "installed?): no account lines laid down") from None
    except (OSError, UnicodeDecodeError) as exc:
        if not manage:
            return None
        raise CommandExecutionError(f"{service} cannot be read: {exc}") from None
    if not manage and pam.BEGIN not in text and pam.END not in text:
        return text  # none of the formula's lines: nothing to take out
    if any(not (char.isprintable() or char in "\t\n") for char in text):
        raise CommandExecutionError(f"{service} holds a control or unprintable character: the formula would not "
                                    "write it back as it is; edit the file by hand first")
    access, allow = settings["ssh_access"], settings["ssh_allow_file"]
    try:
        if not manage:
            return pam.unplace(text)
        operators = settings["pam_operators_file"]
        _check_operators_file(operators, rules)
        if not _pam_module_found("pam_listfile.so"):
            raise CommandExecutionError("pam_listfile.so is not on this node (libpam-modules, pam on RHEL): a "
                                        "required PAM module that is missing denies every login, root's too")
        if access == "adopt":
            module = settings["pam_adopt_module"]
            # /lib is a symlink to usr/lib on merged-/usr systems: judged where it leads
            real = os.path.realpath(module)
            if not (_root_only(os.path.dirname(real)) and _root_file(real)):
                raise CommandExecutionError(
                    f"epilog:pam_adopt_module ({module!r}) is not a file of root's that only root can write: a "
                    "required PAM module that is missing denies every login, root's too (install pam_slurm_adopt: "
                    "libpam-slurm-adopt on Debian, slurm-pam_slurm on RHEL)")
            new = pam.place(text, pam.block(operators, adopt_module=module))
        else:
            new = pam.place(text, pam.block(operators, allow_file=allow))
    except pam.PlaceError as exc:
        raise CommandExecutionError(f"{service}: {exc}") from None
    lines, problems = pam.account_stack("sshd", text=new)
    listed = _operators(settings)  # map.jinja's operators' list, the one pam.sls lays down
    judged, _ = pam.judge(lines, access, allow, settings["localusers"], lists={operators: listed})
    if access == "adopt":
        own = pam.LISTFILE, operators
        judged += [f"{line!r}, before pam_slurm_adopt, admits whom it accepts without adopting them into a job (on "
                   "a stack with pam_localuser, every local account): remove it, or leave epilog:pam_manage off"
                   for line in pam.bypasses(lines) if (line.module, line.arg("file")) != own]
    else:
        shut = pam.refused(lines, listed, lists={operators: listed})
        judged += [f"{line!r} would refuse {name}, a listed operator (or root), before the operators' list admits "
                   "them: take that line out, or leave epilog:pam_manage off" for name, line in sorted(shut.items())]
    if problems or judged:
        raise CommandExecutionError(f"{service} with the formula's lines would have problems, so it is left as it "
                                    "is: " + "; ".join(problems + judged))
    return new


def pam_clean(salt):
    """epilog.pam_clean's work (its docstring in epilog.py)."""
    settings, rules, _ = salt.config()
    pam = _node.pam
    service = os.path.join(pam.PAM_DIR, "sshd")
    try:
        text = pam._read(service)  # pylint: disable=protected-access
    except (OSError, UnicodeDecodeError):
        text = None
    marked = text is not None and not os.path.islink(service) and (pam.BEGIN in text or pam.END in text)
    sshd = pam_file(salt, manage=False) if marked else None
    named = []
    if marked:
        block = text.split(pam.BEGIN, 1)[-1].split(pam.END, 1)[0]
        named = [line.arg("file") for line in pam.account_stack("sshd", text=block)[0] if line.module == pam.LISTFILE
                 and line.arg("file") and line.arg("file") != settings["ssh_allow_file"]]
    wanted = _operators(settings)
    chars = re.compile("[" + rules["account_chars"] + "]+")
    removed, kept = [], []
    for path in dict.fromkeys([settings["pam_operators_file"], *named]):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_uid != 0:
            kept.append(f"{path} is not a regular file of root's: not the formula's list, left alone")
            continue
        try:
            names = pam._read(path).splitlines()  # pylint: disable=protected-access
        except (OSError, UnicodeDecodeError) as exc:
            kept.append(f"{path} cannot be read ({exc}): left alone")
            continue
        ours = names == wanted or (path in named and names[:1] == ["root"]
                                   and all(chars.fullmatch(name) for name in names))
        if not ours:
            kept.append(f"{path} does not hold what epilog.pam lays down ({', '.join(wanted)}): the site's, left "
                        "alone")
            continue
        users = _pam_files_naming(path, sshd)
        if users:
            kept.append(f"{path} is named by {', '.join(users)} outside the formula's lines: left alone")
            continue
        # as file.managed's backup: minion names its copies (file.list_backups reads these names)
        now = time.time()
        stamp = time.strftime("%a_%b_%d_%H:%M:%S_", time.localtime(now)) + f"{int(now * 1000000) % 1000000:06d}_" \
            + time.strftime("%Y", time.localtime(now))
        backup = os.path.join(salt.opts["cachedir"], "file_backup",
                              os.path.dirname(path).lstrip("/"), f"{os.path.basename(path)}_{stamp}")
        removed.append({"path": path, "backup": backup})
    return {"sshd": sshd, "operators_files": removed, "kept": kept}
