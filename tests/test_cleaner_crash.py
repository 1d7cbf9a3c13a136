"""kill -9 in the middle of a log clean: the log recovers to a state between whole swaps.

The long version is ``python -m tools.cleaner_crash`` (every file operation of a
round, and 40 random kills); this kills the cleaning child before each of the
first 30 file operations of a round (every step of the first swap: writing the
cleaned segment, the swap file, the renames, the checkpoint, the snapshot,
removing the swap file) and at a few later ones, then at random moments twice
in a row, and checks after each reopen that the records are exactly those of
the pre-clean state, the post-clean state or a state between two swaps.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from tools.cleaner_crash import check, count_events, finished, prepare, run_child

pytestmark = pytest.mark.system


def test_kill_during_a_clean_recovers_to_a_state_between_swaps(tmp_path: Path) -> None:
    rng = random.Random(20260518)
    pristine = tmp_path / "pristine" / "topic" / "0"
    expected = prepare(pristine, rng, writes=1500, keys=100)
    assert len(expected.boundaries) > 8
    assert expected.states()[0] == expected.before != expected.after
    events = count_events(pristine)
    assert events > 60
    work = tmp_path / "work" / "topic" / "0"
    states: list[int] = []
    for n in [*range(1, 31), *sorted(rng.sample(range(31, events + 1), 6))]:
        shutil.rmtree(work.parent.parent, ignore_errors=True)
        shutil.copytree(pristine, work)
        assert run_child(work, die_at=n), n
        outcome = check(work, expected)
        assert outcome.problem is None, (n, outcome.problem)
        assert outcome.state is not None
        states.append(outcome.state)
    # The first swap's steps end in the pre-clean state before its commit point and
    # in the state after it from there on; later kills land further along.
    assert states[0] == 0 and 0 < states[29] < states[-1]
    assert states == sorted(states)
    for _ in range(3):
        shutil.rmtree(work.parent.parent, ignore_errors=True)
        shutil.copytree(pristine, work)
        for _ in range(2):
            run_child(work, kill_after=rng.uniform(0, expected.round_seconds * 1.5))
            outcome = check(work, expected)
            assert outcome.problem is None, outcome.problem
        run_child(work)
        assert finished(work, expected)
