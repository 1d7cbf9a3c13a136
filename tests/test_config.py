"""Configuration: defaults, the TOML file, flags, and errors that name the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rustka.config import (
    APPEND,
    DELETE,
    SET,
    SETTINGS,
    SOURCE_BROKER,
    SOURCE_DEFAULT,
    SOURCE_TOPIC,
    SUBTRACT,
    TOPIC_CONFIGS,
    TOPIC_ONLY_SETTINGS,
    Config,
    ConfigError,
    altered_topic_configs,
    describe_broker_configs,
    describe_topic_configs,
    parse_duration_ms,
    parse_size,
    topic_configs,
)
from rustka.ops.tap import Options

ROOT = Path(__file__).resolve().parent.parent


def test_embedded_defaults_match_the_documented_ones() -> None:
    """The shipped etc/rustka.toml restates every default, so loading it changes nothing."""
    assert Config.from_file(ROOT / "etc" / "rustka.toml") == Config()


def test_every_setting_is_documented_in_etc() -> None:
    """Each Config field appears in etc/rustka.toml (set or commented out)."""
    text = (ROOT / "etc" / "rustka.toml").read_text()
    for name in Config.__dataclass_fields__:
        assert f"{name} =" in text, name


def test_etc_and_the_docs_table_are_generated_from_the_declarations() -> None:
    """etc/rustka.toml and docs/operations.md's table are what the declarations render."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "settings_docs.py")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_field_is_declared_with_a_doc_and_a_default_that_passes_its_own_checks() -> None:
    """No setting escapes the declarations: each has a doc, and its default is valid."""
    assert set(SETTINGS) == set(Config.__dataclass_fields__)
    for name, declared in SETTINGS.items():
        assert declared.name == name and declared.doc, name
        declared.check_value(getattr(Config(), name))
        if declared.optional:
            assert declared.parse(-1) is None and declared.parse("") is None, name


@pytest.mark.parametrize(
    ("key", "text", "value"),
    [
        ("max_frame_bytes", "2MiB", 2 * 1024**2),
        ("retention_ms", "2h", 7_200_000),
        ("group_min_session_timeout_ms", "10s", 10_000),
        ("group_min_session_timeout_ms", 10_000, 10_000),
        ("max_batch_bytes", "1MiB", 1024**2),
        ("listen", "tcp:1", ["tcp:1"]),
        ("log_format", "json", "json"),
    ],
)
def test_values_are_parsed_by_their_declared_kind(key: str, text: object, value: object) -> None:
    assert getattr(Config().updated({key: text}), key) == value


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"max_frame_bytes": 1000}, "^max_frame_bytes: must be at least 1KiB, got 1000$"),
        ({"max_batch_bytes": 10}, "^max_batch_bytes: must be at least 64, got 10$"),
        ({"max_batch_bytes": "32MiB"}, "^max_batch_bytes: must be at most max_frame_bytes"),
        ({"log_format": "xml"}, "^log_format: expected one of text, json, got 'xml'$"),
        ({"retention_ms": -5}, "^retention_ms: must be at least 0, got -5$"),
        ({"data_dir": None}, "^data_dir: a value is required$"),
        ({"fetch_max_wait_ms": "soon"}, "^fetch_max_wait_ms: expected a duration"),
        (
            {"group_min_session_timeout_ms": 60_000, "group_max_session_timeout_ms": 30_000},
            "^group_min_session_timeout_ms: must be at most group_max_session_timeout_ms$",
        ),
    ],
)
def test_declared_ranges_and_relations_are_enforced(
    settings: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Config().updated(settings)


def test_log_settings_name_the_kafka_topic_configs_they_default() -> None:
    """Per-topic overrides come from the same declarations as the broker-wide settings."""
    topic = {d.topic_config: name for name, d in SETTINGS.items() if d.topic_config}
    assert topic["segment.bytes"] == "segment_bytes"
    assert topic["retention.ms"] == "retention_ms"
    assert topic["max.message.bytes"] == "max_batch_bytes"


def test_defaults_are_the_seed_ones() -> None:
    """Loopback port 9092, data in ./data, three partitions, fsync before ack."""
    config = Config()
    assert config.listen == ["tcp:9092:interface=127.0.0.1"]
    assert config.data_dir == "data"
    assert config.default_partitions == 3
    assert config.flush == "always"
    assert config.max_frame_bytes == 16 * 1024 * 1024


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4096", 4096), ("16MiB", 16 * 1024**2), ("1 GB", 10**9), ("2kib", 2048), (7, 7)],
)
def test_sizes_accept_units(text: str | int, expected: int) -> None:
    """Sizes are plain integers or numbers with a unit."""
    assert parse_size("k", text) == expected


