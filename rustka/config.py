"""Broker configuration: embedded defaults, an optional TOML file, then flags.

Every setting is declared once, below, with `rustka.settings.setting`: its type,
default, range, doc and heading. Parsing, validation, etc/rustka.toml and the
settings table in docs/operations.md all come from those declarations; unknown
keys are errors (a typo must not be silently ignored), and sizes/durations
accept human units ("16MiB", "7d").
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rustka.settings import (
    ConfigError,
    Group,
    Kind,
    Setting,
    declarations,
    parse_duration_ms,
    parse_size,
    setting,
)
from rustka.storage.log_config import LogConfig

__all__ = [
    "CLEANUP_POLICIES",
    "DEFAULT_LISTEN",
    "FLUSH_POLICIES",
    "SETTINGS",
    "TIMESTAMP_TYPES",
    "TOML_PREAMBLE",
    "Config",
    "ConfigError",
    "parse_duration_ms",
    "parse_size",
]

DEFAULT_LISTEN = "tcp:9092:interface=127.0.0.1"
FLUSH_POLICIES = ("always", "interval", "never")
CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_DAY_MS = 86_400_000

TOML_PREAMBLE = """\
# rustka broker configuration.
#
# Every setting is shown with its embedded default; delete what you do not
# change. Command-line flags (--data-dir, --listen, --port, --flush, ...)
# override this file. Sizes accept units ("16MiB", "1GB"); durations accept
# "250ms", "30s", "5m", "2h", "7d" or plain integers meaning milliseconds.
# Unknown keys are an error, so a typo never goes unnoticed.
#
# This file is generated from rustka/config.py (tools/settings_docs.py --write).
"""

_STORAGE = Group("Storage")
_NETWORK = Group(
    "Listeners",
    """\
Twisted endpoint strings, one listener each:
  "tcp:9092:interface=127.0.0.1"        plain TCP on loopback (the default)
  "ssl:9093:interface=0.0.0.0:privateKey=key.pem:certKey=cert.pem"   TLS
  "systemd:domain=INET:name=rustka"     a socket passed by systemd
  "unix:/run/rustka/rustka.sock"        a UNIX socket
"tcp:9092" without interface= listens on every interface.""",
)
_KAFKA = Group(
    "Kafka protocol",
    """\
Kafka's wire protocol (docs/kafka.md). With kafka_enabled, every `listen`
endpoint serves both protocols (the first frame tells them apart), and each
kafka_listen endpoint serves Kafka clients only.""",
)
_GROUPS = Group(
    "Consumer groups",
    """\
Consumer groups (docs/kafka.md, "Groups"), as Kafka's own group.* settings.""",
)
_TOPICS = Group("Topics")
_LIMITS = Group("Request limits")
_LOG = Group(
    "Log segments and retention",
    """\
The defaults of every topic's log; a topic's own configs override them.""",
)
_CLEANER = Group(
    "Log cleaner",
    """\
The cleaner compacts the topics whose cleanup_policy includes "compact", one
partition at a time on the I/O threads, keeping the latest record of each key
(docs/kafka.md, "Log compaction"). These settings are the broker's, as
Kafka's log.cleaner.* are; the per-topic ones are in the section above.""",
)
_DURABILITY = Group(
    "Durability",
    """\
When an acknowledged write is on disk:
  "always"   fsync before acknowledging (concurrent writes share one fsync)
  "interval" fsync every flush_interval_ms; survives a process crash, a power
             cut may lose the last interval
  "never"    leave it to the operating system""",
)
_IO = Group("Disk I/O and fetches")
_CONNECTIONS = Group("Connections")
_MANHOLE = Group(
    "Manhole",
    """\
Manhole admin shell over SSH (off unless set). Public-key login only:
manhole_authorized_keys names an OpenSSH authorized_keys file.""",
)
_OBSERVE = Group("Metrics and logs")


def _host_name(host: str) -> str | None:
    if len(host) > 255 or not host.strip() or host.split() != [host]:
        return f"expected a host name or IP address, got {host!r}"
    return None


