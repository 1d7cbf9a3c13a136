"""Whether every document a writer JSON schema accepts is accepted by a reader schema:
Confluent's JSON Schema rules, named by its difference types (an open content model
lets in properties it does not name, a closed one, `additionalProperties: false`,
does not; a reader may widen what the writer allowed and may not narrow it).

BACKWARD asks it with the new schema as the reader, FORWARD with the old one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import referencing.exceptions

from rustka.schema_registry.json_schema import JsonSchema

if TYPE_CHECKING:
    # referencing exports its resolver's class only from its core module.
    from referencing._core import Resolver

# A $ref chain or a recursive schema is followed this deep, then assumed to match.
MAX_DEPTH = 200

TYPE_KEYWORDS = {
    "object": ("properties", "required", "additionalProperties", "maxProperties", "minProperties"),
    "array": ("items", "prefixItems", "maxItems", "minItems", "uniqueItems"),
    "string": ("maxLength", "minLength", "pattern"),
    "number": ("maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum", "multipleOf"),
}
ALL_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
COMBINATORS = ("anyOf", "oneOf", "allOf")

# (keyword, the name of the change when the reader adds it / makes it stricter)
UPPER_BOUNDS = (
    ("maxLength", "MAX_LENGTH"),
    ("maximum", "MAXIMUM"),
    ("exclusiveMaximum", "EXCLUSIVE_MAXIMUM"),
    ("maxItems", "MAX_ITEMS"),
    ("maxProperties", "MAX_PROPERTIES"),
)
LOWER_BOUNDS = (
    ("minLength", "MIN_LENGTH"),
    ("minimum", "MINIMUM"),
    ("exclusiveMinimum", "EXCLUSIVE_MINIMUM"),
    ("minItems", "MIN_ITEMS"),
    ("minProperties", "MIN_PROPERTIES"),
)

Side = tuple[Any, "Resolver[Any]"]


def reader_errors(reader: JsonSchema, writer: JsonSchema) -> list[str]:
    return Comparison().check(
        (writer.document, writer.resolver), (reader.document, reader.resolver), "#", 0
    )


def is_empty(schema: Any) -> bool:
    """True for a schema that accepts everything (annotations aside)."""
    if schema is True:
        return True
    annotations = {"$id", "$schema", "title", "description", "default", "examples", "$comment"}
    return isinstance(schema, dict) and not set(schema) - annotations


def declared_types(schema: dict[str, Any]) -> set[str] | None:
    """The types a schema allows, by `type` or else by the keywords it uses; None: any."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return set(declared)
    inferred = {
        kind for kind, keywords in TYPE_KEYWORDS.items() if any(k in schema for k in keywords)
    }
    return inferred or None


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def covered(writer_type: str, reader_types: set[str] | None) -> bool:
    if reader_types is None or writer_type in reader_types:
        return True
    return writer_type == "integer" and "number" in reader_types