@pytest.mark.parametrize(
    ("text", "expected"), [("250ms", 250), ("30s", 30_000), ("7d", 604_800_000), (5, 5)]
)
def test_durations_accept_units(text: str | int, expected: int) -> None:
    """Durations are milliseconds or numbers with a unit."""
    assert parse_duration_ms("k", text) == expected


def test_unknown_key_is_named(tmp_path: Path) -> None:
    """A typo in the file is an error naming the key, not silently ignored."""
    path = tmp_path / "r.toml"
    path.write_text('flsuh = "always"\n')
    with pytest.raises(ConfigError, match="flsuh"):
        Config.from_file(path)


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"flush": "sometimes"}, "flush"),
        ({"default_partitions": 0}, "default_partitions"),
        ({"max_frame_bytes": "2GiB"}, "max_frame_bytes"),
        ({"segment_bytes": "8GiB"}, "segment_bytes"),
        ({"io_threads": "two"}, "io_threads"),
        ({"auto_create_topics": "yes"}, "auto_create_topics"),
        ({"manhole": "tcp:9022"}, "manhole"),
        ({"listen": []}, "listen"),
    ],
)
def test_bad_values_name_their_key(settings: dict[str, object], key: str) -> None:
    """Every rejected value produces a message starting with its setting's name."""
    with pytest.raises(ConfigError, match=key):
        Config().updated(settings)


def test_retention_minus_one_means_unlimited() -> None:
    """-1 switches retention off, as in Kafka."""
    assert Config().updated({"retention_bytes": -1}).retention_bytes is None


def test_flags_override_the_file(tmp_path: Path) -> None:
    """Command-line flags win over the config file, which wins over the defaults."""
    path = tmp_path / "r.toml"
    path.write_text('data_dir = "/srv/a"\nflush = "never"\ndefault_partitions = 5\n')
    opts = Options()
    opts.parseOptions(["--config", str(path), "--data-dir", "/srv/b", "--port", "19092"])
    config = opts.config
    assert config.data_dir == "/srv/b"
    assert config.flush == "never"
    assert config.default_partitions == 5
    assert config.listen == ["tcp:19092:interface=127.0.0.1"]


def test_twistd_options_reject_bad_config(tmp_path: Path) -> None:
    """`twistd rustka` fails on a bad setting before anything binds or writes."""
    from twisted.python.usage import UsageError

    opts = Options()
    with pytest.raises(UsageError, match="flush"):
        opts.parseOptions(["--flush", "sometimes"])


def test_listen_is_repeatable() -> None:
    """Several listeners can be given at once."""
    opts = Options()
    opts.parseOptions(["--listen", "tcp:1:interface=127.0.0.1", "--listen", "unix:/tmp/x"])
    assert opts.config.listen == ["tcp:1:interface=127.0.0.1", "unix:/tmp/x"]


def test_backlog_setting() -> None:
    """backlog defaults to 1024 and must be a positive integer the kernel can take."""
    assert Config().backlog == 1024
    assert Config().updated({"backlog": 4096}).backlog == 4096
    for bad, message in ((0, "at least 1"), (70_000, "at most 65535"), ("many", "integer")):
        with pytest.raises(ConfigError, match=f"^backlog: .*{message}"):
            Config().updated({"backlog": bad})


