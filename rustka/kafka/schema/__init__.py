"""Kafka wire primitives, the field-declaration machinery and the derived codecs.

Why this shape: every message of every API version is described exactly once, as a tree of
`Field` objects (see rustka/kafka/messages/). Both directions of the codec are *derived*
from that tree, so a version difference is one edit in one place and the encoder can never disagree
with the decoder. Derivation generates Python source per (struct, version, flexible) the
first time it is needed and caches the resulting function: neighbouring fixed-width fields
collapse into one `struct` call and there is no per-field interpretation at run time, which
keeps the hot Produce-decode and Fetch-encode paths cheap.

Decoders only ever raise `KafkaCodecError` on hostile input: every length is checked against
the bytes that remain *before* anything is allocated, and the public entry points translate
the few low-level errors (`struct.error`, `IndexError`, `UnicodeDecodeError`) they can hit.

The package: `types` (the declaration vocabulary), `primitives` (what the generated code
calls), `codegen` (the derivation), `apis` (`ApiSpec` and the headers). This module
re-exports their public names, so `from rustka.kafka.schema import ...` names no layout.
"""

from __future__ import annotations

from .apis import ApiSpec, RequestHeader, read_request_header
from .codegen import (
    as_view,
    compile_decoder,
    compile_encoder,
    compile_error_counter,
    decode_struct,
    encode_struct,
)
from .primitives import BIG_CHUNK, read_uvarint, skip_tagged_fields, write_uvarint
from .types import (
    BOOL,
    BYTES,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    MAX_VERSION,
    RECORDS,
    STRING,
    UINT16,
    UUID,
    Array,
    Field,
    Fixed,
    KafkaCodecError,
    Struct,
    Var,
    parse_versions,
)

__all__ = [
    "BIG_CHUNK",
    "BOOL",
    "BYTES",
    "FLOAT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "MAX_VERSION",
    "RECORDS",
    "STRING",
    "UINT16",
    "UUID",
    "ApiSpec",
    "Array",
    "Field",
    "Fixed",
    "KafkaCodecError",
    "RequestHeader",
    "Struct",
    "Var",
    "as_view",
    "compile_decoder",
    "compile_encoder",
    "compile_error_counter",
    "decode_struct",
    "encode_struct",
    "parse_versions",
    "read_request_header",
    "read_uvarint",
    "skip_tagged_fields",
    "write_uvarint",
]
