"""Native requests to broker core calls, and core results and errors to native responses.

`NativeHandler.handle` is the per-request path of the native protocol
(docs/protocol.md): one dict lookup to dispatch, one callback/errback pair for
the accounting, and a Deferred that never errbacks: every error becomes the
response the protocol prescribes (tag 4 ``Error`` for seed ops, tag 14
``Failure`` or 15 ``OutOfRange`` for extensions, see `codec.error_response`).

Seed Produce requests that arrive together skip `handle`: `produce_many` hands
the whole burst to `Broker.append_records`, which answers per partition, so a
one-record request costs no Deferred chain of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

import rustka
from rustka.broker import share_queue
from rustka.broker.core import DELETE, SET, AppendResult, Broker, ReadResult, TopicInfo
from rustka.broker.produce import EarlyAnswer
from rustka.broker.share_groups import AcquireResult
from rustka.broker.stats import RequestStats
from rustka.config import ConfigEntry, describe_topic_configs
from rustka.errors import InvalidRequest, TransactionalIdNotFound, UnknownPartition
from rustka.native import codec as p
from rustka.record.batch import Record
from rustka.security.acl import AclBinding, AclError, validate_binding
from rustka.security.principal import ANONYMOUS
from rustka.storage.txn_log import TxnMetadata, TxnState

_PRODUCE = "Produce"
_ANONYMOUS = str(ANONYMOUS)
_new_tuple: Callable[..., Any] = tuple.__new__
_PRODUCE_TEMPLATE = p.Produce("", b"", b"")

Reply = Callable[[list[Any], list[p.Response]], None]
"""``reply(tokens, responses)``: how `NativeHandler.produce_many` hands answers back."""

EarlySend = Callable[[list[Any], bytes], None]
"""``send(tokens, frames)``: a connection that can write from an I/O pool thread takes
the stored produces' framed answers there (`NativeHandler.early_answer`)."""

_frame_produced = p.RESPONSE_FRAMERS[p.Produced]


def _produced(partition: int, first: int, count: int) -> list[p.Response]:
    """The answers to ``count`` seed produces stored from offset ``first`` on."""
    make = _new_tuple
    produced = p.Produced
    return [make(produced, (partition, first + i)) for i in range(count)]


def _fire_first(tokens: list[Any], responses: list[p.Response]) -> None:
    tokens[0].callback(responses[0])


