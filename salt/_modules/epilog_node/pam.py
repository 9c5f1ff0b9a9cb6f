"""The sshd PAM stack, read as libpam reads it, and what it means for who
governs ssh logins (epilog:ssh_access). epilog.verify asks; no job end
imports this.

The account lines of a service, with what it includes (Debian's
"@include name", "account include name", "account substack name"),
in the order libpam runs them; then the verdicts:

- under listfile, a pam_listfile line must admit users by the chain's
  allow file and refuse every other login, and run for every login (no
  earlier success may end the stack before it, but a list of the
  operators alone): otherwise the lines prolog 50 adds and part 39
  removes govern nothing;
- under listfile, the chain's allow file as a sufficient line before
  pam_slurm_adopt lets every job user skip adoption: their sessions run
  outside the job's cgroup, limits and accounting;
- under adopt, a stack without pam_slurm_adopt leaves ssh to nothing;
- under adopt, a listed operator that no sufficient line admits before
  pam_slurm_adopt is adopted into their job, and killed with it;
- pam_slurm_adopt's failure actions at their testing defaults let a login
  it could not adopt in (action_adopt_failure=allow), or one it failed on
  (action_generic_failure=ignore)."""
import os
import stat

PAM_DIR = "/etc/pam.d"
MAX_FILES = 32
MAX_BYTES = 1 << 20
ADOPT = "pam_slurm_adopt"
LISTFILE = "pam_listfile"


class Line:
    """One account line: where it is, its control (a word, or the bracket's
    text), its module's name (no directory, no .so), its arguments, the
    module as written (PATH), and the substacks it runs inside (STACK: one
    number per substack, outermost first; a done or a jump there ends or
    skips only within the innermost)."""

    def __init__(self, where, control, module, args, path=None, stack=()):
        self.where, self.control, self.module, self.args = where, control, module, args
        self.path, self.stack = path or module, tuple(stack)

    @property
    def sub(self):
        """It runs inside a substack: a success there ends only the substack."""
        return bool(self.stack)

    def arg(self, key, default=None):
        for item in self.args:
            name, eq, value = item.partition("=")
            if eq and name == key:
                return value
        return default

    def actions(self):
        """The control as libpam reads it: {return value: action}, "default"
        for every value not named (libpam ignores a value a bracket names
        neither itself nor by default)."""
        control = self.control.strip().lower()
        if control in ("required", "requisite"):
            return {"success": "ok", "new_authtok_reqd": "ok", "ignore": "ignore",
                    "default": "bad" if control == "required" else "die"}
        if control == "sufficient":
            return {"success": "done", "new_authtok_reqd": "done", "default": "ignore"}
        if control == "optional":
            return {"success": "ok", "new_authtok_reqd": "ok", "default": "ignore"}
        if not control.startswith("["):
            return {}
        return dict(item.partition("=")[::2] for item in control.strip("[]").split() if "=" in item)

    def action(self, value):
        """What libpam does when this line's module returns VALUE (success,
        auth_err, service_err ...): ok, done, bad, die, ignore, reset, or a
        number of lines to jump."""
        actions = self.actions()
        return actions.get(value, actions.get("default", "ignore"))

    def success_action(self):
        """What libpam does when this line's module succeeds: "done" (the
        stack ends, admitted, when nothing failed before), a number of
        lines to jump, or None (the stack goes on)."""
        action = self.action("success")
        if action == "done" or (action.isdigit() and int(action) > 0):
            return action
        return None

    def fails_on(self, value):
        """A return of VALUE fails the login: ok and done make it the
        stack's answer (a success later cannot undo it), bad and die too."""
        return self.action(value) in ("ok", "done", "bad", "die")

    @property
    def ends_on_success(self):
        """A success of this line admits the login at once: sufficient, or
        a bracket whose success (or default) is done; never one inside a
        substack."""
        return not self.sub and self.success_action() == "done"

    def __repr__(self):
        return "%s: account %s %s" % (self.where, self.control, " ".join([self.module, *self.args]))


def _module(path):
    name = os.path.basename(path)
    return name[:-3] if name.endswith(".so") else name


def _split(text):
    """A PAM line's fields: a [bracket] control is one field, spaces and all."""
    fields, rest = [], text.strip()
    while rest:
        if rest.startswith("[") and len(fields) == 1:
            end = rest.find("]")
            end = len(rest) - 1 if end < 0 else end
            fields.append(rest[:end + 1])
            rest = rest[end + 1:].lstrip()
            continue
        word, _, rest = rest.partition(" ")
        word, rest = word.strip(), rest.lstrip()
        if word:
            fields.append(word)
    return fields


