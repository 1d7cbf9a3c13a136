"""The schema registry as a Twisted service of the broker (docs/schema-registry.md).

`SchemaRegistryService` opens the store once the broker's storage is open (the REST
API answers 503 until ``_schemas`` is replayed), holds the site the tap binds on
``schema_registry_listen``, and offers the two questions other parts of the broker
ask without importing this package: `known_schema_id` (per-topic validation in the
produce path) and `decode_value` (the console).
"""

from __future__ import annotations

import struct
from typing import Any

from twisted.application import service
from twisted.internet import defer
from twisted.logger import Logger

from rustka.config import ConfigError
from rustka.schema_registry import formats
from rustka.schema_registry.auth import Guard
from rustka.schema_registry.model import RegistryError
from rustka.schema_registry.rest import RegistrySite, site
from rustka.schema_registry.store import SchemaStore

MAGIC = 0
HEADER = struct.Struct(">bI")
"""Confluent's wire format: magic byte 0, then the schema id (big-endian int32)."""

PARSED_KEPT = 1024
_LOOPBACK = ("interface=127.", "interface=localhost", "interface=::1", "interface=\\:\\:1")

_log = Logger(namespace="rustka.schema_registry")


def loopback_or_tls(description: str) -> bool:
    """Whether Basic credentials sent to this listener stay on the machine or in TLS."""
    kind = description.split(":", 1)[0].strip().lower()
    if kind in ("ssl", "unix"):
        return True
    return any(part in description for part in _LOOPBACK)


class SchemaRegistryService(service.Service):
    """The store, its site, and the broker-facing questions."""

    def __init__(self, config: Any, broker: Any, reactor: Any, credentials: Any = None) -> None:
        self.broker = broker
        self.store = SchemaStore(broker, reactor)
        basic = config.schema_registry_authentication == "basic"
        listen = config.schema_registry_listen or ""
        if basic and not loopback_or_tls(listen):
            raise ConfigError(
                'schema_registry_authentication = "basic" sends passwords: '
                "schema_registry_listen must be an ssl: endpoint or bound to loopback"
            )
        if basic and credentials is None:
            raise ConfigError('schema_registry_authentication = "basic" needs the broker\'s users')
        guard = None
        if basic or broker.access.enabled:
            guard = Guard(credentials, broker.access, basic=basic)
        self.site: RegistrySite = site(self.store, guard)
        self.opened: defer.Deferred[None] | None = None
        self._parsed: dict[tuple[int, Any], Any] = {}
        """Parsed schemas by id (and what the id names), so decoding parses each once."""
        self.listener: Any = None
        """The HTTP listener the tap binds for it (rustka.ops.tap)."""
        broker.known_schema_id = self.known_schema_id

    def startService(self) -> None:
        super().startService()
        self.opened = defer.Deferred.fromCoroutine(self.store.open())
        self.opened.addErrback(self._open_failed)

    def _open_failed(self, failure: Any) -> None:
        _log.failure("the schema registry cannot open _schemas", failure)

    def stopService(self) -> None:
        super().stopService()
        self.store.close()

    def when_ready(self) -> defer.Deferred[None]:
        return self.store.when_ready()

    # -- for the rest of the broker -------------------------------------------------------

    def known_schema_id(self, schema_id: int) -> bool:
        """Whether ``schema_id`` names a schema (live or soft-deleted: records written
        before a soft delete still decode)."""
        return schema_id in self.store.registry.by_id

    def decode_value(self, value: bytes) -> dict[str, Any] | None:
        """A framed value with a known id decoded for the console; None otherwise."""
        if len(value) < HEADER.size:
            return None
        magic, schema_id = HEADER.unpack_from(value)
        registry = self.store.registry
        text = registry.by_id.get(schema_id) if magic == MAGIC else None
        if text is None:
            return None
        try:
            parsed = self._parsed.get((schema_id, text))
            if parsed is None:
                parsed = registry.parse(text.schema_type, text.text, text.references, formats.parse)
                if len(self._parsed) >= PARSED_KEPT:
                    self._parsed.clear()
                self._parsed[(schema_id, text)] = parsed
            decoded = formats.decode(parsed, bytes(value[HEADER.size :]))
        except (RegistryError, ValueError, TypeError, KeyError, IndexError, EOFError):
            return None
        return {
            "schema_id": schema_id,
            "schema_type": text.schema_type,
            "subject": registry.subject_of(schema_id),
            "value": decoded,
        }