def test_kafka_settings_defaults() -> None:
    """Kafka is on, served on the `listen` ports, with no extra listener or advertised address."""
    config = Config()
    assert config.kafka_enabled is True
    assert config.kafka_listen == []
    assert config.advertised_host is None and config.advertised_port is None


def test_kafka_settings_from_a_file(tmp_path: Path) -> None:
    """The TOML forms: a list (or one string) of endpoints, a host and a port."""
    path = tmp_path / "r.toml"
    path.write_text(
        'kafka_listen = ["tcp:9093:interface=127.0.0.1", "unix:/run/k.sock"]\n'
        'advertised_host = "broker.example.com"\nadvertised_port = 19092\n'
    )
    config = Config.from_file(path)
    assert config.kafka_listen == ["tcp:9093:interface=127.0.0.1", "unix:/run/k.sock"]
    assert (config.advertised_host, config.advertised_port) == ("broker.example.com", 19092)
    one = Config().updated({"kafka_listen": "tcp:9093"})
    assert one.kafka_listen == ["tcp:9093"]
    off = Config().updated({"kafka_enabled": False})
    assert off.kafka_enabled is False and off.kafka_listen == []
    unset = config.updated({"advertised_host": "", "advertised_port": -1})
    assert unset.advertised_host is None and unset.advertised_port is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"kafka_enabled": "yes"}, "^kafka_enabled: expected true or false"),
        ({"kafka_listen": [9093]}, "^kafka_listen: expected an endpoint string or a list"),
        ({"kafka_listen": ["tcp:9093", " "]}, "^kafka_listen: an endpoint string is empty"),
        (
            {"kafka_enabled": False, "kafka_listen": ["tcp:9093"]},
            "^kafka_listen: set, but kafka_enabled is false",
        ),
        ({"advertised_host": "two words"}, "^advertised_host: expected a host name"),
        ({"advertised_host": "h" * 256}, "^advertised_host: expected a host name"),
        ({"advertised_host": 7}, "^advertised_host: expected a string"),
        ({"advertised_port": 0}, "^advertised_port: must be at least 1, got 0"),
        ({"advertised_port": 65_536}, "^advertised_port: must be at most 65535, got 65536"),
        ({"advertised_port": "9092"}, "^advertised_port: expected an integer"),
        ({"advertised_port": True}, "^advertised_port: expected an integer"),
    ],
)
def test_bad_kafka_settings_name_their_key(settings: dict[str, object], message: str) -> None:
    """Each bad Kafka setting is refused with a message that starts with its name."""
    with pytest.raises(ConfigError, match=message):
        Config().updated(settings)


def test_bad_kafka_listen_endpoint_fails_the_build(tmp_path: Path) -> None:
    """An unparseable kafka_listen string stops the start, naming the setting."""
    from twisted.internet import reactor

    from rustka.ops.tap import build_service

    config = Config().updated({"data_dir": str(tmp_path / "d"), "kafka_listen": ["bogus:1"]})
    with pytest.raises(ConfigError, match=r"^kafka_listen: bad endpoint 'bogus:1'"):
        build_service(config, reactor)


# -- topic configs ------------------------------------------------------------------------

