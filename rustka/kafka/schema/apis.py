"""`ApiSpec`, one API's versions and codecs, and the request/response headers."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .codegen import (
    _DECODE_ERRORS,
    _ENCODE_ERRORS,
    Decoder,
    Encoder,
    ErrorCounter,
    _finish,
    as_view,
    compile_decoder,
    compile_encoder,
    compile_error_counter,
)
from .primitives import (
    _pack_hhi,
    _pack_i,
    _r_str,
    _unpack_hhi,
    _unpack_i,
    _w_str,
    skip_tagged_fields,
)
from .types import KafkaCodecError, Struct


class RequestHeader(NamedTuple):
    """Request header v1/v2 fields (v2 only adds a tagged-field section, skipped here)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, eq=False)
class ApiSpec:
    """One API: what we advertise and how each of its versions is laid out.

    `flexible_from` is the first flexible version according to Kafka's schema even when it
    lies above `max_version`: it decides the request header version of a request the
    client sent at a version we do not support, so the header can still be parsed.
    """

    key: int
    name: str
    min_version: int
    max_version: int
    flexible_from: int | None
    request: Struct
    response: Struct
    #: ApiVersions answers with header v0 even for flexible versions: the client parses it
    #: before it knows anything about the broker.
    response_header_v0_always: bool = False
    _compiled: dict[tuple[int, bool], tuple[Decoder, Encoder]] = field(
        default_factory=dict, init=False, repr=False
    )
    _error_counters: dict[int, ErrorCounter] = field(default_factory=dict, init=False, repr=False)

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from

    def request_header_version(self, version: int) -> int:
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        if self.response_header_v0_always or not self.is_flexible(version):
            return 0
        return 1

    def codec(self, version: int, is_request: bool) -> tuple[Decoder, Encoder]:
        """The compiled (decoder, encoder) pair for one version and direction, cached."""
        key = (version, is_request)
        pair = self._compiled.get(key)
        if pair is None:
            if not self.supports(version):
                raise KafkaCodecError(f"{self.name} v{version} is not supported")
            st = self.request if is_request else self.response
            flex = self.is_flexible(version)
            pair = (compile_decoder(st, version, flex), compile_encoder(st, version, flex))
            self._compiled[key] = pair
        return pair

    def response_error_counter(self, version: int) -> ErrorCounter:
        """`compile_error_counter` of this version's response, cached."""
        counter = self._error_counters.get(version)
        if counter is None:
            if not self.supports(version):
                raise KafkaCodecError(f"{self.name} v{version} is not supported")
            counter = compile_error_counter(self.response, version, self.is_flexible(version))
            self._error_counters[version] = counter
        return counter

    def _decode(self, version: int, is_request: bool, mv: memoryview, pos: int) -> dict[str, Any]:
        dec = self.codec(version, is_request)[0]
        try:
            return dec(mv, pos)[0]
        except KafkaCodecError:
            raise
        except _DECODE_ERRORS as exc:
            kind = "request" if is_request else "response"
            raise KafkaCodecError(f"malformed {self.name} v{version} {kind}: {exc}") from exc

    def _encode(
        self, version: int, is_request: bool, w: bytearray, body: Mapping[str, Any]
    ) -> list[Any]:
        enc = self.codec(version, is_request)[1]
        parts: list[Any] = []
        try:
            enc(w, parts, body)
        except KafkaCodecError:
            raise
        except _ENCODE_ERRORS as exc:
            kind = "request" if is_request else "response"
            raise KafkaCodecError(f"cannot encode {self.name} v{version} {kind}: {exc}") from exc
        return _finish(w, parts)

    def decode_request(self, version: int, buf: bytes | memoryview, pos: int) -> dict[str, Any]:
        return self._decode(version, True, as_view(buf), pos)

    def encode_request(
        self, version: int, correlation_id: int, client_id: str | None, body: Mapping[str, Any]
    ) -> bytes:
        self.codec(version, True)  # refuse unsupported versions before building a header
        w = bytearray()
        try:
            w += _pack_hhi(self.key, version, correlation_id)
            _w_str(w, client_id, True, "client_id")
        except (struct.error, AttributeError) as exc:
            raise KafkaCodecError(f"cannot encode request header: {exc}") from exc
        if self.request_header_version(version) == 2:
            w.append(0)
        return b"".join(self._encode(version, True, w, body))

    def encode_response_parts(
        self, version: int, correlation_id: int, body: Mapping[str, Any]
    ) -> list[Any]:
        self.codec(version, False)
        try:
            w = bytearray(_pack_i(correlation_id))
        except struct.error as exc:
            raise KafkaCodecError(f"cannot encode correlation id: {exc}") from exc
        if self.response_header_version(version) == 1:
            w.append(0)
        return self._encode(version, False, w, body)

    def encode_response(self, version: int, correlation_id: int, body: Mapping[str, Any]) -> bytes:
        parts = self.encode_response_parts(version, correlation_id, body)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def decode_response(self, version: int, buf: bytes | memoryview) -> tuple[int, dict[str, Any]]:
        self.codec(version, False)
        mv = as_view(buf)
        try:
            (correlation_id,) = _unpack_i(mv, 0)
            pos = 4
            if self.response_header_version(version) == 1:
                pos = skip_tagged_fields(mv, pos)
        except KafkaCodecError:
            raise
        except _DECODE_ERRORS as exc:
            raise KafkaCodecError(f"malformed response header: {exc}") from exc
        return correlation_id, self._decode(version, False, mv, pos)


def read_request_header(
    buf: bytes | memoryview, apis: Mapping[int, ApiSpec]
) -> tuple[RequestHeader, int]:
    """Parse a request header; returns it and the offset where the body starts.

    Header v2 (flexible request versions) keeps client_id as a classic int16 string and adds
    a tagged-field section. Flexibility is judged from Kafka's threshold even for versions
    we do not support; an unknown api key is read as header v1.
    """
    mv = as_view(buf)
    try:
        key, version, correlation_id = _unpack_hhi(mv, 0)
        client_id, pos = _r_str(mv, 8, True)
        spec = apis.get(key)
        if spec is not None and spec.is_flexible(version):
            pos = skip_tagged_fields(mv, pos)
    except KafkaCodecError:
        raise
    except _DECODE_ERRORS as exc:
        raise KafkaCodecError(f"malformed request header: {exc}") from exc
    return RequestHeader(key, version, correlation_id, client_id), pos
