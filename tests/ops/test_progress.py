"""The progress line of long CLI commands (rustka/ops/progress.py)."""

from __future__ import annotations

import io

from rustka.ops.progress import Progress, format_duration


class FakeTTY(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class Clock:
    """A settable clock so redraw throttling and rates are deterministic."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_draws_rate_bar_and_eta_on_a_tty() -> None:
    """On a TTY the line shows records, rate, a bar and an ETA, redrawn in place."""
    stream, clock = FakeTTY(), Clock()
    progress = Progress(stream, label="produce t", total=1000, clock=clock, interval=0.5)
    clock.now += 2
    progress.update(500, 250)
    assert stream.getvalue() == (
        "\rproduce t  500 records  250 records/s  [#####...............]  25%  ETA 0:06"
    )
    clock.now += 0.1
    progress.update(600, 300)
    assert stream.getvalue().count("\r") == 1  # throttled
    clock.now += 2
    progress.update(1000, 1000)
    progress.finish()
    final = stream.getvalue().rsplit("\r", 1)[1]
    assert "100%" in final and "ETA" not in final and final.endswith("\n")


def test_progress_without_total_has_no_eta() -> None:
    """With nothing known ahead, only counts and rate are shown."""
    stream, clock = FakeTTY(), Clock()
    progress = Progress(stream, clock=clock, interval=0)
    clock.now += 4
    progress.update(1000)
    assert stream.getvalue() == "\r1,000 records  250 records/s"


def test_progress_is_silent_off_a_tty() -> None:
    """A stream that is not a terminal gets nothing, not even on finish()."""
    stream = io.StringIO()
    progress = Progress(stream, total=10, interval=0)
    progress.update(5, 5)
    progress.finish()
    assert stream.getvalue() == "" and not progress.enabled


def test_format_duration() -> None:
    """ETAs read as M:SS under an hour and H:MM:SS above."""
    assert format_duration(0) == "0:00"
    assert format_duration(65.4) == "1:05"
    assert format_duration(3 * 3600 + 61) == "3:01:01"


def test_stream_without_isatty_counts_as_piped() -> None:
    """An object whose isatty() raises (a closed stream) disables progress."""
    closed = io.StringIO()
    closed.close()
    assert not Progress(closed).enabled
