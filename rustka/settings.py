"""How a setting is declared, parsed, checked and documented.

Each broker setting is declared once, as a dataclass field of `rustka.config.Config`
made by `setting(...)`: its type (a `Kind`), default, range or allowed values, whether
it may be unset, a one-line doc and the heading it is listed under. Parsing the TOML
file and the flags, range checks, the comments of `etc/rustka.toml` and the settings
table of docs/operations.md are all derived from those declarations (Kafka's
``ConfigDef.define`` is the model), so no second table can drift from the first.
A setting that is also a Kafka topic config names it in ``topic_config``: the broker
value is that topic config's default. Kafka topic configs with no broker setting are
declared the same way (rustka.config.TopicOnlyConfigs), and a topic's overrides are
parsed and checked by these declarations too (`Setting.parse_topic`), with Kafka's
spelling of values (``LogConfig``/``ConfigDef`` parsing: plain numbers, ``true``/
``false``, comma-separated lists) and, where Kafka's range differs from the broker's,
``topic_minimum``/``topic_maximum``.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


class ConfigError(Exception):
    """A setting is missing, mistyped or out of range; the message names the key."""


class Kind(enum.Enum):
    """What a setting's value is, and so how the file and the flags may spell it."""

    BOOL = "boolean"
    INT = "integer"
    RATIO = "ratio"
    SIZE = "size"
    DURATION = "duration"
    STRING = "string"
    CHOICE = "choice"
    LIST = "list"
    ENDPOINTS = "endpoints"


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
# The words an optional setting may be given to mean "not set" (Kafka's -1 among them).
_UNSET = (-1, "", "none")
# How Kafka's ConfigDef reads a topic config's string (parseType): trimmed, then a
# Java long or double, true/false in any case, or a list split at commas with any
# whitespace around them.
_KAFKA_INTEGER = re.compile(r"[+-]?[0-9]+")
_KAFKA_DOUBLE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_KAFKA_LIST_SEPARATOR = re.compile(r"\s*,\s*")
_KAFKA_TYPE = {
    "boolean": "BOOLEAN",
    "integer": "LONG",
    "size": "LONG",
    "duration": "LONG",
    "ratio": "DOUBLE",
    "string": "STRING",
    "choice": "STRING",
    "list": "LIST",
}


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


