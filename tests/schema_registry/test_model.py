"""The registry's state from ``_schemas`` records in Confluent's format, and its commands."""

from __future__ import annotations

import json

import pytest

from rustka.schema_registry import formats
from rustka.schema_registry.model import (
    Reference,
    Registry,
    RegistryError,
    schema_key,
    subject_key,
)

AVRO = '{"type":"record","name":"A","fields":[]}'
OTHER = '{"type":"record","name":"A","fields":[{"name":"x","type":"int","default":0}]}'


def record(key: dict[str, object], value: dict[str, object] | None) -> tuple[bytes, bytes | None]:
    return json.dumps(key).encode(), None if value is None else json.dumps(value).encode()


def register(registry: Registry, subject: str, text: str, **kw: object) -> tuple[int, int]:
    made, records = registry.register(
        subject, "AVRO", text, (), formats.parse, formats.compatibility_errors, **kw
    )
    for key, value in records:
        assert registry.apply(key, value)
    assert registry.outcome(made)
    return made.id, made.version


def test_keys_are_written_as_confluent_orders_them() -> None:
    assert schema_key("s", 2) == b'{"keytype":"SCHEMA","subject":"s","version":2,"magic":1}'
    assert subject_key("CONFIG", None) == b'{"keytype":"CONFIG","magic":0}'
    assert subject_key("MODE", "s") == b'{"keytype":"MODE","subject":"s","magic":0}'


def test_records_a_confluent_registry_wrote_are_understood() -> None:
    registry = Registry()
    log = [
        record({"keytype": "NOOP", "magic": 0}, None),
        record({"keytype": "CONFIG", "magic": 0}, {"compatibilityLevel": "FULL"}),
        record(
            {"keytype": "SCHEMA", "subject": "t-value", "version": 1, "magic": 1},
            {"subject": "t-value", "version": 1, "id": 7, "schema": AVRO, "deleted": False},
        ),
        record(
            {"keytype": "SCHEMA", "subject": "t-value", "version": 2, "magic": 1},
            {
                "subject": "t-value",
                "version": 2,
                "id": 8,
                "schemaType": "JSON",
                "schema": '{"type":"object"}',
                "references": [{"name": "x", "subject": "t-value", "version": 1}],
                "deleted": False,
            },
        ),
        record({"keytype": "MODE", "subject": "t-value", "magic": 0}, {"mode": "READONLY"}),
        record(
            {"keytype": "DELETE_SUBJECT", "subject": "t-value", "magic": 0},
            {"subject": "t-value", "version": 1},
        ),
    ]
    for key, value in log:
        assert registry.apply(key, value)
    assert registry.compatibility("anything") == "FULL"
    assert registry.mode("t-value") == "READONLY"
    assert [v.version for v in registry.live_versions("t-value")] == [2]
    second = registry.version("t-value", 2)
    assert second.schema.schema_type == "JSON"
    assert second.schema.references == (Reference("x", "t-value", 1),)
    assert registry.max_id == 8
    # a tombstone hard-deletes a version; its id goes once nothing uses it
    assert registry.apply(
        *record({"keytype": "SCHEMA", "subject": "t-value", "version": 1, "magic": 1}, None)
    )
    assert 7 not in registry.by_id and 8 in registry.by_id
    # bytes that are not ours are skipped, never fatal
    assert not registry.apply(b"not json", b"{}")
    assert not registry.apply(None, b"{}")


def test_the_first_record_for_an_id_or_a_version_wins() -> None:
    registry = Registry()
    assert registry.apply(
        *record(
            {"keytype": "SCHEMA", "subject": "a", "version": 1, "magic": 1},
            {"subject": "a", "version": 1, "id": 1, "schema": AVRO, "deleted": False},
        )
    )
    # another broker's record: the same id for another schema
    assert not registry.apply(
        *record(
            {"keytype": "SCHEMA", "subject": "b", "version": 1, "magic": 1},
            {"subject": "b", "version": 1, "id": 1, "schema": OTHER, "deleted": False},
        )
    )
    # ... or the same subject version for another schema
    assert not registry.apply(
        *record(
            {"keytype": "SCHEMA", "subject": "a", "version": 1, "magic": 1},
            {"subject": "a", "version": 1, "id": 2, "schema": OTHER, "deleted": False},
        )
    )
    assert registry.subjects() == ["a"]
    assert registry.schema(1).text == AVRO and 2 not in registry.by_id
    # the loser registers again and gets the next id and version
    assert register(registry, "a", OTHER) == (2, 2)


def test_ids_are_shared_across_subjects_and_kept_after_a_soft_delete() -> None:
    registry = Registry()
    assert register(registry, "a", AVRO) == (1, 1)
    assert register(registry, "b", AVRO) == (1, 1)
    _, records = registry.delete_subject("a", permanent=False)
    for r in records:
        registry.apply(*r)
    assert registry.subjects() == ["b"] and registry.subjects(deleted=True) == ["a", "b"]
    # registering again after a soft delete makes a new version with the same id
    assert register(registry, "a", AVRO) == (1, 2)


def test_read_only_and_import_modes() -> None:
    registry = Registry()
    for r in registry.set_mode(None, "READONLY"):
        registry.apply(*r)
    with pytest.raises(RegistryError) as refused:
        register(registry, "a", AVRO)
    assert refused.value.code == 42205
    for r in registry.set_mode(None, "IMPORT"):
        registry.apply(*r)
    assert register(registry, "a", AVRO, schema_id=40, version=3) == (40, 3)
    with pytest.raises(RegistryError) as taken:
        register(registry, "a", OTHER, schema_id=40, version=4)
    assert taken.value.code == 42207
