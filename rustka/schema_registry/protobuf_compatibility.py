"""Whether a reader Protobuf schema reads what a writer schema wrote: Confluent's
Protobuf rules, named by its difference types. Fields are matched by number; adding
or removing one is fine both ways (proto3 ignores unknown fields and defaults missing
ones), a changed type is fine only within a wire-compatible group of scalars, and a
removed message, a changed package or fields shuffled between oneofs are not.

As in Confluent's registry, the rules compare an "original" with an "update":
BACKWARD asks it with the new schema as the update (the reader), FORWARD with the
old one, so a change breaks FORWARD when its reverse breaks BACKWARD."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2

from rustka.schema_registry.protobuf import ProtobufSchema

FieldProto = descriptor_pb2.FieldDescriptorProto
MessageProto = descriptor_pb2.DescriptorProto

# Scalars whose encodings read each other (the Protobuf language guide, "Updating A
# Message Type"); an enum is read as an int32.
SCALAR_GROUPS = {
    FieldProto.TYPE_INT32: "int",
    FieldProto.TYPE_INT64: "int",
    FieldProto.TYPE_UINT32: "int",
    FieldProto.TYPE_UINT64: "int",
    FieldProto.TYPE_BOOL: "int",
    FieldProto.TYPE_ENUM: "int",
    FieldProto.TYPE_SINT32: "zigzag",
    FieldProto.TYPE_SINT64: "zigzag",
    FieldProto.TYPE_STRING: "string or bytes",
    FieldProto.TYPE_BYTES: "string or bytes",
    FieldProto.TYPE_FIXED32: "fixed32",
    FieldProto.TYPE_SFIXED32: "fixed32",
    FieldProto.TYPE_FIXED64: "fixed64",
    FieldProto.TYPE_SFIXED64: "fixed64",
    FieldProto.TYPE_FLOAT: "float",
    FieldProto.TYPE_DOUBLE: "double",
}


def reader_errors(reader: ProtobufSchema, writer: ProtobufSchema) -> list[str]:
    return Diff(original=writer, update=reader).errors()


class Types:
    """Every message of a schema and its imports, by full name."""

    def __init__(self, schema: ProtobufSchema) -> None:
        self.main_file = schema.file.name
        self.messages: dict[str, tuple[MessageProto, str, str]] = {}
        for file in [*schema.imports.values(), schema.file]:
            pending = [(f".{file.package}" if file.package else "", m) for m in file.message_type]
            while pending:
                scope, message = pending.pop()
                name = f"{scope}.{message.name}"
                self.messages[name] = (message, file.package, file.name)
                pending.extend((name, nested) for nested in message.nested_type)

    def kind(self, field: FieldProto) -> str:
        if field.type == FieldProto.TYPE_MESSAGE:
            message = self.messages.get(field.type_name)
            if message is not None and message[0].options.map_entry:
                return "map"
            return "message"
        if field.type == FieldProto.TYPE_GROUP:
            return "message"
        return "scalar"

    def local_name(self, type_name: str) -> str:
        message = self.messages.get(type_name)
        package = f".{message[1]}." if message is not None and message[1] else "."
        return type_name[len(package) :] if type_name.startswith(package) else type_name


class Diff:
    def __init__(self, original: ProtobufSchema, update: ProtobufSchema) -> None:
        self.original, self.update = original, update
        self.original_types, self.update_types = Types(original), Types(update)
        self.found: list[str] = []
        self.compared: set[tuple[str, str]] = set()

    def errors(self) -> list[str]:
        if self.original.file.package != self.update.file.package:
            self.found.append(
                f"PACKAGE_CHANGED at #/: package {self.original.file.package!r}"
                f" -> {self.update.file.package!r}"
            )
        self.compare_messages(
            list(self.original.file.message_type), list(self.update.file.message_type), "#"
        )
        return self.found

    def compare_messages(
        self, original: list[MessageProto], update: list[MessageProto], path: str
    ) -> None:
        updated = {message.name: message for message in update}
        for message in original:
            where = f"{path}/{message.name}"
            if message.name not in updated:
                if not message.options.map_entry:
                    self.found.append(f"MESSAGE_REMOVED at {where}: the message is gone")
                continue
            self.compare_message(message, updated[message.name], where)

    def compare_message(self, original: MessageProto, update: MessageProto, path: str) -> None:
        key = (path, path)
        if key in self.compared:
            return
        self.compared.add(key)
        original_oneof = oneof_members(original)
        update_oneof = oneof_members(update)
        original_fields = {f.number: f for f in original.field}
        update_fields = {f.number: f for f in update.field}
        for oneof_name, numbers in group_by_oneof(update_oneof).items():
            moved = [n for n in numbers if n in original_fields and n not in original_oneof]
            existing = [n for n in numbers if n in original_oneof]
            where = f"{path}/{oneof_name}"
            if len(moved) > 1:
                self.found.append(
                    f"MULTIPLE_FIELDS_MOVED_TO_ONEOF at {where}: fields {moved} moved into it"
                )
            elif moved and existing:
                self.found.append(
                    f"FIELD_MOVED_TO_EXISTING_ONEOF at {where}: field {moved[0]} moved into a"
                    " oneof that has fields from before"
                )
        for oneof_name, numbers in group_by_oneof(original_oneof).items():
            kept = {n for n, name in update_oneof.items() if name == oneof_name}
            if not kept:
                continue  # ONEOF_REMOVED
            for number in numbers:
                if number not in kept:
                    self.found.append(
                        f"ONEOF_FIELD_REMOVED at {path}/{oneof_name}: field {number} left the oneof"
                    )
        for number, field in original_fields.items():
            where = f"{path}/{number}"
            if number not in update_fields:
                if field.label == FieldProto.LABEL_REQUIRED:
                    self.found.append(f"REQUIRED_FIELD_REMOVED at {where}: {field.name!r}")
                continue  # FIELD_REMOVED
            self.compare_field(field, update_fields[number], where)
        for number, field in update_fields.items():
            if number not in original_fields and field.label == FieldProto.LABEL_REQUIRED:
                self.found.append(f"REQUIRED_FIELD_ADDED at {path}/{number}: {field.name!r}")
        self.compare_messages(list(original.nested_type), list(update.nested_type), path)

    def compare_field(self, original: FieldProto, update: FieldProto, path: str) -> None:
        original_kind = self.original_types.kind(original)
        update_kind = self.update_types.kind(update)
        if original_kind != update_kind:
            self.found.append(
                f"FIELD_KIND_CHANGED at {path}: {original.name!r} was a {original_kind},"
                f" is a {update_kind}"
            )
        elif original_kind == "scalar":
            if SCALAR_GROUPS.get(original.type) != SCALAR_GROUPS.get(update.type):
                self.found.append(
                    f"FIELD_SCALAR_KIND_CHANGED at {path}: {original.name!r} was"
                    f" {type_label(original)}, is {type_label(update)}, which do not read"
                    " each other"
                )
            elif is_repeated(original) != is_repeated(update) and (
                SCALAR_GROUPS.get(original.type) != "string or bytes"
            ):
                # Repeated numbers are packed into one length-delimited run, which a
                # singular field cannot read; a repeated string is just the field again.
                self.found.append(
                    f"FIELD_NUMERIC_LABEL_CHANGED at {path}: {original.name!r} was"
                    f" {label(original)}, is {label(update)}"
                )
        elif original_kind == "map":
            original_entry = self.original_types.messages[original.type_name][0]
            update_entry = self.update_types.messages[update.type_name][0]
            for o, u in zip(original_entry.field, update_entry.field, strict=False):
                self.compare_field(o, u, f"{path}/{o.name}")
        else:
            self.compare_named(original, update, path)

    def compare_named(self, original: FieldProto, update: FieldProto, path: str) -> None:
        original_name = self.original_types.local_name(original.type_name)
        update_name = self.update_types.local_name(update.type_name)
        if original_name != update_name:
            self.found.append(
                f"FIELD_NAMED_TYPE_CHANGED at {path}: {original.name!r} was a {original_name},"
                f" is a {update_name}"
            )
            return
        original_message = self.original_types.messages.get(original.type_name)
        update_message = self.update_types.messages.get(update.type_name)
        if original_message is None or update_message is None:
            return
        if original_message[2] == self.original_types.main_file:
            return
        # Messages of the schema's own file are compared where they are declared; those
        # of its imports are compared here, where a field uses them.
        key = (original.type_name, update.type_name)
        if key in self.compared:
            return
        self.compared.add(key)
        before = len(self.found)
        self.compare_message(original_message[0], update_message[0], f"#/{original_name}")
        if len(self.found) > before:
            self.found.append(
                f"FIELD_NAMED_TYPE_CHANGED at {path}: {original_name} changed incompatibly"
            )


def oneof_members(message: MessageProto) -> dict[int, str]:
    """Field number -> its real oneof's name (proto3 `optional` fields' synthetic oneofs
    are not oneofs to a reader)."""
    return {
        field.number: message.oneof_decl[field.oneof_index].name
        for field in message.field
        if field.HasField("oneof_index") and not field.proto3_optional
    }


def group_by_oneof(members: dict[int, str]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for number, name in members.items():
        groups.setdefault(name, []).append(number)
    return groups


def is_repeated(field: FieldProto) -> bool:
    return field.label == FieldProto.LABEL_REPEATED


def label(field: FieldProto) -> str:
    return "repeated" if is_repeated(field) else "singular"


def type_label(field: FieldProto) -> str:
    names: Any = FieldProto.Type.Name(field.type)
    return str(names).removeprefix("TYPE_").lower()
