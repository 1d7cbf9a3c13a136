"""Confluent's Schema Registry REST API over Twisted Web (docs/schema-registry.md).

One leaf resource routes every path. Each answer is JSON in Confluent's media type;
each refusal is Confluent's ``{"error_code", "message"}`` with its HTTP status. A
body is read only up to `MAX_BODY` (`BoundedRequest` hangs up on a bigger one before
it is buffered), and a body that is not a JSON object is a 422, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import resource, server

from rustka.http_bodies import bounded_request
from rustka.schema_registry import formats
from rustka.schema_registry.auth import Guard
from rustka.schema_registry.model import (
    SCHEMA_TYPES,
    RegistryError,
    SchemaText,
    Version,
    invalid_schema,
    parse_version,
    pin_latest,
    references_from,
    schema_not_found,
    subject_not_found,
)
from rustka.schema_registry.store import SchemaStore
from rustka.security.acl import CLUSTER_NAME, Operation, ResourceType

MAX_BODY = 2 * 1024 * 1024
"""The largest request body read (2 MiB); a schema is at most formats.MAX_SCHEMA_BYTES."""

CONTENT_TYPE = b"application/vnd.schemaregistry.v1+json"
ACCEPTED_TYPES = (
    "application/vnd.schemaregistry.v1+json",
    "application/vnd.schemaregistry+json",
    "application/json",
    "application/octet-stream",
)

_log = Logger(namespace="rustka.schema_registry")


def _flag(args: dict[str, str], name: str) -> bool:
    return args.get(name, "").lower() == "true"


def _id(text: str) -> int:
    if not text.isdigit() or len(text) > 10:
        raise schema_not_found()
    return int(text)


class Api:
    """What each route does, on the store's caught-up state."""

    def __init__(self, store: SchemaStore) -> None:
        self.store = store

    @property
    def registry(self) -> Any:
        return self.store.registry

    # -- bodies ---------------------------------------------------------------------------

    @staticmethod
    def schema_request(body: dict[str, Any]) -> tuple[str, str, Any]:
        text = body.get("schema")
        if not isinstance(text, str) or not text:
            raise invalid_schema('the request needs a "schema" string')
        if len(text.encode()) > formats.MAX_SCHEMA_BYTES:
            raise invalid_schema(f"larger than {formats.MAX_SCHEMA_BYTES} bytes")
        schema_type = body.get("schemaType") or "AVRO"
        if not isinstance(schema_type, str) or schema_type.upper() not in SCHEMA_TYPES:
            raise invalid_schema(f"unknown schemaType {schema_type!r}")
        return schema_type.upper(), text, references_from(body.get("references"))

    # -- subjects -------------------------------------------------------------------------

    async def register(self, subject: str, body: dict[str, Any], args: dict[str, str]) -> Any:
        schema_type, text, refs = self.schema_request(body)
        schema_id = body.get("id")
        version = body.get("version")
        for name, value in (("id", schema_id), ("version", version)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise RegistryError(422, 42202 if name == "version" else 42201, f"{name}: a number")
        normalize = _flag(args, "normalize")

        def command(registry: Any) -> Any:
            pinned = pin_latest(registry, refs)
            return registry.register(
                subject,
                schema_type,
                text,
                pinned,
                formats.parse,
                formats.compatibility_errors,
                schema_id=schema_id if schema_id is not None and schema_id >= 0 else None,
                version=version if version is not None and version > 0 else None,
                normalize=normalize,
            )

        made: Version = await self.store.register(command)
        return made.as_json()

    async def lookup(self, subject: str, body: dict[str, Any], args: dict[str, str]) -> Any:
        schema_type, text, refs = self.schema_request(body)
        registry = self.registry
        found = registry.lookup(
            subject,
            schema_type,
            text,
            pin_latest(registry, refs),
            formats.parse,
            deleted=_flag(args, "deleted"),
            normalize=_flag(args, "normalize"),
        )
        return found.as_json()

    async def compatibility(
        self, subject: str, which: str | None, body: dict[str, Any], args: dict[str, str]
    ) -> Any:
        schema_type, text, refs = self.schema_request(body)
        registry = self.registry
        parsed = registry.parse(schema_type, text, pin_latest(registry, refs), formats.parse)
        if which is None:
            against = list(registry.versions.get(subject, {}).values())
            against = sorted((v for v in against if not v.deleted), key=lambda v: v.version)
        else:
            number = parse_version(which)
            if subject not in registry.versions:
                raise subject_not_found(subject)
            against = [registry.version(subject, number)]
        level = registry.compatibility(subject)
        if which is not None and level is not None:
            # One named version: the non-transitive form of the subject's level.
            level = level.replace("_TRANSITIVE", "")
        errors = registry.compatibility_errors(
            subject, parsed, against, formats.parse, formats.compatibility_errors, level
        )
        answer: dict[str, Any] = {"is_compatible": not errors}
        if _flag(args, "verbose"):
            answer["messages"] = errors
        return answer

    async def delete_version(self, subject: str, which: str, args: dict[str, str]) -> Any:
        number = parse_version(which)
        permanent = _flag(args, "permanent")
        return await self.store.change(lambda r: r.delete_version(subject, number, permanent))

    async def delete_subject(self, subject: str, args: dict[str, str]) -> Any:
        permanent = _flag(args, "permanent")
        return await self.store.change(lambda r: r.delete_subject(subject, permanent))

    # -- schemas by id --------------------------------------------------------------------

    def schema_by_id(self, schema_id: int, args: dict[str, str]) -> dict[str, Any]:
        text = self.registry.schema(schema_id)
        out: dict[str, Any] = {}
        if text.schema_type != "AVRO":
            out["schemaType"] = text.schema_type
        if text.references:
            out["references"] = [r.as_json() for r in text.references]
        out["schema"] = self.shown(text, args)
        return out

    def shown(self, text: SchemaText, args: dict[str, str]) -> str:
        """A stored schema as asked for: as stored (`.proto` text for Protobuf), or with
        `?format=serialized` a Protobuf schema as base64 of its FileDescriptorProto,
        which confluent-kafka asks for when it reads a reference or the latest version."""
        if args.get("format") != "serialized" or text.schema_type != "PROTOBUF":
            return text.text
        parsed = self.registry.parse(text.schema_type, text.text, text.references, formats.parse)
        serialized = getattr(parsed, "serialized", None)
        return text.text if serialized is None else str(serialized())

    def version(self, version: Version, args: dict[str, str]) -> dict[str, Any]:
        out = version.as_json()
        out["schema"] = self.shown(version.schema, args)
        return out

    # -- config and mode ------------------------------------------------------------------

    async def put_config(self, subject: str | None, body: dict[str, Any]) -> Any:
        level = body.get("compatibility", body.get("compatibilityLevel"))
        if subject is not None:
            self.registry.check_writable(subject)
        await self.store.change(lambda r: (None, r.set_config(subject, level)))
        return {"compatibility": str(level).upper()}

    async def delete_config(self, subject: str | None) -> Any:
        previous = await self.store.change(lambda r: r.delete_config(subject))
        return {"compatibilityLevel": previous}

    def get_config(self, subject: str | None, args: dict[str, str]) -> Any:
        level = self.registry.compatibility(subject, _flag(args, "defaultToGlobal"))
        if level is None:
            raise RegistryError(
                404,
                40408,
                f"Subject '{subject}' does not have subject-level compatibility configured",
            )
        return {"compatibilityLevel": level}

    async def put_mode(self, subject: str | None, body: dict[str, Any]) -> Any:
        mode = body.get("mode")
        await self.store.change(lambda r: (None, r.set_mode(subject, mode)))
        return {"mode": str(mode).upper()}

    def get_mode(self, subject: str | None, args: dict[str, str]) -> Any:
        mode = self.registry.mode(subject, _flag(args, "defaultToGlobal") or subject is None)
        if mode is None:
            raise RegistryError(
                404, 40409, f"Subject '{subject}' does not have subject-level mode configured"
            )
        return {"mode": mode}

    async def delete_mode(self, subject: str) -> Any:
        mode = await self.store.change(lambda r: r.delete_mode(subject))
        return {"mode": mode}


def topic_of(subject: str) -> str:
    """The topic a subject's ACLs are checked on: Confluent's TopicNameStrategy names a
    topic's subjects ``TOPIC-key`` and ``TOPIC-value``; any other subject is checked as a
    topic of its own name (docs/schema-registry.md, "Authorization")."""
    for suffix in ("-key", "-value"):
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[: -len(suffix)]
    return subject


class RegistryResource(resource.Resource):
    """Every path of the API."""

    isLeaf = True

    def __init__(self, store: SchemaStore, guard: Guard | None = None) -> None:
        super().__init__()
        self.store = store
        self.api = Api(store)
        self.guard = guard

    def render(self, request: server.Request) -> Any:
        d = defer.Deferred.fromCoroutine(self._serve(request))
        d.addErrback(self._failed, request)
        return server.NOT_DONE_YET

    def _failed(self, failure: Failure, request: server.Request) -> None:
        error = failure.value
        if not isinstance(error, RegistryError):
            _log.failure("schema registry request failed", failure)
            error = RegistryError(500, 50001, f"Error in the backend data store: {error}")
        self._send(request, error.status, {"error_code": error.code, "message": error.message})

    def _send(self, request: server.Request, status: int, body: Any) -> None:
        if request.finished or request._disconnected:  # type: ignore[attr-defined]
            return
        request.setResponseCode(status)
        request.setHeader(b"content-type", CONTENT_TYPE)
        if status == 401:
            request.setHeader(b"www-authenticate", b'Basic realm="rustka schema registry"')
        data = body.encode() if isinstance(body, Raw) else json.dumps(body).encode()
        request.setHeader(b"content-length", str(len(data)).encode())
        if request.method != b"HEAD":
            request.write(data)
        request.finish()

    @staticmethod
    def _body(request: server.Request) -> dict[str, Any]:
        kind = request.getHeader(b"content-type")
        if kind is not None:
            name = (kind.decode("latin-1") if isinstance(kind, bytes) else kind).split(";")[0]
            if name.strip().lower() not in ACCEPTED_TYPES:
                raise RegistryError(415, 415, f"HTTP 415 Unsupported Media Type: {name}")
        content = request.content
        raw = content.read() if content is not None else b""
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise RegistryError(422, 422, f"Unrecognized JSON body: {e}") from None
        if not isinstance(body, dict):
            raise RegistryError(422, 422, "The body must be a JSON object")
        return body

    async def _serve(self, request: server.Request) -> None:
        path = request.path.decode("latin-1").split("?", 1)[0]
        parts = [unquote(p) for p in path.strip("/").split("/") if p]
        args = {
            k.decode("latin-1"): v[-1].decode("latin-1") for k, v in (request.args or {}).items()
        }
        method = request.method.decode("latin-1")
        principal = self.guard.principal(request) if self.guard is not None else None
        if parts == [] and method == "GET":
            return self._send(request, 200, {})
        self.store.check_ready()
        body = self._body(request) if method in ("POST", "PUT") else {}
        answer = await self._route(request, principal, method, parts, args, body)
        self._send(request, 200, answer)

    def _allow(
        self,
        request: server.Request,
        principal: str | None,
        operation: Operation,
        rtype: ResourceType,
        name: str,
    ) -> None:
        if self.guard is not None:
            self.guard.require(request, principal, operation, rtype, name)

    def _may(self, request: server.Request, principal: str | None, subject: str) -> bool:
        if self.guard is None:
            return True
        return self.guard.allows(
            request, principal, Operation.READ, ResourceType.TOPIC, topic_of(subject)
        )

    def _subject(
        self, request: server.Request, principal: str | None, subject: str, write: bool
    ) -> None:
        operation = Operation.WRITE if write else Operation.READ
        self._allow(request, principal, operation, ResourceType.TOPIC, topic_of(subject))

    def _cluster(self, request: server.Request, principal: str | None) -> None:
        self._allow(request, principal, Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)

    def _visible(
        self, request: server.Request, principal: str | None, versions: Sequence[Version]
    ) -> list[Version]:
        return [v for v in versions if self._may(request, principal, v.subject)]

    async def _route(
        self,
        request: server.Request,
        principal: str | None,
        method: str,
        parts: list[str],
        args: dict[str, str],
        body: dict[str, Any],
    ) -> Any:
        api = self.api
        registry = self.store.registry
        deleted = _flag(args, "deleted")
        sub = lambda s, w=False: self._subject(request, principal, s, w)  # noqa: E731
        match method, parts:
            case "GET", ["subjects"]:
                names = registry.subjects(deleted, args.get("subjectPrefix", ""))
                return [s for s in names if self._may(request, principal, s)]
            case "GET", ["subjects", subject, "versions"]:
                sub(subject)
                return [v.version for v in registry.live_versions(subject, deleted)]
            case "POST", ["subjects", subject, "versions"]:
                sub(subject, True)
                return await api.register(subject, body, args)
            case "GET", ["subjects", subject, "versions", which]:
                sub(subject)
                return api.version(registry.version(subject, parse_version(which), deleted), args)
            case "GET", ["subjects", subject, "versions", which, "schema"]:
                sub(subject)
                found = registry.version(subject, parse_version(which), deleted)
                return Raw(api.shown(found.schema, args))
            case "GET", ["subjects", subject, "versions", which, "referencedby"]:
                sub(subject)
                return registry.referenced_by(
                    subject, registry.version(subject, parse_version(which), True).version
                )
            case "DELETE", ["subjects", subject, "versions", which]:
                sub(subject, True)
                return await api.delete_version(subject, which, args)
            case "POST", ["subjects", subject]:
                sub(subject)
                return await api.lookup(subject, body, args)
            case "DELETE", ["subjects", subject]:
                sub(subject, True)
                return await api.delete_subject(subject, args)
            case "GET", ["schemas", "types"]:
                return list(SCHEMA_TYPES)
            case "GET", ["schemas", "ids", number]:
                schema_id = _id(number)
                self._id_visible(request, principal, schema_id)
                return api.schema_by_id(schema_id, args)
            case "GET", ["schemas", "ids", number, "schema"]:
                schema_id = _id(number)
                self._id_visible(request, principal, schema_id)
                return Raw(api.shown(registry.schema(schema_id), args))
            case "GET", ["schemas", "ids", number, "subjects"]:
                schema_id = _id(number)
                found = self._visible(request, principal, registry.id_versions(schema_id, deleted))
                return sorted({v.subject for v in found})
            case "GET", ["schemas", "ids", number, "versions"]:
                schema_id = _id(number)
                found = self._visible(request, principal, registry.id_versions(schema_id, deleted))
                return [{"subject": v.subject, "version": v.version} for v in found]
            case "POST", ["compatibility", "subjects", subject, "versions"]:
                sub(subject)
                return await api.compatibility(subject, None, body, args)
            case "POST", ["compatibility", "subjects", subject, "versions", which]:
                sub(subject)
                return await api.compatibility(subject, which, body, args)
            case "GET", ["config"]:
                return api.get_config(None, args)
            case "PUT", ["config"]:
                self._cluster(request, principal)
                return await api.put_config(None, body)
            case "DELETE", ["config"]:
                self._cluster(request, principal)
                return await api.delete_config(None)
            case "GET", ["config", subject]:
                sub(subject)
                return api.get_config(subject, args)
            case "PUT", ["config", subject]:
                sub(subject, True)
                return await api.put_config(subject, body)
            case "DELETE", ["config", subject]:
                sub(subject, True)
                return await api.delete_config(subject)
            case "GET", ["mode"]:
                return api.get_mode(None, args)
            case "PUT", ["mode"]:
                self._cluster(request, principal)
                return await api.put_mode(None, body)
            case "GET", ["mode", subject]:
                sub(subject)
                return api.get_mode(subject, args)
            case "PUT", ["mode", subject]:
                sub(subject, True)
                return await api.put_mode(subject, body)
            case "DELETE", ["mode", subject]:
                sub(subject, True)
                return await api.delete_mode(subject)
        raise RegistryError(404, 404, "HTTP 404 Not Found")

    def _id_visible(self, request: server.Request, principal: str | None, schema_id: int) -> None:
        registry = self.store.registry
        registry.schema(schema_id)
        if self.guard is None:
            return
        versions = registry.id_versions(schema_id, True)
        if not self._visible(request, principal, versions):
            raise RegistryError(
                403, 40301, f"User is denied operation Read on schema id {schema_id}"
            )


class Raw(str):
    """An answer sent as it is: a schema's own text (``.../schema`` routes), as Confluent
    sends it, not quoted as a JSON string."""


# Bodies over `MAX_BODY` are hung up on as they arrive, as the console's are.
BoundedRequest = bounded_request(MAX_BODY, "BoundedRequest")


class RegistrySite(server.Site):
    requestFactory = BoundedRequest

    def log(self, request: server.Request) -> None:
        pass


def site(store: SchemaStore, guard: Guard | None = None) -> RegistrySite:
    return RegistrySite(RegistryResource(store, guard))


__all__ = ["MAX_BODY", "RegistryResource", "RegistrySite", "site", "topic_of"]
