"""A broker's membership of a cluster: its heartbeat, the view it gives Metadata and
FindCoordinator, and the group coordinator role (docs/diskless.md, "A cluster of
brokers").

Every broker with a catalog is a member: it joins once its Kafka listener is bound
(the address the others hand out), then beats every third of ``cluster_lease_ms`` on
the I/O pool. A beat renews its lease, asks for the coordinator role, publishes its
local topics, and brings back the live brokers. The role is held only while the lease
is known to run: a beat that fails past the local deadline (the time the last good
beat was sent, plus the lease, less a margin) gives the role up here before the
database can give it to anyone else, so two brokers never coordinate the same groups.

Gaining the role loads the committed offsets the previous coordinator wrote to the
catalog before any group request is served; losing it drops every group (members
find the new coordinator and rejoin) and the offsets this broker knew.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from rustka.broker.access import Access
from rustka.broker.coordinator import GroupCoordinator
from rustka.broker.lanes import IOPool
from rustka.security.acl_store import encode_acls
from rustka.security.credentials import CredentialStore
from rustka.storage.diskless.catalog import Catalog
from rustka.storage.diskless.group_offsets import GroupOffsets
from rustka.storage.diskless.membership import (
    COORDINATOR_ROLE,
    BrokerIdTaken,
    BrokerInfo,
    ClusterView,
    Membership,
    leader_for,
)
from rustka.storage.diskless.shared_documents import SharedDocuments
from rustka.storage.offsets import OffsetsStore

__all__ = ["INCARNATION_FILE", "ClusterMember"]

INCARNATION_FILE = "cluster.incarnation"
"""In the data dir: the last run's incarnation, so a restart takes its id back at once."""
ACLS = "acls"
CREDENTIALS = "credentials"
"""The shared documents' names in the catalog (rustka/storage/diskless/shared_documents.py)."""
_MARGIN = 0.8
"""The share of the lease a broker counts on after a beat was sent (clock-rate drift
between this machine and the database's is far below the rest)."""