def _lines(data):
    """(number, text) of a PAM file's lines, comments dropped and
    backslash continuations joined."""
    out, pending, start = [], "", 0
    for number, raw in enumerate(data.replace("\t", " ").split("\n"), 1):
        text = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = number
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        text, pending = pending + text, ""
        if text.strip():
            out.append((start, text))
    return out


def passes_over(lines, i, target):
    """A success of LINES[I] ends the stack, or jumps over LINES[TARGET],
    so that TARGET never runs for that login. A done or a jump inside a
    substack ends or jumps within it (a substack nested in it counts as
    one line), and so passes over only what is in it."""
    line, goal = lines[i], lines[target]
    depth = len(line.stack)
    if goal.stack[:depth] != line.stack:
        return False
    action = line.success_action()
    if action is None:
        return False
    if action == "done":
        return True
    units, last = 0, None
    for k in range(i + 1, target + 1):
        unit = lines[k].stack[depth] if len(lines[k].stack) > depth else ("line", k)
        if unit != last:
            units, last = units + 1, unit
    return units <= int(action)


def account_stack(service, pam_dir=PAM_DIR, text=None):
    """(lines, problems): SERVICE's account lines in the order libpam runs
    them, what it includes expanded; problems name what could not be read.
    TEXT: SERVICE's own file as it would be (what it includes is read)."""
    lines, problems, seen, own, substacks = [], [], [], text, [0]

    def walk(name, stack, depth):
        path = name if name.startswith("/") else os.path.join(pam_dir, name)
        if depth > 8 or len(seen) >= MAX_FILES:
            problems.append("[pam-include-too-deep] %s: includes nest too deep (a loop?); the PAM stack is not "
                            "read past it" % path)
            return
        seen.append(path)
        try:
            data = own if depth == 0 and own is not None else _read(path)
        except (OSError, UnicodeDecodeError) as exc:
            problems.append("[pam-unreadable] %s cannot be read: %s" % (path, exc))
            return
        for number, text in _lines(data):
            where = "%s:%d" % (path, number)
            fields = _split(text)
            if fields[0] == "@include" and len(fields) > 1:
                walk(fields[1], stack, depth + 1)
                continue
            kind = fields[0].lstrip("-").lower()
            if kind != "account" or len(fields) < 3:
                continue
            control = fields[1]
            if control.lower() == "include":
                walk(fields[2], stack, depth + 1)
                continue
            if control.lower() == "substack":
                substacks[0] += 1
                walk(fields[2], (*stack, substacks[0]), depth + 1)
                continue
            lines.append(Line(where, control, _module(fields[2]), fields[3:], fields[2], stack))

    walk(service, (), 0)
    return lines, problems


def _read(path):
    """PATH's text: a regular file (never a FIFO or device, never waited
    on) of at most MAX_BYTES; anything else is an OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError("not a regular file")
        if st.st_size > MAX_BYTES:
            raise OSError("larger than %d bytes" % MAX_BYTES)
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise OSError("larger than %d bytes" % MAX_BYTES)
    return data.decode("utf-8")


def _listed(path):
    """The names pam_listfile admits from PATH: none when it would refuse
    the file (it lstats it: a symlink, not a regular file, or writable by
    others), None when it cannot be read here."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o002:
            return set()
        return set(line.strip() for line in _read(path).split("\n") if line.strip())
    except (OSError, UnicodeDecodeError):
        return None


def _admits(line):
    """A pam_listfile line that allows the users its file lists."""
    return (line.module == LISTFILE and line.arg("item") == "user" and line.arg("sense") == "allow"
            and line.arg("file") is not None)


def _names(path, lists):
    """The names the list PATH holds: as LISTS gives them (a list as it
    will be), else as pam_listfile would read it now (_listed)."""
    return set(lists[path]) if path in lists else _listed(path)


# the line the chain needs under listfile (docs/site-configurations.md shows it)
ALLOW_LINE = "account required pam_listfile.so item=user sense=allow onerr=fail file=%s"


def _not_gating(line):
    """Why LINE, a pam_listfile line that admits the users its file lists,
    does not refuse every other login: [] when it does. pam_listfile
    answers auth_err for a user its file does not list, and service_err
    (onerr=fail, its default) when the file is missing or unreadable."""
    why = []
    if not line.fails_on("auth_err"):
        why.append("its control (%s) lets a login the file does not list go on to the next line" % line.control)
    elif line.arg("onerr", "fail") == "succeed":
        why.append("onerr=succeed admits every login while the file is missing or unreadable")
    elif not line.fails_on("service_err"):
        why.append("its control (%s) lets every login go on while the file is missing or unreadable" % line.control)
    if line.arg("apply") is not None:
        why.append("apply=%s limits it to that user or group: every other login passes it" % line.arg("apply"))
    return why


