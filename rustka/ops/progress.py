"""A one-line progress display for long CLI runs, shown only on a terminal.

Progress goes to stderr and only when that stream is a TTY: when output is
piped or captured the user (or a script) wants the data and the summary, not
carriage returns. Redrawing is throttled by the clock so updating after every
batch costs a comparison, not a write.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Progress", "format_duration"]

_BAR_WIDTH = 20


class _Stream(Protocol):
    def write(self, text: str, /) -> int: ...
    def flush(self) -> None: ...
    def isatty(self) -> bool: ...


def format_duration(seconds: float) -> str:
    """H:MM:SS (or M:SS under an hour) for an ETA."""
    total = max(0, int(seconds + 0.5))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Records done, their rate and, when ``total`` work is known, a bar and an ETA.

    Work and records are counted apart because what is known ahead differs:
    a file's size in bytes for produce, an end offset for consume.
    """

    def __init__(
        self,
        stream: _Stream,
        *,
        label: str = "",
        total: int | None = None,
        unit: str = "records",
        interval: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        try:
            self.enabled = bool(stream.isatty())
        except (AttributeError, ValueError, OSError):
            self.enabled = False
        self.stream = stream
        self.label = label
        self.total = total
        self.unit = unit
        self.interval = interval
        self.clock = clock
        self.records = 0
        self.done = 0
        self._start = clock()
        self._next_draw = self._start + interval
        self._width = 0

    def update(self, records: int, done: int | None = None) -> None:
        """Set the counts so far; redraws at most once per ``interval``."""
        self.records = records
        if done is not None:
            self.done = done
        if self.enabled:
            now = self.clock()
            if now >= self._next_draw:
                self._next_draw = now + self.interval
                self._draw(now)

    def line(self, now: float | None = None) -> str:
        """The text the display shows at ``now``."""
        now = self.clock() if now is None else now
        elapsed = max(now - self._start, 1e-9)
        rate = self.records / elapsed
        parts = [self.label] if self.label else []
        parts.append(f"{self.records:,} {self.unit}")
        parts.append(f"{rate:,.0f} {self.unit}/s")
        total = self.total
        if total:
            fraction = min(1.0, max(0.0, self.done / total))
            filled = int(fraction * _BAR_WIDTH)
            parts.append(f"[{'#' * filled}{'.' * (_BAR_WIDTH - filled)}] {fraction:4.0%}")
            if 0 < fraction < 1:
                parts.append(f"ETA {format_duration(elapsed * (1 - fraction) / fraction)}")
        return "  ".join(parts)

    def _draw(self, now: float) -> None:
        text = self.line(now)
        pad = max(0, self._width - len(text))
        self._width = len(text)
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()

    def finish(self) -> None:
        """Draw the final state and end the line, so later messages start clean."""
        if self.enabled:
            self._draw(self.clock())
            self.stream.write("\n")
            self.stream.flush()
