"""Declarations of every Kafka API rustka speaks, and the public codec entry points.

Each message is declared once, field by field, in wire order, with Kafka's own version
notation ("3+", "2-4") so that it can be checked line by line against Kafka's JSON schemas
(clients/src/main/resources/common/message/<Name>{Request,Response}.json). Field names are
the snake_case of Kafka's current field names; decoded messages are plain dicts/lists with
those keys, and encoders accept the same shape with missing keys taking the field default.

The declarations sit in one module per API family (admin, produce_fetch, groups,
transactions, security); each API's structs are followed by its one `api(...)` call
(rustka/kafka/messages/registry.py), which holds its versions and registers it in `APIS`.
`APIS` is the single place the front-end learns what to advertise. Flexible versions are
declared only where an API needs them (docs/kafka.md, "APIs and versions", says which and
why); `flexible_from` records Kafka's threshold so headers of newer requests parse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rustka.kafka.errors import ErrorCode
from rustka.kafka.schema import ApiSpec, KafkaCodecError, RequestHeader, read_request_header

# Importing the family modules runs their `api(...)` declarations.
from . import (  # noqa: F401
    admin,
    groups,
    produce_fetch,
    security,
    share_groups,
    telemetry,
    transactions,
)
from .registry import APIS, ApiKey

__all__ = [
    "APIS",
    "ApiKey",
    "ApiSpec",
    "KafkaCodecError",
    "RequestHeader",
    "api_versions_error_response",
    "api_versions_table",
    "count_response_errors",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_parts",
    "is_flexible",
]

# `api` refuses a second declaration of a key; a key named in ApiKey but never declared
# would leave the front-end without its codec, so it stops the import instead.
_undeclared = sorted(set(ApiKey) - set(APIS))
if _undeclared:
    raise ImportError(f"api keys without a declaration: {_undeclared}")


# --- Public entry points ---------------------------------------------------------------


def _spec(api_key: int) -> ApiSpec:
    spec = APIS.get(api_key)
    if spec is None:
        raise KafkaCodecError(f"unknown api key {api_key}")
    return spec


def is_flexible(api_key: int, version: int) -> bool:
    """Whether (api, version) uses compact encodings and tagged fields (Kafka's threshold)."""
    return _spec(api_key).is_flexible(version)


def decode_request_header(buf: bytes | memoryview) -> tuple[RequestHeader, int]:
    """Parse a request header (v1 or v2); returns it and the body offset.

    Raises only KafkaCodecError. Unknown api keys and unsupported versions still parse, so
    the front-end can answer them (ApiVersions) or drop the connection.
    """
    return read_request_header(buf, APIS)


def decode_request(api_key: int, version: int, buf: bytes | memoryview, pos: int) -> dict[str, Any]:
    """Decode a request body starting at `pos` (from `decode_request_header`).

    `buf` must end where the request ends. Records come back as memoryview slices of `buf`
    (no copy) or None; trailing bytes after the body are ignored, as Kafka does.
    """
    return _spec(api_key).decode_request(version, buf, pos)


def encode_request(
    api_key: int,
    version: int,
    correlation_id: int,
    client_id: str | None,
    body: Mapping[str, Any],
) -> bytes:
    """Header plus body of a request, without the 4-byte size prefix (for the mirror client)."""
    return _spec(api_key).encode_request(version, correlation_id, client_id, body)


def encode_response_parts(
    api_key: int, version: int, correlation_id: int, body: Mapping[str, Any]
) -> list[Any]:
    """A response (header + body, no size prefix) as bytes-like parts.

    Records chunks of at least `schema.BIG_CHUNK` bytes are passed through as their own
    parts instead of being copied, so a Fetch response can go out with writeSequence.
    The total length is `sum(len(p) for p in parts)`.
    """
    return _spec(api_key).encode_response_parts(version, correlation_id, body)


def count_response_errors(
    api_key: int, version: int, body: Mapping[str, Any], out: dict[int, int]
) -> None:
    """Add each non-zero ``error_code`` of a response body to ``out`` (code -> times)."""
    _spec(api_key).response_error_counter(version)(body, out)


def encode_response(
    api_key: int, version: int, correlation_id: int, body: Mapping[str, Any]
) -> bytes:
    """`b"".join(encode_response_parts(...))`: header + body, no size prefix."""
    return _spec(api_key).encode_response(version, correlation_id, body)


def decode_response(
    api_key: int, version: int, buf: bytes | memoryview
) -> tuple[int, dict[str, Any]]:
    """Parse a response frame (no size prefix); returns (correlation_id, body)."""
    return _spec(api_key).decode_response(version, buf)


def api_versions_table() -> list[dict[str, int]]:
    """The ApiVersions `api_keys` array advertising every declared API, sorted by key."""
    return [
        {"api_key": s.key, "min_version": s.min_version, "max_version": s.max_version}
        for s in sorted(APIS.values(), key=lambda s: s.key)
    ]


def api_versions_error_response(correlation_id: int) -> bytes:
    """Kafka's answer to an ApiVersions version it does not know.

    A v0-layout body (header v0, error UNSUPPORTED_VERSION, the full table) that every client
    can parse whatever version it sent; clients then retry with a listed version.
    """
    body = {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": api_versions_table()}
    return APIS[ApiKey.API_VERSIONS].encode_response(0, correlation_id, body)