def format_size(n: int) -> str:
    """The shortest exact binary-unit spelling: 16777216 -> "16MiB", 4096 -> "4KiB"."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n and n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


def format_duration(ms: int) -> str:
    """The largest exact unit: 604800000 -> "7d", 1500 -> "1500ms"."""
    for unit in ("d", "h", "m", "s"):
        factor = _DURATION_UNITS[unit]
        if ms and ms % factor == 0:
            return f"{ms // factor}{unit}"
    return f"{ms}ms"


@dataclass(frozen=True, slots=True)
class Group:
    """A heading in etc/rustka.toml and docs: settings that are read together."""

    title: str
    doc: str = ""


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting's declaration; ``name`` is filled in from its Config field."""

    kind: Kind
    default: Any
    doc: str
    group: Group
    minimum: int | float | None = None
    maximum: int | float | None = None
    choices: tuple[str, ...] = ()
    optional: bool = False
    example: Any = None
    topic_config: str | None = None
    topic_minimum: int | float | None = None
    topic_maximum: int | float | None = None
    topic_unset: int | None = None
    effect: str = ""
    check: Callable[[Any], str | None] | None = None
    name: str = ""

    def parse(self, value: Any) -> Any:
        """The value as given in the file or a flag, typed and range-checked."""
        key = self.name
        if value is None or (self.optional and _is_unset(value)):
            if not self.optional:
                raise ConfigError(f"{key}: a value is required")
            return None
        parsed = self._typed(value)
        self.check_value(parsed)
        return parsed

    def check_value(self, value: Any) -> None:
        """Range, allowed values and the setting's own rule; ConfigError names the key."""
        key = self.name
        if value is None:
            return
        if self.kind is Kind.CHOICE and value not in self.choices:
            raise ConfigError(f"{key}: expected one of {', '.join(self.choices)}, got {value!r}")
        if self.kind is Kind.LIST:
            for item in split_list(value):
                if self.choices and item not in self.choices:
                    raise ConfigError(
                        f"{key}: each item must be one of {', '.join(self.choices)}, got {item!r}"
                    )
        elif self.kind is Kind.ENDPOINTS:
            if self.minimum and len(value) < self.minimum:
                raise ConfigError(f"{key}: at least {self.minimum} endpoint is required")
            if any(not e.strip() for e in value):
                raise ConfigError(f"{key}: an endpoint string is empty")
        elif self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{key}: must be at least {self.plain(self.minimum)}, got {value}")
        elif self.maximum is not None and value > self.maximum:
            raise ConfigError(f"{key}: must be at most {self.plain(self.maximum)}, got {value}")
        if self.check is not None and (problem := self.check(value)) is not None:
            raise ConfigError(f"{key}: {problem}")

    def _typed(self, value: Any) -> Any:
        key = self.name
        kind = self.kind
        if kind is Kind.SIZE:
            return parse_size(key, value)
        if kind is Kind.DURATION:
            return parse_duration_ms(key, value)
        if kind is Kind.ENDPOINTS:
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise ConfigError(f"{key}: expected an endpoint string or a list of them")
            return list(items)
        if kind is Kind.BOOL and not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        if kind is Kind.INT and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if kind is Kind.RATIO:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{key}: expected a number between 0 and 1, got {value!r}")
            return float(value)
        if kind is Kind.LIST:
            items = value if isinstance(value, list) else None
            if isinstance(value, str):
                items = split_list(value)
            if items is None or not all(isinstance(i, str) for i in items):
                raise ConfigError(f"{key}: expected a comma-separated string or a list of strings")
            return join_list(items)
        if kind in (Kind.STRING, Kind.CHOICE) and not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value

    # -- the Kafka topic config of the same declaration ----------------------------

    @property
    def kafka_type(self) -> str:
        """The type Kafka's ConfigDef gives the topic config (INT for 32-bit ones)."""
        if self.kind in (Kind.INT, Kind.SIZE, Kind.DURATION):
            high = self.topic_maximum if self.topic_maximum is not None else self.maximum
            return "INT" if high is not None and high <= 2**31 - 1 else "LONG"
        return _KAFKA_TYPE[self.kind.value]

    def parse_topic(self, text: str | None) -> Any:
        """A topic override as Kafka spells it, typed and checked as Kafka's LogConfig would.

        The value is in this setting's own terms (None for an optional setting's
        "no limit", spelled ``topic_unset`` or -1); ConfigError names the Kafka key
        in Kafka's words ("Invalid value x for configuration retention.ms: ...").
        """
        key = self.topic_config or self.name
        if text is None:
            raise ConfigError(f"Null value not supported for topic configs: {key}")
        if not isinstance(text, str):
            raise ConfigError(f"Invalid value {text!r} for configuration {key}: not a string")
        trimmed = text.strip()

        def invalid(why: str) -> ConfigError:
            return ConfigError(f"Invalid value {text} for configuration {key}: {why}")

        kind = self.kind
        value: Any
        if kind is Kind.BOOL:
            if trimmed.lower() not in ("true", "false"):
                raise invalid("Expected value to be either true or false")
            value = trimmed.lower() == "true"
        elif kind in (Kind.INT, Kind.SIZE, Kind.DURATION):
            if not _KAFKA_INTEGER.fullmatch(trimmed):
                raise invalid(f"Not a number of type {self.kafka_type}")
            value = int(trimmed)
            bits = 31 if self.kafka_type == "INT" else 63
            if not -(2**bits) <= value < 2**bits:
                raise invalid(f"Not a number of type {self.kafka_type}")
        elif kind is Kind.RATIO:
            if not _KAFKA_DOUBLE.fullmatch(trimmed):
                raise invalid("Not a number of type DOUBLE")
            value = float(trimmed)
        elif kind is Kind.LIST:
            value = join_list(split_list(trimmed))
        elif kind in (Kind.STRING, Kind.CHOICE):
            value = trimmed
        else:
            raise invalid(f"a {kind.value} setting is not a topic config")
        if self.optional and value == (-1 if self.topic_unset is None else self.topic_unset):
            return None
        low = self.topic_minimum if self.topic_minimum is not None else self.minimum
        high = self.topic_maximum if self.topic_maximum is not None else self.maximum
        if low is not None and value < low:
            raise invalid(f"Value must be at least {low}")
        if high is not None and value > high:
            raise invalid(f"Value must be no more than {high}")
        if kind is Kind.CHOICE and value not in self.choices:
            raise invalid(f"String must be one of: {', '.join(self.choices)}")
        if kind is Kind.LIST and self.choices:
            for item in split_list(value):
                if item not in self.choices:
                    raise invalid(f"String must be one of: {', '.join(self.choices)}")
        if self.check is not None and (problem := self.check(value)) is not None:
            raise invalid(problem)
        return value

    def topic_text(self, value: Any) -> str:
        """``value`` as Kafka spells the topic config (DescribeConfigs, the stored overrides)."""
        if value is None:
            return str(-1 if self.topic_unset is None else self.topic_unset)
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float):
            text = repr(value)
            return text if any(c in text for c in ".en") else f"{text}.0"
        return str(value)

    def show(self, value: Any) -> str:
        """The value as etc/rustka.toml spells it."""
        if value is None:
            return "-1"
        if self.kind is Kind.SIZE:
            text = format_size(value)
            return text if text.isdigit() else f'"{text}"'
        if self.kind is Kind.DURATION:
            text = format_duration(value)
            return text[:-2] if self.name.endswith("_ms") and text.endswith("ms") else f'"{text}"'
        if self.kind is Kind.BOOL:
            return "true" if value else "false"
        if self.kind in (Kind.STRING, Kind.CHOICE, Kind.LIST):
            return f'"{value}"'
        if self.kind is Kind.ENDPOINTS:
            return "[" + ", ".join(f'"{e}"' for e in value) + "]"
        return str(value)

    def plain(self, value: Any) -> str:
        """The value as a message or a table shows it: etc's spelling, unquoted."""
        return self.show(value).strip('"')

    def range_text(self) -> str:
        """Allowed values, for the docs table."""
        if self.kind is Kind.CHOICE:
            return ", ".join(f"`{c}`" for c in self.choices)
        if self.kind is Kind.LIST:
            items = ", ".join(f"`{c}`" for c in self.choices) if self.choices else "any items"
            return f"a comma-separated list of {items}"
        if self.kind is Kind.ENDPOINTS:
            return f"at least {self.minimum}" if self.minimum else "any number"
        low = self.plain(self.minimum) if self.minimum is not None else None
        high = self.plain(self.maximum) if self.maximum is not None else None
        parts = [f"≥ {low}" if low is not None else "", f"≤ {high}" if high is not None else ""]
        text = ", ".join(p for p in parts if p)
        if self.optional:
            text = f"{text}; -1 = unset" if text else "-1 = unset"
        return text