# Kafka's topic configs (LogConfig of apache/kafka 1eb7644), each with its type and default.
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy": ("LIST", "delete"),
    "compression.gzip.level": ("INT", "-1"),
    "compression.lz4.level": ("INT", "9"),
    # Confluent Server's schema validation (docs/schema-registry.md)
    "confluent.key.schema.validation": ("BOOLEAN", "false"),
    "confluent.value.schema.validation": ("BOOLEAN", "false"),
    "compression.type": ("STRING", "producer"),
    "compression.zstd.level": ("INT", "3"),
    "delete.retention.ms": ("LONG", "86400000"),
    "diskless.enable": ("BOOLEAN", "false"),  # KIP-1150, accepted for Kafka 4
    "file.delete.delay.ms": ("LONG", "60000"),
    "flush.messages": ("LONG", "9223372036854775807"),
    "flush.ms": ("LONG", "9223372036854775807"),
    "follower.replication.throttled.replicas": ("LIST", ""),
    "index.interval.bytes": ("INT", "4096"),
    "leader.replication.throttled.replicas": ("LIST", ""),
    "local.retention.bytes": ("LONG", "-2"),
    "local.retention.ms": ("LONG", "-2"),
    "max.compaction.lag.ms": ("LONG", "9223372036854775807"),
    "max.message.bytes": ("INT", "1048588"),
    "message.downconversion.enable": ("BOOLEAN", "true"),
    "message.format.version": ("STRING", "3.0-IV1"),
    "message.timestamp.after.max.ms": ("LONG", "9223372036854775807"),
    "message.timestamp.before.max.ms": ("LONG", "9223372036854775807"),
    "message.timestamp.difference.max.ms": ("LONG", "9223372036854775807"),
    "message.timestamp.type": ("STRING", "CreateTime"),
    "min.cleanable.dirty.ratio": ("DOUBLE", "0.5"),
    "min.compaction.lag.ms": ("LONG", "0"),
    "min.insync.replicas": ("INT", "1"),
    "preallocate": ("BOOLEAN", "false"),
    "remote.log.copy.disable": ("BOOLEAN", "false"),
    "remote.log.delete.on.disable": ("BOOLEAN", "false"),
    "remote.storage.enable": ("BOOLEAN", "false"),
    "retention.bytes": ("LONG", "-1"),
    "retention.ms": ("LONG", "604800000"),
    "segment.bytes": ("INT", "1073741824"),
    "segment.index.bytes": ("INT", "10485760"),
    "segment.jitter.ms": ("LONG", "0"),
    "segment.ms": ("LONG", "604800000"),
    "unclean.leader.election.enable": ("BOOLEAN", "false"),
}
# Where rustka's broker-wide default differs from Kafka's, and why.
RUSTKA_DEFAULTS = {
    "file.delete.delay.ms": "5000",  # rustka's file_delete_delay_ms
    "max.message.bytes": str(16 * 1024**2),  # max_batch_bytes unset: the frame limit
}


def test_every_kafka_topic_config_is_declared_once_with_kafkas_type_and_default() -> None:
    """The complete list: any valid Kafka topic config is accepted, none twice."""
    assert list(TOPIC_CONFIGS) == sorted(KAFKA_TOPIC_CONFIGS)
    topic_only = {s.topic_config for s in TOPIC_ONLY_SETTINGS.values()}
    broker = {s.topic_config for s in SETTINGS.values() if s.topic_config}
    assert not topic_only & broker
    entries = {e.name: e for e in describe_topic_configs(Config(), {})}
    for key, (kafka_type, default) in KAFKA_TOPIC_CONFIGS.items():
        declared = TOPIC_CONFIGS[key]
        assert declared.kafka_type == kafka_type, key
        assert entries[key].value == RUSTKA_DEFAULTS.get(key, default), key
        assert entries[key].source == SOURCE_DEFAULT, key
        assert declared.parse_topic(entries[key].value) == Config().topic_value(declared), key


