"""The native wire codec: bytes in, immutable message values out, and back.

Pure functions with no I/O and no reactor, in the spirit of h11: the server,
the client, the CLI and the tests all share one definition of every message, so
a framing or field-order mistake cannot exist on one side only. A payload here
is one frame *without* its 4-byte length prefix (Int32StringReceiver strips and
adds that); ``request_frame``/``response_frame`` give the prefixed pieces.

**One declaration per message.** Each message (rustka/native/messages.py) is a
class whose annotations name its wire types in order (``topic: Str``,
``partition: UInt32``, ...) and whose ``OP`` or ``TAG`` is its code;
``@request``/``@response`` register it. Every
way of reading or writing it is derived from that declaration by the wire
engine (rustka/native/wire.py):

- a checking reader, which names the field and position of any problem;
- a checking writer, which names the field of a value that does not fit;
- for messages without arrays, straight-line fast paths compiled from the
  field list (one ``struct`` call per run of fixed-size fields) for decoding,
  encoding and framing. They fall back to the checking paths on anything
  unusual, so errors are always reported the same way.

Adding an op is one class in rustka/native/messages.py plus its handler; no
table needs editing.

Every length and count read from the wire is checked against the bytes that
remain *before* anything is allocated, so a hostile frame costs at most its own
size. Malformed input always raises :class:`~rustka.errors.InvalidRequest` with
a message naming the problem; values that do not fit their wire type raise
``ValueError`` on encode, because that is a programming error, not bad input.

The byte layout is specified in ``docs/protocol.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias, Union

from rustka.errors import InvalidRequest, OffsetOutOfRange, RustkaError

# Every message class, wire type and declaration helper is re-exported: rustka.native.codec
# stays the one import of the client library, the server, the tools and the tests.
from rustka.native.messages import *  # noqa: F403
from rustka.native.messages import (
    CONFIG_SOURCES,
    HIGH_WATERMARK,
    MIN_PROTOCOL_VERSION,
    NO_TIME,
    PROTOCOL_VERSION,
    DeleteRecords,
    Error,
    Failure,
    FetchBatch,
    OutOfRange,
    acl_binding,
    acl_entry,
    acl_selector,
)
from rustka.native.wire import *  # noqa: F403
from rustka.native.wire import (
    _REQUESTS,
    _RESPONSES,
    _STRUCT_FIELDS,
    BATCHES,
    BYTES,
    STR,
    U8,
    U16,
    U32,
    U64,
    Array,
    Buffer,
    WireType,
    _Spec,
    item,
    request,
    response,
)

# --------------------------------------------------------------------------- derived tables

SEED_OPS: tuple[int, ...] = (1, 2, 3, 4)
EXTENSION_OPS: tuple[int, ...] = tuple(sorted(set(_REQUESTS) - set(SEED_OPS)))

# Every declared request or response class; the unions follow the declarations above.
Request: TypeAlias = Union[tuple(spec.cls for spec in _REQUESTS.values())]  # type: ignore[valid-type]  # noqa: UP007
Response: TypeAlias = Union[tuple(spec.cls for spec in _RESPONSES.values())]  # type: ignore[valid-type]  # noqa: UP007

_Fast = Callable[[bytes], Any]
_Encoder = Callable[[Any], list[bytes]]

_FAST_REQUESTS: dict[int, _Fast] = {
    code: spec.decode_fast for code, spec in _REQUESTS.items() if spec.decode_fast is not None
}
_FAST_RESPONSES: dict[int, _Fast] = {
    code: spec.decode_fast for code, spec in _RESPONSES.items() if spec.decode_fast is not None
}
_REQUEST_PARTS: dict[type, _Encoder] = {s.cls: s.parts for s in _REQUESTS.values()}
_RESPONSE_PARTS: dict[type, _Encoder] = {s.cls: s.parts for s in _RESPONSES.values()}
_REQUEST_FRAMES: dict[type, _Encoder] = {s.cls: s.frame for s in _REQUESTS.values()}
_RESPONSE_FRAMES: dict[type, _Encoder] = {s.cls: s.frame for s in _RESPONSES.values()}
RESPONSE_FRAMERS: dict[type, _Encoder] = _RESPONSE_FRAMES
"""Response class -> its compiled framer, for a server's write loop (one lookup, one call);
treat it as read-only. ``response_frame`` is the same with a check of the type."""

MESSAGES: tuple[_Spec, ...] = (*_REQUESTS.values(), *_RESPONSES.values())
"""The declaration behind every message, for tests that drive each one through every path."""


# --------------------------------------------------------------------------- entry points


def _decode_slow(payload: bytes, table: dict[int, _Spec], kind: str) -> Any:
    """Everything but a fast path's success: empty frames, unknown codes, precise errors."""
    code_name = "op" if kind == "request" else "tag"
    if not payload:
        raise InvalidRequest(f"empty frame: a {kind} needs at least its {code_name} byte")
    spec = table.get(payload[0])
    if spec is None:
        raise InvalidRequest(f"unknown {code_name} {payload[0]}")
    return spec.decode_slow(payload)


