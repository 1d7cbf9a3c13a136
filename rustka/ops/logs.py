"""Log observers for operators: plain lines for journald, JSON for machines.

twistd's ``--logger`` takes a zero-argument factory, hence the module-level
callables. The broker itself only ever emits through `twisted.logger.Logger`
with named fields, so both observers see the same structured events.
"""

from __future__ import annotations

import sys
from typing import IO

from twisted.logger import (
    FileLogObserver,
    ILogObserver,
    eventAsJSON,
    eventAsText,
)


def json_observer(stream: IO[str] | None = None) -> ILogObserver:
    """One JSON object per line (no record separator), for log shippers."""
    target = stream if stream is not None else sys.stdout
    return FileLogObserver(target, lambda event: eventAsJSON(event) + "\n")


def journal_observer() -> ILogObserver:
    """Lines without timestamps, since journald adds its own.

    Use as ``twistd --logger rustka.ops.logs.journal_observer``.
    """
    return FileLogObserver(
        sys.stdout, lambda event: eventAsText(event, includeTimestamp=False) + "\n"
    )


def json_stdout_observer() -> ILogObserver:
    """``--logger rustka.ops.logs.json_stdout_observer`` for JSON logs under twistd."""
    return json_observer(sys.stdout)
