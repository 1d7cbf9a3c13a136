"""A partition log's settings, as storage sees them.

The broker's declarations (rustka/config.py) and a topic's own configs are
resolved into one of these before storage opens a log; storage never reads
the broker's configuration itself.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LogConfig"]


@dataclass
class LogConfig:
    """Per-partition storage settings; None disables a time or size limit."""

    segment_bytes: int = 1 << 30
    segment_ms: int | None = 7 * 24 * 3600 * 1000
    retention_bytes: int | None = None
    retention_ms: int | None = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    flush: str = "always"