def decode_request(payload: Buffer) -> Request:
    """Parse one request frame payload (op byte first), or raise InvalidRequest saying why."""
    if type(payload) is not bytes:
        payload = bytes(payload)
    if payload:
        fast = _FAST_REQUESTS.get(payload[0])
        if fast is not None:
            message = fast(payload)
            if message is not None:
                return message  # type: ignore[no-any-return]
    return _decode_slow(payload, _REQUESTS, "request")  # type: ignore[no-any-return]


def decode_response(payload: Buffer) -> Response:
    """Parse one response frame payload (tag byte first), or raise InvalidRequest saying why."""
    if type(payload) is not bytes:
        payload = bytes(payload)
    if payload:
        fast = _FAST_RESPONSES.get(payload[0])
        if fast is not None:
            message = fast(payload)
            if message is not None:
                return message  # type: ignore[no-any-return]
    return _decode_slow(payload, _RESPONSES, "response")  # type: ignore[no-any-return]


def _encoder(table: dict[type, _Encoder], message: object, kind: str) -> _Encoder:
    encoder = table.get(type(message))
    if encoder is None:
        raise TypeError(f"not a rustka {kind}: {type(message).__name__}")
    return encoder


def encode_request(req: Request) -> bytes:
    """The frame payload of ``req`` (without the 4-byte length prefix)."""
    parts = _encoder(_REQUEST_PARTS, req, "request")(req)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def encode_response(resp: Response) -> bytes:
    """The frame payload of ``resp`` (without the 4-byte length prefix)."""
    parts = _encoder(_RESPONSE_PARTS, resp, "response")(resp)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def request_parts(req: Request) -> list[bytes]:
    """Like encode_request, but a ProduceBatch's data stays a separate piece.

    ``b"".join(request_parts(req)) == encode_request(req)``; the pieces suit
    ``transport.writeSequence`` so a large batch is not copied into a new frame.
    """
    return _encoder(_REQUEST_PARTS, req, "request")(req)


def response_parts(resp: Response) -> list[bytes]:
    """Like encode_response, but a Batches response's data stays a separate piece.

    ``b"".join(response_parts(resp)) == encode_response(resp)``.
    """
    return _encoder(_RESPONSE_PARTS, resp, "response")(resp)


def request_frame(req: Request) -> list[bytes]:
    """The whole frame of ``req``, length prefix included, as pieces for writeSequence."""
    return _encoder(_REQUEST_FRAMES, req, "request")(req)


def response_frame(resp: Response) -> list[bytes]:
    """The whole frame of ``resp``, length prefix included, as pieces for writeSequence.

    The server writes every response through this; a fixed-size response (a
    seed ``Produced``) is a single struct call, prefix and all.
    """
    return _encoder(_RESPONSE_FRAMES, resp, "response")(resp)


# --------------------------------------------------------------------------- errors


_SEED_REQUEST_TYPES = tuple(_REQUESTS[op].cls for op in SEED_OPS)


def error_response(request: Request | None, exc: RustkaError) -> Response:
    """The response that reports ``exc`` for ``request`` (None: the frame did not parse).

    Seed ops and unparseable frames get tag 4 ``Error`` so seed clients never see
    a tag they do not know; extension ops get tag 14 ``Failure`` with the error's
    code, except an out-of-range FetchBatch or DeleteRecords, which gets tag 15 with
    the bounds.
    """
    message = str(exc) or type(exc).__name__
    if request is None or isinstance(request, _SEED_REQUEST_TYPES):
        return Error(message)
    if isinstance(exc, OffsetOutOfRange) and isinstance(request, (FetchBatch, DeleteRecords)):
        return OutOfRange(exc.offset, exc.log_start, exc.end)
    code = getattr(exc, "code", RustkaError.code)
    if not isinstance(code, int) or not 0 <= code <= U16.max:
        code = RustkaError.code
    return Failure(code, message)


__all__ = [
    "acl_binding",
    "acl_entry",
    "acl_selector",
    "BATCHES",
    "BYTES",
    "CONFIG_SOURCES",
    "EXTENSION_OPS",
    "HIGH_WATERMARK",
    "MESSAGES",
    "MIN_PROTOCOL_VERSION",
    "NO_TIME",
    "PROTOCOL_VERSION",
    "RESPONSE_FRAMERS",
    "SEED_OPS",
    "STR",
    "U16",
    "U32",
    "U64",
    "U8",
    "Array",
    "Request",
    "Response",
    "WireType",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "error_response",
    "item",
    "request",
    "request_frame",
    "request_parts",
    "response",
    "response_frame",
    "response_parts",
    *(spec.cls.__name__ for spec in MESSAGES),
    *(cls.__name__ for cls in _STRUCT_FIELDS),
]
