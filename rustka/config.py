"""Broker configuration: embedded defaults, an optional TOML file, then flags.

Every setting is declared once, below, with `rustka.settings.setting`: its type,
default, range, doc and heading. Parsing, validation, etc/rustka.toml and the
settings table in docs/operations.md all come from those declarations; unknown
keys are errors (a typo must not be silently ignored), and sizes/durations
accept human units ("16MiB", "7d").
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rustka.settings import (
    ConfigError,
    Group,
    Kind,
    Setting,
    declarations,
    join_list,
    parse_duration_ms,
    parse_size,
    setting,
    split_list,
)
from rustka.storage.log_config import LogConfig

__all__ = [
    "APPEND",
    "CLEANUP_POLICIES",
    "CONFIG_OPS",
    "DEFAULT_LISTEN",
    "DELETE",
    "FLUSH_POLICIES",
    "SET",
    "SETTINGS",
    "SOURCE_BROKER",
    "SOURCE_DEFAULT",
    "SOURCE_TOPIC",
    "SUBTRACT",
    "TIMESTAMP_TYPES",
    "TOML_PREAMBLE",
    "TOPIC_CONFIGS",
    "TOPIC_ONLY_SETTINGS",
    "Config",
    "ConfigEntry",
    "ConfigError",
    "ConfigOp",
    "TopicOnlyConfigs",
    "altered_topic_configs",
    "describe_broker_configs",
    "describe_topic_configs",
    "parse_duration_ms",
    "parse_size",
    "topic_configs",
]

DEFAULT_LISTEN = "tcp:9092:interface=127.0.0.1"
FLUSH_POLICIES = ("always", "interval", "never")
# The items cleanup.policy may list, in any order ("compact,delete" does both).
CLEANUP_POLICIES = ("compact", "delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_DAY_MS = 86_400_000
# Kafka's Integer.MAX_VALUE and Long.MAX_VALUE, the bounds of its INT and LONG configs.
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1

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
_AUTHORIZATION = Group(
    "Authorization",
    """\
ACLs in Kafka's model (docs/security.md, "Authorization (ACLs)"): with
authorizer_enabled, every request of both protocols is checked against the
ACLs in the data directory's acls file, managed with CreateAcls/DeleteAcls or
`rustka acls`. A principal is "User:NAME"; unauthenticated clients are
User:ANONYMOUS.""",
)
_OBSERVE = Group("Metrics and logs")
_TELEMETRY = Group(
    "Client telemetry",
    """\