@dataclass
class Config:
    """Every broker setting, declared once: type, default, range, doc, heading."""

    data_dir: str = setting(
        Kind.STRING,
        "data",
        "Where topics (one folder each) and the __offsets log live. Relative paths resolve "
        "against the working directory; use an absolute path under systemd.",
        _STORAGE,
    )
    listen: list[str] = setting(
        Kind.ENDPOINTS,
        [DEFAULT_LISTEN],
        "The listeners of both protocols.",
        _NETWORK,
        minimum=1,
    )
    backlog: int = setting(
        Kind.INT,
        1024,
        "Connections the kernel queues before the broker accepts them; a restart makes every "
        "client reconnect at once, and Twisted's default of 50 overflows. Applied to every "
        "tcp:, tcp6:, ssl: and unix: listener whose string names no backlog=; cut to "
        "/proc/sys/net/core/somaxconn. A systemd socket takes Backlog= in its unit.",
        _NETWORK,
        minimum=1,
        maximum=65_535,
    )
    kafka_enabled: bool = setting(
        Kind.BOOL,
        True,
        "Speak Kafka's protocol too. With false, only the native protocol is spoken and "
        "kafka_listen must stay empty.",
        _KAFKA,
    )
    kafka_listen: list[str] = setting(
        Kind.ENDPOINTS, [], "Extra listeners that serve Kafka clients only.", _KAFKA
    )
    advertised_host: str | None = setting(
        Kind.STRING,
        None,
        "The host Metadata tells Kafka clients to connect to; by default the one they "
        "dialled. Set it behind NAT, a proxy or a container port mapping.",
        _KAFKA,
        optional=True,
        example="broker.example.com",
        check=_host_name,
    )
    advertised_port: int | None = setting(
        Kind.INT,
        None,
        "The port Metadata advertises; by default the one the client dialled.",
        _KAFKA,
        optional=True,
        example=9092,
        minimum=1,
        maximum=65_535,
    )
    group_initial_rebalance_delay_ms: int = setting(
        Kind.DURATION,
        1000,
        "How long the first rebalance of an empty group waits for more members (Kafka "
        "waits 3 s; a short wait lets a leader see the topic's metadata before it assigns).",
        _GROUPS,
        minimum=0,
        maximum=300_000,
    )
    group_min_session_timeout_ms: int = setting(
        Kind.DURATION, 6_000, "Shortest session timeout a member may ask for.", _GROUPS, minimum=1
    )
    group_max_session_timeout_ms: int = setting(
        Kind.DURATION, 1_800_000, "Longest session timeout a member may ask for.", _GROUPS
    )
    default_partitions: int = setting(
        Kind.INT,
        3,
        "Partitions of a topic created by its first Produce.",
        _TOPICS,
        minimum=1,
        maximum=10_000,
    )
    max_partitions: int = setting(
        Kind.INT,
        4000,
        "Most partitions the broker holds in all. Each keeps about three files open, so "
        "this bounds descriptors no matter how many topics clients create.",
        _TOPICS,
        minimum=1,
    )
    auto_create_topics: bool = setting(
        Kind.BOOL,
        True,
        'Create unknown topics on Produce. With false, only "rustka topics create" does.',
        _TOPICS,
    )
    max_frame_bytes: int = setting(
        Kind.SIZE,
        16 * 1024**2,
        "Largest request frame accepted; checked on the 4-byte length before buffering.",
        _LIMITS,
        minimum=1024,
        maximum=1024**3,
    )
    max_batch_bytes: int | None = setting(
        Kind.SIZE,
        None,
        "Largest record batch a produce may store; a larger one is refused "
        "(MESSAGE_TOO_LARGE for Kafka clients). -1: max_frame_bytes.",
        _LIMITS,
        optional=True,
        minimum=64,
        topic_config="max.message.bytes",
    )
    segment_bytes: int = setting(
        Kind.SIZE,
        1024**3,
        "A segment is closed and a new one started at this size.",
        _LOG,
        minimum=1,
        maximum=2**32 - 1,
        topic_config="segment.bytes",
    )
    segment_ms: int | None = setting(
        Kind.DURATION,
        7 * _DAY_MS,
        "...or when its first record is older than this, so idle partitions can expire too.",
        _LOG,
        optional=True,
        minimum=0,
        topic_config="segment.ms",
    )
    retention_bytes: int | None = setting(
        Kind.SIZE,
        None,
        "Retention deletes whole old segments (never the active one) past this size per "
        "partition. -1 = unlimited.",
        _LOG,
        optional=True,
        minimum=0,
        topic_config="retention.bytes",
    )
    retention_ms: int | None = setting(
        Kind.DURATION,
        7 * _DAY_MS,
        "...and segments whose newest record is older than this. -1 = unlimited.",
        _LOG,
        optional=True,
        minimum=0,
        topic_config="retention.ms",
    )
    retention_check_interval_ms: int = setting(
        Kind.DURATION, 300_000, "How often retention runs.", _LOG, minimum=1
    )
    index_interval_bytes: int = setting(
        Kind.SIZE,
        4096,
        "One sparse index entry per this many bytes of log.",
        _LOG,
        minimum=1,
        topic_config="index.interval.bytes",
    )
    cleanup_policy: str = setting(
        Kind.CHOICE,
        "delete",
        "What happens to old segments: delete them (retention), compact them (keep the "
        "latest record of each key), or both.",
        _LOG,
        choices=CLEANUP_POLICIES,
        topic_config="cleanup.policy",
    )
    delete_retention_ms: int = setting(
        Kind.DURATION,
        _DAY_MS,
        "How long a tombstone (a null value) is kept on a compacted topic after the segment "
        "holding it was cleaned, so that readers can see the delete.",
        _LOG,
        minimum=0,
        topic_config="delete.retention.ms",
    )
    min_compaction_lag_ms: int = setting(
        Kind.DURATION,
        0,
        "The least time a record stays uncompacted in the log.",
        _LOG,
        minimum=0,
        topic_config="min.compaction.lag.ms",
    )
    max_compaction_lag_ms: int | None = setting(
        Kind.DURATION,
        None,
        "The most time a record may stay uncompacted, whatever the dirty ratio. -1: no limit.",
        _LOG,
        optional=True,
        minimum=1,
        topic_config="max.compaction.lag.ms",
    )
    min_cleanable_dirty_ratio: float = setting(
        Kind.RATIO,
        0.5,
        "A compacted log is cleaned once this share of it has not been cleaned yet.",
        _LOG,
        minimum=0,
        maximum=1,
        topic_config="min.cleanable.dirty.ratio",
    )
    file_delete_delay_ms: int = setting(
        Kind.DURATION,
        5_000,
        "How long a deleted segment's files stay open (for reads in flight) before they go.",
        _LOG,
        minimum=0,
        topic_config="file.delete.delay.ms",
    )
    message_timestamp_type: str = setting(
        Kind.CHOICE,
        "CreateTime",
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch with "
        "the broker's clock when it is stored.",
        _LOG,
        choices=TIMESTAMP_TYPES,
        topic_config="message.timestamp.type",
    )
    cleaner_enabled: bool = setting(
        Kind.BOOL,
        True,
        "Run the log cleaner (Kafka's log.cleaner.enable). Off, compacted topics only grow.",
        _CLEANER,
    )
    cleaner_dedupe_buffer_bytes: int = setting(
        Kind.SIZE,
        128 * 1024**2,
        "The most memory the cleaner's key map uses, counted at its worst moment: at most "
        "184 bytes per key, so 128MiB maps 700,000 distinct keys; a partition with more in "
        "its uncleaned part is cleaned over several rounds "
        "(Kafka's log.cleaner.dedupe.buffer.size).",
        _CLEANER,
        minimum=64 * 1024,
    )
    cleaner_io_max_bytes_per_second: int | None = setting(
        Kind.SIZE,
        16 * 1024**2,
        "The cleaner's read plus write rate: it pauses between steps to stay under it, which "
        "also bounds the CPU it takes from produce and fetch. -1: no limit "
        "(Kafka's log.cleaner.io.max.bytes.per.second).",
        _CLEANER,
        optional=True,
        minimum=4096,
    )
    cleaner_backoff_ms: int = setting(
        Kind.DURATION,
        15_000,
        "How long the cleaner waits before looking again when no partition needs cleaning "
        "(Kafka's log.cleaner.backoff.ms).",
        _CLEANER,
        minimum=1,
    )
    flush: str = setting(
        Kind.CHOICE,
        "always",
        "always, interval or never (above).",
        _DURABILITY,
        choices=FLUSH_POLICIES,
    )
    flush_interval_ms: int = setting(
        Kind.DURATION,
        1000,
        "With flush = interval, how often every partition is fsynced.",
        _DURABILITY,
        minimum=1,
    )
    io_threads: int = setting(
        Kind.INT,
        2,
        "Threads doing disk I/O. The GIL makes more than a few useless.",
        _IO,
        minimum=1,
    )
    fetch_max_bytes: int = setting(
        Kind.SIZE, 8 * 1024**2, "The most one batched fetch returns.", _IO, minimum=1
    )
    fetch_max_wait_ms: int = setting(
        Kind.DURATION, 30_000, "The longest a fetch may long-poll.", _IO, minimum=0
    )
    max_in_flight_per_connection: int = setting(
        Kind.INT,
        1024,
        "Unanswered requests before the broker stops reading from that connection.",
        _CONNECTIONS,
        minimum=1,
    )
    max_output_bytes_per_connection: int = setting(
        Kind.SIZE,
        32 * 1024**2,
        "Output bytes queued for a connection before the broker stops reading from it.",
        _CONNECTIONS,
        minimum=1,
    )
    max_connections: int = setting(
        Kind.INT,
        19_000,
        "Connections beyond this are refused (logged once per burst).",
        _CONNECTIONS,
        minimum=1,
    )
    idle_timeout_ms: int = setting(
        Kind.DURATION,
        600_000,
        "A connection that sends nothing and awaits nothing for this long is closed.",
        _CONNECTIONS,
        minimum=1,
    )
    shutdown_timeout_ms: int = setting(
        Kind.DURATION,
        10_000,
        "Longest a graceful stop waits for in-flight work.",
        _CONNECTIONS,
        minimum=0,
    )
    manhole: str | None = setting(
        Kind.STRING,
        None,
        "The manhole's SSH listener.",
        _MANHOLE,
        optional=True,
        example="tcp:9022:interface=127.0.0.1",
    )
    manhole_authorized_keys: str | None = setting(
        Kind.STRING,
        None,
        "The OpenSSH authorized_keys file of who may log in; required with manhole.",
        _MANHOLE,
        optional=True,
        example="/etc/rustka/manhole_authorized_keys",
    )
    manhole_host_key: str | None = setting(
        Kind.STRING,
        None,
        "The SSH host key, generated on first start (mode 0600); by default "
        "<data_dir>/manhole_host_key.",
        _MANHOLE,
        optional=True,
        example="/var/lib/rustka/manhole_host_key",
    )
    metrics: str | None = setting(
        Kind.STRING,
        None,
        "Prometheus metrics at /metrics on this listener (off unless set).",
        _OBSERVE,
        optional=True,
        example="tcp:9308:interface=127.0.0.1",
    )
    log_format: str = setting(
        Kind.CHOICE,
        "text",
        '"text" or "json" log lines (rustka serve; under twistd use --logger).',
        _OBSERVE,
        choices=("text", "json"),
    )

    @classmethod
    def from_file(cls, path: str | Path) -> Config:
        """Defaults overlaid with the TOML file at ``path``."""
        try:
            with open(path, "rb") as f:
                table = tomllib.load(f)
        except OSError as e:
            raise ConfigError(f"cannot read config file {path}: {e.strerror}") from e
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {path} is not valid TOML: {e}") from e
        return cls().updated(table, source=str(path))

    def updated(self, values: dict[str, Any], source: str = "flags") -> Config:
        """A copy with ``values`` applied and checked; keys are named in every error."""
        changes: dict[str, Any] = {}
        for key, value in values.items():
            declared = SETTINGS.get(key)
            if declared is None:
                raise ConfigError(f"{source}: unknown setting {key!r}")
            changes[key] = declared.parse(value)
        result = dataclasses.replace(self, **changes)
        result.check()
        return result

    def check(self) -> None:
        """Each value against its declaration, then the rules that relate two settings."""
        for key, declared in SETTINGS.items():
            declared.check_value(getattr(self, key))
        if self.max_batch_bytes is not None and self.max_batch_bytes > self.max_frame_bytes:
            raise ConfigError(
                f"max_batch_bytes: must be at most max_frame_bytes ({self.max_frame_bytes}), "
                f"got {self.max_batch_bytes}"
            )
        if self.kafka_listen and not self.kafka_enabled:
            raise ConfigError("kafka_listen: set, but kafka_enabled is false")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ConfigError(
                "group_min_session_timeout_ms: must be at most group_max_session_timeout_ms"
            )
        if self.manhole and not self.manhole_authorized_keys:
            raise ConfigError(
                "manhole: an authorized keys file (manhole_authorized_keys) is required; "
                "the manhole has no default credentials"
            )

    def log_config(self) -> LogConfig:
        """The storage layer's view of these settings."""
        return LogConfig(
            segment_bytes=self.segment_bytes,
            segment_ms=self.segment_ms,
            retention_bytes=self.retention_bytes,
            retention_ms=self.retention_ms,
            index_interval_bytes=self.index_interval_bytes,
            flush=self.flush,
            cleanup_policy=self.cleanup_policy,
            delete_retention_ms=self.delete_retention_ms,
            min_compaction_lag_ms=self.min_compaction_lag_ms,
            max_compaction_lag_ms=self.max_compaction_lag_ms,
            min_cleanable_dirty_ratio=self.min_cleanable_dirty_ratio,
            file_delete_delay_ms=self.file_delete_delay_ms,
            message_timestamp_type=self.message_timestamp_type,
            max_message_bytes=self.max_batch_bytes,
        )


SETTINGS: dict[str, Setting] = {s.name: s for s in declarations(Config)}
