"""What a part's action is handed (Context), defined here so that the
parts, the worker and the runner all import it from below: nothing that
runs a part imports the runner for it.
"""


class Context:
    """What a part's action is handed: the settings and the names of what it
    edits, the job, the user's identity, the uid to act for (a lastuserjob
    part the runner started), its deadline, log(level, line) and
    fact(key, value) for the record."""

    def __init__(self, run, name, act_uid, deadline, log, fact):
        self.settings, self.names, self.trust, self.env = run.settings, run.names, run.trust, run.env
        self.job, self.user, self.identity = run.job, run.user, run.identity
        self.name, self.act_uid, self.deadline, self.log, self.fact = name, act_uid, deadline, log, fact
