"""A partition log's settings, as storage sees them.

The broker's declarations (rustka/config.py) and a topic's own configs are
resolved into one of these before storage opens a log; storage never reads
the broker's configuration itself. It stores a topic's configs (the
``topic-config`` file, rustka/storage/log_files.py) and asks a `Resolver`,
which the broker hands it, for the LogConfig they make.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["LogConfig", "Resolver"]


@dataclass
class LogConfig:
    """Per-partition storage settings; None disables a time or size limit."""

    segment_bytes: int = 1 << 30
    segment_ms: int | None = 7 * 24 * 3600 * 1000
    retention_bytes: int | None = None
    retention_ms: int | None = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    flush: str = "always"
    #: Kafka's cleanup.policy: "delete", "compact", both ("compact,delete", in either
    #: order) or neither (""), comma-separated without spaces.
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
    #: Kafka's segment.index.bytes: a segment rolls once its offset index holds this
    #: many bytes of entries (8 each) or its time index does (12 each).
    segment_index_bytes: int = 10 * 1024 * 1024
    #: Kafka's compression.type: "producer" keeps each batch's codec, a codec name
    #: ("uncompressed", "gzip", "snappy", "lz4", "zstd") is what every batch is stored in.
    compression_type: str = "producer"
    #: How far a CreateTime record's timestamp may lie before or after the broker's
    #: clock (Kafka's message.timestamp.before.max.ms/after.max.ms); None: no limit.
    message_timestamp_before_max_ms: int | None = None
    message_timestamp_after_max_ms: int | None = None
    #: Kafka's diskless.enable (KIP-1150): the partitions live in the object store and
    #: the catalog (rustka/storage/diskless/), not in segments.
    diskless_enable: bool = False
    #: Confluent's confluent.value.schema.validation and confluent.key.schema.validation:
    #: each record's value (key) must carry a schema id the schema registry knows.
    confluent_value_schema_validation: bool = False
    confluent_key_schema_validation: bool = False

    @property
    def compact(self) -> bool:
        """Whether the cleaner keeps only the latest record of each key."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """Whether retention deletes old segments by time and size."""
        return "delete" in self.cleanup_policy.split(",")


Resolver = Callable[[Mapping[str, str]], LogConfig]
"""A topic's own configs (Kafka's names and spelling) -> its log's settings.

Raises ValueError (rustka.settings.ConfigError) naming a config that is unknown or
whose value is invalid.
"""
