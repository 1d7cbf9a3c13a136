"""How many response bytes one connection may hold in the broker's memory.

A client can pipeline thousands of reads and then stop reading. Without a
bound, the broker builds every response (a 512 KiB record times 2,000 Fetches
is a gigabyte) and keeps it until the client reads or goes. The rule, shared
by every front-end (the native server now, the Kafka server's Fetch too), is:

1. **Reserve before building.** Before a request whose answer can be large
   starts, it reserves its cost: the most it can return when that is known
   (a batched fetch's ``max_bytes``), else an estimate (`estimate`). A request
   that does not fit waits, and the front-end stops reading from the
   connection until the budget frees, so nothing more is even parsed.
2. **Settle when built.** Once the response exists, its reservation becomes
   its real size (`settle`), so an estimate that was too high frees the rest
   at once and one that was too low is counted truthfully from then on.
3. **Release when handed to the transport.** From then on the transport's
   write buffer holds it, and the front-end pauses (no new reservations) while
   the transport says the client is not reading (IPushProducer.pauseProducing).

Reserved bytes therefore stay within the limit, plus one response: a single
request may always start when nothing is reserved, so an answer larger than
the whole budget is still served. With the transport's buffer bounded the same
way, a connection holds at most about twice its budget (docs/reliability.md,
``max_output_bytes_per_connection``).

Plain Python without Twisted, so any protocol class can own one.
"""

from __future__ import annotations

__all__ = ["OutputBudget"]


class OutputBudget:
    """The response bytes one connection has reserved, against its limit.

    ``floor_fraction`` sets the smallest estimate for a response of unknown
    size (``limit // floor_fraction``); it caps how many such requests run at
    once before their real sizes are known.
    """

    __slots__ = ("_floor", "largest", "limit", "reserved")

    def __init__(self, limit: int, floor_fraction: int = 16) -> None:
        self.limit = limit
        self.reserved = 0
        self.largest = 0
        """The largest response settled so far: the next estimate when sizes are unknown."""
        self._floor = max(1, limit // floor_fraction)

    def set_limit(self, limit: int, floor_fraction: int = 16) -> None:
        """Change the limit (the server learns it from its config once connected)."""
        self.limit = limit
        self._floor = max(1, limit // floor_fraction)

    def estimate(self) -> int:
        """The cost to reserve for a response whose size is unknown until it is read.

        Until one response has been settled nothing is known, so the estimate is
        the whole limit: the first such read runs alone. After that it is the
        largest response this connection has had, and never less than the floor,
        which caps how many small reads run at once.
        """
        if not self.largest:
            return self.limit
        return max(self._floor, self.largest)

    def admits(self, cost: int) -> bool:
        """Whether a request of ``cost`` may start now (always, when nothing is reserved)."""
        return not self.reserved or self.reserved + cost <= self.limit

    @property
    def exhausted(self) -> bool:
        """True while nothing more (not even the smallest estimate) would be admitted."""
        return bool(self.reserved) and self.reserved + self._floor > self.limit

    def reserve(self, cost: int) -> int:
        """Count ``cost`` as reserved; returns it, to be settled or released later."""
        if cost < 0:
            raise ValueError(f"a reservation cannot be negative: {cost}")
        self.reserved += cost
        return cost

    def settle(self, reserved: int, actual: int) -> int:
        """Replace a reservation by the response's real size; returns the new reservation."""
        if actual < 0:
            raise ValueError(f"a response size cannot be negative: {actual}")
        self.reserved += actual - reserved
        if actual > self.largest:
            self.largest = actual
        return actual

    def release(self, amount: int) -> None:
        """The response was handed to the transport: its bytes no longer count here."""
        self.reserved -= amount
        if self.reserved < 0:
            raise AssertionError(f"output budget released more than it reserved ({self.reserved})")
