"""A FileDescriptorProto printed as `.proto` source: the canonical form of a Protobuf
schema, which is what the registry stores and shows (as Confluent's registry does),
whether the schema came as `.proto` text or as a base64 descriptor
(docs/schema-registry.md, "Protobuf schemas").

The text compiles back to the same descriptor, in the same order: the order of the
top-level and nested messages is what Confluent's message-index list counts, so a
map field's synthetic entry message (which protoc adds where the field is) is kept in
its place among the nested messages. Types are written fully qualified (`.pkg.Msg`),
which protoc resolves without looking at scopes. What the text cannot say faithfully
(custom options, groups, editions, names that are no identifiers) makes
`Unprintable`, and the caller keeps the schema as it came."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from google.protobuf import descriptor_pb2, unknown_fields
from google.protobuf.descriptor import FieldDescriptor

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
TYPE_NAME = re.compile(r"\.?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")

FDP = descriptor_pb2.FieldDescriptorProto
SCALARS = {
    FDP.TYPE_DOUBLE: "double",
    FDP.TYPE_FLOAT: "float",
    FDP.TYPE_INT64: "int64",
    FDP.TYPE_UINT64: "uint64",
    FDP.TYPE_INT32: "int32",
    FDP.TYPE_FIXED64: "fixed64",
    FDP.TYPE_FIXED32: "fixed32",
    FDP.TYPE_BOOL: "bool",
    FDP.TYPE_STRING: "string",
    FDP.TYPE_BYTES: "bytes",
    FDP.TYPE_UINT32: "uint32",
    FDP.TYPE_SFIXED32: "sfixed32",
    FDP.TYPE_SFIXED64: "sfixed64",
    FDP.TYPE_SINT32: "sint32",
    FDP.TYPE_SINT64: "sint64",
}
LABELS = {
    FDP.LABEL_OPTIONAL: "optional",
    FDP.LABEL_REQUIRED: "required",
    FDP.LABEL_REPEATED: "repeated",
}

# The largest field number plus one (a message's ranges end exclusive), and the largest
# enum number (an enum's reserved ranges end inclusive): both print as `max`.
FIELD_NUMBER_END = 536_870_912
ENUM_NUMBER_MAX = 2_147_483_647
INDENT = "  "
# What protoc's C escaping of a bytes default can hold: no bare quote, backslash or
# line break, and only escapes protoc reads back.
C_ESCAPED = re.compile(r'(?:[^"\\\n]|\\(?:[0-7]{1,3}|x[0-9a-fA-F]{1,2}|[abfnrtv\\\'"?]))*')


class Unprintable(ValueError):
    """The descriptor holds what `.proto` text written here would not say the same way."""


def proto_text(file: descriptor_pb2.FileDescriptorProto) -> str:
    """The file as `.proto` source, the same text for the same descriptor (its name,
    source info and protoc's own JSON names left out)."""
    return FilePrinter(file).text()


class FilePrinter:
    """One file's text, built line by line; a class only so that each block knows
    whether the file is proto2 or proto3 (labels differ) without passing it down."""

    def __init__(self, file: descriptor_pb2.FileDescriptorProto) -> None:
        self.file = file
        self.lines: list[str] = []
        syntax = file.syntax or "proto2"
        if syntax not in ("proto2", "proto3"):
            raise Unprintable(f"syntax {syntax!r}")
        self.proto3 = syntax == "proto3"

    def text(self) -> str:
        file = self.file
        self.emit(0, f'syntax = "{"proto3" if self.proto3 else "proto2"}";')
        if file.package:
            self.emit(0, f"package {dotted(file.package)};")
        public = set(file.public_dependency)
        weak = set(file.weak_dependency)
        for index, name in enumerate(file.dependency):
            kind = "public " if index in public else "weak " if index in weak else ""
            self.emit(0, f"import {kind}{quote(name)};")
        for name, value in option_values(file, "options"):
            self.emit(0, f"option {name} = {value};")
        scope = "." + file.package if file.package else ""
        for message in file.message_type:
            self.message(0, message, scope)
        for enum in file.enum_type:
            self.enum(0, enum)
        self.extensions(0, file.extension)
        for service in file.service:
            self.service(service)
        return "\n".join(self.lines) + "\n"

    def emit(self, depth: int, line: str) -> None:
        self.lines.append(INDENT * depth + line)

    def close(self, depth: int) -> None:
        """A block's `}`, on its opening line when the block is empty."""
        opening = self.lines[-1]
        if opening.endswith(" {") and len(opening) - len(opening.lstrip()) == len(INDENT) * depth:
            self.lines[-1] = opening + "}"
        else:
            self.emit(depth, "}")

    def message(self, depth: int, message: descriptor_pb2.DescriptorProto, scope: str) -> None:
        name = identifier(message.name)
        full = f"{scope}.{name}"
        self.emit(depth, f"message {name} {{")
        inner = depth + 1
        for option, value in option_values(message, "options", skip={"map_entry"}):
            self.emit(inner, f"option {option} = {value};")
        entries = {
            f"{full}.{nested.name}": index
            for index, nested in enumerate(message.nested_type)
            if nested.options.map_entry
        }
        # Nested enums, then nested messages in their own order, then the fields; a map
        # field prints once every nested message before its entry has, so that protoc
        # puts the entry back in its place.
        printed = 0

        def nested_up_to(end: int) -> None:
            nonlocal printed
            for nested in message.nested_type[printed:end]:
                if not nested.options.map_entry:
                    self.message(inner, nested, full)
            printed = max(printed, end)

        for enum in message.enum_type:
            self.enum(inner, enum)
        nested_up_to(min(entries.values(), default=len(message.nested_type)))
        fields = list(message.field)
        done: set[int] = set()
        mapped: list[int] = []
        for index, field in enumerate(fields):
            if index in done:
                continue
            entry = entries.get(field.type_name) if field.label == FDP.LABEL_REPEATED else None
            if entry is not None:
                nested_up_to(entry + 1)
                self.map_field(inner, field, message.nested_type[entry])
                mapped.append(entry)
            elif field.HasField("oneof_index") and not field.proto3_optional:
                members = [
                    (i, f)
                    for i, f in enumerate(fields)
                    if f.HasField("oneof_index") and f.oneof_index == field.oneof_index
                ]
                self.oneof(inner, message.oneof_decl[field.oneof_index], [f for _, f in members])
                done.update(i for i, _ in members)
            else:
                self.field(inner, field)
        if sorted(mapped) != sorted(entries.values()):
            # An entry no map field names (or two fields name) has no `.proto` spelling.
            raise Unprintable(f"map entries of {full}")
        nested_up_to(len(message.nested_type))
        self.extensions(inner, message.extension)
        if any(r.HasField("options") for r in message.extension_range):
            raise Unprintable(f"options on an extension range of {full}")
        if message.extension_range:
            spans = [(r.start, r.end - 1) for r in message.extension_range]
            self.emit(inner, f"extensions {number_ranges(spans, FIELD_NUMBER_END - 1)};")
        self.reserved(
            inner,
            [(r.start, r.end - 1) for r in message.reserved_range],
            FIELD_NUMBER_END - 1,
            message.reserved_name,
        )
        self.close(depth)

    def field(
        self, depth: int, field: descriptor_pb2.FieldDescriptorProto, in_oneof: bool = False
    ) -> None:
        if field.type == FDP.TYPE_GROUP:
            raise Unprintable(f"group {field.name}")
        label = ""
        if not in_oneof:
            if self.proto3:
                if field.proto3_optional:
                    label = "optional "
                elif field.label == FDP.LABEL_REPEATED:
                    label = "repeated "
                elif field.label == FDP.LABEL_REQUIRED:
                    raise Unprintable(f"required field {field.name} in a proto3 file")
            else:
                label = LABELS[field.label] + " "
        extras = []
        if field.HasField("default_value"):
            extras.append(f"default = {default_value(field)}")
        extras += field_extras(field)
        declared = f"{field_type(field)} {identifier(field.name)} = {field.number}"
        self.emit(depth, f"{label}{declared}{brackets(extras)};")

    def map_field(
        self,
        depth: int,
        field: descriptor_pb2.FieldDescriptorProto,
        entry: descriptor_pb2.DescriptorProto,
    ) -> None:
        by_number = {f.number: f for f in entry.field}
        if set(by_number) != {1, 2} or option_values(entry, "options", skip={"map_entry"}):
            raise Unprintable(f"map entry {entry.name}")
        key, value = field_type(by_number[1]), field_type(by_number[2])
        extras = brackets(field_extras(field))
        self.emit(depth, f"map<{key}, {value}> {identifier(field.name)} = {field.number}{extras};")

    def oneof(
        self,
        depth: int,
        oneof: descriptor_pb2.OneofDescriptorProto,
        fields: list[descriptor_pb2.FieldDescriptorProto],
    ) -> None:
        self.emit(depth, f"oneof {identifier(oneof.name)} {{")
        for option, value in option_values(oneof, "options"):
            self.emit(depth + 1, f"option {option} = {value};")
        for field in fields:
            self.field(depth + 1, field, in_oneof=True)
        self.close(depth)

    def enum(self, depth: int, enum: descriptor_pb2.EnumDescriptorProto) -> None:
        self.emit(depth, f"enum {identifier(enum.name)} {{")
        inner = depth + 1
        for option, value in option_values(enum, "options"):
            self.emit(inner, f"option {option} = {value};")
        for value in enum.value:
            extras = brackets([f"{n} = {v}" for n, v in option_values(value, "options")])
            self.emit(inner, f"{identifier(value.name)} = {value.number}{extras};")
        self.reserved(
            inner,
            [(r.start, r.end) for r in enum.reserved_range],
            ENUM_NUMBER_MAX,
            enum.reserved_name,
        )
        self.close(depth)

    def reserved(
        self, depth: int, ranges: list[tuple[int, int]], top: int, names: Iterable[str]
    ) -> None:
        if ranges:
            self.emit(depth, f"reserved {number_ranges(ranges, top)};")
        names = list(names)
        if names:
            self.emit(depth, f"reserved {', '.join(quote(identifier(n)) for n in names)};")

    def extensions(
        self, depth: int, extensions: Iterable[descriptor_pb2.FieldDescriptorProto]
    ) -> None:
        """`extend` blocks, one per run of extensions of the same message."""
        block: str | None = None
        for extension in extensions:
            extendee = type_name(extension.extendee)
            if extendee != block:
                if block is not None:
                    self.close(depth)
                self.emit(depth, f"extend {extendee} {{")
                block = extendee
            self.field(depth + 1, extension)
        if block is not None:
            self.close(depth)

    def service(self, service: descriptor_pb2.ServiceDescriptorProto) -> None:
        self.emit(0, f"service {identifier(service.name)} {{")
        for option, value in option_values(service, "options"):
            self.emit(1, f"option {option} = {value};")
        for method in service.method:
            given = "stream " if method.client_streaming else ""
            returned = "stream " if method.server_streaming else ""
            head = (
                f"rpc {identifier(method.name)}({given}{type_name(method.input_type)}) "
                f"returns ({returned}{type_name(method.output_type)})"
            )
            options = option_values(method, "options")
            if not options:
                self.emit(1, head + ";")
                continue
            self.emit(1, head + " {")
            for option, value in options:
                self.emit(2, f"option {option} = {value};")
            self.close(1)
        self.close(0)


def identifier(name: str) -> str:
    if not IDENTIFIER.fullmatch(name):
        raise Unprintable(f"{name!r} is no identifier")
    return name


def dotted(name: str) -> str:
    if not DOTTED.fullmatch(name):
        raise Unprintable(f"{name!r} is no package name")
    return name


def type_name(name: str) -> str:
    if not TYPE_NAME.fullmatch(name):
        raise Unprintable(f"{name!r} is no type name")
    return name


def field_type(field: descriptor_pb2.FieldDescriptorProto) -> str:
    # A descriptor built by hand may name a message or enum type without saying which
    # (the pool looks it up); an unset type would otherwise read as its default, double.
    if not field.HasField("type"):
        if field.type_name:
            return type_name(field.type_name)
        raise Unprintable(f"field {field.name} has no type")
    if field.type in SCALARS:
        return SCALARS[field.type]
    if field.type in (FDP.TYPE_MESSAGE, FDP.TYPE_ENUM):
        return type_name(field.type_name)
    raise Unprintable(f"field {field.name} of type {field.type}")


def field_extras(field: descriptor_pb2.FieldDescriptorProto) -> list[str]:
    """A field's bracketed options after its default: json_name when it is not the
    one protoc derives, then the options by number."""
    extras = []
    if field.HasField("json_name") and field.json_name != default_json_name(field.name):
        extras.append(f"json_name = {quote(field.json_name)}")
    extras += [f"{name} = {value}" for name, value in option_values(field, "options")]
    return extras


def default_json_name(name: str) -> str:
    """protoc's JSON name of a field: underscores dropped, the letter after each one
    capitalised."""
    parts = name.split("_")
    return parts[0] + "".join(part[:1].upper() + part[1:] for part in parts[1:])


def brackets(extras: list[str]) -> str:
    return f" [{', '.join(extras)}]" if extras else ""


def option_values(
    owner: Any, field_name: str, skip: frozenset[str] | set[str] = frozenset()
) -> list[tuple[str, str]]:
    """The standard options set on a descriptor, by field number, as `.proto` values.
    Custom options arrive as fields the descriptor messages do not know (the schema
    that defines them is not compiled into this process): those are refused."""
    if not owner.HasField(field_name):
        return []
    options = getattr(owner, field_name)
    if len(unknown_fields.UnknownFieldSet(options)):
        raise Unprintable(f"custom options in {type(options).__name__}")
    out = []
    for descriptor, value in options.ListFields():
        if descriptor.name in skip:
            continue
        if descriptor.is_extension or descriptor.is_repeated:
            raise Unprintable(f"option {descriptor.name}")
        out.append((descriptor.name, option_value(descriptor, value)))
    return out


def option_value(descriptor: FieldDescriptor, value: Any) -> str:
    if descriptor.type == FieldDescriptor.TYPE_BOOL:
        return "true" if value else "false"
    if descriptor.type == FieldDescriptor.TYPE_ENUM:
        return descriptor.enum_type.values_by_number[value].name
    if descriptor.type == FieldDescriptor.TYPE_STRING:
        return quote(value)
    if descriptor.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return float_text(value)
    if isinstance(value, int):
        return str(value)
    raise Unprintable(f"option {descriptor.name}")


def float_text(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def default_value(field: descriptor_pb2.FieldDescriptorProto) -> str:
    """A proto2 default as the descriptor keeps it: strings raw, bytes already
    C-escaped by protoc, enums by value name, numbers as protoc wrote them."""
    raw = field.default_value
    if field.type == FDP.TYPE_STRING:
        return quote(raw)
    if field.type == FDP.TYPE_BYTES:
        if not C_ESCAPED.fullmatch(raw):
            raise Unprintable(f"default of {field.name}")
        return f'"{raw}"'
    if field.type == FDP.TYPE_ENUM:
        return identifier(raw)
    if field.type == FDP.TYPE_BOOL and raw in ("true", "false"):
        return raw
    if re.fullmatch(r"-?(inf|nan|[0-9][0-9A-Za-z.+\-]*)", raw):
        return raw
    raise Unprintable(f"default of {field.name}")


def number_ranges(ranges: list[tuple[int, int]], top: int) -> str:
    """Inclusive (start, end) ranges as `5, 9 to 11, 100 to max`."""
    parts = []
    for start, end in ranges:
        if end == start:
            parts.append(str(start))
        else:
            parts.append(f"{start} to {'max' if end == top else end}")
    return ", ".join(parts)


ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(text: str) -> str:
    """A string literal protoc reads back as `text` (UTF-8 kept as it is; control
    characters octal-escaped)."""
    out = []
    for char in text:
        if char in ESCAPES:
            out.append(ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\{ord(char):03o}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'