def _judge_listfile(lines, allow_file, operators, lists):
    """(problems, warnings) of the account LINES under listfile: a pam_listfile
    line must admit users by ALLOW_FILE, refuse every login it does not
    list (and every login while the file is missing), and run for every
    login: no earlier line's success may end the stack or jump over it,
    but a list that admits root and OPERATORS alone (their list, the
    formula's first line) may. Each problem starts with its code."""
    fix = ("add '%s' after the last account line of %s (after a sufficient pam_listfile line for the operators' "
           "list, so that root and the operators are never locked out), or set epilog:pam_manage: true (the state "
           "epilog.pam lays both down)" % (ALLOW_LINE % allow_file, os.path.join(PAM_DIR, "sshd")))
    consulting = [i for i, line in enumerate(lines) if _admits(line) and line.arg("file") == allow_file]
    if not consulting:
        near = [line for line in lines if line.module == LISTFILE and (line.arg("file") == allow_file
                                                                       or _admits(line))]
        return ["[pam-listfile-missing] epilog:ssh_access is listfile, but no account line of sshd's PAM stack "
                "admits users by epilog:ssh_allow_file (%s, item=user sense=allow)%s: the lines prolog 50 adds and "
                "part 39 removes govern no ssh login; %s"
                % (allow_file, " (of its pam_listfile lines, %s)" % "; ".join(repr(line) for line in near)
                   if near else "", fix)], []
    gating = [i for i in consulting if not _not_gating(lines[i])]
    if not gating:
        return ["[pam-listfile-not-gating] %r consults epilog:ssh_allow_file, but %s: a user part 39 revoked still "
                "logs in; %s" % (lines[i], "; ".join(_not_gating(lines[i])), fix) for i in consulting], []
    allowed = set(operators) | {"root"}
    bypassed = []
    for i in gating:
        bad, warnings = [], []
        for j in range(i):
            if not passes_over(lines, j, i):
                continue
            earlier = lines[j]
            names = _names(earlier.arg("file"), lists) if _admits(earlier) else None
            if not _admits(earlier):
                bad.append("%r admits whom its module accepts" % earlier)
            elif names is None:
                warnings.append("[pam-listfile-list-unreadable] %r, before %r, admits the users its list names "
                                "without the allow file; the list "
                             "cannot be read here, so this cannot tell whether it names anyone but the operators"
                             % (earlier, lines[i]))
            elif names - allowed:
                bad.append("%r admits %s (not in epilog:localusers)" % (earlier, ", ".join(sorted(names - allowed))))
        if not bad:
            return [], warnings
        bypassed.append((lines[i], bad))
    line, bad = bypassed[0]
    return ["[pam-listfile-bypassed] %r consults epilog:ssh_allow_file, but an earlier line's success ends the "
            "account stack or jumps over it, so it never runs for those logins: %s. Move the allow file's line above "
            "it, or take it out" % (line, "; ".join(bad))], []


def refused(lines, names, lists=None):
    """{name: line} of the NAMES whose login a pam_listfile line of LINES
    refuses before a list admits it (a sufficient line that names them),
    as far as the lists tell: any other module is taken to let them
    through, and a list that cannot be read, or another module whose
    success may end the stack or jump over a pam_listfile line, ends the
    look for that name (this cannot tell what it does).
    LISTS: {path: names} of list files as they will be (not read)."""
    out = {}
    lists = lists or {}
    others = [i for i, line in enumerate(lines) if line.module != LISTFILE and line.success_action() is not None
              and (line.success_action() == "done"
                   or any(passes_over(lines, i, k) for k in range(i + 1, len(lines)) if lines[k].module == LISTFILE))]
    for name in names:
        for i, line in enumerate(lines):
            sense = line.arg("sense")
            if i in others:
                break
            if line.module != LISTFILE or line.arg("item") != "user" or line.arg("apply") is not None \
                    or sense not in ("allow", "deny"):
                continue
            path = line.arg("file")
            listed = _names(path, lists) if path is not None else None
            if listed is None:
                if path is None or os.path.lexists(path):
                    break
                ok = line.arg("onerr", "fail") == "succeed"
                value = "success" if ok else "service_err"
            else:
                ok = (name in listed) == (sense == "allow")
                value = "success" if ok else "auth_err"
            if ok and line.ends_on_success:
                break
            if not ok and line.fails_on(value):
                out[name] = line
                break
    return out