class NativeHandler:
    """Serves native requests over one `Broker`; see the module docstring."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.stats = RequestStats()
        """This front-end's requests by op name (`BrokerFactory.request_stats`)."""
        self._handlers: dict[type, Callable[[Any], defer.Deferred[Any] | Any]] = {
            p.Produce: self._produce,
            p.Fetch: self._fetch,
            p.Commit: self._commit,
            p.OffsetFetch: self._offset_fetch,
            p.Hello: self._hello,
            p.ProduceBatch: self._produce_batch,
            p.FetchBatch: self._fetch_batch,
            p.Metadata: self._metadata,
            p.CreateTopic: self._create_topic,
            p.AlterTopic: self._alter_topic,
            p.ListGroups: self._list_groups,
            p.DescribeGroup: self._describe_group,
            p.DeleteTopic: self._delete_topic,
            p.DescribeLogs: self._describe_logs,
            p.CreateTopicWithConfigs: self._create_topic_with_configs,
            p.AlterTopicConfigs: self._alter_topic_configs,
            p.DescribeTopicConfigs: self._describe_topic_configs,
            p.DeleteRecords: self._delete_records,
            p.DescribeAcls: self._describe_acls,
            p.ListTransactions: self._list_transactions,
            p.DescribeTransaction: self._describe_transaction,
            p.AbortTransaction: self._abort_transaction,
            p.DescribeStableOffsets: self._describe_stable_offsets,
            p.ShareFetch: self._share_fetch,
            p.ShareAcknowledge: self._share_acknowledge,
            p.ShareLeave: self._share_leave,
            p.DescribeShareGroup: self._describe_share_group,
            p.AlterShareGroupOffsets: self._alter_share_group_offsets,
            p.DeleteShareGroupOffsets: self._delete_share_group_offsets,
        }
        # The ACL changes are audited with who made them.
        self._by_principal: dict[type, Callable[[Any, str], defer.Deferred[Any]]] = {
            p.CreateAcls: self._create_acls,
            p.DeleteAcls: self._delete_acls,
        }

    # -- entry points ----------------------------------------------------------------

    def handle(self, request: p.Request, principal: str = _ANONYMOUS) -> defer.Deferred[p.Response]:
        """The response for ``request`` from a connection acting as ``principal``; the
        Deferred never errbacks."""
        name = type(request).__name__
        self.stats.received(name)
        started = time.perf_counter()
        try:
            self.broker.check_serving()
            handler = self._handlers.get(type(request))
            if handler is not None:
                result = handler(request)
            else:
                result = self._by_principal[type(request)](request, principal)
        except Exception:
            result = self._error(request, Failure())
        if isinstance(result, defer.Deferred):
            return result.addCallbacks(
                self._done,
                self._failed,
                callbackArgs=(name, started),
                errbackArgs=(request, name, started),
            )
        return defer.succeed(self._done(result, name, started))

    def produce_many(
        self,
        requests: list[p.Produce],
        tokens: list[Any],
        reply: Reply,
        early: EarlyAnswer | None = None,
    ) -> None:
        """Seed Produce requests that arrived together: one lane append per partition.

        ``reply(tokens, responses)`` is called on the reactor thread once per
        partition touched (possibly before this returns), with the tokens of
        that partition's requests in arrival order and their responses
        (`Produced`, or `Error` like `handle` would answer). Each request is
        counted and timed in the stats as if it went through `handle`.
        ``early``, from `early_answer`, also gets each stored partition's
        answers on the I/O thread, before ``reply``.
        """
        self.stats.received(_PRODUCE, len(requests))
        self.broker.append_records(
            requests, tokens, self._records_stored, (reply, time.perf_counter()), early
        )

    def early_answer(self, send: EarlySend) -> EarlyAnswer:
        """The produce path's I/O-thread callback for a connection that can write there.

        It frames the answers `produce_many`'s ``reply`` would carry for a stored
        partition (the same `Produced` values, the codec's framer) and hands them to
        ``send``; refusals and duplicates are answered by ``reply`` alone. Made once
        per connection; it touches no handler state, so it is safe on any thread.
        """
        frame = _frame_produced

        def answer(tokens: list[Any], partition: int, first: int) -> None:
            responses = _produced(partition, first, len(tokens))
            send(tokens, b"".join([part for response in responses for part in frame(response)]))

        return answer

    # -- accounting ------------------------------------------------------------------------

    def _done(self, response: p.Response, name: str, started: float) -> p.Response:
        self.stats.answered(name, time.perf_counter() - started)
        return response

    def _failed(
        self, failure: Failure, request: p.Request, name: str, started: float
    ) -> p.Response:
        return self._done(self._error(request, failure), name, started)

    def _error(self, request: p.Request, failure: Failure) -> p.Response:
        name = type(request).__name__
        self.stats.failed(name)
        return p.error_response(request, self.broker.report_error(failure, name))

    def _records_stored(
        self,
        tokens: list[Any],
        partition: int,
        result: int | Failure,
        context: tuple[Reply, float | None],
    ) -> None:
        """`Broker.append_records` answered for one partition: build the responses."""
        reply, started = context
        if type(result) is Failure:
            responses = [self._error(_PRODUCE_TEMPLATE, result) for _ in tokens]
        else:
            responses = _produced(partition, result, len(tokens))
        if started is not None:
            self.stats.answered(_PRODUCE, time.perf_counter() - started, len(tokens))
        reply(tokens, responses)

    # -- seed operations -----------------------------------------------------------------

    def _produce(self, req: p.Produce) -> defer.Deferred[p.Response]:
        d: defer.Deferred[p.Response] = defer.Deferred()
        # `handle` does the accounting: no start time here.
        self.broker.append_records([req], [d], self._records_stored, (_fire_first, None))
        return d

    def _fetch(self, req: p.Fetch) -> defer.Deferred[p.Response]:
        def found(record: Record | None) -> p.Response:
            if record is None:
                return p.NotFound()
            return p.FetchedRecord(req.offset, record.key or b"", record.value or b"")

        return self.broker.read_record(req.topic, req.partition, req.offset).addCallback(found)

    def _kafka_members_absent(self, group: str) -> None:
        """Refuse a native consumer's commit or start in a group Kafka members drive.

        Their coordinator-assigned partitions would otherwise get a second reader and
        offsets written past their backs (docs/kafka.md, "Consumer groups").
        """
        self.broker.groups.require_no_active_members(group)

    def _commit(self, req: p.Commit) -> defer.Deferred[p.Response]:
        self._kafka_members_absent(req.group)
        d = self.broker.commit_offsets(req.group, {(req.topic, req.partition): req.offset})
        return d.addCallback(lambda _: p.CommitOk())

    def _offset_fetch(self, req: p.OffsetFetch) -> p.Response:
        self._kafka_members_absent(req.group)
        key = (req.topic, req.partition)
        offset = self.broker.committed_offsets(req.group, [key]).get(key)
        return p.NotFound() if offset is None else p.Offset(offset)

    # -- extensions ----------------------------------------------------------------------

    def _hello(self, req: p.Hello) -> p.Response:
        version = max(1, min(req.version, p.PROTOCOL_VERSION))
        ops = p.SEED_OPS if version == 1 else (*p.SEED_OPS, *p.EXTENSION_OPS)
        return p.Welcome(version, f"rustka {rustka.__version__}", tuple(ops))

    def _produce_batch(self, req: p.ProduceBatch) -> defer.Deferred[p.Response]:
        def produced(result: AppendResult) -> p.Response:
            return p.BatchProduced(req.partition, result.base_offset, result.last_offset)

        d = self.broker.append(req.topic, req.partition, req.batches, auto_create=True)
        return d.addCallback(produced)

    def _fetch_batch(self, req: p.FetchBatch) -> defer.Deferred[p.Response]:
        """One partition under the broker's fetch policy (size cap, long-poll for any
        data), the same as a Kafka Fetch; its error is the request's."""
        wanted = [(req.topic, req.partition, req.offset, req.max_bytes)]
        d = self.broker.fetch(wanted, req.max_bytes, max_wait_ms=req.max_wait_ms)
        return d.addCallback(_only_batches)

    def _metadata(self, req: p.Metadata) -> p.Response:
        topics = self.broker.topics_snapshot(req.topics or None)
        return p.MetadataResult(
            tuple(
                p.TopicMetadata(
                    info.name,
                    tuple(
                        p.PartitionMetadata(part.log_start_offset, part.high_watermark)
                        for part in info.partitions
                    ),
                )
                for info in topics
            )
        )

    def _describe_logs(self, req: p.DescribeLogs) -> p.Response:
        broker = self.broker
        cleaning = broker.cleaner.totals.partitions
        topics = []
        for info in broker.topics_snapshot(req.topics or None):
            logs = []
            policy = ""
            for part in info.partitions:
                plog = broker.partition(info.name, part.partition)
                policy = plog.config.cleanup_policy
                state = cleaning.get((info.name, part.partition))
                logs.append(
                    p.LogInfo(
                        part.log_start_offset,
                        part.high_watermark,
                        plog.size_bytes,
                        len(plog.segments),
                        0 if state is None else round(state.dirty_ratio * 1_000_000),
                        plog.cleaner_checkpoint.first_dirty,
                        0 if state is None else state.bytes_read,
                        0 if state is None else state.bytes_written,
                        0 if state is None or state.last_clean_ms is None else state.last_clean_ms,
                        "" if state is None or state.uncleanable is None else state.uncleanable,
                    )
                )
            topics.append(p.TopicLogs(info.name, policy, tuple(logs)))
        return p.LogsDescribed(tuple(topics))

    def _create_topic(self, req: p.CreateTopic) -> defer.Deferred[p.Response]:
        return self.broker.create_topic(req.topic, req.partitions).addCallback(_topic_info)

    def _create_topic_with_configs(
        self, req: p.CreateTopicWithConfigs
    ) -> defer.Deferred[p.Response]:
        configs = {c.name: c.value for c in req.configs}
        if len(configs) != len(req.configs):
            raise InvalidRequest(f"a config is named twice in {[c.name for c in req.configs]}")
        d = self.broker.create_topic(req.topic, req.partitions, configs)
        return d.addCallback(_topic_info)

    def _alter_topic_configs(self, req: p.AlterTopicConfigs) -> defer.Deferred[p.Response]:
        names = [c.name for c in req.set] + list(req.delete)
        if len(set(names)) != len(names):
            raise InvalidRequest(f"a config is named twice in {names}")
        if req.validate_only > 1:
            raise InvalidRequest(f"validate_only must be 0 or 1, got {req.validate_only}")
        ops = [(c.name, SET, c.value) for c in req.set] + [(k, DELETE, None) for k in req.delete]
        d = self.broker.alter_topic_configs(req.topic, ops, validate_only=bool(req.validate_only))
        config = self.broker.config
        return d.addCallback(
            lambda own: _topic_configs(req.topic, describe_topic_configs(config, own))
        )

    def _describe_topic_configs(self, req: p.DescribeTopicConfigs) -> p.Response:
        return _topic_configs(req.topic, self.broker.topic_configs(req.topic))

    def _alter_topic(self, req: p.AlterTopic) -> defer.Deferred[p.Response]:
        return self.broker.alter_topic(req.topic, req.partitions).addCallback(_topic_info)

    def _delete_records(self, req: p.DeleteRecords) -> defer.Deferred[p.Response]:
        """Past the high watermark is OffsetOutOfRange, answered as tag 15 with the bounds."""
        offset = -1 if req.offset == p.HIGH_WATERMARK else req.offset
        d = self.broker.delete_records(req.topic, req.partition, offset)
        return d.addCallback(lambda start: p.LogStart(req.topic, req.partition, start))

    def _delete_topic(self, req: p.DeleteTopic) -> defer.Deferred[p.Response]:
        return self.broker.delete_topic(req.topic).addCallback(lambda _: p.TopicDeleted(req.topic))

    def _list_groups(self, req: p.ListGroups) -> p.Response:
        return p.Groups(tuple(self.broker.group_names()))

    def _describe_group(self, req: p.DescribeGroup) -> p.Response:
        offsets = tuple(
            p.GroupOffset(e.topic, e.partition, e.committed, e.log_start, e.high_watermark)
            for e in self.broker.group_offsets(req.group)
        )
        return p.GroupOffsets(req.group, offsets)

    # -- ACLs (docs/protocol.md, "ACLs") --------------------------------------------

    def _create_acls(self, req: p.CreateAcls, principal: str) -> defer.Deferred[p.Response]:
        bindings = [p.acl_binding(e) for e in req.acls]
        for binding in bindings:
            try:
                validate_binding(binding)
            except AclError as e:
                raise InvalidRequest(f"ACL {binding.describe()}: {e}") from None
        done = self.broker.access.create(bindings, principal)
        created = p.Acls(tuple(p.acl_entry(b) for b in sorted(set(bindings))))
        return done.addCallback(lambda _: created)

    def _describe_acls(self, req: p.DescribeAcls) -> p.Response:
        found = self.broker.access.describe(p.acl_selector(req))
        return p.Acls(tuple(p.acl_entry(a) for a in found))

    def _delete_acls(self, req: p.DeleteAcls, principal: str) -> defer.Deferred[p.Response]:
        done = self.broker.access.delete([p.acl_selector(req)], principal)

        def deleted(results: list[list[AclBinding] | str]) -> p.Response:
            [result] = results
            if isinstance(result, str):
                raise InvalidRequest(result)
            return p.Acls(tuple(p.acl_entry(a) for a in result))

        return done.addCallback(deleted)

    # -- transactions, the operator's view (docs/protocol.md 7.15) --------------------

    def _list_transactions(self, req: p.ListTransactions) -> p.Response:
        """Kafka's ListTransactions filters, except that an unknown state name is an
        error here rather than a list to report back: a typo must not look like "none"."""
        known = {state.kafka_name: state for state in TxnState}
        unknown = [name for name in req.states if name not in known]
        if unknown:
            raise InvalidRequest(
                f"unknown transaction state {', '.join(map(repr, unknown))}; the states are "
                f"{', '.join(known)}"
            )
        states = {known[name] for name in req.states}
        producers = set(req.producer_ids)
        listed = tuple(
            p.ListedTransaction(
                m.transactional_id,
                m.producer_id,
                m.producer_epoch,
                m.state.kafka_name,
                m.timeout_ms,
                _time(m.start_ms),
            )
            for m in self.broker.transactions.transactions()
            if (not states or m.state in states) and (not producers or m.producer_id in producers)
        )
        return p.Transactions(listed)

    def _known_transaction(self, transactional_id: str) -> TxnMetadata:
        meta = self.broker.transactions.describe(transactional_id)
        if meta is None:
            raise TransactionalIdNotFound(f"no transactional id {transactional_id!r}")
        return meta

    def _describe_transaction(self, req: p.DescribeTransaction) -> p.Response:
        m = self._known_transaction(req.transactional_id)
        return p.TransactionDescribed(
            m.transactional_id,
            m.state.kafka_name,
            m.producer_id,
            m.producer_epoch,
            m.timeout_ms,
            _time(m.start_ms),
            _time(m.last_update_ms),
            _txn_partitions(m),
            tuple(sorted(m.offsets)),
        )

    def _abort_transaction(self, req: p.AbortTransaction) -> defer.Deferred[p.Response]:
        """As a timeout aborts it: markers of a bumped epoch on every partition, which
        fences the producer; an id without an open transaction is InvalidTxnState."""
        self._known_transaction(req.transactional_id)

        def aborted(m: TxnMetadata) -> p.Response:
            return p.TransactionAborted(
                m.transactional_id,
                m.producer_id,
                m.producer_epoch,
                m.state.kafka_name,
                _txn_partitions(m),
            )

        return self.broker.transactions.abort(req.transactional_id).addCallback(aborted)

    def _describe_stable_offsets(self, req: p.DescribeStableOffsets) -> p.Response:
        broker = self.broker
        topics = []
        for info in broker.topics_snapshot(req.topics or None):
            parts = []
            for part in info.partitions:
                plog = broker.partition(info.name, part.partition)
                producers = plog.producer_state
                open_txns = []
                for producer_id, first in sorted(plog.open_transactions().items()):
                    entry = producers.entry(producer_id)
                    epoch = 0 if entry is None else max(entry.epoch, 0)
                    open_txns.append(p.OpenTransaction(producer_id, epoch, first))
                parts.append(
                    p.StableOffset(plog.last_stable_offset, plog.end_offset, tuple(open_txns))
                )
            topics.append(p.TopicStableOffsets(info.name, tuple(parts)))
        return p.StableOffsets(tuple(topics))

    # -- share groups: a topic as a work queue (docs/protocol.md 7.16) ---------------------

    def _share_fetch(self, req: p.ShareFetch) -> defer.Deferred[p.Response]:
        if req.start not in _SHARE_STARTS:
            raise InvalidRequest(f"ShareFetch start {req.start}: 0, 1 (earliest) or 2 (latest)")
        d = share_queue.take(
            self.broker,
            req.group,
            _member(req.member),
            req.topic,
            req.max_records,
            req.max_wait_ms,
            _SHARE_STARTS[req.start],
        )
        return d.addCallback(_share_records)

    def _share_acknowledge(self, req: p.ShareAcknowledge) -> defer.Deferred[p.Response]:
        for ack in req.acks:
            if ack.kind not in _ACK_KINDS:
                raise InvalidRequest(f"acknowledgement kind {ack.kind}: 1, 2 or 3")
        acks = [(a.partition, a.offset, a.kind) for a in req.acks]
        d = share_queue.acknowledge(self.broker, req.group, _member(req.member), req.topic, acks)
        return d.addCallback(
            lambda results: p.ShareAcknowledged(
                tuple(p.ShareAckResult(partition, code) for partition, code in results)
            )
        )

    def _share_leave(self, req: p.ShareLeave) -> defer.Deferred[p.Response]:
        d = share_queue.leave(self.broker, req.group, _member(req.member))
        return d.addCallback(lambda _: p.ShareLeft())

    def _describe_share_group(self, req: p.DescribeShareGroup) -> p.Response:
        shares = share_queue.coordinator(self.broker)
        desc = shares.describe(req.group)
        return p.ShareGroupDescribed(
            req.group,
            desc.state,
            desc.group_epoch,
            tuple(
                p.ShareMember(
                    m.member_id,
                    m.member_epoch,
                    tuple(
                        p.TopicPartition(topic, partition)
                        for topic, partitions in sorted(m.assignment.items())
                        for partition in sorted(partitions)
                    ),
                )
                for m in desc.members
            ),
            tuple(
                p.SharePartitionWindow(
                    w.topic,
                    w.partition,
                    w.start_offset,
                    w.end_offset,
                    w.available,
                    w.acquired,
                    w.acknowledged,
                    w.archived,
                )
                for w in shares.partition_states(req.group)
            ),
        )

    def _alter_share_group_offsets(self, req: p.AlterShareGroupOffsets) -> defer.Deferred[Any]:
        for o in req.offsets:
            if not 0 <= o.partition < self.broker.partition_count(o.topic):
                raise UnknownPartition(f"{o.topic} has no partition {o.partition}")
        offsets = {(o.topic, o.partition): o.offset for o in req.offsets}
        d = share_queue.alter_offsets(self.broker, req.group, offsets)
        return d.addCallback(lambda _: p.ShareOffsetsAltered())

    def _delete_share_group_offsets(self, req: p.DeleteShareGroupOffsets) -> defer.Deferred[Any]:
        d = share_queue.delete_offsets(self.broker, req.group, req.topics)
        return d.addCallback(lambda _: p.ShareOffsetsDeleted())