@pytest.mark.parametrize(
    ("overrides", "field", "value"),
    [
        ({"cleanup.policy": "compact"}, "cleanup_policy", "compact"),
        ({"cleanup.policy": "delete, compact"}, "cleanup_policy", "delete,compact"),
        ({"cleanup.policy": ""}, "cleanup_policy", ""),
        ({"retention.ms": "-1"}, "retention_ms", None),
        ({"retention.ms": "9223372036854775807"}, "retention_ms", 2**63 - 1),
        ({"retention.bytes": "1000"}, "retention_bytes", 1000),
        ({"segment.bytes": "52428800"}, "segment_bytes", 52_428_800),
        ({"segment.ms": "9223372036854775807"}, "segment_ms", None),
        ({"index.interval.bytes": "0"}, "index_interval_bytes", 1),
        ({"segment.index.bytes": "80"}, "segment_index_bytes", 80),
        ({"max.message.bytes": "100"}, "max_message_bytes", 100),
        ({"max.message.bytes": "-1"}, "max_message_bytes", 16 * 1024**2),
        ({"message.timestamp.type": "LogAppendTime"}, "message_timestamp_type", "LogAppendTime"),
        ({"min.compaction.lag.ms": "5"}, "min_compaction_lag_ms", 5),
        ({"max.compaction.lag.ms": "9223372036854775807"}, "max_compaction_lag_ms", None),
        ({"delete.retention.ms": "900"}, "delete_retention_ms", 900),
        ({"min.cleanable.dirty.ratio": "0.1"}, "min_cleanable_dirty_ratio", 0.1),
        ({"file.delete.delay.ms": "0"}, "file_delete_delay_ms", 0),
        ({"compression.type": "lz4"}, "compression_type", "lz4"),
        ({"message.timestamp.before.max.ms": "10"}, "message_timestamp_before_max_ms", 10),
        ({"message.timestamp.after.max.ms": "10"}, "message_timestamp_after_max_ms", 10),
    ],
)
def test_a_topics_configs_override_the_broker_defaults_in_its_log_config(
    overrides: dict[str, str], field: str, value: object
) -> None:
    resolved = Config().log_config(overrides)
    assert getattr(resolved, field) == value
    untouched = {k: v for k, v in vars(Config().log_config()).items() if k != field}
    assert {k: v for k, v in vars(resolved).items() if k != field} == untouched


def test_the_deprecated_timestamp_difference_bounds_what_the_new_configs_leave_unbounded() -> None:
    """Kafka's getMessageTimestampBeforeMaxMs/AfterMaxMs."""
    both = Config().log_config({"message.timestamp.difference.max.ms": "7"})
    assert (both.message_timestamp_before_max_ms, both.message_timestamp_after_max_ms) == (7, 7)
    one = Config().log_config(
        {"message.timestamp.difference.max.ms": "7", "message.timestamp.after.max.ms": "9"}
    )
    assert (one.message_timestamp_before_max_ms, one.message_timestamp_after_max_ms) == (7, 9)


