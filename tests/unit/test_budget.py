"""The chain's deadline budget has one home, epilog_node/budget.py: the
runner shares chain_timeout by it (room), epilog.verify judges the parts
laid down by it (worst_case), and map.jinja's least chain_timeout is its
chain of one part. map.jinja cannot import Python at its render, so its
check is rendered here, through Salt's Jinja, over a grid of timeouts, and
must refuse exactly the chain_timeouts below budget.minimum."""
import re

import pytest

from tests.helpers import REPO
from tests.unit.conftest import node
from tests.unit.test_settings import DEFAULTS, merged

budget = node("budget")
salt_exceptions = pytest.importorskip("salt.exceptions")

GRID = [(part, squeue) for part in (2, 7, 20, 61) for squeue in (1, 5, 30)]


@pytest.mark.parametrize("part_timeout,squeue_timeout", GRID)
def test_map_jinja_refuses_exactly_the_chain_timeouts_below_the_budgets_minimum(tmp_path, part_timeout,
                                                                                 squeue_timeout):
    least = budget.minimum(part_timeout, squeue_timeout)
    given = {"part_timeout": part_timeout, "squeue_timeout": squeue_timeout, "sweep_budget": 1}
    assert merged(tmp_path, {"epilog": {**given, "chain_timeout": least}})["chain_timeout"] == least
    with pytest.raises(salt_exceptions.SaltException) as caught:
        merged(tmp_path, {"epilog": {**given, "chain_timeout": least - 1}})
    assert (f"epilog:chain_timeout ({least - 1}) must leave room for the decision, one part and the runner: at "
            f"least epilog:part_timeout ({part_timeout}) + epilog:squeue_timeout ({squeue_timeout}) + 18"
            in str(caught.value))


def test_the_minimum_is_the_worst_case_of_one_part_and_the_message_says_it():
    for part_timeout, squeue_timeout in GRID:
        assert budget.minimum(part_timeout, squeue_timeout) == part_timeout + squeue_timeout + 18
        assert budget.minimum(part_timeout, squeue_timeout) == budget.worst_case(1, part_timeout, squeue_timeout)
    # map.jinja's check is this sum, and no other
    text = (REPO / "salt/epilog/map.jinja").read_text()
    assert re.findall(r"epilog\.part_timeout \+ epilog\.squeue_timeout \+ (\d+) > epilog\.chain_timeout", text) == \
        [str(budget.minimum(0, 0))]


def test_the_defaults_fit_the_formulas_four_epilog_parts_and_two_of_the_sites_below_a_common_120_s():
    """The operators' finding: the defaults used to leave one second beyond
    the formula's own four epilog parts, so one site part of its own made
    epilog.verify report [chain-worst-case-too-long]. They hold two now,
    with chain_timeout below a common EpilogTimeout of 120 s; a third
    needs chain_timeout raised (pillar.example says by how much)."""
    part, squeue, chain = DEFAULTS["part_timeout"], DEFAULTS["squeue_timeout"], DEFAULTS["chain_timeout"]
    assert budget.worst_case(4, part, squeue) == 77 <= chain
    assert budget.worst_case(4 + 2, part, squeue) == 105 <= chain < 120
    assert budget.worst_case(4 + 3, part, squeue) == 119 > chain
    assert budget.shown(6, part, squeue) == \
        "6 parts x (part_timeout 12 + 2) + 10 for the user's lock + squeue_timeout 5 + 1 + 5"
    # the sweep stops within the part, and the map's least chain_timeout is met
    assert DEFAULTS["sweep_budget"] < part and budget.minimum(part, squeue) <= chain
    example = (REPO / "pillar.example").read_text()
    assert "6 x 14 + 21 = 105" in example and "at least 119 (7 x 14 + 21)" in example
    assert "at least 153 (6 x 22 + 21)" in example and budget.worst_case(6, 20, squeue) == 153


@pytest.mark.parametrize("elapsed,own_after,room", [
    (0, 0, 20), (0, 3, 20), (0, 4, 17), (30, 3, 9), (40, 3, -1), (104.5, 0, 0), (84.2, 0, 20), (89.5, 0, 15),
])
def test_a_part_gets_part_timeout_but_never_the_time_the_own_parts_after_it_need(elapsed, own_after, room):
    # chain_timeout 110, part_timeout 20: 110 - elapsed - 5 - own_after x 22, at most 20, whole seconds
    assert budget.room(20, 110, elapsed, own_after) == room


def test_the_last_own_part_still_gets_its_whole_time_when_the_chain_fits():
    """With a chain_timeout at the worst case of N parts, each of the N
    parts, run to its deadline and killed, still gets its part_timeout."""
    part, squeue = 20, 5
    for parts in range(1, 6):
        chain = budget.worst_case(parts, part, squeue)
        elapsed = budget.LOCK_WAIT + squeue + budget.SQUEUE_GRACE  # the decision's worst case
        for after in reversed(range(parts)):
            assert budget.room(part, chain, elapsed, after) == part
            elapsed += part + budget.KILL_GRACE
