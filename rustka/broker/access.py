"""Who may do what: the broker's ACLs, their changes, and the record of every denial.

Both front-ends ask through a `Gate`, made per request for the connection's
principal and address, at the one place each sends every request through
(`rustka.kafka.apis.dispatch`, the native server's dispatch). With
``authorizer_enabled`` off there is no gate and no cost.

ACL changes (CreateAcls, DeleteAcls, `rustka acls`) are made one at a time: the
new set is written whole to the ACL file on the I/O pool and only then swapped
into the authorizer, so a change a client was told succeeded is on disk, and a
failed write leaves the old set enforced (docs/security.md, "Authorization (ACLs)").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator, Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

from twisted.internet import defer
from twisted.logger import Logger

from rustka.broker.lanes import IOPool
from rustka.config import Config
from rustka.errors import InvalidRequest
from rustka.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclError,
    Operation,
    ResourceType,
    validate_binding,
)
from rustka.security.acl_store import ACL_FILE, decode_acls, encode_acls, load_acls, save_acls
from rustka.security.authorizer import Authorizer
from rustka.settings import split_list

__all__ = ["Access", "Gate", "SecurityDisabled"]

audit = Logger(namespace="rustka.audit")

R = TypeVar("R")

_GATES_KEPT = 10_000
"""Distinct (principal, host) gates kept before they are dropped and made anew."""


class SecurityDisabled(InvalidRequest):
    """ACLs were asked for while authorization is off (Kafka's SECURITY_DISABLED; the
    native protocol's code 2, with this message)."""


class Access:
    """The ACLs in force, how they change, and the denial counters the metrics read."""

    def __init__(self, config: Config, io: IOPool) -> None:
        self.io = io
        self.path = Path(config.data_dir) / ACL_FILE
        self.authorizer: Authorizer | None = None
        if config.authorizer_enabled:
            self.authorizer = Authorizer(
                super_users=split_list(config.super_users),
                allow_if_no_acl=config.allow_everyone_if_no_acl_found,
            )
        self.denials: Counter[str] = Counter()
        """Denied requests by operation name, for rustka_authorization_denials_total."""
        self.changes = 0
        self._lock = defer.DeferredLock()
        self._gates: dict[tuple[str, str], Gate] = {}
        self.shared: Callable[[], AbstractContextManager[Any]] | None = None
        """In a cluster: the catalog's copy of the ACLs under its lock, a draft whose
        ``body`` is the stored encoding (docs/diskless.md, "Security in a cluster")."""

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def load(self) -> defer.Deferred[None]:
        """Read the ACL file (on the pool) before the broker serves; a damaged file
        fails the start, as a damaged log does, rather than opening every resource."""
        authorizer = self.authorizer
        if authorizer is None:
            return defer.succeed(None)
        return self.io.run(load_acls, self.path).addCallback(self._loaded, authorizer)

    def _loaded(self, acls: frozenset[AclBinding], authorizer: Authorizer) -> None:
        authorizer.replace(acls)
        for gate in self._gates.values():
            gate.forget()

    def gate(self, principal: str, host: str) -> Gate:
        """The gate of a principal at a host (front-ends ask only when `enabled`): one per
        pair, kept, so that a connection's requests share its answers."""
        key = (principal, host)
        gate = self._gates.get(key)
        if gate is None:
            if len(self._gates) >= _GATES_KEPT:
                self._gates.clear()
            gate = self._gates[key] = Gate(self, self._require(), principal, host)
        return gate

    # -- ACL administration --------------------------------------------------------

    def _require(self) -> Authorizer:
        if self.authorizer is None:
            raise SecurityDisabled("no authorizer is enabled (authorizer_enabled = false)")
        return self.authorizer

    def describe(self, selector: AclBindingFilter) -> list[AclBinding]:
        """The ACLs ``selector`` matches, in a stable order."""
        authorizer = self._require()
        selector.validate()
        return sorted(a for a in authorizer.acls if selector.matches(a))

    def create(
        self, acls: Sequence[AclBinding], principal: str
    ) -> defer.Deferred[list[str | None]]:
        """Add ``acls``; per binding, None or why it was refused. The valid ones are
        stored even when others are not, as Kafka does."""
        authorizer = self._require()

        def change(current: frozenset[AclBinding]) -> tuple[set[AclBinding], list[str | None]]:
            result: list[str | None] = []
            new = set(current)
            for acl in acls:
                try:
                    validate_binding(acl)
                except AclError as e:
                    result.append(str(e))
                    continue
                new.add(acl)
                result.append(None)
            return new, result

        return self._change(authorizer, change, principal)

    def delete(
        self, selectors: Sequence[AclBindingFilter], principal: str
    ) -> defer.Deferred[list[list[AclBinding] | str]]:
        """Remove every ACL each selector matches; per selector, what it removed or why
        it was refused."""
        authorizer = self._require()

        def change(
            current: frozenset[AclBinding],
        ) -> tuple[set[AclBinding], list[list[AclBinding] | str]]:
            result: list[list[AclBinding] | str] = []
            new = set(current)
            for selector in selectors:
                try:
                    selector.validate()
                except AclError as e:
                    result.append(str(e))
                    continue
                matched = sorted(a for a in current if selector.matches(a))
                new.difference_update(matched)
                result.append(matched)
            return new, result

        return self._change(authorizer, change, principal)

    def _change(
        self,
        authorizer: Authorizer,
        change: Callable[[frozenset[AclBinding]], tuple[set[AclBinding], R]],
        principal: str,
    ) -> defer.Deferred[R]:
        """Run ``change`` on the current set under the lock; store and swap in its result."""

        @defer.inlineCallbacks
        def locked() -> Generator[defer.Deferred[Any], Any, R]:
            if self.shared is not None:
                current, new, result = yield self.io.run(self._change_shared, authorizer, change)
            else:
                current = authorizer.acls
                new, result = change(current)
                if new != current:
                    yield self.io.run(save_acls, self.path, new)
            added, removed = new - current, current - new
            if added or removed or authorizer.acls != frozenset(new):
                self._install(authorizer, frozenset(new))
                self.changes += 1
                for acl in sorted(added):
                    self._audit_change("acl-created", acl, principal)
                for acl in sorted(removed):
                    self._audit_change("acl-deleted", acl, principal)
            return result

        return self._lock.run(locked)

    def _change_shared(
        self,
        authorizer: Authorizer,
        change: Callable[[frozenset[AclBinding]], tuple[set[AclBinding], R]],
    ) -> tuple[frozenset[AclBinding], set[AclBinding], R]:
        """On the pool, in a cluster: the change made on the catalog's copy under its lock
        (a broker's first change stores the ACLs it had), then on this broker's file."""
        assert self.shared is not None
        with self.shared() as draft:
            current = authorizer.acls if draft.body is None else decode_acls(draft.body)
            new, result = change(current)
            if draft.body is None or new != current:
                draft.body = encode_acls(new)
        save_acls(self.path, new)
        return current, new, result

    def _install(self, authorizer: Authorizer, acls: frozenset[AclBinding]) -> None:
        authorizer.replace(acls)
        for gate in self._gates.values():
            gate.forget()

    def install(self, data: bytes) -> defer.Deferred[None]:
        """Take the cluster's ACLs (changed by another broker): kept in this broker's file
        too, then enforced. Under the changes' lock, so no change here interleaves."""
        authorizer = self.authorizer
        if authorizer is None:
            return defer.succeed(None)
        acls = decode_acls(data)

        @defer.inlineCallbacks
        def locked() -> Generator[defer.Deferred[Any], Any, None]:
            if acls != authorizer.acls:
                yield self.io.run(save_acls, self.path, acls)
                self._install(authorizer, acls)

        return self._lock.run(locked)

    @staticmethod
    def _audit_change(event: str, acl: AclBinding, by: str) -> None:
        audit.info(
            "audit {event} by {by}: {acl}",
            event=event,
            by=by,
            acl=acl.describe(),
            resource_type=acl.resource_type.name,
            resource_name=acl.resource_name,
            pattern_type=acl.pattern_type.name,
            principal=acl.principal,
            host=acl.host,
            operation=acl.operation.name,
            permission=acl.permission.name,
        )

    def denied(self, principal: str, host: str, operation: Operation, what: str) -> None:
        """Count and log one denial (``what`` names the resource or the request)."""
        self.denials[operation.name] += 1
        audit.info(
            "audit denied {principal} from {host}: {operation} {what}",
            event="denied",
            principal=principal,
            host=host,
            operation=operation.name,
            what=what,
        )


class Gate:
    """One request's authorization questions, for its connection's principal and host."""

    __slots__ = ("_access", "_answers", "_authorizer", "allowed", "host", "principal")

    def __init__(self, access: Access, authorizer: Authorizer, principal: str, host: str) -> None:
        self._access = access
        self._authorizer = authorizer
        self.principal = principal
        self.host = host
        # This principal's answers until the ACLs change (`forget` empties them): one
        # small dict lookup per question on the request path.
        self._answers: dict[tuple[int, int, str], bool] = {}
        self.allowed: set[Any] = set()
        """Whole requests a front-end found allowed (its own keys, such as an op and a
        topic), so the next one like them costs one set lookup; emptied with the answers."""

    def forget(self) -> None:
        """The ACLs changed: answer every question anew."""
        self._answers = {}
        self.allowed = set()

    def allows(
        self, operation: Operation, resource_type: ResourceType, name: str, quiet: bool = False
    ) -> bool:
        """Whether the operation is allowed; a denial is counted and logged unless
        ``quiet`` (a listing that leaves out what the principal may not see)."""
        key = (operation, resource_type, name)
        answer = self._answers.get(key)
        if answer is None:
            answer = self._authorizer.authorize(
                self.principal, self.host, operation, resource_type, name
            )
            if len(self._answers) >= _GATES_KEPT:
                self._answers = {}
            self._answers[key] = answer
        if answer:
            return True
        if not quiet:
            self._access.denied(
                self.principal, self.host, operation, f"{resource_type.name}:{name}"
            )
        return False

    def allows_any(self, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether the operation is allowed on some resource of the type."""
        if self._authorizer.authorize_any(self.principal, self.host, operation, resource_type):
            return True
        self._access.denied(self.principal, self.host, operation, f"any {resource_type.name}")
        return False

    def filter(
        self, operation: Operation, resource_type: ResourceType, names: Iterable[str]
    ) -> list[str]:
        """The names the operation is allowed on, quietly."""
        return [n for n in names if self.allows(operation, resource_type, n, quiet=True)]