def enum_values(schema: dict[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    return schema.get("enum")


class Comparison:
    def __init__(self) -> None:
        self.in_progress: set[tuple[int, int]] = set()

    def resolve(self, side: Side) -> Side:
        schema, resolver = side
        for _ in range(MAX_DEPTH):
            if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
                break
            try:
                resolved = resolver.lookup(schema["$ref"])
            except referencing.exceptions.Unresolvable:
                # Only refs under a nested $id escape the check at parse; what they
                # point at is unknown, so it is taken as any document.
                return True, resolver
            schema, resolver = resolved.contents, resolved.resolver
        return schema, resolver

    def check(self, writer_side: Side, reader_side: Side, path: str, depth: int) -> list[str]:
        writer_side, reader_side = self.resolve(writer_side), self.resolve(reader_side)
        writer, reader = writer_side[0], reader_side[0]
        if writer is False or is_empty(reader):
            return []
        if reader is False:
            return [f"TYPE_CHANGED at {path}: the reader accepts nothing (false)"]
        if writer is True:
            writer = {}
        key = (id(writer), id(reader))
        if depth > MAX_DEPTH or key in self.in_progress:
            return []
        self.in_progress.add(key)
        try:
            return self.compare(writer, writer_side[1], reader, reader_side[1], path, depth + 1)
        finally:
            self.in_progress.discard(key)

    def sub(self, writer: Side, reader: Side, path: str, depth: int) -> bool:
        """Whether the writer's part is readable by the reader's part, on its own."""
        return not Comparison().check(writer, reader, path, depth)

    def compare(
        self,
        writer: dict[str, Any],
        w_res: Resolver[Any],
        reader: dict[str, Any],
        r_res: Resolver[Any],
        path: str,
        depth: int,
    ) -> list[str]:
        errors = self.compare_combined(writer, w_res, reader, r_res, path, depth)
        if errors is not None:
            return errors
        errors = []
        writer_types, reader_types = declared_types(writer), declared_types(reader)
        both = ALL_TYPES if writer_types is None else writer_types
        if writer_types is None and reader_types is not None:
            errors.append(
                f"TYPE_NARROWED at {path}: the reader allows only {sorted(reader_types)},"
                " the writer any type"
            )
        elif writer_types is not None:
            lost = {t for t in writer_types if not covered(t, reader_types)}
            if lost:
                change = "TYPE_NARROWED" if lost != writer_types else "TYPE_CHANGED"
                errors.append(
                    f"{change} at {path}: the writer allows {sorted(lost)}, the reader does not"
                )
            both = writer_types - lost
        errors += self.compare_enums(writer, reader, path)
        errors += self.compare_bounds(writer, reader, path)
        if "pattern" in reader and reader["pattern"] != writer.get("pattern"):
            change = "PATTERN_CHANGED" if "pattern" in writer else "PATTERN_ADDED"
            errors.append(f"{change} at {path}: the reader's pattern is {reader['pattern']!r}")
        if "multipleOf" in reader:
            written = writer.get("multipleOf")
            if written is None:
                errors.append(f"MULTIPLE_OF_ADDED at {path}: the reader adds multipleOf")
            elif written % reader["multipleOf"] != 0:
                errors.append(
                    f"MULTIPLE_OF_CHANGED at {path}: multipleOf {written} -> {reader['multipleOf']}"
                )
        if reader.get("uniqueItems") and not writer.get("uniqueItems"):
            errors.append(f"UNIQUE_ITEMS_ADDED at {path}: the reader requires unique items")
        if "object" in both:
            errors += self.compare_objects(writer, w_res, reader, r_res, path, depth)
        if "array" in both:
            errors += self.compare_arrays(writer, w_res, reader, r_res, path, depth)
        return errors

    def compare_bounds(
        self, writer: dict[str, Any], reader: dict[str, Any], path: str
    ) -> list[str]:
        errors = []
        for keyword, name in UPPER_BOUNDS:
            bound, written = number(reader.get(keyword)), number(writer.get(keyword))
            if bound is None:
                continue
            if written is None:
                errors.append(f"{name}_ADDED at {path}: the reader adds {keyword} {bound}")
            elif written > bound:
                errors.append(f"{name}_DECREASED at {path}: {keyword} {written} -> {bound}")
        for keyword, name in LOWER_BOUNDS:
            bound, written = number(reader.get(keyword)), number(writer.get(keyword))
            if bound is None:
                continue
            if written is None and keyword.startswith("min") and keyword != "minimum":
                written = 0  # a count's lower bound is 0 when not given
            if written is None:
                errors.append(f"{name}_ADDED at {path}: the reader adds {keyword} {bound}")
            elif written < bound:
                errors.append(f"{name}_INCREASED at {path}: {keyword} {written} -> {bound}")
        return errors

    def compare_enums(self, writer: dict[str, Any], reader: dict[str, Any], path: str) -> list[str]:
        allowed = enum_values(reader)
        if allowed is None:
            return []
        written = enum_values(writer)
        if written is None:
            return [
                f"ENUM_ARRAY_NARROWED at {path}: the reader adds an enum the writer did not have"
            ]
        lost = [value for value in written if value not in allowed]
        if lost:
            return [f"ENUM_ARRAY_NARROWED at {path}: the reader's enum lacks {lost}"]
        return []

    def compare_combined(
        self,
        writer: dict[str, Any],
        w_res: Resolver[Any],
        reader: dict[str, Any],
        r_res: Resolver[Any],
        path: str,
        depth: int,
    ) -> list[str] | None:
        """anyOf/oneOf/allOf on either side; None when neither has one."""
        w_comb = next((c for c in COMBINATORS if isinstance(writer.get(c), list)), None)
        r_comb = next((c for c in COMBINATORS if isinstance(reader.get(c), list)), None)
        if w_comb is None and r_comb is None:
            return None
        if r_comb is not None and len(reader[r_comb]) == 1 and w_comb is None:
            return self.check(
                (writer, w_res), (reader[r_comb][0], r_res), f"{path}/{r_comb}/0", depth
            )
        if w_comb is not None and len(writer[w_comb]) == 1 and r_comb is None:
            return self.check((writer[w_comb][0], w_res), (reader, r_res), path, depth)
        if w_comb is None:
            assert r_comb is not None
            branches = list(enumerate(reader[r_comb]))
            if r_comb == "allOf":
                failed = [
                    i for i, b in branches if not self.sub((writer, w_res), (b, r_res), path, depth)
                ]
                if failed:
                    return [f"PRODUCT_TYPE_EXTENDED at {path}: the reader's allOf adds {failed}"]
                return []
            if any(self.sub((writer, w_res), (b, r_res), path, depth) for _, b in branches):
                return []  # SUM_TYPE_EXTENDED: the writer's type became one branch of a union
            return [
                f"TYPE_CHANGED at {path}: no branch of the reader's {r_comb} reads the"
                " writer's schema"
            ]
        if r_comb is None:
            if w_comb == "allOf":
                if any(self.sub((b, w_res), (reader, r_res), path, depth) for b in writer[w_comb]):
                    return []
                return [f"TYPE_CHANGED at {path}: the reader does not read the writer's allOf"]
            lost = [
                i
                for i, b in enumerate(writer[w_comb])
                if not self.sub((b, w_res), (reader, r_res), path, depth)
            ]
            if lost:
                return [
                    f"TYPE_CHANGED at {path}: the reader does not read {w_comb} branches {lost}"
                ]
            return []
        if (w_comb == "allOf") != (r_comb == "allOf"):
            return [f"COMBINED_TYPE_CHANGED at {path}: {w_comb} became {r_comb}"]
        if r_comb == "allOf":
            extra = [
                i
                for i, r in enumerate(reader[r_comb])
                if not any(self.sub((w, w_res), (r, r_res), path, depth) for w in writer[w_comb])
            ]
            if extra:
                return [f"PRODUCT_TYPE_EXTENDED at {path}: the reader's allOf adds {extra}"]
            return []
        lost = [
            i
            for i, w in enumerate(writer[w_comb])
            if not any(self.sub((w, w_res), (r, r_res), path, depth) for r in reader[r_comb])
        ]
        if lost:
            return [
                f"SUM_TYPE_NARROWED at {path}: the reader's {r_comb} reads none of the"
                f" writer's branches {lost}"
            ]
        return []

    def compare_objects(
        self,
        writer: dict[str, Any],
        w_res: Resolver[Any],
        reader: dict[str, Any],
        r_res: Resolver[Any],
        path: str,
        depth: int,
    ) -> list[str]:
        errors = []
        w_props: dict[str, Any] = writer.get("properties", {})
        r_props: dict[str, Any] = reader.get("properties", {})
        w_extra = writer.get("additionalProperties", True)
        r_extra = reader.get("additionalProperties", True)
        for name in [*w_props, *(n for n in r_props if n not in w_props)]:
            where = f"{path}/properties/{name}"
            if name in w_props and name in r_props:
                errors += self.check((w_props[name], w_res), (r_props[name], r_res), where, depth)
            elif name in w_props:
                if w_props[name] is False or is_empty(r_extra):
                    continue  # PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL
                if r_extra is False:
                    errors.append(
                        f"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at {where}: the writer may"
                        " write it and the reader allows no additional properties"
                    )
                elif not self.sub((w_props[name], w_res), (r_extra, r_res), where, depth):
                    errors.append(
                        f"PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL at {where}:"
                        " the reader's additionalProperties does not read it"
                    )
            else:
                if w_extra is False or is_empty(r_props[name]):
                    continue  # the writer never wrote it, or the reader takes anything
                if is_empty(w_extra):
                    errors.append(
                        f"PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL at {where}: the writer's open"
                        " content model may have written it with any value"
                    )
                elif not self.sub((w_extra, w_res), (r_props[name], r_res), where, depth):
                    errors.append(
                        f"PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL at {where}:"
                        " the writer's additionalProperties may have written it otherwise"
                    )
        for name in reader.get("required", []):
            if name in writer.get("required", []):
                continue
            prop = r_props.get(name)
            if isinstance(prop, dict) and "default" in prop:
                continue  # REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED
            errors.append(
                f"REQUIRED_ATTRIBUTE_ADDED at {path}/required: {name!r} is required by the"
                " reader and not by the writer"
            )
        if w_extra is not False and not is_empty(r_extra):
            where = f"{path}/additionalProperties"
            if r_extra is False:
                errors.append(
                    f"ADDITIONAL_PROPERTIES_REMOVED at {where}: the writer allowed additional"
                    " properties, the reader allows none"
                )
            elif is_empty(w_extra) or not self.sub(
                (w_extra, w_res), (r_extra, r_res), where, depth
            ):
                errors.append(
                    f"ADDITIONAL_PROPERTIES_NARROWED at {where}: the reader restricts additional"
                    " properties the writer allowed"
                )
        return errors

    def compare_arrays(
        self,
        writer: dict[str, Any],
        w_res: Resolver[Any],
        reader: dict[str, Any],
        r_res: Resolver[Any],
        path: str,
        depth: int,
    ) -> list[str]:
        errors = []
        w_tuple = writer.get(
            "prefixItems", writer.get("items") if isinstance(writer.get("items"), list) else []
        )
        r_tuple = reader.get(
            "prefixItems", reader.get("items") if isinstance(reader.get("items"), list) else []
        )
        for index, (w_item, r_item) in enumerate(zip(w_tuple, r_tuple, strict=False)):
            errors += self.check((w_item, w_res), (r_item, r_res), f"{path}/items/{index}", depth)
        w_items = writer.get("items", True)
        r_items = reader.get("items", True)
        if isinstance(w_items, list):
            w_items = writer.get("additionalItems", True)
        if isinstance(r_items, list):
            r_items = reader.get("additionalItems", True)
        errors += self.check((w_items, w_res), (r_items, r_res), f"{path}/items", depth)
        return errors


def number(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value
