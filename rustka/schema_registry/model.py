"""The schema registry's state, built by applying ``_schemas`` records in log order.

Pure: no Twisted, no I/O. `Registry.apply` takes one record of the ``_schemas``
topic (key and value bytes, Confluent's own JSON) and updates the state; every
command (`register`, `delete_version`, `set_config`, ...) checks what it is asked
against the state and returns the records that make the change, which the store
appends and then applies like any other record (docs/schema-registry.md,
"Storage"). So the state is only ever what the log says, and a ``_schemas`` topic
written by a Confluent registry means the same thing here, and the other way round.

A SCHEMA record whose id already names a different schema is ignored, as Confluent's
reader ignores it, and so is one for a subject's version that already holds another
schema: the first writer wins, and a writer whose record was ignored registers again
under a fresh id and version (`Registry.outcome`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rustka.schema_registry.formats import COMPATIBILITY_LEVELS, ParsedSchema, SchemaError

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
DEFAULT_COMPATIBILITY = "BACKWARD"
DEFAULT_MODE = "READWRITE"
SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")

Record = tuple[bytes, bytes | None]
"""One ``_schemas`` record: key and value (None: a tombstone)."""

Parse = Callable[[str, str, Sequence[tuple[str, ParsedSchema]]], ParsedSchema]


class RegistryError(Exception):
    """An answer other than success: Confluent's HTTP status and error code."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version: Any) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found for subject '{subject}'.")


def schema_not_found(what: str = "Schema not found") -> RegistryError:
    return RegistryError(404, 40403, what)


def invalid_schema(message: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema: {message}")


def invalid_version(version: Any) -> RegistryError:
    return RegistryError(
        422,
        42202,
        f"The specified version '{version}' is not a valid version id. "
        'Allowed values are between [1, 2^31-1] and the string "latest"',
    )


def not_permitted(message: str) -> RegistryError:
    return RegistryError(422, 42205, message)


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema's import of another: its name in the schema, and the version it means."""

    name: str
    subject: str
    version: int

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True, slots=True)
class SchemaText:
    """What an id stands for: the same type, text and references always get the same id."""

    schema_type: str
    text: str
    references: tuple[Reference, ...] = ()


@dataclass(slots=True)
class Version:
    """One version of a subject."""

    subject: str
    version: int
    id: int
    schema: SchemaText
    deleted: bool = False

    def as_json(self) -> dict[str, Any]:
        """As the REST API shows it (AVRO and no references are left out, as Confluent does)."""
        out: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.id}
        if self.schema.schema_type != "AVRO":
            out["schemaType"] = self.schema.schema_type
        if self.schema.references:
            out["references"] = [r.as_json() for r in self.schema.references]
        out["schema"] = self.schema.text
        return out


