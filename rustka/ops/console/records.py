"""Stored batches turned into the console's JSON records, within a page's bounds.

Plain synchronous code run on the I/O pool (decoding and decompressing are CPU
work the reactor must not do). Keys, values and headers are attacker-controlled
bytes: they leave here as data (UTF-8 text, or hex when they are not text), never
as markup, and the page inserts them as text (docs/console.md, "Safety").
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rustka.errors import InvalidBatch
from rustka.ops.console.search import RecordFilter
from rustka.record.batch import decode_records, parse_header
from rustka.record.header import CONTROL_BIT, LOG_OVERHEAD, TIMESTAMP_TYPE_BIT

FORMATS = ("text", "json", "hex")
"""How keys and values are shown: text (hex if not UTF-8), JSON parsed where it is
JSON, or always hex."""


@dataclass(slots=True)
class Page:
    """Records decoded from ``first`` on, and where the next page starts."""

    records: list[dict[str, Any]] = field(default_factory=list)
    next_offset: int = 0
    bytes: int = 0
    truncated: bool = False
    scanned: int = 0
    """Records looked at (a search passes over those that do not match)."""
    scanned_bytes: int = 0
    """Bytes of stored batches looked at."""


ValueDecoder = Callable[[bytes], "dict[str, Any] | None"]
"""A schema registry's decoder: a Confluent-framed value with a known schema id as
``{"schema_id", "schema_type", "subject", "value"}``, anything else None."""


def decoded_value(decode: ValueDecoder, value: bytes) -> dict[str, Any] | None:
    """What ``decode`` makes of a value, as JSON data; a decoder that fails says so in
    ``error`` instead of failing the whole page."""
    try:
        found = decode(value)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
    if found is None:
        return None
    try:
        json.dumps(found, allow_nan=False)
    except (TypeError, ValueError):
        found = {**found, "value": repr(found.get("value"))}
    return found


def _finite(text: str) -> float:
    """JSON has no infinities: ``1e999`` is not shown parsed (the answer must be JSON)."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} is out of range")
    return value


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def show_bytes(data: bytes | None, fmt: str, cap: int) -> dict[str, Any] | None:
    """One key, value or header value as JSON data; at most ``cap`` bytes of it."""
    if data is None:
        return None
    part = data[:cap]
    out: dict[str, Any] = {"size": len(data)}
    if len(data) > cap:
        out["truncated"] = True
    text = None
    if fmt != "hex":
        try:
            text = part.decode("utf-8")
        except UnicodeDecodeError as e:
            # a cut through a multi-byte character is still text
            if len(data) > cap and e.start >= len(part) - 3:
                text = part[: e.start].decode("utf-8", errors="strict")
    if text is None:
        out["hex"] = part.hex()
        return out
    out["text"] = text
    if fmt == "json" and "truncated" not in out:
        with contextlib.suppress(ValueError, RecursionError):
            out["json"] = json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    return out


def _record_size(key: bytes | None, value: bytes | None, headers: Sequence[Any]) -> int:
    size = len(key or b"") + len(value or b"")
    return size + sum(len(k) + len(v or b"") for k, v in headers)


def decode_page(
    chunks: Sequence[bytes],
    first: int,
    limit: int,
    max_bytes: int,
    fmt: str,
    page: Page,
    keep: RecordFilter | None = None,
    max_scan: int | None = None,
    decode_value: ValueDecoder | None = None,
) -> Page:
    """Add the records at or after ``first`` from stored batches to ``page``.

    Stops at ``limit`` records or once ``max_bytes`` of keys, values and headers
    are taken (a single record larger than that is shown cut to it, so a page
    always moves on). Control batches (transaction markers) hold no user records;
    they only move ``next_offset`` on. With ``keep``, only the records it matches
    are taken, and the scan stops after ``max_scan`` records looked at; with
    ``decode_value``, each value it knows gets ``decoded`` (docs/console.md).
    """
    data = b"".join(chunks)
    pos = 0
    page.next_offset = max(page.next_offset, first)
    page.scanned_bytes += len(data)
    while pos + LOG_OVERHEAD <= len(data) and len(page.records) < limit:
        try:
            header = parse_header(data, pos)
        except InvalidBatch:
            break
        end = pos + header.size
        if end > len(data):
            break
        if header.attributes & CONTROL_BIT:
            page.next_offset = max(page.next_offset, header.next_offset)
            pos = end
            continue
        log_append = bool(header.attributes & TIMESTAMP_TYPE_BIT)
        for record in decode_records(data, pos, verify=True, min_offset=first):
            offset = record.offset if record.offset is not None else header.base_offset
            if offset < page.next_offset:
                continue
            if len(page.records) >= limit:
                return page
            if max_scan is not None and page.scanned >= max_scan:
                page.truncated = True
                return page
            page.scanned += 1
            timestamp = header.max_timestamp if log_append else record.timestamp
            if keep is not None and not keep.matches(
                record.key, record.value, record.headers, timestamp
            ):
                page.next_offset = offset + 1
                continue
            size = _record_size(record.key, record.value, record.headers)
            room = max_bytes - page.bytes
            if page.records and size > room:
                page.truncated = True
                return page
            cap = max(room, 0) if page.records else max_bytes
            shown: dict[str, Any] = {
                "offset": offset,
                "timestamp": timestamp,
                "timestamp_type": "LogAppendTime" if log_append else "CreateTime",
                "key": show_bytes(record.key, fmt, cap),
                "value": show_bytes(record.value, fmt, cap),
                "headers": [
                    {"key": name, "value": show_bytes(value, fmt, cap)}
                    for name, value in record.headers
                ],
            }
            if decode_value is not None and record.value is not None:
                decoded = decoded_value(decode_value, record.value)
                if decoded is not None:
                    shown["decoded"] = decoded
            page.records.append(shown)
            page.bytes += min(size, cap)
            page.next_offset = offset + 1
        page.next_offset = max(page.next_offset, header.next_offset)
        pos = end
    return page
