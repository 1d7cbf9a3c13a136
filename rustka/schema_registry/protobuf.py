"""Protobuf schemas, in the two forms clients register them: `.proto` text (curl users,
Confluent's docs), compiled by protoc (grpcio-tools), and base64 of a serialized
FileDescriptorProto (confluent-kafka's ProtobufSerializer), read directly. Both end
as one FileDescriptorProto in a descriptor pool with the well-known types and the
schema's references, which is what the canonical form, the compatibility rules and
the decoder read.

protoc runs as a child process: its C++ parser then never shares the broker's
process with hostile input, and its errors come back on its stderr, word for word."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import (
    any_pb2,
    api_pb2,
    descriptor_pb2,
    descriptor_pool,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    json_format,
    message_factory,
    source_context_pb2,
    struct_pb2,
    text_format,
    timestamp_pb2,
    type_pb2,
    wrappers_pb2,
)
from google.protobuf.message import DecodeError

from rustka.schema_registry.parsed import References, SchemaError, check_size
from rustka.schema_registry.proto_text import Unprintable, default_json_name, proto_text

# The files every schema may import without a reference (Confluent skips references for
# them too), in an order where each one's imports come before it.
WELL_KNOWN = (
    any_pb2,
    source_context_pb2,
    type_pb2,
    api_pb2,
    descriptor_pb2,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    struct_pb2,
    timestamp_pb2,
    wrappers_pb2,
)
WELL_KNOWN_NAMES = frozenset(module.DESCRIPTOR.name for module in WELL_KNOWN)

# What the registered schema's own file is called when protoc compiles it; a name no
# import path is likely to be.
MAIN_FILE = "registered-schema.proto"
PROTOC_TIMEOUT_SECONDS = 30
BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")

# protoc's descriptors, serialized, by a digest of the text and the imports (see
# compile_proto); forgotten all at once when they would hold over 16 MiB.
COMPILED_BYTES = 16 << 20
COMPILED: dict[bytes, bytes] = {}


class ProtobufSchema:
    """A parsed Protobuf schema: `text` as registered, `file` its FileDescriptorProto
    (no source info), `pool` the descriptors it and its references define."""

    schema_type = "PROTOBUF"

    def __init__(self, text: str, references: References = ()) -> None:
        check_size(text)
        self.text = text
        imports: dict[str, descriptor_pb2.FileDescriptorProto] = {}
        for name, ref in references:
            if not isinstance(ref, ProtobufSchema):
                raise SchemaError(f"reference {name!r} is a {ref.schema_type} schema, not PROTOBUF")
            dependency = descriptor_pb2.FileDescriptorProto()
            dependency.CopyFrom(ref.file)
            dependency.name = name
            imports[name] = dependency
        serialized = from_base64(text)
        self.file = serialized if serialized is not None else compile_proto(text, imports)
        self.file.ClearField("source_code_info")
        if not self.file.name or self.file.name in imports or self.file.name in WELL_KNOWN_NAMES:
            self.file.name = MAIN_FILE
        self.imports = imports
        self.pool = build_pool(self.file, imports)
        self.descriptor = self.pool.FindFileByName(self.file.name)
        # Printed from the pool's copy, in which every field's type is resolved and
        # named in full, however a hand-built descriptor named it.
        resolved = descriptor_pb2.FileDescriptorProto()
        self.descriptor.CopyToProto(resolved)
        try:
            self._canonical = proto_text(resolved)
        except (Unprintable, KeyError, IndexError):
            # What the printer cannot render, or a descriptor it misreads, is kept as
            # registered (docs/schema-registry.md, "Protobuf schemas").
            self._canonical = descriptor_text(self.file)

    def canonical(self) -> str:
        return self._canonical

    def normalized(self) -> str:
        return self._canonical

    def serialized(self) -> str:
        """Base64 of the FileDescriptorProto, for `?format=serialized`."""
        return base64.standard_b64encode(self.file.SerializeToString()).decode("ascii")

    def message_descriptor(self, indexes: list[int]) -> Any:
        """The message Confluent's message-index list names: the first index picks a
        top-level message, each next one a message nested in the one before."""
        candidates = list(self.descriptor.message_types_by_name.values())
        found = None
        for index in indexes:
            if not 0 <= index < len(candidates):
                raise SchemaError(f"message index {indexes} names no message of the schema")
            found = candidates[index]
            candidates = list(found.nested_types)
        if found is None:
            raise SchemaError("the message-index list is empty")
        return found

    def decode(self, payload: bytes) -> Any:
        indexes, offset = read_message_indexes(payload)
        descriptor = self.message_descriptor(indexes)
        message = message_factory.GetMessageClass(descriptor)()
        try:
            message.ParseFromString(payload[offset:])
        except DecodeError as exc:
            raise SchemaError(f"the bytes are not a {descriptor.full_name}: {exc}") from None
        return json_format.MessageToDict(message, preserving_proto_field_name=True)


def from_base64(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The FileDescriptorProto base64 text holds, or None when the text is no base64
    (`.proto` text always has characters base64 has not: spaces, `;`, `{`)."""
    if not BASE64.fullmatch(text) or not text.strip():
        return None
    try:
        raw = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    file = descriptor_pb2.FileDescriptorProto()
    try:
        file.ParseFromString(raw)
    except DecodeError as exc:
        raise SchemaError(f"the base64 text is no serialized FileDescriptorProto: {exc}") from None
    if not (file.name or file.package or file.message_type or file.enum_type or file.service):
        raise SchemaError(
            "the base64 text is no serialized FileDescriptorProto: it declares nothing"
        )
    return file


