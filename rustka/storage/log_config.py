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
    #: "delete", "compact" or "compact,delete" (Kafka's cleanup.policy).
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 24 * 3600 * 1000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int | None = None
    min_cleanable_dirty_ratio: float = 0.5
    file_delete_delay_ms: int = 5_000
    #: "CreateTime" or "LogAppendTime" (Kafka's message.timestamp.type).
    message_timestamp_type: str = "CreateTime"
    #: Largest batch a producer may store; None: the broker's frame limit.
    max_message_bytes: int | None = None

    @property
    def compact(self) -> bool:
        """Whether the cleaner keeps only the latest record of each key."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """Whether retention deletes old segments by time and size."""
        return "delete" in self.cleanup_policy.split(",")
