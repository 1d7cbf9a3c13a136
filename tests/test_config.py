"""Configuration: defaults, the TOML file, flags, and errors that name the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rustka.config import SETTINGS, Config, ConfigError, parse_duration_ms, parse_size
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