def judge(lines, access, allow_file, operators, lists=None):
    """(problems, warnings) of the account LINES under epilog:ssh_access
    ACCESS, with the chain's ALLOW_FILE and the listed OPERATORS. LISTS:
    {path: names} of list files as they will be (not read)."""
    lists = lists or {}
    problems, warnings = [], []
    adopt = next((i for i, line in enumerate(lines) if line.module == ADOPT), None)
    before = lines[:adopt] if adopt is not None else lines
    if access == "listfile":
        more_problems, more_warnings = _judge_listfile(lines, allow_file, operators, lists)
        problems += more_problems
        warnings += more_warnings
        shut = refused(lines, operators, lists)
        if shut:
            warnings.append("[pam-operators-refused] listed operators %s: their ssh logins are refused by %s "
                            "(a sufficient pam_listfile line for the operators' list before it lets them in)" % (
                                ", ".join(sorted(shut)), "; ".join(sorted(set(repr(line) for line in shut.values())))))
    if access == "listfile" and adopt is not None:
        for i, line in enumerate(before):
            if line.module == LISTFILE and line.arg("file") == allow_file and passes_over(lines, i, adopt) \
                    and line.arg("sense") == "allow":
                problems.append("[pam-allow-file-skips-adopt] %r: the chain's allow file (epilog:ssh_allow_file) is "
                                "a sufficient line before pam_slurm_adopt, so every job user skips adoption and "
                                "their sessions run outside the job's cgroup, limits and accounting: set "
                                "epilog:ssh_access adopt, or drop one of the two" % line)
    if access == "adopt":
        if adopt is None:
            problems.append("[pam-adopt-missing] epilog:ssh_access is adopt, but sshd's PAM stack has no "
                            "pam_slurm_adopt account line: nothing governs ssh logins to this node")
        else:
            line = lines[adopt]
            ignore_root = line.arg("ignore_root", "1") != "0"
            admitted, unknown = set(), False
            for i, earlier in enumerate(before):
                if not passes_over(lines, i, adopt):
                    continue
                if _admits(earlier):
                    path = earlier.arg("file")
                    names = set(lists[path]) if path in lists else _listed(path)
                    if names is None:
                        unknown = True
                    else:
                        admitted |= names
                else:
                    unknown = True
                    warnings.append("[pam-bypasses-adopt] %r, before pam_slurm_adopt, admits whom it accepts without "
                                    "adopting them into a job: their sessions run outside the job's cgroup, limits "
                                    "and accounting" % earlier)
            missing = [name for name in operators if name not in admitted and not (name == "root" and ignore_root)]
            if missing and unknown:
                warnings.append("[pam-operators-unknown] listed operators %s: a sufficient line before "
                                "pam_slurm_adopt (%r) may admit them; this cannot tell. One it does not admit is "
                                "adopted into their job and killed with it" % (", ".join(missing), line))
            elif missing:
                problems.append("[pam-operators-not-admitted] listed operators %s are not admitted before "
                                "pam_slurm_adopt (%r): each is adopted into their own job and killed with it, or "
                                "denied without one; list them in a sufficient pam_listfile line before it"
                                % (", ".join(missing), line))
            for key, want in (("action_adopt_failure", "deny"), ("action_generic_failure", "deny")):
                if line.arg(key) != want:
                    warnings.append("[pam-adopt-testing-default] %r: %s is %s, its testing default: set %s=%s" % (
                        line, key, line.arg(key) or "unset", key, want))
    return problems, warnings


def adoption(lines, user):
    """(adopted, why) of USER's ssh logins under the account LINES: True
    when pam_slurm_adopt adopts them into USER's job on the node (so Slurm
    ends them with it, whoever the chain spares), False when it never sees
    them (no pam_slurm_adopt, root under ignore_root, or a sufficient line
    before it that admits USER), None when it cannot tell (a sufficient
    line before it whose answer this cannot read)."""
    adopt = next((i for i, line in enumerate(lines) if line.module == ADOPT), None)
    if adopt is None:
        return False, "sshd's PAM stack has no pam_slurm_adopt line"
    line = lines[adopt]
    if user == "root" and line.arg("ignore_root", "1") != "0":
        return False, "pam_slurm_adopt leaves root alone (ignore_root): %r" % line
    unknown = None
    for i, earlier in enumerate(lines[:adopt]):
        if not passes_over(lines, i, adopt):
            continue
        names = _listed(earlier.arg("file")) if _admits(earlier) else None
        if names is not None and user in names:
            return False, "admitted before pam_slurm_adopt by %r" % earlier
        if names is None and unknown is None:
            unknown = earlier
    if unknown is not None:
        return None, "%r, before pam_slurm_adopt, may admit them; this cannot tell" % unknown
    return True, "adopted into their job on this node by %r" % line