class ClusterMember:
    """The Twisted side of `Membership`: the beat, the view, the coordinator role."""

    log = Logger()

    def __init__(
        self,
        catalog: Catalog,
        config: Any,
        io: IOPool,
        clock: IReactorTime,
        groups: GroupCoordinator,
        offsets: OffsetsStore,
        local_topics: Callable[[], dict[str, int]],
        access: Access | None = None,
    ) -> None:
        self.broker_id: int = config.broker_id
        self.lease_ms: int = config.cluster_lease_ms
        self._catalog = catalog
        self._data_dir = Path(config.data_dir)
        self._io = io
        self._clock = clock
        self._groups = groups
        self._offsets = offsets
        self._local_topics = local_topics
        self.membership: Membership | None = None
        self._loop = task.LoopingCall(self._beat)
        self._loop.clock = clock
        self.view: ClusterView | None = None
        self._deadline = 0.0
        self._coordinating = False
        self._loading = False
        self.role_changes = 0
        """Times the coordinator role reached or left this broker (a metric)."""
        self.beats_failed = 0
        self.live_changes = 0
        """Times the live brokers' set changed, this broker's joining included (a metric)."""
        self.clashes: list[str] = []
        offsets.mirror = GroupOffsets(catalog)
        groups.coordinating = self.coordinates_groups
        self._documents = SharedDocuments(catalog)
        self._versions: dict[str, int] = {}
        self._access = access if access is not None and access.enabled else None
        if self._access is not None:
            self._access.shared = lambda: self._documents.changing(ACLS)
        self.credentials: CredentialStore | None = None

    def share_credentials(self, store: CredentialStore) -> None:
        """The SCRAM credentials are the cluster's: changed in the catalog, installed here
        when another broker changes them (before `join`)."""
        self.credentials = store
        store.shared = lambda: self._documents.changing(CREDENTIALS)

    # -- lifecycle -------------------------------------------------------------------------

    def join(self, host: str, port: int) -> defer.Deferred[None]:
        """Register as ``host:port`` and start beating; fires after the first beat (an id
        another live broker holds fails it with `BrokerIdTaken`)."""
        self.membership = Membership(
            self._catalog,
            self.broker_id,
            host,
            port,
            lease_ms=self.lease_ms,
            state_file=self._data_dir / INCARNATION_FILE,
        )
        d = self._beat()
        d.addCallback(lambda _: self._start_loop())
        return d

    def _start_loop(self) -> None:
        self._loop.start(self.lease_ms / 3000, now=False).addErrback(self._stopped)

    def _stopped(self, failure: Failure) -> None:
        self.log.failure("the cluster heartbeat stopped", failure)

    def leave(self) -> defer.Deferred[None]:
        """On a clean stop: give the role and the id up at once."""
        if self._loop.running:
            self._loop.stop()
        self._lose_role("this broker is stopping")
        membership = self.membership
        if membership is None or self.view is None:
            return defer.succeed(None)
        d = self._io.run(membership.leave)
        d.addErrback(lambda f: self.log.warn("leaving the cluster: {why}", why=f.getErrorMessage()))
        return d

    # -- the view --------------------------------------------------------------------------

    def brokers(self) -> tuple[BrokerInfo, ...]:
        """The live brokers, this one always among them (it serves while it answers)."""
        view = self.view
        own = self.own_info()
        if view is None:
            return (own,) if own is not None else ()
        if own is not None and view.broker(self.broker_id) is None:
            return tuple(sorted((*view.brokers, own), key=lambda b: b.broker_id))
        return view.brokers

    def own_info(self) -> BrokerInfo | None:
        m = self.membership
        return None if m is None else BrokerInfo(m.broker_id, m.host, m.port, m.rack)

    def coordinator(self) -> BrokerInfo | None:
        """The broker FindCoordinator names for groups, if the role is held."""
        if self.coordinates_groups():
            return self.own_info()
        view = self.view
        held = None if view is None else view.holder(COORDINATOR_ROLE)
        if held is None or view is None or held[0] == self.broker_id:
            return None
        return view.broker(held[0])

    def shared_cluster_id(self, proposed: str) -> str:
        """Blocking, on the pool: the cluster's id from the catalog."""
        return Membership(self._catalog, self.broker_id, "", 0, lease_ms=self.lease_ms).cluster_id(
            proposed
        )

    def diskless_leaders(self, topic: str, count: int) -> list[int]:
        """The leader Metadata names for each partition of a diskless topic."""
        live = [b.broker_id for b in self.brokers()]
        return [leader_for(topic, i, live) for i in range(count)]

    def coordinates_groups(self) -> bool:
        return self._coordinating and self._clock.seconds() < self._deadline

    # -- the beat --------------------------------------------------------------------------

    def _beat(self) -> defer.Deferred[None]:
        membership = self.membership
        assert membership is not None
        sent = self._clock.seconds()
        topics = self._local_topics()

        first = self.view is None

        def beat() -> tuple[ClusterView, list[str], bytes | None]:
            view = membership.heartbeat([COORDINATOR_ROLE])
            clashes = membership.publish_local_topics(topics)
            if first:
                self._seed_documents()
            return view, clashes, self._sync_documents()

        d = self._io.run(beat)
        d.addCallbacks(self._beaten, self._failed, callbackArgs=(sent,))
        return d

    def _seed_documents(self) -> None:
        """On the pool, at the first beat: a cluster that keeps no ACLs or credentials yet
        starts from this broker's, if it has any (a single broker turned into a cluster
        keeps them)."""
        sources: list[tuple[str, Callable[[], bytes]]] = []
        access = self._access
        if access is not None and access.authorizer is not None and access.authorizer.acls:
            authorizer = access.authorizer
            sources.append((ACLS, lambda: encode_acls(authorizer.acls)))
        if self.credentials is not None and self.credentials.users():
            sources.append((CREDENTIALS, self.credentials.encoded))
        for name, encoded in sources:
            with self._documents.changing(name) as draft:
                if draft.body is None:
                    draft.body = encoded()

    def _sync_documents(self) -> bytes | None:
        """On the pool: what changed in the catalog since the last beat. Credentials are
        installed here and then; the ACLs' bytes go back to the reactor (their changes
        are ordered there)."""
        versions = self._documents.versions()
        acls = None
        for name, version in versions.items():
            if self._versions.get(name) == version:
                continue
            draft = self._documents.read(name)
            if draft.body is None:
                continue
            if name == CREDENTIALS and self.credentials is not None:
                self.credentials.install(draft.body)
            elif name == ACLS and self._access is not None:
                acls = draft.body
            self._versions[name] = draft.version
        return acls

    def _beaten(self, result: tuple[ClusterView, list[str], bytes | None], sent: float) -> None:
        view, clashes, acls = result
        if acls is not None and self._access is not None:
            self._access.install(acls).addErrback(
                lambda f: self.log.failure("installing the cluster's ACLs", f)
            )
        self._deadline = sent + self.lease_ms / 1000 * _MARGIN
        previous = self.view
        self.view = view
        if previous is None or previous.live_ids != view.live_ids:
            self.live_changes += 1
            self.log.info("cluster: live brokers {ids}", ids=list(view.live_ids))
        for name in clashes:
            if name not in self.clashes:
                self.clashes.append(name)
                self.log.error(
                    "topic {name!r} is a local topic here but another broker or a diskless "
                    "topic holds the name in the cluster: only clients of this broker see it",
                    name=name,
                )
        held = view.holder(COORDINATOR_ROLE)
        mine = held is not None and held[0] == self.broker_id
        if mine and not self._coordinating and not self._loading:
            self._take_role(held[1] if held else 0)
        elif not mine and self._coordinating:
            self._lose_role("the coordinator role passed to another broker")

    def _failed(self, failure: Failure) -> None:
        if failure.check(BrokerIdTaken) and self.view is None:
            return failure  # type: ignore[return-value]
        self.beats_failed += 1
        self.log.warn("cluster heartbeat failed: {why}", why=failure.getErrorMessage())
        if self._coordinating and self._clock.seconds() >= self._deadline:
            self._lose_role("the lease could not be renewed")
        return None

    def _take_role(self, epoch: int) -> None:
        self._loading = True
        group_offsets = GroupOffsets(self._catalog)

        def loaded(entries: dict[Any, Any]) -> None:
            self._loading = False
            if self._clock.seconds() >= self._deadline:
                return
            self._offsets.replace(entries)
            self._groups.resign()
            self._coordinating = True
            self.role_changes += 1
            self.log.info(
                "cluster: this broker coordinates the groups (epoch {epoch}, {count} commits)",
                epoch=epoch,
                count=len(entries),
            )

        def failed(failure: Failure) -> None:
            self._loading = False
            self.log.warn("loading the groups' offsets: {why}", why=failure.getErrorMessage())

        self._io.run(group_offsets.load).addCallbacks(loaded, failed)

    def _lose_role(self, why: str) -> None:
        if not self._coordinating:
            return
        self._coordinating = False
        self.role_changes += 1
        self._groups.resign()
        self._offsets.replace({})
        self.log.warn("cluster: this broker no longer coordinates the groups: {why}", why=why)
