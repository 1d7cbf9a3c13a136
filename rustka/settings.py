"""How a setting is declared, parsed, checked and documented.

Each broker setting is declared once, as a dataclass field of `rustka.config.Config`
made by `setting(...)`: its type (a `Kind`), default, range or allowed values, whether
it may be unset, a one-line doc and the heading it is listed under. Parsing the TOML
file and the flags, range checks, the comments of `etc/rustka.toml` and the settings
table of docs/operations.md are all derived from those declarations (Kafka's
``ConfigDef.define`` is the model), so no second table can drift from the first.
A setting that is also a Kafka topic config names it in ``topic_config``: the broker
value is that topic config's default.
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
        if self.kind is Kind.ENDPOINTS:
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
        if kind in (Kind.STRING, Kind.CHOICE) and not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value

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
        if self.kind in (Kind.STRING, Kind.CHOICE):
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
        if self.kind is Kind.ENDPOINTS:
            return f"at least {self.minimum}" if self.minimum else "any number"
        low = self.plain(self.minimum) if self.minimum is not None else None
        high = self.plain(self.maximum) if self.maximum is not None else None
        parts = [f"≥ {low}" if low is not None else "", f"≤ {high}" if high is not None else ""]
        text = ", ".join(p for p in parts if p)
        if self.optional:
            text = f"{text}; -1 = unset" if text else "-1 = unset"
        return text


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