# -- the account lines epilog.pam lays down ---------------------------------------
BEGIN = "# BEGIN epilog formula: laid down by Salt (state epilog.pam); set epilog:pam_* in the pillar, not here"
END = "# END epilog formula"


def block(operators_file, adopt_module=None, allow_file=None):
    """The formula's account lines, under epilog:ssh_access adopt
    (ADOPT_MODULE) or listfile (ALLOW_FILE). First the operators' list
    admits root and the operators (pam_listfile refuses a list that is a
    symlink or writable by others: the state lays it down root's, 0600);
    then, under adopt, pam_slurm_adopt adopts every other login into the
    user's job on the node, or denies it, failures denied too (its testing
    defaults would let them in); under listfile, pam_listfile admits every
    other login only while the chain's allow file names it, and none while
    that file is missing or unreadable (onerr=fail), which the operators'
    line before it never reads."""
    if (adopt_module is None) == (allow_file is None):
        raise ValueError("the formula's lines gate by pam_slurm_adopt or by the allow file, one of the two")
    gate = ("account required %s action_adopt_failure=deny action_generic_failure=deny" % adopt_module
            if adopt_module is not None else ALLOW_LINE % allow_file)
    return [BEGIN,
            "account sufficient pam_listfile.so item=user sense=allow onerr=fail file=%s" % operators_file,
            gate,
            END]


class PlaceError(ValueError):
    """The service file cannot take the formula's lines safely."""


def unplace(text):
    """TEXT without the formula's lines (from BEGIN to END); an END
    missing, or a BEGIN twice, is a PlaceError: the file was edited by
    hand, and no line of it is guessed at."""
    lines = text.split("\n")
    begins = [i for i, line in enumerate(lines) if line.strip() == BEGIN]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if not begins and not ends:
        return text
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise PlaceError("the formula's lines (%r ... %r) are not one whole block: fix the file by hand"
                         % (BEGIN, END))
    return "\n".join(lines[:begins[0]] + lines[ends[0] + 1:])


def place(text, lines):
    """TEXT (a service's PAM file) with the formula's LINES right after its
    last account line (an "account ..." line, or "@include common-account"):
    the formula's gate (pam_slurm_adopt, or the allow file) is to be the
    last of the account stack, after every check of the site's. Any
    earlier block of the formula's is replaced; no account line, or a
    pam_slurm_adopt line of the site's own when LINES hold one, is a
    PlaceError."""
    adopting = any(len(_split(line)) > 2 and _module(_split(line)[2]) == ADOPT for line in lines)
    rest = unplace(text).split("\n")
    last, i = None, 0
    while i < len(rest):
        start, logical = i, rest[i].split("#", 1)[0].rstrip()
        while logical.endswith("\\") and i + 1 < len(rest):  # a line continued on the next
            i += 1
            logical = logical[:-1] + " " + rest[i].split("#", 1)[0].rstrip()
        fields = _split(logical.replace("\t", " "))
        if fields and (fields[0].lstrip("-").lower() == "account" or fields[:2] == ["@include", "common-account"]):
            last = i
            if i != start and not rest[i].split("#", 1)[0].strip():
                raise PlaceError("line %d, an account line, is continued (a trailing \\) onto a blank or comment "
                                 "line: libpam before 1.5.3 joins what follows to it; join it by hand" % (start + 1))
            if adopting and len(fields) > 2 and _module(fields[2]) == ADOPT:
                raise PlaceError("line %d has a pam_slurm_adopt line of its own (%s): remove it, or leave "
                                 "epilog:pam_manage off" % (start + 1, logical.strip()))
        i += 1
    if last is None:
        raise PlaceError("it has no account line (nor @include common-account) to put the formula's after")
    return "\n".join(rest[:last + 1] + list(lines) + rest[last + 1:])


def bypasses(lines):
    """The account LINES before pam_slurm_adopt whose success admits a login
    without it (ends the stack, or jumps over it)."""
    adopt = next((i for i, line in enumerate(lines) if line.module == ADOPT), None)
    if adopt is None:
        return []
    return [line for i, line in enumerate(lines[:adopt]) if passes_over(lines, i, adopt)]
