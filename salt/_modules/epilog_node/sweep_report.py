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
# Entries each list of the report (removed, would_remove, kept, unjudged,
# errors) holds, at most; past that they are counted (report["more"]) and
# the counts per kind stay whole: a /tmp a user filled with names makes a
# report, and a worker's memory, of a bounded size.
REPORT_MAX = 10000

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


# Every loop over what users can make many (a directory's names, processes,
# sockets, a process's descriptors) asks check() once every CHECK_EVERY steps.
CHECK_EVERY = 256


def stopped():
    """The runner's SIGTERM came (part 45's time is up)."""
    return bool(_SIGTERM)


def check(deadline):
    """Terminated once the runner's SIGTERM came, Budget once DEADLINE
    (time.monotonic(); None: none) is past: what every loop of the sweep
    over what users can make many (names, processes, sockets, descriptors)
    asks, every so many steps."""
    if _SIGTERM:
        raise Terminated("stopped by SIGTERM: the chain's time for part 45 ran out")
    if deadline is not None and time.monotonic() > deadline:
        raise Budget()


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

    def _listed(self, key, make):
        """MAKE() appended to the report's list KEY while it holds fewer than
        REPORT_MAX entries; counted in report["more"] past that (MAKE, which
        shows a name users chose, is then never called)."""
        entries = self.report[key]
        if len(entries) < REPORT_MAX:
            entries.append(make())
        else:
            more = self.report.setdefault("more", {})
            more[key] = more.get(key, 0) + 1

    # -- the log: what users can create is summed up -------------------------
    def note(self, level, kind, line, subject):
        """A line for the log, of a KIND of line (what it says of its
        SUBJECT, a name users can create): the first FEW of a kind are
        logged as they are, the rest counted (never kept), and the kind
        summed up in one line when the sweep ends (flush_notes)."""
        lines, count = self._notes.setdefault((level, kind), ([], [0]))
        count[0] += 1
        if len(lines) < FEW:
            lines.append(line)

    def flush_notes(self):
        for (level, kind), (lines, count) in self._notes.items():
            if count[0] <= FEW:
                for line in lines:
                    self.log(level, line)
            else:
                self.log(level, f"{kind}: {count[0]} entries; the first {FEW}: {'; '.join(lines)}")
        self._notes = {}

    # -- bookkeeping -------------------------------------------------------
    def keep(self, kind, path, reason, candidate=True):
        """PATH is kept, for REASON. CANDIDATE: one the sweep may still
        judge (an entry whose name is not its kind's is not: it is counted
        and never remembered)."""
        if candidate:
            self._decided.add(path)
        self._listed("kept", lambda: {"path": system.show(path), "kind": kind, "reason": reason})
        self.report["counts"][kind]["kept"] += 1

    def gone(self, kind, path):
        """PATH was removed (or, in a test, would be)."""
        self._listed("would_remove" if self.test else "removed", lambda: system.show(path))
        self.report["counts"][kind]["removed"] += 1

    def unjudged(self, kind, path, why):
        """PATH could not be judged: kept, reported, and the sweep goes on."""
        self.keep(kind, path, f"could not be judged: {why}")
        self._listed("unjudged", lambda: f"{system.show(path)}: {why}")
        self.note("warning", "sweep kept entries it could not judge",
                  f"sweep kept {system.show(path)}: could not be judged: {why}", system.show(path))

    def error(self, path, message):
        self._decided.add(path)
        self._listed("errors", lambda: f"{system.show(path)}: {message}")
        self.note("warning", "sweep errors", f"sweep error: {system.show(path)}: {message}", system.show(path))

    def check_budget(self):
        check(self.deadline)


def fact(report):
    """The sweep's fact for the job end's record: the counts per kind, the
    paths removed and kept (each list cut when it would pass half of
    FACT_PATH_CHARS, with how many were left out); of a sweep that removed
    nothing (test, would), what would have gone, and would: true; of one
    its budget stopped, budget_exhausted, left and listing_cut."""
    out = {"counts": {kind: dict(report["counts"][kind]) for kind in KINDS}}
    gone_key = "would_remove" if report.get("test") else "removed"
    more = report.get("more", {})
    for key, paths, beyond in (("removed", report[gone_key], more.get(gone_key, 0)),
                               ("kept", [kept["path"] for kept in report["kept"]], more.get("kept", 0))):
        shown, size = [], 0
        for path in paths:
            size += len(ascii(path)) + 1
            if size > FACT_PATH_CHARS // 2:
                break
            shown.append(path)
        out[key] = shown
        out[key + "_more"] = len(paths) + beyond - len(shown)
    if report.get("test"):
        out["would"] = True
    if report.get("budget_exhausted"):
        out["budget_exhausted"], out["left"] = True, report.get("left", 0)
        if report.get("listing_cut"):
            out["listing_cut"] = report["listing_cut"]
    return out
