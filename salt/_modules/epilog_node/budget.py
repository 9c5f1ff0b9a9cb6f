"""The chain's deadline budget, the one rule for how the epilog chain's time
(epilog:chain_timeout) is shared: the runner gives each part its seconds by
it (room), epilog.verify judges the parts laid down against it
(worst_case), and map.jinja's minimum of chain_timeout is its chain of one
part (minimum; a unit test holds map.jinja's check to it).

A part gets at most part_timeout, then KILL_GRACE more to die; the wait for
the user's lock takes at most LOCK_WAIT, the squeue fallback of the last-job
lookup squeue_timeout plus SQUEUE_GRACE; the runner keeps RUNNER_KEEPS for
itself: 2 to kill a part, 1 for its whole-second clock, 2 for the syslog
flush and the exit. Pure arithmetic on the settings' seconds.
"""

KILL_GRACE = 2
LOCK_WAIT = 10
SQUEUE_GRACE = 1
RUNNER_KEEPS = 5


def worst_case(parts, part_timeout, squeue_timeout):
    """The seconds a chain of PARTS parts may take at the most: each part to
    its deadline and its death, the wait for the user's lock, the squeue
    fallback, and what the runner keeps."""
    return parts * (part_timeout + KILL_GRACE) + LOCK_WAIT + squeue_timeout + SQUEUE_GRACE + RUNNER_KEEPS


def minimum(part_timeout, squeue_timeout):
    """The least chain_timeout map.jinja accepts: room for the decision, one
    part and the runner (the worst case of a chain of one part)."""
    return worst_case(1, part_timeout, squeue_timeout)


def shown(parts, part_timeout, squeue_timeout):
    """How worst_case adds up, in words, for a message."""
    return ("%d parts x (part_timeout %d + %d) + %d for the user's lock + squeue_timeout %d + %d + %d"
            % (parts, part_timeout, KILL_GRACE, LOCK_WAIT, squeue_timeout, SQUEUE_GRACE, RUNNER_KEEPS))


def room(part_timeout, chain_timeout, elapsed, own_after):
    """The seconds a part may have now, ELAPSED seconds into the chain: at
    most part_timeout, and never more than what is left of chain_timeout once
    the formula's OWN_AFTER parts still to come have their part_timeout +
    KILL_GRACE each (a site part cannot eat the time 39 and 40 need), less
    what the runner keeps. Below 1: the chain's deadline is reached."""
    return min(part_timeout, int(chain_timeout - elapsed - RUNNER_KEEPS - own_after * (part_timeout + KILL_GRACE)))