def _dumps(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def schema_key(subject: str, version: int) -> bytes:
    """Confluent's SchemaKey, its fields in Confluent's order, so compaction matches keys."""
    return _dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def subject_key(keytype: str, subject: str | None) -> bytes:
    """CONFIG, MODE, DELETE_SUBJECT keys; the global ones have no subject at all."""
    data: dict[str, Any] = {"keytype": keytype}
    if subject is not None:
        data["subject"] = subject
    data["magic"] = 0
    return _dumps(data)


def schema_value(version: Version) -> bytes:
    data: dict[str, Any] = {
        "subject": version.subject,
        "version": version.version,
        "id": version.id,
    }
    if version.schema.schema_type != "AVRO":
        data["schemaType"] = version.schema.schema_type
    if version.schema.references:
        data["references"] = [r.as_json() for r in version.schema.references]
    data["schema"] = version.schema.text
    data["deleted"] = version.deleted
    return _dumps(data)


NOOP_KEY = _dumps({"keytype": "NOOP", "magic": 0})


def _references(raw: Any) -> tuple[Reference, ...]:
    refs = []
    for item in raw or ():
        refs.append(Reference(str(item["name"]), str(item["subject"]), int(item["version"])))
    return tuple(refs)


def parse_version(text: str) -> int | str:
    """A version path segment: a number from 1, ``latest`` or -1 (also latest)."""
    if text == "latest" or text == "-1":
        return "latest"
    if text.isdigit() and len(text) < 11 and 1 <= int(text) <= 2**31 - 1:
        return int(text)
    raise invalid_version(text)


@dataclass(slots=True)
class Registry:
    """Subjects, versions, ids, configs and modes, as the log has them so far."""

    versions: dict[str, dict[int, Version]] = field(default_factory=dict)
    configs: dict[str | None, str] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    by_id: dict[int, SchemaText] = field(default_factory=dict)
    ids: dict[SchemaText, int] = field(default_factory=dict)
    max_id: int = 0

    # -- applying the log ---------------------------------------------------------------

    def apply(self, key: bytes | None, value: bytes | None) -> bool:
        """Apply one record; False when it is not ours, malformed, or loses an id race."""
        if key is None:
            return False
        try:
            k = json.loads(key)
            v = None if value is None else json.loads(value)
            return self._apply(k, v)
        except (ValueError, KeyError, TypeError, AttributeError):
            return False

    def _apply(self, k: dict[str, Any], v: Any) -> bool:
        keytype = k.get("keytype")
        if keytype == "SCHEMA":
            return self._apply_schema(str(k["subject"]), int(k["version"]), v)
        if keytype == "CONFIG":
            subject = k.get("subject")
            level = None if v is None else v.get("compatibilityLevel") or v.get("compatibility")
            if level is None:
                self.configs.pop(subject, None)
            else:
                self.configs[subject] = str(level)
            return True
        if keytype == "MODE":
            subject = k.get("subject")
            if v is None or v.get("mode") is None:
                self.modes.pop(subject, None)
            else:
                self.modes[subject] = str(v["mode"])
            return True
        if keytype == "DELETE_SUBJECT" and v is not None:
            till = int(v["version"])
            for number, version in self.versions.get(str(v["subject"]), {}).items():
                if number <= till:
                    version.deleted = True
            return True
        if keytype == "CLEAR_SUBJECT" and v is not None:
            versions = self.versions.get(str(v["subject"]), {})
            for number in [n for n, ver in versions.items() if ver.deleted]:
                del versions[number]
            self._forget_unused_ids()
            return True
        return keytype == "NOOP"

    def _apply_schema(self, subject: str, number: int, v: Any) -> bool:
        versions = self.versions.setdefault(subject, {})
        if v is None:
            versions.pop(number, None)
            if not versions:
                del self.versions[subject]
            self._forget_unused_ids()
            return True
        text = SchemaText(
            str(v.get("schemaType") or "AVRO"), str(v["schema"]), _references(v.get("references"))
        )
        schema_id = int(v["id"])
        known = self.by_id.get(schema_id)
        held = versions.get(number)
        if (known is not None and known != text) or (
            held is not None and (held.id != schema_id or held.schema != text)
        ):
            # An id, or a subject's version, already names something else: the first
            # record wins (in a cluster two brokers may append such records at once).
            if not versions:
                del self.versions[subject]
            return False
        self.by_id[schema_id] = text
        self.ids.setdefault(text, schema_id)
        self.max_id = max(self.max_id, schema_id)
        versions[number] = Version(subject, number, schema_id, text, bool(v.get("deleted")))
        return True

    def _forget_unused_ids(self) -> None:
        used = {ver.id for vs in self.versions.values() for ver in vs.values()}
        for schema_id in [i for i in self.by_id if i not in used]:
            text = self.by_id.pop(schema_id)
            if self.ids.get(text) == schema_id:
                del self.ids[text]

    # -- reading -----------------------------------------------------------------------

    def subjects(self, deleted: bool = False, prefix: str = "") -> list[str]:
        return sorted(
            s
            for s, vs in self.versions.items()
            if s.startswith(prefix) and any(deleted or not v.deleted for v in vs.values())
        )

    def live_versions(self, subject: str, deleted: bool = False) -> list[Version]:
        """A subject's versions, oldest first; 40401 when it has none to show."""
        found = [
            v for _, v in sorted(self.versions.get(subject, {}).items()) if deleted or not v.deleted
        ]
        if not found:
            raise subject_not_found(subject)
        return found

    def version(self, subject: str, which: int | str, deleted: bool = False) -> Version:
        versions = self.live_versions(subject, deleted)
        if which == "latest":
            return versions[-1]
        for v in versions:
            if v.version == which:
                return v
        raise version_not_found(subject, which)

    def schema(self, schema_id: int) -> SchemaText:
        found = self.by_id.get(schema_id)
        if found is None:
            raise schema_not_found()
        return found

    def id_versions(self, schema_id: int, deleted: bool = False) -> list[Version]:
        self.schema(schema_id)
        return [
            v
            for s in sorted(self.versions)
            for _, v in sorted(self.versions[s].items())
            if v.id == schema_id and (deleted or not v.deleted)
        ]

    def subject_of(self, schema_id: int) -> str | None:
        """The first subject (by name) with a live version of the id, for decoding."""
        found = self.id_versions(schema_id) if schema_id in self.by_id else []
        return found[0].subject if found else None

    def referenced_by(self, subject: str, number: int) -> list[int]:
        """Ids of the live schemas that import ``subject`` version ``number``."""
        return sorted(
            {
                v.id
                for vs in self.versions.values()
                for v in vs.values()
                if not v.deleted
                and any(r.subject == subject and r.version == number for r in v.schema.references)
            }
        )

    def compatibility(self, subject: str | None, default_to_global: bool = True) -> str | None:
        if subject is not None and subject in self.configs:
            return self.configs[subject]
        if subject is not None and not default_to_global:
            return None
        return self.configs.get(None, DEFAULT_COMPATIBILITY)

    def mode(self, subject: str | None, default_to_global: bool = True) -> str | None:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        if subject is not None and not default_to_global:
            return None
        return self.modes.get(None, DEFAULT_MODE)

    def check_writable(self, subject: str | None) -> str:
        mode = self.mode(subject) or DEFAULT_MODE
        if mode.startswith("READONLY"):
            where = "Subject" if subject is not None and subject in self.modes else "Registry"
            raise not_permitted(f"{where} is in read-only mode")
        return mode

    # -- parsing with references ---------------------------------------------------------

    def resolve(
        self, references: Sequence[Reference], parse: Parse, seen: frozenset[int] = frozenset()
    ) -> list[tuple[str, ParsedSchema]]:
        """Each reference's schema, parsed with its own references first (depth first)."""
        out: list[tuple[str, ParsedSchema]] = []
        for ref in references:
            try:
                target = self.version(ref.subject, ref.version, deleted=True)
            except RegistryError:
                raise invalid_schema(
                    f"reference {ref.name!r}: subject {ref.subject!r} version {ref.version} "
                    "not found"
                ) from None
            if target.id in seen:
                raise invalid_schema(f"reference {ref.name!r} is circular")
            nested = self.resolve(target.schema.references, parse, seen | {target.id})
            try:
                parsed = parse(target.schema.schema_type, target.schema.text, nested)
            except SchemaError as e:
                raise invalid_schema(f"reference {ref.name!r}: {e}") from None
            out.append((ref.name, parsed))
        return out

    def parse(
        self, schema_type: str, text: str, references: Sequence[Reference], parse: Parse
    ) -> ParsedSchema:
        if schema_type not in SCHEMA_TYPES:
            raise invalid_schema(f"unknown schema type {schema_type!r}")
        resolved = self.resolve(references, parse)
        try:
            return parse(schema_type, text, resolved)
        except SchemaError as e:
            raise invalid_schema(str(e)) from None
        except (ValueError, TypeError, KeyError, RecursionError) as e:
            raise invalid_schema(f"{type(e).__name__}: {e}") from None

    def storable(
        self,
        parsed: ParsedSchema,
        text: str,
        references: Sequence[Reference],
        parse: Parse,
        normalize: bool = False,
    ) -> str:
        """The text a version keeps: the canonical (or normalized) form when it parses
        back to a schema, else the text as registered, since every stored text is parsed
        again (compatibility checks, references, decoding). Only a Protobuf schema
        `.proto` text cannot render (custom options, groups; proto_text.py) takes the
        second way: its canonical form is the descriptor's text format."""
        form = parsed.normalized() if normalize else parsed.canonical()
        if form == text:
            return form
        try:
            self.parse(parsed.schema_type, form, references, parse)
        except RegistryError:
            return text
        return form

    def parsed(self, version: Version, parse: Parse) -> ParsedSchema:
        return self.parse(
            version.schema.schema_type, version.schema.text, version.schema.references, parse
        )

    # -- commands ----------------------------------------------------------------------

    def find(self, subject: str, text: SchemaText, deleted: bool = False) -> Version | None:
        for _, v in sorted(self.versions.get(subject, {}).items()):
            if v.schema == text and (deleted or not v.deleted):
                return v
        return None

    def compatibility_errors(
        self,
        subject: str,
        parsed: ParsedSchema,
        against: Sequence[Version],
        parse: Parse,
        check: Callable[[ParsedSchema, Sequence[ParsedSchema], str], list[str]],
        level: str | None = None,
    ) -> list[str]:
        level = level or self.compatibility(subject) or DEFAULT_COMPATIBILITY
        if level == "NONE" or not against:
            return []
        existing = [self.parsed(v, parse) for v in against]
        return list(check(parsed, existing, level))

    def register(
        self,
        subject: str,
        schema_type: str,
        text: str,
        references: Sequence[Reference],
        parse: Parse,
        check: Callable[[ParsedSchema, Sequence[ParsedSchema], str], list[str]],
        *,
        schema_id: int | None = None,
        version: int | None = None,
        normalize: bool = False,
    ) -> tuple[Version, list[Record]]:
        """The version the schema is (or becomes) and the records that make it so
        (none when the subject already has it)."""
        mode = self.check_writable(subject)
        if schema_id is not None and schema_id >= 0 and mode != "IMPORT":
            raise not_permitted(f"Subject {subject} is not in import mode")
        parsed = self.parse(schema_type, text, references, parse)
        form = self.storable(parsed, text, references, parse, normalize)
        stored = SchemaText(schema_type, form, tuple(references))
        # A version stored as it was registered (by a Confluent registry whose `_schemas`
        # this is, or a schema with no canonical text that parses back) is found by
        # that text, as lookup finds it.
        existing = self.find(subject, stored) or self.find(
            subject, SchemaText(schema_type, text, tuple(references))
        )
        if existing is not None and (schema_id is None or schema_id == existing.id):
            return existing, []
        every = sorted(self.versions.get(subject, {}).values(), key=lambda v: v.version)
        live = [v for v in every if not v.deleted]
        if mode != "IMPORT":
            errors = self.compatibility_errors(subject, parsed, live, parse, check)
            if errors:
                raise RegistryError(
                    409,
                    409,
                    "Schema being registered is incompatible with an earlier schema for "
                    f'subject "{subject}", details: {errors}',
                )
        if schema_id is not None and schema_id >= 0:
            known = self.by_id.get(schema_id)
            if known is not None and known != stored:
                raise RegistryError(
                    422, 42207, f"Overwrite new schema with id {schema_id} is not permitted."
                )
            new_id = schema_id
        else:
            new_id = self.ids.get(stored, self.max_id + 1)
        number = (
            version
            if version is not None and mode == "IMPORT"
            else (every[-1].version + 1 if every else 1)
        )
        taken = self.versions.get(subject, {}).get(number)
        if taken is not None:
            raise not_permitted(
                f"Subject {subject} version {number} already holds schema id {taken.id}"
            )
        made = Version(subject, number, new_id, stored)
        return made, [(schema_key(subject, number), schema_value(made))]

    def outcome(self, made: Version) -> bool:
        """After the store applied ``made``'s record: did it take (or lose a race)?"""
        now = self.versions.get(made.subject, {}).get(made.version)
        return now is not None and now.id == made.id and now.schema == made.schema

    def lookup(
        self,
        subject: str,
        schema_type: str,
        text: str,
        references: Sequence[Reference],
        parse: Parse,
        deleted: bool = False,
        normalize: bool = False,
    ) -> Version:
        if subject not in self.versions:
            raise subject_not_found(subject)
        parsed = self.parse(schema_type, text, references, parse)
        forms = [parsed.canonical(), text]
        if normalize:
            forms.insert(1, parsed.normalized())
        for form in forms:
            found = self.find(subject, SchemaText(schema_type, form, tuple(references)), deleted)
            if found is not None:
                return found
        raise schema_not_found()

    def delete_version(
        self, subject: str, which: int | str, permanent: bool
    ) -> tuple[int, list[Record]]:
        self.check_writable(subject)
        version = self.version(subject, which, deleted=permanent)
        if permanent and not version.deleted:
            raise RegistryError(
                404,
                40407,
                f"Subject '{subject}' Version {version.version} was not deleted first "
                "before being permanently deleted",
            )
        if not permanent and version.deleted:
            raise RegistryError(
                404,
                40406,
                f"Subject '{subject}' Version {version.version} was soft deleted."
                "Set permanent=true to delete permanently",
            )
        users = self.referenced_by(subject, version.version)
        if users:
            raise RegistryError(
                422,
                42206,
                f"One or more references exist to the schema "
                f"{{subject={subject},version={version.version}}}: ids {users}",
            )
        key = schema_key(subject, version.version)
        if permanent:
            return version.version, [(key, None)]
        gone = Version(subject, version.version, version.id, version.schema, deleted=True)
        return version.version, [(key, schema_value(gone))]

    def delete_subject(self, subject: str, permanent: bool) -> tuple[list[int], list[Record]]:
        self.check_writable(subject)
        every = sorted(self.versions.get(subject, {}).values(), key=lambda v: v.version)
        if not every:
            raise subject_not_found(subject)
        live = [v for v in every if not v.deleted]
        if permanent:
            if live:
                raise RegistryError(
                    404,
                    40405,
                    f"Subject '{subject}' was not deleted first before being permanently deleted",
                )
            records: list[Record] = [(schema_key(subject, v.version), None) for v in every]
            records += self._subject_settings_gone(subject)
            return [v.version for v in every], records
        if not live:
            raise RegistryError(
                404,
                40404,
                f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently",
            )
        for v in live:
            users = self.referenced_by(subject, v.version)
            if users:
                raise RegistryError(
                    422,
                    42206,
                    f"One or more references exist to the schema "
                    f"{{subject={subject},version={v.version}}}: ids {users}",
                )
        value = _dumps({"subject": subject, "version": every[-1].version})
        records = [(subject_key("DELETE_SUBJECT", subject), value)]
        records += self._subject_settings_gone(subject)
        return [v.version for v in live], records

    def _subject_settings_gone(self, subject: str) -> list[Record]:
        records: list[Record] = []
        if subject in self.configs:
            records.append((subject_key("CONFIG", subject), None))
        if subject in self.modes:
            records.append((subject_key("MODE", subject), None))
        return records

    def set_config(self, subject: str | None, level: Any) -> list[Record]:
        if not isinstance(level, str) or level.upper() not in COMPATIBILITY_LEVELS:
            raise RegistryError(
                422,
                42203,
                "Invalid compatibility level. Valid values are none, backward, "
                "forward, full, backward_transitive, forward_transitive, and full_transitive",
            )
        return [(subject_key("CONFIG", subject), _dumps({"compatibilityLevel": level.upper()}))]

    def delete_config(self, subject: str | None) -> tuple[str, list[Record]]:
        if subject is not None and subject not in self.configs:
            raise subject_not_found(subject)
        previous = self.compatibility(subject) or DEFAULT_COMPATIBILITY
        return previous, [(subject_key("CONFIG", subject), None)]

    def set_mode(self, subject: str | None, mode: Any) -> list[Record]:
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise RegistryError(
                422,
                42204,
                "Invalid mode. Valid values are READWRITE, READONLY, READONLY_OVERRIDE and IMPORT.",
            )
        return [(subject_key("MODE", subject), _dumps({"mode": mode.upper()}))]

    def delete_mode(self, subject: str) -> tuple[str, list[Record]]:
        if subject not in self.modes:
            raise subject_not_found(subject)
        return self.modes[subject], [(subject_key("MODE", subject), None)]


def references_from(raw: Any) -> tuple[Reference, ...]:
    """A request's ``references``; 42201 for anything else than a list of
    ``{name, subject, version}`` (version from 1, or -1 for the latest)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise invalid_schema("references: a list of {name, subject, version}")
    out = []
    for item in raw:
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or not isinstance(item.get("subject"), str)
            or not isinstance(item.get("version"), int)
            or isinstance(item.get("version"), bool)
        ):
            raise invalid_schema("references: each a {name, subject, version}")
        out.append(Reference(item["name"], item["subject"], item["version"]))
    return tuple(out)


def pin_latest(registry: Registry, refs: Iterable[Reference]) -> tuple[Reference, ...]:
    """References to version -1 name the subject's latest version at registration."""
    out = []
    for ref in refs:
        if ref.version == -1:
            try:
                ref = Reference(
                    ref.name, ref.subject, registry.version(ref.subject, "latest").version
                )
            except RegistryError:
                raise invalid_schema(
                    f"reference {ref.name!r}: subject {ref.subject!r} not found"
                ) from None
        out.append(ref)
    return tuple(out)
