"""The fetch policy: how much a fetch may return, how long it may wait, what it reserves.

Both front-ends fetch through here, so a native FetchBatch and a Kafka Fetch
follow one set of rules (docs/broker-api.md, "Fetch policy"):

- **Size cap** (`FetchLimits.byte_budget`): a fetch returns at most what it
  asked for and at most the broker's ``fetch_max_bytes``; the first batch still
  comes whole even above that (`rustka.broker.reads`), so a consumer always
  progresses.
- **Output reservation** (`FetchLimits.reservation`): what a fetch reserves in
  its connection's `OutputBudget` before it runs (rustka/output_budget.py): the
  most it can return under the size cap.
- **Long-poll** (`FetchPolicy.fetch`): read; if every partition answered and
  together they hold fewer than ``min_bytes``, park on the broker's waiters
  (`rustka.broker.waiters`) until one of them grows or the wait (capped by
  ``fetch_max_wait_ms``) runs out, then read once more and answer whatever is
  there. A partition answered with an error ends the wait before it starts,
  so the client hears of it at once.

`FetchPolicy` states what it needs of the core in `FetchCore`, so it never
imports the core (`rustka.broker.core.Broker` builds it and delegates to it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from twisted.internet import defer

from rustka.broker.reads import FetchPosition, ReadResult

FetchAnswer = list[ReadResult | Exception]
"""Each partition's read (or its error, in its place), in the fetch's order."""


@dataclass(frozen=True, slots=True)
class FetchLimits:
    """The broker's bounds on one fetch (``fetch_max_bytes``, ``fetch_max_wait_ms``)."""

    max_bytes: int
    max_wait_ms: int

    def reservation(self, requested: int) -> int:
        """The output bytes a fetch asking for ``requested`` reserves before it runs:
        the most it returns under the size cap (nothing if it asks for nothing)."""
        return max(0, min(requested, self.max_bytes))

    def byte_budget(self, requested: int) -> int:
        """The bytes a fetch asking for ``requested`` is read within (at least one: the
        first batch comes whole whatever the budget)."""
        return max(1, self.reservation(requested))

    def wait_s(self, requested_ms: int) -> float:
        """How long a fetch asking to wait ``requested_ms`` may long-poll, in seconds."""
        return min(requested_ms, self.max_wait_ms) / 1000


def should_wait(answer: Iterable[ReadResult | Exception], min_bytes: int) -> bool:
    """Whether a fetch that read ``answer`` parks: no partition failed and together
    they returned fewer than ``min_bytes``."""
    total = 0
    for result in answer:
        if isinstance(result, Exception):
            return False
        total += result.size
    return total < min_bytes


class FetchCore(Protocol):
    """What `FetchPolicy` needs of the broker core (`rustka.broker.core.Broker` is one)."""

    def read_many(
        self, wanted: Sequence[FetchPosition], max_bytes: int, *, committed: bool = False
    ) -> defer.Deferred[FetchAnswer]:
        """Each partition's batches from its offset, within ``max_bytes`` in order."""

    def wait_for_data(
        self,
        positions: Iterable[tuple[str, int, int]],
        timeout_s: float,
        *,
        committed: bool = False,
    ) -> defer.Deferred[None]:
        """Fires once a partition has data past its offset, or after ``timeout_s``."""


class FetchPolicy:
    """One broker's fetches under its `FetchLimits`; see the module docstring."""

    def __init__(self, core: FetchCore, limits: FetchLimits) -> None:
        self._core = core
        self.limits = limits

    def fetch(
        self,
        wanted: Sequence[FetchPosition],
        max_bytes: int,
        *,
        min_bytes: int = 1,
        max_wait_ms: int = 0,
        committed: bool = False,
    ) -> defer.Deferred[FetchAnswer]:
        """Read ``wanted`` within the capped ``max_bytes``, long-polling for ``min_bytes``
        for at most the capped ``max_wait_ms``; a partition's error answers in its place."""
        core = self._core
        budget = self.limits.byte_budget(max_bytes)
        wait_s = self.limits.wait_s(max_wait_ms)
        d = core.read_many(wanted, budget, committed=committed)
        if wait_s <= 0:
            return d

        def first(answer: FetchAnswer) -> FetchAnswer | defer.Deferred[FetchAnswer]:
            if not should_wait(answer, min_bytes):
                return answer
            positions = [(topic, partition, offset) for topic, partition, offset, _ in wanted]
            parked = core.wait_for_data(positions, wait_s, committed=committed)
            return parked.addCallback(lambda _: core.read_many(wanted, budget, committed=committed))

        # Fired only with the answer (not while parked), and cancelling it unparks.
        answered: defer.Deferred[FetchAnswer] = defer.Deferred(lambda _: d.cancel())
        d.addCallback(first).chainDeferred(answered)
        return answered