# ShareFetch's ``start``: the group's own setting, earliest, latest.
_SHARE_STARTS = {0: None, 1: "earliest", 2: "latest"}
# Kafka's acknowledgement types: accept, release, reject.
_ACK_KINDS = frozenset({1, 2, 3})


def _member(member: str) -> str:
    if not member or len(member) > _MAX_MEMBER_ID:
        raise InvalidRequest(f"a share member id is 1 to {_MAX_MEMBER_ID} characters")
    return member


_MAX_MEMBER_ID = 255


def _share_records(taken: list[tuple[int, AcquireResult]]) -> p.Response:
    return p.ShareRecords(
        tuple(
            p.SharePartitionRecords(
                partition,
                b"".join(result.chunks),
                tuple(p.AcquiredRange(r.first, r.last, r.delivery_count) for r in result.acquired),
            )
            for partition, result in taken
        )
    )


def _time(ms: int) -> int:
    """A coordinator time for the wire: Kafka's -1 (none) is `codec.NO_TIME`."""
    return ms if ms > 0 else p.NO_TIME


def _txn_partitions(meta: TxnMetadata) -> tuple[p.TxnPartition, ...]:
    return tuple(p.TxnPartition(t, i) for t, i in sorted(meta.partitions))


def _only_batches(answer: list[ReadResult | Exception]) -> p.Response:
    [result] = answer
    if isinstance(result, Exception):
        raise result
    return _batches(result)


def _batches(result: ReadResult) -> p.Response:
    chunks = result.chunks
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return p.Batches(result.log_start_offset, result.high_watermark, data)


def _topic_configs(topic: str, entries: list[ConfigEntry]) -> p.Response:
    return p.TopicConfigs(
        topic,
        tuple(
            p.TopicConfig(e.name, e.value or "", p.CONFIG_SOURCES.index(e.source)) for e in entries
        ),
    )


def _topic_info(info: TopicInfo) -> p.Response:
    return p.TopicInfo(info.name, len(info.partitions))
