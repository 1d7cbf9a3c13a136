"""What a message search asks for, and whether one record matches it.

Pure: the query parameters of a search (docs/console.md, "The JSON API") become a
`RecordFilter`, and `RecordFilter.matches` is asked of each decoded record on the
I/O pool (`rustka.ops.console.records.decode_page`). Matching is on the stored
bytes: a key or value substring is a byte substring of its UTF-8 form, so binary
keys and values are searched as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

KEY_MATCHES = ("substring", "exact")

DEFAULT_MAX_SCAN = 10_000
"""Records one search call looks at unless it asks for fewer (or more, up to the cap)."""
MAX_SCAN = 100_000
"""Records one search call looks at, at most, whatever it asks for."""
MAX_SCAN_BYTES = 64 * 1024 * 1024
"""Bytes of stored batches one search call reads, at most."""


class FilterError(ValueError):
    """A search parameter that is not what the API takes."""


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """Every part given must match; a filter of nothing matches every record."""

    key: bytes | None = None
    key_exact: bool = False
    value: bytes | None = None
    header_name: str | None = None
    header_value: bytes | None = None
    from_ts: int | None = None
    to_ts: int | None = None

    @property
    def empty(self) -> bool:
        return (
            self.key is None
            and self.value is None
            and self.header_name is None
            and self.from_ts is None
            and self.to_ts is None
        )

    def matches(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        timestamp: int,
    ) -> bool:
        if self.from_ts is not None and timestamp < self.from_ts:
            return False
        if self.to_ts is not None and timestamp > self.to_ts:
            return False
        if self.key is not None:
            if key is None:
                return False
            if self.key_exact and key != self.key:
                return False
            if not self.key_exact and self.key not in key:
                return False
        if self.value is not None and (value is None or self.value not in value):
            return False
        if self.header_name is not None:
            return any(
                name == self.header_name
                and (self.header_value is None or (data or b"") == self.header_value)
                for name, data in headers
            )
        return True


def _whole(params: dict[str, str], name: str) -> int | None:
    text = params.get(name, "")
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise FilterError(f"{name}: expected a whole number, got {text!r}") from None


def parse_filter(params: dict[str, str]) -> RecordFilter:
    """The filter of a messages call's ``key``, ``key_match``, ``value``, ``header``
    (a name, or ``name=value``), ``from_ts`` and ``to_ts`` (milliseconds, inclusive)."""
    key_match = params.get("key_match", "substring") or "substring"
    if key_match not in KEY_MATCHES:
        raise FilterError(f"key_match: one of {', '.join(KEY_MATCHES)}, got {key_match!r}")
    key = params.get("key", "")
    value = params.get("value", "")
    header = params.get("header", "")
    name, sep, wanted = header.partition("=")
    from_ts, to_ts = _whole(params, "from_ts"), _whole(params, "to_ts")
    if from_ts is not None and to_ts is not None and to_ts < from_ts:
        raise FilterError("to_ts: not before from_ts")
    return RecordFilter(
        key=key.encode() if key else None,
        key_exact=key_match == "exact",
        value=value.encode() if value else None,
        header_name=name if header else None,
        header_value=wanted.encode() if sep else None,
        from_ts=from_ts,
        to_ts=to_ts,
    )
