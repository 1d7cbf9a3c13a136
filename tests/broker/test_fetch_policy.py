"""The fetch policy both front-ends share: size cap, output reservation, long-poll.

The long-poll runs on real `Waiters` and a `task.Clock`, over an in-memory
`FetchCore` whose partitions are lists of batches (offset = index), so time is
advanced, never waited for.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest
from twisted.internet import defer, task

from rustka.broker.fetch_policy import FetchAnswer, FetchLimits, FetchPolicy, should_wait
from rustka.broker.reads import FetchPosition, ReadResult
from rustka.broker.waiters import Waiters
from rustka.errors import OffsetOutOfRange, UnknownTopic

LIMITS = FetchLimits(max_bytes=1000, max_wait_ms=500)


def test_a_fetch_is_capped_by_the_brokers_max_bytes_and_reserves_that() -> None:
    assert LIMITS.byte_budget(10) == 10
    assert LIMITS.byte_budget(5000) == 1000
    assert LIMITS.byte_budget(0x7FFFFFFF) == 1000
    # Asking for nothing still reads the first batch whole, but reserves nothing ahead.
    assert LIMITS.byte_budget(0) == 1 and LIMITS.reservation(0) == 0
    assert LIMITS.byte_budget(-5) == 1 and LIMITS.reservation(-5) == 0
    assert LIMITS.reservation(10) == 10 and LIMITS.reservation(5000) == 1000


def test_the_wait_is_capped_by_the_brokers_max_wait() -> None:
    assert LIMITS.wait_s(100) == 0.1
    assert LIMITS.wait_s(600_000) == 0.5
    assert LIMITS.wait_s(0) == 0
    assert LIMITS.wait_s(-1) < 0


def _result(size: int) -> ReadResult:
    return ReadResult((b"x" * size,) if size else (), 0, 0)


@pytest.mark.parametrize(
    ("answer", "min_bytes", "waits"),
    [
        ([_result(0)], 1, True),
        ([_result(5)], 1, False),
        ([_result(5), _result(4)], 10, True),
        ([_result(5), _result(5)], 10, False),
        # An error is answered at once: the client must hear of it.
        ([_result(0), UnknownTopic("gone")], 1, False),
        ([_result(0)], 0, False),
    ],
)
def test_a_fetch_waits_only_below_min_bytes_and_without_errors(
    answer: list[ReadResult | Exception], min_bytes: int, waits: bool
) -> None:
    assert should_wait(answer, min_bytes) is waits


class Partitions:
    """A `FetchCore` over in-memory partitions: each a list of batches, offset = index."""

    def __init__(self, clock: task.Clock) -> None:
        self.waiters = Waiters(clock)
        self.batches: dict[tuple[str, int], list[bytes]] = {("a", 0): [], ("b", 0): []}
        self.budgets: list[int] = []
        self.waits: list[float] = []

    def append(self, topic: str, partition: int, batch: bytes) -> None:
        self.batches[(topic, partition)].append(batch)
        self.waiters.wake((topic, partition))

    def read_many(
        self, wanted: Sequence[FetchPosition], max_bytes: int, *, committed: bool = False
    ) -> defer.Deferred[FetchAnswer]:
        self.budgets.append(max_bytes)
        out: FetchAnswer = []
        for topic, partition, offset, _ in wanted:
            log = self.batches.get((topic, partition))
            if log is None:
                out.append(UnknownTopic(topic))
            elif offset > len(log):
                out.append(OffsetOutOfRange(offset, 0, len(log)))
            else:
                out.append(ReadResult(tuple(log[offset:]), len(log), 0))
        return defer.succeed(out)

    def wait_for_data(
        self,
        positions: Iterable[tuple[str, int, int]],
        timeout_s: float,
        *,
        committed: bool = False,
    ) -> defer.Deferred[None]:
        self.waits.append(timeout_s)
        keys = [(t, p) for t, p, _ in positions]
        if any(len(self.batches[(t, p)]) > offset for t, p, offset in positions):
            return defer.succeed(None)
        return self.waiters.park(keys, timeout_s)


@pytest.fixture
def clock() -> task.Clock:
    return task.Clock()


@pytest.fixture
def core(clock: task.Clock) -> Partitions:
    return Partitions(clock)


def _sizes(d: defer.Deferred[FetchAnswer]) -> list[int | str]:
    assert d.called
    answer: FetchAnswer = d.result
    return [type(r).__name__ if isinstance(r, Exception) else r.size for r in answer]


def test_a_fetch_with_enough_data_answers_at_once(core: Partitions) -> None:
    core.append("a", 0, b"12345")
    d = FetchPolicy(core, LIMITS).fetch([("a", 0, 0, 100)], 5000, min_bytes=5, max_wait_ms=500)
    assert _sizes(d) == [5]
    assert core.budgets == [1000] and core.waits == []


def test_a_long_poll_answers_when_data_arrives(clock: task.Clock, core: Partitions) -> None:
    policy = FetchPolicy(core, LIMITS)
    wanted = [("a", 0, 0, 100), ("b", 0, 0, 100)]
    d = policy.fetch(wanted, 5000, min_bytes=1, max_wait_ms=60_000)
    assert not d.called and core.waits == [0.5] and len(core.waiters) == 1
    clock.advance(0.25)
    core.append("b", 0, b"xyz")
    assert _sizes(d) == [0, 3]
    assert core.budgets == [1000, 1000] and len(core.waiters) == 0


def test_a_long_poll_answers_what_there_is_when_the_capped_wait_ends(
    clock: task.Clock, core: Partitions
) -> None:
    d = FetchPolicy(core, LIMITS).fetch([("a", 0, 0, 100)], 100, min_bytes=10, max_wait_ms=60_000)
    core.append("a", 0, b"1234")  # wakes the poll: it reads once more and answers
    assert _sizes(d) == [4]
    d = FetchPolicy(core, LIMITS).fetch([("a", 0, 1, 100)], 100, min_bytes=10, max_wait_ms=60_000)
    clock.advance(0.499)
    assert not d.called
    clock.advance(0.001)
    assert _sizes(d) == [0] and len(core.waiters) == 0


def test_an_error_or_no_wait_answers_without_parking(core: Partitions) -> None:
    policy = FetchPolicy(core, LIMITS)
    d = policy.fetch([("a", 0, 0, 100), ("gone", 0, 0, 100)], 100, max_wait_ms=500)
    assert _sizes(d) == [0, "UnknownTopic"]
    d = policy.fetch([("a", 0, 7, 100)], 100, max_wait_ms=500)
    assert _sizes(d) == ["OffsetOutOfRange"]
    d = policy.fetch([("a", 0, 0, 100)], 100, max_wait_ms=0)
    assert _sizes(d) == [0]
    assert core.waits == [] and len(core.budgets) == 3


def test_cancelling_a_parked_fetch_unparks_it(clock: task.Clock, core: Partitions) -> None:
    d = FetchPolicy(core, LIMITS).fetch([("a", 0, 0, 100)], 100, max_wait_ms=500)
    assert len(core.waiters) == 1
    d.addErrback(lambda f: f.trap(defer.CancelledError))
    d.cancel()
    assert len(core.waiters) == 0 and clock.getDelayedCalls() == []
    core.append("a", 0, b"late")
    assert len(core.budgets) == 1