Kafka clients that support KIP-714 (librdkafka 2.5+, Kafka's Java client 3.7+) push
their own metrics to a broker that asks for them (docs/operations.md, "Client
telemetry"). Off unless client_telemetry_metrics names some: then every client is asked
for the metrics whose names start with one of its prefixes ("*" for all), every
client_telemetry_interval_ms, and the latest values appear per client on the
Prometheus endpoint and the console. Needs the `telemetry` extra (opentelemetry-proto).""",
)
_CONSOLE = Group(
    "Web console",
    """\
The web console and its JSON API (docs/console.md), off unless console_listen
is set. Anyone who reaches it can read every record: keep it on loopback
(interface=127.0.0.1) or behind an authenticating proxy. Admin actions (create,
grow or delete a topic, reset a group's offsets) also need the token in
console_token_file and, with authorizer_enabled, ACLs for console_principal.""",
)
_SCHEMA_REGISTRY = Group(
    "Schema registry",
    """\
A Confluent-compatible schema registry inside the broker (docs/schema-registry.md),
off unless schema_registry_listen is set. Its state is the _schemas topic. Serve it
over TLS with an ssl: endpoint, as any other listener.""",
)
_DISKLESS = Group(
    "Diskless topics",
    """\
Topics created with diskless.enable=true keep no segment on the broker's disk: their
batches go to an S3-compatible object store and their order to PostgreSQL
(docs/diskless.md). Both are off unless diskless_dsn and diskless_bucket are set; a
broker without them refuses diskless.enable=true. Credentials come from the usual
places, never from this file: PostgreSQL's PGPASSWORD or ~/.pgpass, and the object
store's AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the other sources boto3 reads).""",
)
_SECURITY = Group(
    "Authentication",
    """\
Who may connect (docs/security.md). Each listener requires one of:
  "none"  no authentication: every client is User:ANONYMOUS (the default)
  "sasl"  Kafka clients: SASL (SASL_PLAINTEXT on tcp:, SASL_SSL on ssl:);
          native clients: the SCRAM exchange of docs/protocol.md
  "mtls"  an ssl: listener that requires a client certificate signed by
          ssl_client_ca_file; the subject, mapped by ssl_principal_mapping_rules,
          is the principal
listen_security lists one word per listen endpoint, in order, and
kafka_listen_security one per kafka_listen endpoint; empty means "none" for all.""",
)


LISTENER_SECURITY = ("none", "sasl", "mtls")
SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")


def _host_name(host: str) -> str | None:
    if len(host) > 255 or not host.strip() or host.split() != [host]:
        return f"expected a host name or IP address, got {host!r}"
    return None


def _principals(value: str) -> str | None:
    for principal in split_list(value):
        kind, sep, name = principal.partition(":")
        if not sep or not kind or not name:
            return f"each principal is TYPE:NAME, such as User:admin, not {principal!r}"
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
    share_auto_offset_reset: str = setting(
        Kind.CHOICE,
        "latest",
        "Where a share group starts reading a partition it never read (Kafka's group "
        "config share.auto.offset.reset): latest or earliest.",
        _GROUPS,
        choices=("latest", "earliest"),
    )
    group_share_record_lock_duration_ms: int = setting(
        Kind.DURATION,
        30_000,
        "How long a share-group member holds the records it acquired before they are "
        "offered again (Kafka's group.share.record.lock.duration.ms).",
        _GROUPS,
        minimum=100,
        maximum=3_600_000,
    )
    group_share_delivery_count_limit: int = setting(
        Kind.INT,
        5,
        "Deliveries of a record to a share group after which it is archived instead of "
        "offered again (Kafka's group.share.delivery.count.limit).",
        _GROUPS,
        minimum=1,
        maximum=100,
    )
    group_share_session_timeout_ms: int = setting(
        Kind.DURATION,
        45_000,
        "How long a share-group member may go without a heartbeat before it is removed "
        "and its records released (Kafka's group.share.session.timeout.ms).",
        _GROUPS,
        minimum=1,
    )
    group_share_heartbeat_interval_ms: int = setting(
        Kind.DURATION,
        5_000,
        "How often share-group members are told to heartbeat (Kafka's "
        "group.share.heartbeat.interval.ms).",
        _GROUPS,
        minimum=1,
    )
    group_consumer_session_timeout_ms: int = setting(
        Kind.DURATION,
        45_000,
        "How long a member of a consumer-protocol group (KIP-848) may stay silent before "
        "it is removed (Kafka's group.consumer.session.timeout.ms).",
        _GROUPS,
        minimum=1,
    )
    group_consumer_heartbeat_interval_ms: int = setting(
        Kind.DURATION,
        5_000,
        "How often members of a consumer-protocol group heartbeat (Kafka's "
        "group.consumer.heartbeat.interval.ms).",
        _GROUPS,
        minimum=1,
    )
    group_consumer_assignors: str = setting(
        Kind.LIST,
        "uniform,range",
        "Server-side assignors of consumer-protocol groups, the first the default "
        "(Kafka's group.consumer.assignors): uniform, range.",
        _GROUPS,
        choices=("uniform", "range"),
    )
    consumer_offsets_topic: bool = setting(
        Kind.BOOL,
        False,
        "Keep Kafka's __consumer_offsets topic, written from the offsets store, for tools "
        "that read it (Burrow); read-only to clients. Not in a cluster.",
        _GROUPS,
    )
    offsets_topic_num_partitions: int = setting(
        Kind.INT,
        1,
        "Partitions of __consumer_offsets when it is created (Kafka's "
        "offsets.topic.num.partitions, 50 there; one partition holds every group here).",
        _GROUPS,
        minimum=1,
        maximum=1000,
    )
    transaction_max_timeout_ms: int = setting(
        Kind.DURATION,
        900_000,
        "Longest transaction.timeout.ms a transactional producer may ask for (Kafka's "
        "transaction.max.timeout.ms); a longer one gets INVALID_TRANSACTION_TIMEOUT.",
        _GROUPS,
        minimum=1,
    )
    transaction_abort_interval_ms: int = setting(
        Kind.DURATION,
        10_000,
        "How often open transactions are checked against their timeout; an expired one is "
        "aborted and its producer fenced (Kafka's "
        "transaction.abort.timed.out.transaction.cleanup.interval.ms).",
        _GROUPS,
        minimum=10,
        maximum=3_600_000,
    )
    transactional_id_expiration_ms: int = setting(
        Kind.DURATION,
        7 * _DAY_MS,
        "How long a transactional id whose last transaction ended (or that never began "
        "one) is kept; then it is forgotten and its transaction log record tombstoned, "
        "and its next producer gets a new producer id (Kafka's "
        "transactional.id.expiration.ms). An id with a transaction open never expires. "
        "Checked with retention.",
        _GROUPS,
        minimum=1,
    )
    offsets_retention_ms: int | None = setting(
        Kind.DURATION,
        7 * _DAY_MS,
        "How long a group with no members keeps its committed offsets, counted from its "
        "last commit or from when it became empty, whichever is later (Kafka's "
        "offsets.retention.minutes). Checked with retention. -1 = forever.",
        _GROUPS,
        optional=True,
        minimum=1,
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
        topic_minimum=0,
        topic_maximum=_INT_MAX,
    )
    segment_bytes: int = setting(
        Kind.SIZE,
        1024**3,
        "A segment is closed and a new one started at this size.",
        _LOG,
        minimum=1,
        maximum=2**32 - 1,
        topic_config="segment.bytes",
        topic_minimum=14,
        topic_maximum=_INT_MAX,
    )
    segment_ms: int | None = setting(
        Kind.DURATION,
        7 * _DAY_MS,
        "...or when its first record is older than this, so idle partitions can expire too.",
        _LOG,
        optional=True,
        minimum=0,
        topic_config="segment.ms",
        topic_minimum=1,
        topic_unset=_LONG_MAX,
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
        topic_minimum=0,
        topic_maximum=_INT_MAX,
    )
    cleanup_policy: str = setting(
        Kind.LIST,
        "delete",
        "What happens to old segments: delete them (retention), compact them (keep the "
        'latest record of each key), or both ("compact,delete").',
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
        topic_unset=_LONG_MAX,
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
        4 * 1024**2,
        "The cleaner's read plus write rate: it pauses between steps to stay under it, which "
        "also bounds the CPU it takes from produce and fetch (at 4MiB/s produce loses less "
        "than a fifth of its throughput while a clean runs, docs/performance.md). -1: no "
        "limit (Kafka's log.cleaner.io.max.bytes.per.second).",
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
    fast_paths: bool = setting(
        Kind.BOOL,
        True,
        "Take the shortcuts past Twisted's public interfaces that cut per-request latency "
        "(answers sent on the socket at once, seed Produce answers sent from the I/O "
        "thread, the lean epoll step; docs/performance.md). Off, or on a Twisted without "
        "the parts they use, the plain Twisted way is taken: always correct, only slower. "
        "RUSTKA_FAST_PATHS=off in the environment turns them off too.",
        _IO,
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
    authorizer_enabled: bool = setting(
        Kind.BOOL,
        False,
        "Check every request against the ACLs. Off, every client may do everything, as "
        "before; turn it on only with authenticated listeners, or every ACL must name "
        "User:ANONYMOUS.",
        _AUTHORIZATION,
    )
    super_users: str = setting(
        Kind.LIST,
        "",
        "Principals allowed everything whatever the ACLs say (Kafka's super.users), such "
        'as "User:admin".',
        _AUTHORIZATION,
        example="User:admin",
        check=_principals,
    )
    allow_everyone_if_no_acl_found: bool = setting(
        Kind.BOOL,
        False,
        "Whether a resource no ACL mentions is open to all (Kafka's "
        "allow.everyone.if.no.acl.found). Off, the safe default: what no ACL allows is "
        "denied.",
        _AUTHORIZATION,
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
    client_telemetry_metrics: str = setting(
        Kind.LIST,
        "",
        "Metric name prefixes Kafka clients are asked to push (KIP-714), comma-separated; "
        '"*" for all of them; empty: client telemetry off.',
        _TELEMETRY,
        example="org.apache.kafka.producer.,org.apache.kafka.consumer.",
    )
    client_telemetry_interval_ms: int = setting(
        Kind.DURATION,
        60_000,
        "How often clients push their metrics (Kafka's interval.ms of a subscription).",
        _TELEMETRY,
        minimum=100,
    )
    client_telemetry_max_bytes: int = setting(
        Kind.SIZE,
        1024 * 1024,
        "The largest push accepted, compressed (Kafka's telemetry.max.bytes).",
        _TELEMETRY,
        minimum=1024,
    )
    client_telemetry_max_clients: int = setting(
        Kind.INT,
        1_000,
        "Client instances kept at once; past it the least recently heard from is dropped.",
        _TELEMETRY,
        minimum=1,
    )
    client_telemetry_max_series: int = setting(
        Kind.INT,
        500,
        "Metric series (a name and its labels) kept per client; the rest are dropped.",
        _TELEMETRY,
        minimum=1,
    )
    log_format: str = setting(
        Kind.CHOICE,
        "text",
        '"text" or "json" log lines (rustka serve; under twistd use --logger).',
        _OBSERVE,
        choices=("text", "json"),
    )
    console_listen: str | None = setting(
        Kind.STRING,
        None,
        "The web console's HTTP listener (off unless set; keep it on loopback).",
        _CONSOLE,
        optional=True,
        example="tcp:9080:interface=127.0.0.1",
    )
    console_token_file: str | None = setting(
        Kind.STRING,
        None,
        "A file holding the token the console's admin actions require (its first line); "
        "without it the console is read-only.",
        _CONSOLE,
        optional=True,
        example="/etc/rustka/console_token",
    )
    console_principal: str = setting(
        Kind.STRING,
        "User:console",
        "The principal the console's admin actions are authorized as (with authorizer_enabled).",
        _CONSOLE,
    )
    console_authentication: str = setting(
        Kind.CHOICE,
        "none",
        '"none": the read API is open to whoever reaches the listener, admin actions take '
        'the token; "users": a person signs in as a SCRAM user, and with authorizer_enabled '
        "every read and action is authorized as that user.",
        _CONSOLE,
        choices=("none", "users"),
    )
    console_allowed_hosts: str = setting(
        Kind.LIST,
        "",
        "Host names the console answers to besides IP addresses, localhost and this "
        "machine's name (a defence against DNS rebinding); add a reverse proxy's name.",
        _CONSOLE,
        example="console.example.com",
    )
    schema_registry_listen: str | None = setting(
        Kind.STRING,
        None,
        "The schema registry's HTTP listener (off unless set); an ssl: endpoint serves TLS.",
        _SCHEMA_REGISTRY,
        optional=True,
        example="tcp:8081:interface=127.0.0.1",
    )
    schema_registry_authentication: str = setting(
        Kind.CHOICE,
        "none",
        '"basic": HTTP Basic credentials checked against the broker\'s SCRAM users '
        '(only on an ssl: or loopback listener); "none": anyone who reaches it.',
        _SCHEMA_REGISTRY,
        choices=("none", "basic"),
    )
    listen_security: str = setting(
        Kind.LIST,
        "",
        "What each listen endpoint requires, in order: none, sasl or mtls.",
        _SECURITY,
        choices=LISTENER_SECURITY,
        example="sasl",
    )
    kafka_listen_security: str = setting(
        Kind.LIST,
        "",
        "What each kafka_listen endpoint requires, in order: none, sasl or mtls.",
        _SECURITY,
        choices=LISTENER_SECURITY,
        example="sasl,mtls",
    )
    sasl_enabled_mechanisms: str = setting(
        Kind.LIST,
        "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
        "The SASL mechanisms sasl listeners offer (Kafka's sasl.enabled.mechanisms).",
        _SECURITY,
        choices=SASL_MECHANISMS,
        check=lambda v: None if v else "at least one mechanism is required",
    )
    credentials_file: str | None = setting(
        Kind.STRING,
        None,
        "The users' SCRAM credentials (mode 0600); by default <data_dir>/credentials.",
        _SECURITY,
        optional=True,
        example="/var/lib/rustka/credentials",
    )
    connection_failed_authentication_delay_ms: int = setting(
        Kind.DURATION,
        100,
        "How long a failed authentication's answer and hang-up are delayed, so "
        "guessing passwords is slow (Kafka's connection.failed.authentication.delay.ms).",
        _SECURITY,
        minimum=0,
        maximum=60_000,
    )
    connections_max_reauth_ms: int = setting(
        Kind.DURATION,
        0,
        "The session lifetime SASL clients are told (KIP-368): they re-authenticate "
        "before it ends, and a connection that does not is closed; 0 = no limit.",
        _SECURITY,
        minimum=0,
    )
    ssl_client_ca_file: str | None = setting(
        Kind.STRING,
        None,
        "PEM file of the CAs whose client certificates mtls listeners accept.",
        _SECURITY,
        optional=True,
        example="/etc/rustka/client-ca.pem",
    )
    ssl_principal_mapping_rules: str = setting(
        Kind.STRING,
        "DEFAULT",
        "How a client certificate's subject becomes a principal name "
        "(Kafka's ssl.principal.mapping.rules: RULE:pattern/replacement/[LU], DEFAULT).",
        _SECURITY,
    )

    diskless_dsn: str | None = setting(
        Kind.STRING,
        None,
        "The PostgreSQL database that orders diskless topics (a libpq connection string "
        "or URI); every broker of a cluster names the same one.",
        _DISKLESS,
        optional=True,
        example="postgresql://rustka@db.example.com/rustka",
    )
    diskless_bucket: str | None = setting(
        Kind.STRING,
        None,
        "The object-store bucket that holds diskless topics' batches.",
        _DISKLESS,
        optional=True,
        example="rustka-data",
    )
    diskless_s3_endpoint: str | None = setting(
        Kind.STRING,
        None,
        "The S3 endpoint URL; unset: AWS's own for diskless_s3_region.",
        _DISKLESS,
        optional=True,
        example="http://127.0.0.1:8333",
    )
    diskless_s3_region: str = setting(
        Kind.STRING, "us-east-1", "The object store's region.", _DISKLESS
    )
    diskless_prefix: str = setting(
        Kind.STRING,
        "",
        "A prefix for every object key, so several clusters can share one bucket.",
        _DISKLESS,
    )
    diskless_buffer_ms: int = setting(
        Kind.DURATION,
        50,
        "How long a broker gathers diskless produces before it uploads them as one "
        "object: the floor of their produce latency, traded for fewer, larger uploads.",
        _DISKLESS,
        minimum=1,
        maximum=60_000,
    )
    diskless_buffer_bytes: int = setting(
        Kind.SIZE,
        8 * 1024**2,
        "Upload at once when the gathered batches reach this size.",
        _DISKLESS,
        minimum=1024,
        maximum=1024**3,
    )
    diskless_cache_bytes: int = setting(
        Kind.SIZE,
        64 * 1024**2,
        "Recent objects kept in memory, so consumers at the tail do not each read the store.",
        _DISKLESS,
        minimum=0,
        maximum=64 * 1024**3,
    )
    broker_id: int = setting(
        Kind.INT,
        0,
        "This broker's id (Kafka's node.id): named in Metadata, and on the objects it uploads.",
        _DISKLESS,
        minimum=0,
        maximum=_INT_MAX,
    )

    cluster_lease_ms: int = setting(
        Kind.DURATION,
        10_000,
        "How long a broker of a cluster counts as alive after its last heartbeat to the "
        "catalog (it beats every third of this): how soon the others list it no longer, "
        "lead its partitions and take its group coordinator role after it dies.",
        _DISKLESS,
        minimum=1_000,
        maximum=300_000,
    )

    @property
    def diskless_configured(self) -> bool:
        """Whether this broker can keep diskless topics (a database and a bucket)."""
        return bool(self.diskless_dsn and self.diskless_bucket)

    def listener_security(self, name: str) -> list[str]:
        """What each endpoint of ``name`` (listen, kafka_listen) requires, one word each."""
        endpoints: list[str] = getattr(self, name)
        words = split_list(getattr(self, f"{name}_security"))
        return words or ["none"] * len(endpoints)

    def _check_listener_security(self) -> None:
        for name in ("listen", "kafka_listen"):
            endpoints: list[str] = getattr(self, name)
            words = split_list(getattr(self, f"{name}_security"))
            if words and len(words) != len(endpoints):
                raise ConfigError(
                    f"{name}_security: {len(words)} entries for {len(endpoints)} "
                    f"{name} endpoints; give one per endpoint, in order"
                )
            for endpoint, word in zip(endpoints, words, strict=False):
                if word == "mtls" and not endpoint.strip().lower().startswith("ssl:"):
                    raise ConfigError(
                        f"{name}_security: mtls needs an ssl: endpoint, not {endpoint!r}"
                    )
                if word == "mtls" and not self.ssl_client_ca_file:
                    raise ConfigError(
                        f"{name}_security: mtls needs ssl_client_ca_file, the CAs "
                        "that sign the client certificates"
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
        self._check_listener_security()
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ConfigError(
                "group_min_session_timeout_ms: must be at most group_max_session_timeout_ms"
            )
        if bool(self.diskless_dsn) != bool(self.diskless_bucket):
            raise ConfigError(
                "diskless_dsn and diskless_bucket: set both for diskless topics, or neither"
            )
        if self.manhole and not self.manhole_authorized_keys:
            raise ConfigError(
                "manhole: an authorized keys file (manhole_authorized_keys) is required; "
                "the manhole has no default credentials"
            )

    def log_config(self, overrides: Mapping[str, str] | None = None) -> LogConfig:
        """The storage layer's view of these settings, with a topic's own configs over them.

        ``overrides`` are Kafka topic configs as a client sends them; each is
        parsed and checked by its declaration (`topic_configs`), then the pairs
        Kafka checks together. ConfigError names the first bad one. The result is
        what that topic's partition logs use.
        """
        values: dict[str, Any] = {}
        for declared in _LOG_DECLARATIONS:
            values[_log_field(declared)] = self.topic_value(declared)
        for key, value in _parsed(overrides or {}).items():
            field = _log_field(TOPIC_CONFIGS[key])
            if field in values:
                values[field] = value
        if values["max_message_bytes"] is None:
            values["max_message_bytes"] = self.max_frame_bytes
        lag, max_lag = values["min_compaction_lag_ms"], values["max_compaction_lag_ms"]
        if max_lag is not None and lag > max_lag:
            raise ConfigError(
                f"conflict topic config setting min.compaction.lag.ms ({lag}) > "
                f"max.compaction.lag.ms ({max_lag})"
            )
        if values["diskless_enable"]:
            if not self.diskless_configured:
                raise ConfigError(
                    "diskless.enable=true needs a broker configured for diskless topics "
                    "(diskless_dsn and diskless_bucket)"
                )
            if "compact" in values["cleanup_policy"].split(","):
                raise ConfigError(
                    "cleanup.policy=compact is not supported on a diskless topic "
                    "(diskless.enable=true) yet"
                )
        # Kafka indexes every batch with 0; a segment's interval of 1 byte does the same.
        values["index_interval_bytes"] = max(1, values["index_interval_bytes"])
        # Kafka's deprecated difference.max.ms stands in for either bound left at its default.
        difference = values.pop("message_timestamp_difference_max_ms")
        for bound in ("message_timestamp_before_max_ms", "message_timestamp_after_max_ms"):
            if values[bound] == _LONG_MAX:
                values[bound] = difference
            if values[bound] == _LONG_MAX:
                values[bound] = None
        return LogConfig(**values)

    def topic_value(self, declared: Setting) -> Any:
        """The value a topic has for a topic config it does not override: the broker's
        setting of that name (max.message.bytes: the frame limit when it is unset), or,
        for a topic config with no broker setting, Kafka's default."""
        if declared.name not in SETTINGS:
            return declared.default
        value = getattr(self, declared.name)
        if declared.name == "max_batch_bytes" and value is None:
            return self.max_frame_bytes
        return value


SETTINGS: dict[str, Setting] = {s.name: s for s in declarations(Config)}


# --------------------------------------------------------------------------- topic configs

_TOPIC_ONLY = Group(
    "Topic configs without a broker setting",
    """\
Kafka topic configs that a topic may set (CreateTopics, AlterConfigs, rustka topics
create/alter --config) and that have no broker-wide setting here: each topic has
Kafka's default unless it overrides it. `effect` says what rustka does with one.""",
)
_STORED_ONLY = "stored and reported; "
_NO_REPLICAS = _STORED_ONLY + "no effect on a single node, which has one replica of each partition"
_NO_TIERED = _STORED_ONLY + "no effect: rustka has no tiered storage"

# Kafka's message.format.version values (MetadataVersion): a release, optionally with its
# internal version ("2.8-IV1"); longer spellings ("2.8.1") are cut to the release.
_IBP_SUBVERSIONS = {
    "0.8.0": 0, "0.8.1": 0, "0.8.2": 0, "0.9.0": 0, "0.10.0": 2, "0.10.1": 3, "0.10.2": 1,
    "0.11.0": 3, "1.0": 1, "1.1": 1, "2.0": 2, "2.1": 3, "2.2": 2, "2.3": 2, "2.4": 2, "2.5": 1,
    "2.6": 1, "2.7": 3, "2.8": 2, "3.0": 2, "3.1": 1, "3.2": 1, "3.3": 4, "3.4": 1, "3.5": 3,
    "3.6": 3, "3.7": 5, "3.8": 1, "3.9": 1, "4.0": 4,
}  # fmt: skip


def _metadata_version(value: str) -> str | None:
    segments = value.split(".")
    wanted = 3 if value.startswith("0.") else 2
    key = value if wanted >= len(segments) else ".".join(segments[:wanted])
    release, _, sub = key.partition("-")
    count = _IBP_SUBVERSIONS.get(release)
    if count is not None and (not sub or sub in {f"IV{i}" for i in range(count)}):
        return None
    return f"Version {value} is not a valid version"


def _throttled_replicas(value: str) -> str | None:
    items = split_list(value)
    if "".join(items) == "*" or all(re.fullmatch(r"([0-9]+:[0-9]+)?", i) for i in items):
        return None
    return (
        "must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


def _gzip_level(level: int) -> str | None:
    if level > 9 or (level < 1 and level != -1):
        return "Value must be between 1 and 9 or equal to -1"
    return None


def _no_tiered_storage(enabled: bool) -> str | None:
    if enabled:
        return (
            "Tiered Storage functionality is disabled in the broker. "
            "Topic cannot be configured with remote log storage."
        )
    return None


@dataclass(frozen=True)
class TopicOnlyConfigs:
    """Every Kafka topic config with no broker setting, declared like Config's fields.

    With the Config fields that name a ``topic_config`` these are all of Kafka's
    topic configs (``LogConfig`` of apache/kafka 1eb7644, the 3.9/4.0 line), with
    Kafka's types, defaults and ranges, so any of them is accepted, checked,
    stored and reported. ``effect`` is empty where rustka applies it.
    """

    segment_index_bytes: int = setting(
        Kind.SIZE,
        10 * 1024**2,
        "The largest a segment's offset index may grow: the segment rolls once its "
        "index (8 bytes an entry) or time index (12) is this big.",
        _TOPIC_ONLY,
        minimum=4,
        maximum=_INT_MAX,
        topic_config="segment.index.bytes",
    )
    segment_jitter_ms: int = setting(
        Kind.DURATION,
        0,
        "The most random time taken off segment.ms, so that segments do not all roll at once.",
        _TOPIC_ONLY,
        minimum=0,
        maximum=_LONG_MAX,
        topic_config="segment.jitter.ms",
        effect=_STORED_ONLY + "not applied: segments roll at segment.ms exactly",
    )
    flush_messages: int = setting(
        Kind.INT,
        _LONG_MAX,
        "fsync the log after this many records.",
        _TOPIC_ONLY,
        minimum=1,
        maximum=_LONG_MAX,
        topic_config="flush.messages",
        effect=_STORED_ONLY + "not applied: the broker's flush setting decides for every topic",
    )
    flush_ms: int = setting(
        Kind.DURATION,
        _LONG_MAX,
        "fsync the log after this long.",
        _TOPIC_ONLY,
        minimum=0,
        maximum=_LONG_MAX,
        topic_config="flush.ms",
        effect=_STORED_ONLY + "not applied: the broker's flush setting decides for every topic",
    )
    compression_type: str = setting(
        Kind.CHOICE,
        "producer",
        "The codec batches are stored in: producer keeps each batch's own, any other "
        "recompresses batches in another codec (uncompressed: none).",
        _TOPIC_ONLY,
        choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        topic_config="compression.type",
    )
    compression_gzip_level: int = setting(
        Kind.INT,
        -1,
        "The gzip level when compression.type is gzip (-1: the codec's default).",
        _TOPIC_ONLY,
        maximum=_INT_MAX,
        topic_minimum=-(2**31),
        check=_gzip_level,
        topic_config="compression.gzip.level",
        effect=_STORED_ONLY + "not applied: batches are compressed at the codec's default level",
    )
    compression_lz4_level: int = setting(
        Kind.INT,
        9,
        "The lz4 level when compression.type is lz4.",
        _TOPIC_ONLY,
        minimum=1,
        maximum=17,
        topic_config="compression.lz4.level",
        effect=_STORED_ONLY + "not applied: batches are compressed at the codec's default level",
    )
    compression_zstd_level: int = setting(
        Kind.INT,
        3,
        "The zstd level when compression.type is zstd.",
        _TOPIC_ONLY,
        minimum=-131_072,
        maximum=22,
        topic_config="compression.zstd.level",
        effect=_STORED_ONLY + "not applied: batches are compressed at the codec's default level",
    )
    message_timestamp_before_max_ms: int = setting(
        Kind.DURATION,
        _LONG_MAX,
        "A CreateTime record whose timestamp is further behind the broker's clock is "
        "refused (INVALID_TIMESTAMP).",
        _TOPIC_ONLY,
        minimum=0,
        maximum=_LONG_MAX,
        topic_config="message.timestamp.before.max.ms",
    )
    message_timestamp_after_max_ms: int = setting(
        Kind.DURATION,
        _LONG_MAX,
        "A CreateTime record whose timestamp is further ahead of the broker's clock is "
        "refused (INVALID_TIMESTAMP).",
        _TOPIC_ONLY,
        minimum=0,
        maximum=_LONG_MAX,
        topic_config="message.timestamp.after.max.ms",
    )
    message_timestamp_difference_max_ms: int = setting(
        Kind.DURATION,
        _LONG_MAX,
        "Deprecated by Kafka: both of the above at once, where they are left at their default.",
        _TOPIC_ONLY,
        minimum=0,
        maximum=_LONG_MAX,
        topic_config="message.timestamp.difference.max.ms",
    )
    message_format_version: str = setting(
        Kind.STRING,
        "3.0-IV1",
        "The record format version to store (deprecated by Kafka, ignored from 3.0).",
        _TOPIC_ONLY,
        check=_metadata_version,
        topic_config="message.format.version",
        effect=_STORED_ONLY + "no effect: every batch is RecordBatch v2, as from Kafka 3.0",
    )
    message_downconversion_enable: bool = setting(
        Kind.BOOL,
        True,
        "Whether a Fetch may convert batches for consumers of older record formats.",
        _TOPIC_ONLY,
        topic_config="message.downconversion.enable",
        effect=_STORED_ONLY + "no effect: Fetch v4+ consumers all read RecordBatch v2",
    )
    min_insync_replicas: int = setting(
        Kind.INT,
        1,
        "Replicas that must have a write for acks=all to succeed.",
        _TOPIC_ONLY,
        minimum=1,
        maximum=_INT_MAX,
        topic_config="min.insync.replicas",
        effect=_NO_REPLICAS
        + " (Kafka would refuse acks=all with NOT_ENOUGH_REPLICAS above 1; rustka takes it)",
    )
    unclean_leader_election_enable: bool = setting(
        Kind.BOOL,
        False,
        "Whether a replica outside the ISR may become leader.",
        _TOPIC_ONLY,
        topic_config="unclean.leader.election.enable",
        effect=_NO_REPLICAS,
    )
    leader_replication_throttled_replicas: str = setting(
        Kind.LIST,
        "",
        "Replicas whose replication the leader throttles.",
        _TOPIC_ONLY,
        check=_throttled_replicas,
        topic_config="leader.replication.throttled.replicas",
        effect=_NO_REPLICAS,
    )
    follower_replication_throttled_replicas: str = setting(
        Kind.LIST,
        "",
        "Replicas whose replication the followers throttle.",
        _TOPIC_ONLY,
        check=_throttled_replicas,
        topic_config="follower.replication.throttled.replicas",
        effect=_NO_REPLICAS,
    )
    preallocate: bool = setting(
        Kind.BOOL,
        False,
        "Whether a new segment's file is preallocated to segment.bytes.",
        _TOPIC_ONLY,
        topic_config="preallocate",
        effect=_STORED_ONLY + "not applied: segment files grow as they are written",
    )
    remote_storage_enable: bool = setting(
        Kind.BOOL,
        False,
        "Whether old segments move to tiered storage; true is refused, as a Kafka broker "
        "without tiered storage refuses it.",
        _TOPIC_ONLY,
        check=_no_tiered_storage,
        topic_config="remote.storage.enable",
        effect=_NO_TIERED + " (true is refused with INVALID_CONFIG, as Kafka refuses it)",
    )
    local_retention_ms: int = setting(
        Kind.DURATION,
        -2,
        "With tiered storage, how long segments stay local (-2: retention.ms).",
        _TOPIC_ONLY,
        minimum=-2,
        maximum=_LONG_MAX,
        topic_config="local.retention.ms",
        effect=_NO_TIERED,
    )
    local_retention_bytes: int = setting(
        Kind.SIZE,
        -2,
        "With tiered storage, how many bytes stay local (-2: retention.bytes).",
        _TOPIC_ONLY,
        minimum=-2,
        maximum=_LONG_MAX,
        topic_config="local.retention.bytes",
        effect=_NO_TIERED,
    )
    remote_log_copy_disable: bool = setting(
        Kind.BOOL,
        False,
        "With tiered storage, stop copying segments to it.",
        _TOPIC_ONLY,
        topic_config="remote.log.copy.disable",
        effect=_NO_TIERED,
    )
    remote_log_delete_on_disable: bool = setting(
        Kind.BOOL,
        False,
        "With tiered storage, delete its data when it is turned off.",
        _TOPIC_ONLY,
        topic_config="remote.log.delete.on.disable",
        effect=_NO_TIERED,
    )
    diskless_enable: bool = setting(
        Kind.BOOL,
        False,
        "Keep the topic's batches in the object store and their order in PostgreSQL, on "
        "no broker's disk (KIP-1150; docs/diskless.md). Set when the topic is created; it "
        "cannot change afterwards.",
        _TOPIC_ONLY,
        topic_config="diskless.enable",
    )
    confluent_value_schema_validation: bool = setting(
        Kind.BOOL,
        False,
        "Refuse (INVALID_RECORD) a produced record whose value does not start with "
        "Confluent's framing and a schema id the broker's schema registry knows "
        '(docs/schema-registry.md, "Validation on produce").',
        _TOPIC_ONLY,
        topic_config="confluent.value.schema.validation",
    )
    confluent_key_schema_validation: bool = setting(
        Kind.BOOL,
        False,
        "As confluent.value.schema.validation, for record keys.",
        _TOPIC_ONLY,
        topic_config="confluent.key.schema.validation",
    )


TOPIC_ONLY_SETTINGS: dict[str, Setting] = {s.name: s for s in declarations(TopicOnlyConfigs)}

TOPIC_CONFIGS: dict[str, Setting] = dict(
    sorted(
        (s.topic_config, s)
        for s in (*SETTINGS.values(), *TOPIC_ONLY_SETTINGS.values())
        if s.topic_config is not None
    )
)
"""Every Kafka topic config by its name: the broker settings that default one, then those
without a broker setting. A topic override is parsed and checked by its entry here."""

_LOG_FIELDS = {f.name for f in dataclasses.fields(LogConfig)}
# The one Kafka topic config whose LogConfig field is named differently from its setting.
_RENAMED_LOG_FIELDS = {"max_batch_bytes": "max_message_bytes"}


def _log_field(declared: Setting) -> str:
    return _RENAMED_LOG_FIELDS.get(declared.name, declared.name)


# Broker settings storage reads, and the topic configs it applies (plus the deprecated
# timestamp bound, which log_config folds into the other two).
_LOG_DECLARATIONS = tuple(
    s
    for s in (*SETTINGS.values(), *TOPIC_ONLY_SETTINGS.values())
    if _log_field(s) in _LOG_FIELDS or s.name == "message_timestamp_difference_max_ms"
)


def _parsed(overrides: Mapping[str, str | None]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, text in overrides.items():
        declared = TOPIC_CONFIGS.get(key)
        if declared is None:
            raise ConfigError(f"Unknown topic config name: {key}")
        values[key] = declared.parse_topic(text)
    return values


def topic_configs(overrides: Mapping[str, str | None]) -> dict[str, str]:
    """A topic's own configs, each checked by its declaration and spelled as Kafka reports
    it ("compact, delete" -> "compact,delete", "TRUE" -> "true"); ConfigError names a
    config that is unknown or invalid. `Config.log_config` checks them together."""
    return {key: TOPIC_CONFIGS[key].topic_text(value) for key, value in _parsed(overrides).items()}


# What one change of an alter may do to a topic config (Kafka's AlterConfigOp).
SET = "set"
DELETE = "delete"
APPEND = "append"
SUBTRACT = "subtract"
CONFIG_OPS = (SET, DELETE, APPEND, SUBTRACT)
ConfigOp = tuple[str, str, str | None]
"""``(key, SET | DELETE | APPEND | SUBTRACT, value)``: one change to a topic's configs."""


def altered_topic_configs(
    config: Config, current: Mapping[str, str], ops: Sequence[ConfigOp], *, replace: bool
) -> dict[str, str]:
    """The topic configs ``ops`` make of ``current`` (a topic's own configs).

    Kafka's IncrementalAlterConfigs: in order, SET a value, DELETE back to the
    broker's, APPEND to or SUBTRACT from a list config, starting from the value
    the topic has (its own, else the broker's ``config`` for it); ``replace``
    starts from none instead (Kafka's AlterConfigs). ConfigError carries Kafka's
    message for an unknown key, a list operation on a config that is no list, or
    a value the result does not accept (`topic_configs` checks it whole).
    """
    new = {} if replace else dict(current)
    for key, op, value in ops:
        if op == DELETE:
            new.pop(key, None)
            continue
        declared = TOPIC_CONFIGS.get(key)
        if declared is None:
            raise ConfigError(f"Unknown topic config name: {key}")
        if op == SET:
            new[key] = value  # type: ignore[assignment]
            continue
        if declared.kind is not Kind.LIST:
            raise ConfigError(f"Can't {op.upper()} to key {key} because its type is not LIST.")
        if value is None:
            raise ConfigError(f"Null value not supported for topic configs: {key}")
        have = new[key] if key in new else declared.topic_text(config.topic_value(declared))
        items = split_list(have)
        for item in value.split(","):
            if op == APPEND and item not in items:
                items.append(item)
            elif op == SUBTRACT and item in items:
                items.remove(item)
        new[key] = join_list(items)
    return topic_configs(new)


SOURCE_TOPIC = "topic"
SOURCE_BROKER = "broker"
SOURCE_DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config as DescribeConfigs reports it: its value and where the value comes from.

    ``source`` is SOURCE_TOPIC (the topic's own config), SOURCE_BROKER (a broker
    setting given in the file or a flag) or SOURCE_DEFAULT; ``synonyms`` are the
    places that could set it, most specific first, as (name, value, source),
    the value that applies among them.
    """

    name: str
    value: str | None
    source: str
    read_only: bool
    synonyms: tuple[tuple[str, str | None, str], ...]


def describe_topic_configs(config: Config, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic config of a topic with ``overrides``, by name (Kafka's DescribeConfigs)."""
    entries: list[ConfigEntry] = []
    for key, declared in TOPIC_CONFIGS.items():
        synonyms: list[tuple[str, str | None, str]] = []
        if key in overrides:
            synonyms.append((key, overrides[key], SOURCE_TOPIC))
        if declared.name in SETTINGS:
            value = getattr(config, declared.name)
            if value != declared.default:
                text = declared.topic_text(config.topic_value(declared))
                synonyms.append((declared.name, text, SOURCE_BROKER))
            default = Config().topic_value(declared)
            synonyms.append((declared.name, declared.topic_text(default), SOURCE_DEFAULT))
        else:
            synonyms.append((key, declared.topic_text(declared.default), SOURCE_DEFAULT))
        _, value_text, source = synonyms[0]
        entries.append(ConfigEntry(key, value_text, source, False, tuple(synonyms)))
    return entries


def describe_broker_configs(config: Config) -> list[ConfigEntry]:
    """Every broker setting by its rustka name; all read-only, as settings change only on a
    restart. Values are spelled as Kafka spells configs (lists comma-separated, unset
    optional settings null)."""
    entries: list[ConfigEntry] = []
    for name, declared in sorted(SETTINGS.items()):
        default = _broker_text(declared, declared.default)
        synonyms = [(name, default, SOURCE_DEFAULT)]
        value = getattr(config, name)
        if value != declared.default:
            synonyms.insert(0, (name, _broker_text(declared, value), SOURCE_BROKER))
        _, text, source = synonyms[0]
        entries.append(ConfigEntry(name, text, source, True, tuple(synonyms)))
    return entries


def _broker_text(declared: Setting, value: Any) -> str | None:
    if value is None:
        return None
    if declared.kind is Kind.ENDPOINTS:
        return ",".join(value)
    return declared.topic_text(value)


def render_topic_configs_table() -> str:
    """The Markdown table of every Kafka topic config in docs/kafka.md ("Topic configs")."""
    defaults = Config()
    rows = [
        "| topic config | type | default | allowed | broker setting | what rustka does |",
        "|---|---|---|---|---|---|",
    ]
    for key, declared in TOPIC_CONFIGS.items():
        default = declared.topic_text(defaults.topic_value(declared)) or '""'
        broker = declared.name in SETTINGS
        effect = declared.effect or ("applied" if broker else f"applied: {declared.doc}")
        rows.append(
            f"| `{key}` | {declared.kafka_type} | `{default}` | {_kafka_range(declared)} "
            f"| {f'`{declared.name}`' if broker else '—'} | {effect} |"
        )
    return "\n".join(rows) + "\n"


def _kafka_range(declared: Setting) -> str:
    """What Kafka's ConfigDef would print as the valid values of a topic config."""
    if declared.kind is Kind.CHOICE:
        return ", ".join(f"`{c}`" for c in declared.choices)
    if declared.kind is Kind.LIST:
        items = ", ".join(f"`{c}`" for c in declared.choices)
        return f"a list of {items}" if items else "`*` or a list of partition:broker"
    if declared.kind is Kind.BOOL:
        return "`true`, `false`"
    if declared.kind is Kind.STRING:
        return "a Kafka version" if declared.check is _metadata_version else "any"
    low = declared.topic_minimum if declared.topic_minimum is not None else declared.minimum
    high = declared.topic_maximum if declared.topic_maximum is not None else declared.maximum
    if declared.name == "compression_gzip_level":
        return "1 to 9, or -1"
    parts = []
    if low is not None:
        parts.append(f"≥ {low}")
    if high is not None and high not in (_INT_MAX, _LONG_MAX):
        parts.append(f"≤ {high}")
    text = ", ".join(parts) or "any"
    if declared.name == "max_batch_bytes":
        text += "; -1: max_frame_bytes"
    elif declared.optional:
        unset = -1 if declared.topic_unset is None else declared.topic_unset
        text += f"; {unset}: no limit"
    return text
