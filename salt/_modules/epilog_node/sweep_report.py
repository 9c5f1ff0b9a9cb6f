"""The sweep's report and what ends it: the books a sweep keeps (Report:
each entry removed, kept, or not judged, and why), its log lines, summed up
where users can make them many, the time budget and the runner's SIGTERM
that stop it, and the fact part 45 hands the job end's record (fact).

What users can create is logged summed up: per kind of line, the first few
entries, then how many more (a user's 5,000 malformed locks make one line at
every job end, not 5,000).
"""
import time

from . import system
from .sweep_names import KINDS

# Lines of one kind logged one by one; past that, one line sums them up.
FEW = 3

# What part 45 hands the runner for the job end's record: the counts, and
# the paths removed and kept up to a cap of characters, so that the record
# stays one short line however much residue there was.
FACT_PATH_CHARS = 1500


class Budget(Exception):
    """The time budget ran out."""


class Terminated(Exception):
    """The runner's SIGTERM: the part's time is up. The sweep ends at the
    next entry, as at its budget, and what it did reaches the log."""


# Set by part 45's SIGTERM handler, read where the sweep checks its budget:
# an entry is never left removed but not logged.
_SIGTERM = []


def terminated(signum, frame):
    _SIGTERM.append(signum)


class Unjudged(Exception):
    """One entry could not be judged: it is kept and reported, and the sweep
    goes on with the next one."""


class Report:
    """A sweep's books: its report (the dict run_sweep returns), the paths
    it has decided, its log and its deadline. TEST: a sweep that removes
    nothing (its report says what would go)."""

    def __init__(self, test, job, budget, log):
        self.test = test
        self.purged = "would be purged" if test else "purged"
        self.deadline = time.monotonic() + budget
        self.budget = budget
        self.log = log
        self.report = {
            "test": test,
            "job": job,
            "removed": [],
            "would_remove": [],
            "kept": [],
            "unjudged": [],
            "errors": [],
            "skipped": [],
            "counts": {kind: {"removed": 0, "kept": 0} for kind in KINDS},
            "budget_exhausted": False,
            "left": 0,
        }
        self._decided = set()
        self._notes = {}

    # -- the log: what users can create is summed up -------------------------
    def note(self, level, kind, line, subject):
        """A line for the log, of a KIND of line (what it says of its
        SUBJECT, a name users can create): the first FEW of a kind are
        logged as they are, the rest counted, and the kind summed up in one
        line when the sweep ends (flush_notes)."""
        lines = self._notes.setdefault((level, kind), [])
        lines.append(line if len(lines) < FEW else subject)

    def flush_notes(self):
        for (level, kind), lines in self._notes.items():
            if len(lines) <= FEW:
                for line in lines:
                    self.log(level, line)
            else:
                self.log(level, f"{kind}: {len(lines)} entries; the first {FEW}: {'; '.join(lines[:FEW])}")
        self._notes = {}

    # -- bookkeeping -------------------------------------------------------
    def keep(self, kind, path, reason):
        self._decided.add(path)
        self.report["kept"].append({"path": system.show(path), "kind": kind, "reason": reason})
        self.report["counts"][kind]["kept"] += 1

    def gone(self, kind, path):
        """PATH was removed (or, in a test, would be)."""
        self.report["would_remove" if self.test else "removed"].append(system.show(path))
        self.report["counts"][kind]["removed"] += 1

    def unjudged(self, kind, path, why):
        """PATH could not be judged: kept, reported, and the sweep goes on."""
        self.keep(kind, path, f"could not be judged: {why}")
        self.report["unjudged"].append(f"{system.show(path)}: {why}")
        self.note("warning", "sweep kept entries it could not judge",
                  f"sweep kept {system.show(path)}: could not be judged: {why}", system.show(path))

    def error(self, path, message):
        self._decided.add(path)
        self.report["errors"].append(f"{system.show(path)}: {message}")
        self.note("warning", "sweep errors", f"sweep error: {system.show(path)}: {message}", system.show(path))

    def check_budget(self):
        if _SIGTERM:
            raise Terminated("stopped by SIGTERM: the chain's time for part 45 ran out")
        if time.monotonic() > self.deadline:
            raise Budget()


def fact(report):
    """The sweep's fact for the job end's record: the counts per kind, the
    paths removed and kept (each list cut when it would pass half of
    FACT_PATH_CHARS, with how many were left out); of a sweep that removed
    nothing (test, would), what would have gone, and would: true."""
    out = {"counts": {kind: dict(report["counts"][kind]) for kind in KINDS}}
    gone = report["would_remove"] if report.get("test") else report["removed"]
    for key, paths in (("removed", gone), ("kept", [kept["path"] for kept in report["kept"]])):
        shown, size = [], 0
        for path in paths:
            size += len(ascii(path)) + 1
            if size > FACT_PATH_CHARS // 2:
                break
            shown.append(path)
        out[key] = shown
        out[key + "_more"] = len(paths) - len(shown)
    if report.get("test"):
        out["would"] = True
    return out