def test_broker_settings_are_the_topic_defaults() -> None:
    config = Config().updated({"retention_ms": "1h", "cleanup_policy": "compact"})
    assert config.log_config().retention_ms == 3_600_000
    assert config.log_config({"retention.ms": "5"}).retention_ms == 5
    assert config.log_config().compact and not config.log_config().delete


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"dummy.doesntexist": "x"}, "^Unknown topic config name: dummy.doesntexist$"),
        ({"retention.ms": "soon"}, "^Invalid value soon for configuration retention.ms: Not a"),
        ({"segment.bytes": "13"}, "configuration segment.bytes: Value must be at least 14$"),
        ({"cleanup.policy": "compact,,delete"}, "configuration cleanup.policy: String must be"),
        ({"cleanup.policy": "Delete"}, "configuration cleanup.policy: String must be one of"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "dirty.ratio: Value must be no more than 1$"),
        ({"message.timestamp.type": "Now"}, "message.timestamp.type: String must be one of"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas: Value must be at least 1$"),
        ({"compression.type": "brotli"}, "compression.type: String must be one of"),
        ({"compression.zstd.level": "23"}, "compression.zstd.level: Value must be no more"),
        ({"unclean.leader.election.enable": "1"}, "Expected value to be either true or false"),
        ({"message.format.version": "0.7"}, "Version 0.7 is not a valid version$"),
        ({"remote.storage.enable": "true"}, "Tiered Storage functionality is disabled"),
        ({"local.retention.ms": "-3"}, "local.retention.ms: Value must be at least -2$"),
        ({"max.compaction.lag.ms": "0"}, "max.compaction.lag.ms: Value must be at least 1$"),
        ({"segment.ms": "-1"}, "segment.ms: Value must be at least 1$"),
        ({"retention.ms": None}, "^Null value not supported for topic configs: retention.ms$"),
        (
            {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
            r"^conflict topic config setting min.compaction.lag.ms \(10\) > "
            r"max.compaction.lag.ms \(5\)$",
        ),
    ],
)
def test_a_bad_topic_config_is_refused_naming_it(
    overrides: dict[str, str | None], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Config().log_config(overrides)  # type: ignore[arg-type]


def test_topic_configs_are_checked_and_spelled_as_kafka_reports_them() -> None:
    assert topic_configs(
        {"cleanup.policy": " compact , delete ", "preallocate": "TRUE", "segment.ms": " 10 "}
    ) == {"cleanup.policy": "compact,delete", "preallocate": "true", "segment.ms": "10"}
    assert topic_configs({"message.format.version": "2.8.1"}) == {"message.format.version": "2.8.1"}
    assert topic_configs({"leader.replication.throttled.replicas": "*"})
    with pytest.raises(ConfigError, match="must be the literal"):
        topic_configs({"follower.replication.throttled.replicas": "0:a"})


def test_describe_reports_each_config_with_its_source_and_synonyms() -> None:
    config = Config().updated({"retention_ms": "1h"})
    entries = {e.name: e for e in describe_topic_configs(config, {"segment.bytes": "1000"})}
    seg = entries["segment.bytes"]
    assert (seg.value, seg.source, seg.read_only) == ("1000", SOURCE_TOPIC, False)
    assert seg.synonyms == (
        ("segment.bytes", "1000", SOURCE_TOPIC),
        ("segment_bytes", "1073741824", SOURCE_DEFAULT),
    )
    retention = entries["retention.ms"]
    assert (retention.value, retention.source) == ("3600000", SOURCE_BROKER)
    assert retention.synonyms == (
        ("retention_ms", "3600000", SOURCE_BROKER),
        ("retention_ms", "604800000", SOURCE_DEFAULT),
    )
    isr = entries["min.insync.replicas"]
    assert isr.synonyms == (("min.insync.replicas", "1", SOURCE_DEFAULT),)
    broker = {e.name: e for e in describe_broker_configs(config)}
    assert set(broker) == set(SETTINGS)
    assert (broker["retention_ms"].value, broker["retention_ms"].source) == (
        "3600000",
        SOURCE_BROKER,
    )
    assert broker["listen"].value == "tcp:9092:interface=127.0.0.1"
    assert broker["advertised_host"].value is None
    assert all(e.read_only for e in broker.values())


def test_every_topic_config_rustka_does_not_apply_says_so() -> None:
    applied = {
        "cleanup.policy",
        "retention.ms",
        "retention.bytes",
        "segment.bytes",
        "segment.ms",
        "segment.index.bytes",
        "index.interval.bytes",
        "max.message.bytes",
        "message.timestamp.type",
        "message.timestamp.before.max.ms",
        "message.timestamp.after.max.ms",
        "message.timestamp.difference.max.ms",
        "min.compaction.lag.ms",
        "max.compaction.lag.ms",
        "delete.retention.ms",
        "min.cleanable.dirty.ratio",
        "file.delete.delay.ms",
        "compression.type",
        "diskless.enable",
        "confluent.key.schema.validation",
        "confluent.value.schema.validation",
    }
    for key, declared in TOPIC_CONFIGS.items():
        assert bool(declared.effect) == (key not in applied), key
        assert declared.doc, key


def test_listener_security_is_one_word_per_endpoint_and_defaults_to_none() -> None:
    config = Config().updated({"listen": ["tcp:1", "tcp:2"], "listen_security": "none,sasl"})
    assert config.listener_security("listen") == ["none", "sasl"]
    assert Config().listener_security("listen") == ["none"]
    assert Config().listener_security("kafka_listen") == []
    with pytest.raises(ConfigError, match="2 entries for 1 listen endpoints"):
        Config().updated({"listen_security": "sasl,sasl"})
    with pytest.raises(ConfigError, match="each item must be one of none, sasl, mtls"):
        Config().updated({"listen_security": "kerberos"})
    with pytest.raises(ConfigError, match="mtls needs an ssl: endpoint"):
        Config().updated({"listen_security": "mtls", "ssl_client_ca_file": "/x"})
    ssl = "ssl:9093:privateKey=k.pem:certKey=c.pem"
    with pytest.raises(ConfigError, match="mtls needs ssl_client_ca_file"):
        Config().updated({"kafka_listen": [ssl], "kafka_listen_security": "mtls"})
    with pytest.raises(ConfigError, match="at least one mechanism"):
        Config().updated({"sasl_enabled_mechanisms": ""})


def test_bad_principal_mapping_rules_stop_the_broker_at_start(tmp_path: Path) -> None:
    from rustka.security.session import authenticator_from_config

    config = Config().updated(
        {"data_dir": str(tmp_path), "ssl_principal_mapping_rules": "RULE:^CN=(.*$/$1/"}
    )
    with pytest.raises(ConfigError, match="ssl_principal_mapping_rules: invalid pattern"):
        authenticator_from_config(config)
    default = authenticator_from_config(Config().updated({"data_dir": str(tmp_path)}))
    assert default.store.path == tmp_path / "credentials"
    assert default.mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
    assert default.failure_delay_s == 0.1 and default.session_lifetime_ms == 0


def test_list_configs_append_and_subtract_from_the_value_the_topic_has() -> None:
    """IncrementalAlterConfigs' list arithmetic: APPEND adds items not yet there, SUBTRACT
    removes those that are, from the topic's own value or else the broker's setting."""
    broker = Config(cleanup_policy="delete")
    assert altered_topic_configs(
        broker, {}, [("cleanup.policy", APPEND, "compact")], replace=False
    ) == {"cleanup.policy": "delete,compact"}
    own = {"cleanup.policy": "compact,delete", "retention.ms": "5"}
    assert altered_topic_configs(
        broker,
        own,
        [("cleanup.policy", SUBTRACT, "delete"), ("retention.ms", DELETE, None)],
        replace=False,
    ) == {"cleanup.policy": "compact"}
    assert altered_topic_configs(
        broker, own, [("cleanup.policy", APPEND, "delete,compact")], replace=False
    ) == {"cleanup.policy": "compact,delete", "retention.ms": "5"}
    # AlterConfigs (replace): only what is SET stays.
    assert altered_topic_configs(broker, own, [("segment.bytes", SET, "500")], replace=True) == {
        "segment.bytes": "500"
    }


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([("retention.ms", APPEND, "5")], "Can't APPEND to key retention.ms because its type"),
        ([("cleanup.policy", SUBTRACT, None)], "Null value not supported for topic configs"),
        ([("no.such.config", SET, "1")], "Unknown topic config name: no.such.config"),
        ([("cleanup.policy", APPEND, "forever")], "cleanup.policy"),
    ],
)
def test_list_config_arithmetic_refuses_what_kafka_refuses(
    ops: list[tuple[str, str, str | None]], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        altered_topic_configs(Config(), {}, ops, replace=False)


def test_the_cluster_examples_are_one_cluster_of_three_brokers() -> None:
    """etc/cluster/broker-N.toml load, name one catalog, bucket and lease, and differ in
    what each broker must have of its own (docs/diskless.md, "Running a cluster")."""
    configs = [Config.from_file(ROOT / "etc" / "cluster" / f"broker-{i}.toml") for i in (1, 2, 3)]
    assert [c.broker_id for c in configs] == [1, 2, 3]
    assert all(c.diskless_configured for c in configs)
    shared = ("diskless_dsn", "diskless_bucket", "diskless_s3_endpoint", "cluster_lease_ms")
    for name in shared:
        assert len({getattr(c, name) for c in configs}) == 1, name
    for name in ("data_dir", "advertised_host"):
        assert len({getattr(c, name) for c in configs}) == 3, name
    unit = (ROOT / "systemd" / "rustka@.service").read_text()
    assert "--config /etc/rustka/broker-%i.toml" in unit
    assert all(c.data_dir == f"/var/lib/rustka/broker-{c.broker_id}" for c in configs)
