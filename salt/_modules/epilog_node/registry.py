"""The formula's parts, one entry each: the one place where a part's name
is tied to what it is. layout.yaml lays each down under that name (a unit
test holds the two equal); everything else that knows a part by its name
reads it here: the runner (which parts act, which one revokes), the
worker (which may run in the runner itself, which end their worker), the
dispatch (parts.action), the looks between jobs (the strays' kill, the
IPC removal, the sweep) and the module (verify, explain, the sweep).

What the settings say of a part is here too: not_run (epilog:parts,
epilog:ssh_access) and observing (epilog:mode).

Nothing here imports a part: an action is named (its module, its
function), and parts.action imports the module the first time it runs
one, so a job end imports only the parts it runs.
"""
import os

from . import system

# name: the part's file name (epilog.d/NAME or prolog.d/NAME); stage: the
# runner it belongs to, epilog or prolog; action: (module, function) of
# the node program that runs it;
# acting: it acts on users' things: observe mode has it decide and record
# what it would do, and do none of it; the brake skips it;
# in_process: the runner runs it in itself when it cannot fork a worker
# (the user's processes hold every pid): it forks nothing, its own bounds
# end it (the allow file's lock wait, the kill's rounds), and the kill
# frees pids for the parts after it;
# ends_worker: its worker ends after it (the runner starts another): 40's
# kill acts as the user for a moment, who could renice it or pin it to a
# CPU meanwhile, and nothing of that may last into the next part;
# allow: the edit it makes of the ssh allow file (remove or add), None for
# none; such a part runs only where the file governs ssh (epilog:ssh_access
# listfile);
# between: the work of its that a look between jobs does: revoke and kill
# (a strays kill runs those parts, in this order, under the user's lock),
# ipc (part 42's System V IPC removal: strays and the sweep), sweep (the
# residue sweep: epilog.sweep); None for none;
# does: what it does when the runner starts it, in words (epilog.explain:
# {user}, {uid} and {allow}, the allow file, filled in).
Part = system.fields("Part", "name stage action acting in_process ends_worker allow between does")

PARTS = (
    Part("39-lastuserjob-ssh", "epilog", ("allow", "revoke_ssh"), acting=True, in_process=True, ends_worker=False,
         allow="remove", between="revoke", does="removes the line {user!r} from {allow}"),
    Part("40-lastuserjob-processes", "epilog", ("kill", "kill"), acting=True, in_process=True, ends_worker=True,
         allow=None, between="kill", does="kills every process of uid {uid}"),
    Part("42-lastuserjob-cleanup", "epilog", ("parts", "cleanup"), acting=True, in_process=False, ends_worker=False,
         allow=None, between="ipc", does="removes the files of uid {uid} under /tmp and /dev/shm"),
    Part("45-stale-x-display", "epilog", ("parts", "sweep"), acting=True, in_process=False, ends_worker=False,
         allow=None, between="sweep",
         does="sweeps the residue no live process holds (at every job end, for every user)"),
    # Part 50's grant acts on nobody's things: adding the job user's line
    # harms nobody, and leaving it out would lock users out of their own
    # job's node (observe mode and the brake leave it alone).
    Part("50-exclusive-ssh", "prolog", ("allow", "grant_ssh"), acting=False, in_process=True, ends_worker=False,
         allow="add", between=None, does="adds the line {user!r} to {allow} (only for a user the localusers guard "
         "acts for)"),
)

BY_NAME = {part.name: part for part in PARTS}
NAMES = tuple(part.name for part in PARTS)
ACTING = tuple(part.name for part in PARTS if part.acting)
IN_PROCESS = tuple(part.name for part in PARTS if part.in_process)
ENDS_WORKER = tuple(part.name for part in PARTS if part.ends_worker)
ALLOW_FILE_PARTS = tuple(part.name for part in PARTS if part.allow)
(REVOKE,) = (part.name for part in PARTS if part.allow == "remove")
(GRANT,) = (part.name for part in PARTS if part.allow == "add")
# the parts a strays kill runs, in order, under the user's lock: the ssh
# line first (a killed user with an allow line would log in again), as at
# a last job end
KILL_PARTS = tuple(part.name for part in PARTS if part.between in ("revoke", "kill"))
(KILL_PART,) = (part.name for part in PARTS if part.between == "kill")
(IPC_PART,) = (part.name for part in PARTS if part.between == "ipc")
(SWEEP_PART,) = (part.name for part in PARTS if part.between == "sweep")
# what the revoke part, not run because a lookup failed, says of the line
# the grant added
LINE_STAYS = ("the user's line in %s, if any, stays until a job end of theirs here at which the lookups succeed, "
              "or until removed by hand")
# what each of the epilog's parts does, in words
DOES = {part.name: part.does for part in PARTS if part.stage == "epilog"}


def lastuserjob(name):
    """Whether the part NAME, the formula's or a site's, is one that runs only
    at the user's last job on this node (for the user, under the user's lock,
    past the localusers guard): its name holds -lastuserjob-. The runner
    runs by it, and the metrics and the reader count a record by it."""
    return "-lastuserjob-" in str(name)


def part_names(entries, stage):
    """The names of ENTRIES (layout.yaml's scripts, or its retired) that
    are parts of STAGE (in <stage>.d/): the runner's own and retired
    parts, and the module's (verify, the sweep's chain) from the same rule."""
    prefix = stage + ".d/"
    return [os.path.basename(entry["path"]) for entry in entries if entry["path"].startswith(prefix)]


def observing(settings):
    """epilog:mode is observe: decide, record what would be done, do none of it."""
    return settings.get("mode") == "observe"


# Why a part does not run under the settings: WHY for the log, RECORDED for
# the record.
Off = system.fields("Off", "why recorded")


def not_run(name, settings):
    """Why the formula's part NAME does not run under SETTINGS (an Off), or
    None: turned off (epilog:parts), or an allow file part where the file
    governs no ssh (epilog:ssh_access)."""
    if (settings.get("parts") or {}).get(name) is False:
        why = "off: epilog:parts:%s is false" % name
        return Off(why, why)
    access = settings.get("ssh_access", "listfile")
    if name in ALLOW_FILE_PARTS and access != "listfile":
        return Off("epilog:ssh_access is %s: the chain never edits the ssh allow file"
                   % ("adopt (pam_slurm_adopt governs ssh)" if access == "adopt" else access), "epilog:ssh_access")
    return None