def compile_proto(
    text: str, imports: dict[str, descriptor_pb2.FileDescriptorProto]
) -> descriptor_pb2.FileDescriptorProto:
    """`.proto` text compiled by protoc, its imports given as a descriptor set.

    The registry stores Protobuf schemas as `.proto` text and parses a stored version
    again for every compatibility check; protoc's answer depends on nothing but the
    text and the imports, so it is remembered (a bounded number of them)."""
    digest = hashlib.sha256()
    parts = [text.encode("utf-8")]
    for name, dependency in sorted(imports.items()):
        parts += [name.encode("utf-8"), dependency.SerializeToString(deterministic=True)]
    for part in parts:
        digest.update(len(part).to_bytes(8, "big") + part)
    key = digest.digest()
    known = COMPILED.get(key)
    if known is None:
        known = run_protoc(text, imports).SerializeToString()
        if sum(map(len, COMPILED.values())) + len(known) > COMPILED_BYTES:
            COMPILED.clear()
        COMPILED[key] = known
    return descriptor_pb2.FileDescriptorProto.FromString(known)


def run_protoc(
    text: str, imports: dict[str, descriptor_pb2.FileDescriptorProto]
) -> descriptor_pb2.FileDescriptorProto:
    with tempfile.TemporaryDirectory(prefix="rustka-proto-") as tmp:
        root = Path(tmp)
        (root / MAIN_FILE).write_text(text, encoding="utf-8")
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={root}",
            f"--descriptor_set_out={root / 'out.pb'}",
        ]
        if imports:
            given = descriptor_pb2.FileDescriptorSet(file=list(imports.values()))
            (root / "imports.pb").write_bytes(given.SerializeToString())
            command.append(f"--descriptor_set_in={root / 'imports.pb'}")
        command.append(MAIN_FILE)
        try:
            done = subprocess.run(
                command, capture_output=True, timeout=PROTOC_TIMEOUT_SECONDS, check=False
            )
        except subprocess.TimeoutExpired:
            raise SchemaError(f"protoc took over {PROTOC_TIMEOUT_SECONDS}s on the schema") from None
        if done.returncode != 0:
            message = done.stderr.decode("utf-8", "replace").strip().replace(str(root) + "/", "")
            raise SchemaError(f"invalid .proto schema: {message or 'protoc failed'}")
        out = descriptor_pb2.FileDescriptorSet()
        out.ParseFromString((root / "out.pb").read_bytes())
    (file,) = [f for f in out.file if f.name == MAIN_FILE]
    return file


def build_pool(
    file: descriptor_pb2.FileDescriptorProto, imports: dict[str, descriptor_pb2.FileDescriptorProto]
) -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for module in WELL_KNOWN:
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    pending = [f for name, f in imports.items() if name not in WELL_KNOWN_NAMES]
    added = set(WELL_KNOWN_NAMES)
    # The references come in any order; each goes in once all it imports is there.
    while pending:
        ready = [f for f in pending if set(f.dependency) <= added]
        if not ready:
            names = sorted(f.name for f in pending)
            raise SchemaError(f"references {names} import files that are not references")
        for dependency in ready:
            add(pool, dependency)
            added.add(dependency.name)
            pending.remove(dependency)
    missing = sorted(set(file.dependency) - added)
    if missing:
        raise SchemaError(
            f"the schema imports {missing}, which are neither references nor well-known"
        )
    add(pool, file)
    return pool


def add(pool: descriptor_pool.DescriptorPool, file: descriptor_pb2.FileDescriptorProto) -> None:
    try:
        pool.Add(file)
        pool.FindFileByName(file.name)
    except (TypeError, ValueError, KeyError) as exc:
        raise SchemaError(f"invalid Protobuf schema {file.name!r}: {exc}") from None


def descriptor_text(file: descriptor_pb2.FileDescriptorProto) -> str:
    """The canonical form of a schema `.proto` text cannot render (proto_text.py says
    which): the descriptor in protobuf's text format without what the two registration
    forms differ in (the file's own name, source info, the JSON names protoc derives).
    It does not parse back as a schema, so the registry keeps such a schema as it was
    registered."""
    copy = descriptor_pb2.FileDescriptorProto()
    copy.CopyFrom(file)
    copy.ClearField("name")
    copy.ClearField("source_code_info")
    pending = list(copy.message_type)
    while pending:
        message = pending.pop()
        pending.extend(message.nested_type)
        for field in [*message.field, *message.extension]:
            if field.json_name == default_json_name(field.name):
                field.ClearField("json_name")
    for field in copy.extension:
        if field.json_name == default_json_name(field.name):
            field.ClearField("json_name")
    return text_format.MessageToString(copy, as_one_line=True)


def read_message_indexes(payload: bytes) -> tuple[list[int], int]:
    """Confluent's message-index list at the start of a Protobuf payload: a zigzag
    varint count then that many zigzag varints; a count of 0 means [0]."""
    offset = 0

    def varint() -> int:
        nonlocal offset
        value = shift = 0
        while True:
            if offset >= len(payload) or shift > 63:
                raise SchemaError("the message-index list is cut short")
            byte = payload[offset]
            offset += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return (value >> 1) ^ -(value & 1)

    count = varint()
    if count == 0:
        return [0], offset
    if not 0 < count <= 64:
        raise SchemaError(f"the message-index list has a bad length {count}")
    return [varint() for _ in range(count)], offset