def split_list(text: str) -> list[str]:
    """The items of a comma-separated list, as Kafka's ConfigDef splits one ("" is none)."""
    text = text.strip()
    return _KAFKA_LIST_SEPARATOR.split(text) if text else []


def join_list(items: list[str]) -> str:
    """A list's one spelling: items joined by commas, as DescribeConfigs reports it."""
    return ",".join(item.strip() for item in items)


def _is_unset(value: Any) -> bool:
    return not isinstance(value, bool) and value in _UNSET


def setting(
    kind: Kind,
    default: Any,
    doc: str,
    group: Group,
    **details: Any,
) -> Any:
    """A Config field carrying its declaration (see `Setting` for the details)."""
    declared = Setting(kind, default, doc, group, **details)
    metadata = {"setting": declared}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def declarations(config_class: type) -> Iterator[Setting]:
    """Each field's declaration, in field order, with its name filled in."""
    for f in dataclasses.fields(config_class):
        declared: Setting = f.metadata["setting"]
        yield dataclasses.replace(declared, name=f.name)


def render_toml(config_class: type, preamble: str) -> str:
    """etc/rustka.toml: every setting under its heading, with its doc and default."""
    out = [preamble.rstrip("\n"), ""]
    group: Group | None = None
    for s in declarations(config_class):
        if s.group is not group:
            group = s.group
            out += ["", f"# -- {group.title} " + "-" * max(3, 74 - len(group.title))]
            if group.doc:
                out += [_comment(line) for line in group.doc.strip().splitlines()]
                out.append("")
        out += [_comment(line) for line in textwrap.wrap(s.doc, 77)]
        if s.default is None and s.example is not None:
            out.append(f"# {s.name} = {s.show(s.example)}")
        else:
            out.append(f"{s.name} = {s.show(s.default)}")
    return "\n".join(out).replace("\n\n\n", "\n\n").lstrip("\n") + "\n"


def render_table(config_class: type) -> str:
    """The Markdown table of settings in docs/operations.md."""
    rows = ["| setting | type | default | allowed | what it does |", "|---|---|---|---|---|"]
    for s in declarations(config_class):
        default = "unset" if s.default is None else f"`{s.plain(s.default)}`"
        kafka = f" Kafka topic config `{s.topic_config}`." if s.topic_config else ""
        rows.append(
            f"| `{s.name}` | {s.kind.value} | {default} | {s.range_text()} | {s.doc}{kafka} |"
        )
    return "\n".join(rows) + "\n"


def _comment(line: str) -> str:
    return f"# {line}".rstrip()
