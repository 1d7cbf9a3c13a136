"""OutputBudget: reserve before building, settle to the real size, release on write."""

from __future__ import annotations

import pytest

from rustka.output_budget import OutputBudget


def test_one_request_may_always_start_even_if_larger_than_the_limit() -> None:
    """A single response larger than the whole budget is still served."""
    budget = OutputBudget(100)
    assert budget.admits(1_000)
    budget.reserve(1_000)
    assert not budget.admits(1)
    budget.release(1_000)
    assert budget.reserved == 0 and budget.admits(1)


def test_reservations_stay_within_the_limit() -> None:
    """Requests start while their costs fit; the next one waits."""
    budget = OutputBudget(100)
    for _ in range(4):
        assert budget.admits(25)
        budget.reserve(25)
    assert not budget.admits(25) and budget.exhausted
    budget.release(25)
    assert budget.admits(25) and not budget.exhausted


def test_unknown_sizes_run_alone_until_one_is_known_then_by_the_largest() -> None:
    """The first unknown-size read reserves the whole limit; later ones the largest seen."""
    budget = OutputBudget(1600)
    first = budget.reserve(budget.estimate())
    assert first == 1600 and not budget.admits(budget.estimate())
    settled = budget.settle(first, 30)
    assert settled == 30 and budget.reserved == 30
    assert budget.estimate() == 100  # the floor: limit // 16
    budget.settle(budget.reserve(budget.estimate()), 500)
    assert budget.estimate() == 500 and budget.largest == 500
    assert budget.reserved == 530


def test_settle_can_raise_a_reservation_that_was_too_low() -> None:
    """A response larger than its estimate is counted at its real size."""
    budget = OutputBudget(100)
    cost = budget.reserve(10)
    budget.settle(cost, 90)
    assert budget.reserved == 90 and not budget.admits(20)


def test_bad_amounts_are_refused() -> None:
    """Negative reservations and releases beyond what was reserved are programming errors."""
    budget = OutputBudget(100)
    with pytest.raises(ValueError, match="negative"):
        budget.reserve(-1)
    with pytest.raises(ValueError, match="negative"):
        budget.settle(0, -5)
    with pytest.raises(AssertionError, match="released more"):
        budget.release(1)


def test_set_limit_moves_the_floor() -> None:
    """The server sets the limit from its config after the budget is built."""
    budget = OutputBudget(0)
    budget.set_limit(3200)
    budget.settle(budget.reserve(budget.estimate()), 1)
    assert budget.limit == 3200 and budget.estimate() == 200
