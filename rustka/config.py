"""Broker configuration: embedded defaults, an optional TOML file, then flags.

One flat table keeps the file, the flags and the docs in step: every key in
`etc/rustka.toml` is a field here, unknown keys are errors (a typo must not be
silently ignored), and sizes/durations accept human units ("16MiB", "7d").
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rustka.storage.partition_log import LogConfig

DEFAULT_LISTEN = "tcp:9092:interface=127.0.0.1"
FLUSH_POLICIES = ("always", "interval", "never")


class ConfigError(Exception):
    """A setting is missing, mistyped or out of range; the message names the key."""


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_DURATION_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_NUMBER_UNIT = re.compile(r"\s*(\d+)\s*([A-Za-z]*)\s*")


def parse_size(key: str, value: Any) -> int:
    """Bytes from an int or a string such as ``"16MiB"``."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a size, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        m = _NUMBER_UNIT.fullmatch(value)
        if m and m.group(2).lower() in _SIZE_UNITS:
            return int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    raise ConfigError(f'{key}: expected a size such as 1048576 or "1MiB", got {value!r}')


def parse_duration_ms(key: str, value: Any) -> int:
    """Milliseconds from an int (already ms) or a string such as ``"7d"`` or ``"250ms"``."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a duration, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        m = _NUMBER_UNIT.fullmatch(value)
        if m and m.group(2).lower() in _DURATION_UNITS:
            return int(m.group(1)) * _DURATION_UNITS[m.group(2).lower()]
    raise ConfigError(f'{key}: expected a duration such as 1000 (ms) or "7d", got {value!r}')


_SIZE_KEYS = {
    "max_frame_bytes",
    "segment_bytes",
    "retention_bytes",
    "index_interval_bytes",
    "fetch_max_bytes",
    "max_output_bytes_per_connection",
}
_DURATION_KEYS = {
    "segment_ms",
    "retention_ms",
    "retention_check_interval_ms",
    "flush_interval_ms",
    "fetch_max_wait_ms",
    "idle_timeout_ms",
    "shutdown_timeout_ms",
}
_OPTIONAL_KEYS = {
    "retention_bytes",
    "retention_ms",
    "segment_ms",
    "manhole",
    "metrics",
    "advertised_host",
    "advertised_port",
    "max_batch_bytes",
}


@dataclass
class Config:
    """Every broker setting with its default; `etc/rustka.toml` documents each one."""

    data_dir: str = "data"
    listen: list[str] = field(default_factory=lambda: [DEFAULT_LISTEN])
    backlog: int = 1024
    default_partitions: int = 3
    max_partitions: int = 4000
    auto_create_topics: bool = True
    max_frame_bytes: int = 16 * 1024**2
    segment_bytes: int = 1024**3
    segment_ms: int | None = 7 * 86_400_000
    retention_bytes: int | None = None
    retention_ms: int | None = 7 * 86_400_000
    retention_check_interval_ms: int = 300_000
    index_interval_bytes: int = 4096
    flush: str = "always"
    flush_interval_ms: int = 1000
    io_threads: int = 2
    fetch_max_bytes: int = 8 * 1024**2
    fetch_max_wait_ms: int = 30_000
    max_in_flight_per_connection: int = 1024
    max_output_bytes_per_connection: int = 32 * 1024**2
    max_connections: int = 19_000
    idle_timeout_ms: int = 600_000
    shutdown_timeout_ms: int = 10_000
    manhole: str | None = None
    manhole_authorized_keys: str | None = None
    manhole_host_key: str | None = None
    metrics: str | None = None
    log_format: str = "text"
    # Largest record batch a produce may store (Kafka's message.max.bytes); None: the frame limit.
    max_batch_bytes: int | None = None
    kafka_enabled: bool = True
    kafka_listen: list[str] = field(default_factory=list)
    advertised_host: str | None = None
    advertised_port: int | None = None
    group_initial_rebalance_delay_ms: int = 1000
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000

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
        known = {f.name for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for key, value in values.items():
            if key not in known:
                raise ConfigError(f"{source}: unknown setting {key!r}")
            changes[key] = self._coerce(key, value)
        result = dataclasses.replace(self, **changes)
        result.check()
        return result

    def _coerce(self, key: str, value: Any) -> Any:
        if value is None or (key in _OPTIONAL_KEYS and value in (-1, "", "none")):
            if key not in _OPTIONAL_KEYS:
                raise ConfigError(f"{key}: a value is required")
            return None
        if key in _SIZE_KEYS:
            return parse_size(key, value)
        if key in _DURATION_KEYS:
            return parse_duration_ms(key, value)
        if key in ("listen", "kafka_listen"):
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise ConfigError(f"{key}: expected an endpoint string or a list of them")
            return list(items)
        expected = type(getattr(Config(), key))
        if key in {
            "manhole",
            "manhole_authorized_keys",
            "manhole_host_key",
            "metrics",
            "advertised_host",
        }:
            expected = str
        if key == "advertised_port":
            expected = int
        if key == "max_batch_bytes":
            return parse_size(key, value)
        if expected is bool and not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if expected is str and not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value

    def check(self) -> None:
        """Reject values no broker could run with, before anything binds or writes."""
        if self.flush not in FLUSH_POLICIES:
            raise ConfigError(
                f"flush: expected one of {', '.join(FLUSH_POLICIES)}, got {self.flush!r}"
            )
        if self.log_format not in ("text", "json"):
            raise ConfigError(f"log_format: expected 'text' or 'json', got {self.log_format!r}")
        if not self.listen:
            raise ConfigError("listen: at least one endpoint is required")
        positive = {
            "default_partitions": self.default_partitions,
            "max_partitions": self.max_partitions,
            "segment_bytes": self.segment_bytes,
            "index_interval_bytes": self.index_interval_bytes,
            "io_threads": self.io_threads,
            "fetch_max_bytes": self.fetch_max_bytes,
            "max_in_flight_per_connection": self.max_in_flight_per_connection,
            "max_output_bytes_per_connection": self.max_output_bytes_per_connection,
            "max_connections": self.max_connections,
            "flush_interval_ms": self.flush_interval_ms,
            "retention_check_interval_ms": self.retention_check_interval_ms,
            "idle_timeout_ms": self.idle_timeout_ms,
            "backlog": self.backlog,
        }
        for key, value in positive.items():
            if value < 1:
                raise ConfigError(f"{key}: must be at least 1, got {value}")
        if not 1024 <= self.max_frame_bytes <= 1024**3:
            raise ConfigError(
                f"max_frame_bytes: must be between 1KiB and 1GiB, got {self.max_frame_bytes}"
            )
        if self.advertised_port is not None and not 1 <= self.advertised_port <= 65_535:
            raise ConfigError(f"advertised_port: expected 1-65535, got {self.advertised_port}")
        if (
            self.max_batch_bytes is not None
            and not 64 <= self.max_batch_bytes <= self.max_frame_bytes
        ):
            raise ConfigError(
                f"max_batch_bytes: must be between 64 bytes and max_frame_bytes "
                f"({self.max_frame_bytes}), got {self.max_batch_bytes}"
            )
        if self.kafka_listen and not self.kafka_enabled:
            raise ConfigError("kafka_listen: set, but kafka_enabled is false")
        for key, endpoints in (("listen", self.listen), ("kafka_listen", self.kafka_listen)):
            if any(not e.strip() for e in endpoints):
                raise ConfigError(f"{key}: an endpoint string is empty")
        host = self.advertised_host
        if host is not None and (len(host) > 255 or not host.strip() or host.split() != [host]):
            raise ConfigError(f"advertised_host: expected a host name or IP address, got {host!r}")
        if not 0 <= self.group_initial_rebalance_delay_ms <= 300_000:
            raise ConfigError("group_initial_rebalance_delay_ms: expected 0 to 300000")
        if not 1 <= self.group_min_session_timeout_ms <= self.group_max_session_timeout_ms:
            raise ConfigError(
                "group_min_session_timeout_ms must be at least 1 and at most "
                "group_max_session_timeout_ms"
            )
        if self.backlog > 65_535:
            raise ConfigError(f"backlog: at most 65535 (the kernel's limit), got {self.backlog}")
        if self.default_partitions > 10_000:
            raise ConfigError("default_partitions: at most 10000")
        if self.segment_bytes > 2**32 - 1:
            raise ConfigError("segment_bytes: at most 4GiB - 1 (index positions are u32)")
        if self.fetch_max_wait_ms < 0:
            raise ConfigError("fetch_max_wait_ms: must not be negative")
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
        )
