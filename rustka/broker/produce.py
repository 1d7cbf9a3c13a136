"""The one produce path: every append, from either front-end, goes through here.

Two entry points share everything after routing:

- `Appends.append_records` takes single records (the native seed Produce,
  burst by burst): each record becomes its own one-record batch, the records of
  one partition are concatenated into one payload, and ``reply(tokens,
  partition, first_offset | Failure, context)`` answers them together.
- `Appends.append` takes client-built record batches for one partition (native
  ProduceBatch, Kafka Produce) and returns a Deferred of `AppendResult`.

Both queue their payload on the partition's `Lane` (``append_to``), so
concurrent appends to a partition, from any connection and either protocol,
coalesce into one write and one fsync (group commit), and both finish in
`Appends._appended`: bytes and records counted, the partition marked dirty for
interval flushing (`PartitionLanes.mark_dirty`), parked long-polls woken.
Per-connection order is the
front-end's job (it hands appends over in arrival order); the lane keeps that
order on disk.

`Appends` gets the lanes from the core that creates it and states what else it
needs of the core in `AppendsCore`, so it never imports the core.

Topics that do not exist yet are auto-created on the pool. Every append to a
topic in creation waits in one queue and is replayed in arrival order once the
topic exists, so order holds across the creation too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from twisted.internet import defer
from twisted.python.failure import Failure

from rustka.broker.lanes import OnResult
from rustka.broker.partition_lanes import PartitionLanes, WriteMany
from rustka.broker.stats import BrokerStats
from rustka.broker.waiters import Waiters
from rustka.errors import InvalidBatch, InvalidName, RustkaError, StorageError, UnknownTopic
from rustka.names import INTERNAL_TOPICS, validate_topic
from rustka.record.batch import (
    BatchHeader,
    Record,
    accept_batches,
    encode_batch,
    ms_now,
    parse_header,
    record_prefixes,
    restamp_batches,
)
from rustka.record.compression import codec_of
from rustka.record.header import CONTROL_BIT
from rustka.storage.log_append import AppendInfo
from rustka.storage.log_config import LogConfig
from rustka.storage.partition_store import PartitionStore
from rustka.storage.topic import Topic

PartitionKey = tuple[str, int]
KeyedRecord = tuple[str, bytes | None, bytes | None]
"""``(topic, key, value)``: what `Appends.append_records` stores (a native Produce is one)."""

RecordsReply = Callable[[list[Any], int, "int | Failure", Any], None]
"""``reply(tokens, partition, first_offset_or_failure, context)``.

Called on the reactor thread once per partition a burst touched (maybe before
`append_records` returns). On success the tokens' records got consecutive
offsets from ``first_offset``; a Failure applies to all of them (partition -1
when the record never reached a partition).
"""

EarlyAnswer = Callable[[list[Any], int, int], None]
"""``early(tokens, partition, first_offset)``, the optional last argument of
`Appends.append_records`: called on the I/O pool thread as soon as a partition's group
is stored, before ``reply`` runs on the reactor, so a front-end can answer without
waiting for the hop back (docs/performance.md, "Latency (issue 21)"). It must be
thread-safe and must not raise; ``reply`` still follows for every group."""

BatchesEarly = Callable[["AppendResult"], None]
"""``early(result)``, the optional hook of `Appends.append`: called on the I/O pool
thread once the batches are stored, before the Deferred fires on the reactor."""

_new_tuple: Callable[..., Any] = tuple.__new__


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where `Appends.append` stored a payload of batches."""

    base_offset: int
    last_offset: int
    log_start_offset: int
    duplicate: bool = False
    """A retried idempotent batch: not stored again, these are its original offsets."""
    log_append_time: int = -1
    """The broker time a LogAppendTime topic stamped the batches with; -1 on CreateTime."""


def seed_batches(records: Sequence[KeyedRecord]) -> tuple[bytes, list[tuple[int, BatchHeader]]]:
    """Records as stored batches: each record its own one-record batch.

    A native single-record Produce is stored as a one-record batch (the storage
    format, docs/architecture.md), so a Kafka fetch serves it exactly as produced;
    the burst still costs one write, since the batches are concatenated into
    one payload for the lane. All get the broker's clock at arrival.
    """
    timestamp = ms_now()
    make = _new_tuple
    record = Record
    batches = [
        encode_batch([make(record, (key, value, (), None, None))], timestamp=timestamp)
        for _, key, value in records
    ]
    validated: list[tuple[int, BatchHeader]] = []
    pos = 0
    for batch in batches:
        validated.append((pos, parse_header(batch)))
        pos += len(batch)
    return (batches[0] if len(batches) == 1 else b"".join(batches)), validated


class DisklessAppends(Protocol):
    """The diskless produce path as `Appends` hands work to it, in a lane's shape."""

    def append_to(self, plog: Any, item: Any, on_result: OnResult, context: Any) -> None:
        """Store ``item`` on diskless partition ``plog``; ``on_result(result, context)``."""


class AppendsCore(Protocol):
    """What `Appends` needs of the broker core (`rustka.broker.core.Broker` is one)."""

    max_batch_bytes: int
    """Kafka's message.max.bytes: the largest batch a client may store."""
    stats: BrokerStats
    waiters: Waiters

    @property
    def topics(self) -> Mapping[str, Topic]: ...

    def check_serving(self) -> None:
        """Raise the `BrokerUnavailable` that says why appends cannot run now."""

    def partition(self, topic: str, partition: int) -> PartitionStore:
        """The partition's log; `UnknownTopic` or `UnknownPartition` if there is none."""

    def auto_create_topic(self, name: str) -> defer.Deferred[Topic]:
        """Create ``name`` with the default partitions, or raise why it may not be."""


SchemaIdCheck = Callable[[int], bool]
"""Whether a schema id is known to the schema registry (docs/schema-registry.md,
"Validation on produce"); handed to the broker by the registry's wiring."""


def lane_writer(plog: PartitionStore, known_schema_id: SchemaIdCheck | None = None) -> WriteMany:
    """The ``write_many`` of a partition's lane: `write_batches` on its log."""
    return functools.partial(write_batches, plog, known_schema_id=known_schema_id)


class Appends:
    """The auto-create queue of one broker and its appends; see the module docstring."""

    def __init__(self, core: AppendsCore, lanes: PartitionLanes) -> None:
        self._core = core
        self._lanes = lanes
        # Topics being auto-created -> continuations waiting for them, in arrival order.
        self._creating: dict[str, list[Callable[[Failure | None], None]]] = {}
        self.diskless: DisklessAppends | None = None
        """Where diskless partitions' appends go instead of a lane (set by the broker
        when it has a catalog: rustka/broker/diskless_writer.py)."""

    def _diskless_writer(self) -> DisklessAppends:
        if self.diskless is None:
            raise StorageError("this broker has no diskless engine for a diskless topic")
        return self.diskless

    # -- batches -------------------------------------------------------------------

    def append(
        self,
        topic: str,
        partition: int,
        batches: bytes | memoryview,
        *,
        auto_create: bool,
        internal: bool = False,
        early: BatchesEarly | None = None,
    ) -> defer.Deferred[AppendResult]:
        """Store ``batches`` on the partition's lane, validated there before the write.

        Validation checks every record and decompresses compressed batches, so it
        runs on the I/O pool with the write (`write_batches`), never on the
        reactor; a payload that fails it is refused alone and nothing of it is
        stored, while the other appends coalesced into the same write go on.
        Only the broker itself (``internal``) writes to its internal topics.

        ``early(result)``, when given, is called on the I/O thread as soon as the
        batches are stored (and, under ``flush = "always"``, fsynced), before the
        Deferred fires on the reactor: the Kafka front-end answers a Produce from
        there (docs/performance.md, "Answers from the I/O thread (issue 33)"). It
        gets only a stored result, never a refusal or a retried duplicate; it must
        be thread-safe and must not raise. A diskless partition never calls it.
        """
        core = self._core
        core.check_serving()
        validate_topic(topic, internal_ok=internal)
        d: defer.Deferred[AppendResult] = defer.Deferred()
        payload = bytes(batches) if isinstance(batches, memoryview) else batches

        def go(failure: Failure | None) -> None:
            if failure is not None:
                d.errback(failure)
                return
            try:
                core.check_serving()
                plog = core.partition(topic, partition)
                context = ((topic, partition), len(payload), _batches_appended, (d, plog))
                if plog.config.diskless_enable:
                    self._diskless_writer().append_to(
                        plog, (payload, core.max_batch_bytes), self._appended, context
                    )
                    return
                lane = self._lanes.lane(topic, partition)
            except Exception:
                d.errback(Failure())
                return
            lane.append_to(
                (payload, core.max_batch_bytes),
                self._appended,
                context,
                None if early is None else functools.partial(_batches_early, early, plog),
            )

        self._when_topic(topic, auto_create, go)
        return d

    # -- single records ------------------------------------------------------------

    def append_records(
        self,
        records: Sequence[KeyedRecord],
        tokens: list[Any],
        reply: RecordsReply,
        context: Any,
        early: EarlyAnswer | None = None,
    ) -> None:
        """Route each record by its key and queue one append per partition touched."""
        try:
            self._core.check_serving()
        except Exception:
            reply(tokens, -1, Failure(), context)
            return
        topics = self._core.topics
        creating = self._creating
        groups: dict[PartitionKey, tuple[list[KeyedRecord], list[Any]]] = {}
        for record, token in zip(records, tokens, strict=True):
            name = record[0]
            topic = topics.get(name)
            if name in INTERNAL_TOPICS:  # only the broker writes to its own topics
                refusal = InvalidName(
                    f"invalid topic name {name!r}: names starting with '__' are reserved"
                )
                reply([token], -1, Failure(refusal), context)
                continue
            if topic is None or (creating and name in creating):
                self._records_after_creation(record, token, reply, context, early)
                continue
            partitions = topic.partitions
            partition = 0 if len(partitions) == 1 else topic.partition_for_key(record[1])
            key = (name, partition)
            group = groups.get(key)
            if group is None:
                groups[key] = ([record], [token])
            else:
                group[0].append(record)
                group[1].append(token)
        lanes = self._lanes
        for key, (recs, toks) in groups.items():
            try:
                if any(r[1] is None for r in recs) and self._core.partition(*key).config.compact:
                    recs, toks = self._refuse_keyless(key, recs, toks, reply, context)
                    if not recs:
                        continue
                payload, validated = seed_batches(recs)
                plog = self._core.partition(*key)
                if plog.config.diskless_enable:
                    self._diskless_writer().append_to(
                        plog,
                        (payload, validated),
                        self._appended,
                        (key, len(payload), _records_appended, (toks, reply, context)),
                    )
                    continue
                lane = lanes.existing(key) or lanes.lane(*key)
            except Exception:
                reply(toks, key[1], Failure(), context)
                continue
            lane.append_to(
                (payload, validated),
                self._appended,
                (key, len(payload), _records_appended, (toks, reply, context)),
                None if early is None else functools.partial(_records_early, early, toks, key[1]),
            )

    def _refuse_keyless(
        self,
        key: PartitionKey,
        records: list[KeyedRecord],
        tokens: list[Any],
        reply: RecordsReply,
        context: Any,
    ) -> tuple[list[KeyedRecord], list[Any]]:
        """Answer the records without a key InvalidBatch (a compacted partition could
        never compact them, docs/kafka.md "Log compaction"); return the others."""
        kept: tuple[list[KeyedRecord], list[Any]] = ([], [])
        refused = []
        for record, token in zip(records, tokens, strict=True):
            if record[1] is None:
                refused.append(token)
            else:
                kept[0].append(record)
                kept[1].append(token)
        error = InvalidBatch(
            f"topic {key[0]!r} is compacted: a record without a key cannot be stored there"
        )
        reply(refused, key[1], Failure(error), context)
        return kept

    def _records_after_creation(
        self,
        record: KeyedRecord,
        token: Any,
        reply: RecordsReply,
        context: Any,
        early: EarlyAnswer | None,
    ) -> None:
        def go(failure: Failure | None) -> None:
            if failure is not None:
                reply([token], -1, failure, context)
            else:
                self.append_records([record], [token], reply, context, early)

        self._when_topic(record[0], True, go)

    # -- shared ----------------------------------------------------------------------

    def _when_topic(
        self, name: str, auto_create: bool, then: Callable[[Failure | None], None]
    ) -> None:
        """Call ``then(None)`` once ``name`` exists (now, or after its creation), in order
        with every other append waiting for the same topic; ``then(failure)`` if it
        cannot exist."""
        waiting = self._creating.get(name)
        if waiting is not None:
            waiting.append(then)
            return
        core = self._core
        if name in core.topics:
            then(None)
            return
        try:
            validate_topic(name)
            if not auto_create:
                raise UnknownTopic(f"unknown topic {name!r}")
            created = core.auto_create_topic(name)
        except Exception:
            then(Failure())
            return
        self._creating[name] = [then]
        created.addBoth(self._created, name)

    def _created(self, result: Any, name: str) -> None:
        waiting = self._creating.pop(name)
        failure = result if isinstance(result, Failure) else None
        for then in waiting:
            then(failure)

    def _appended(self, result: Any, context: tuple[PartitionKey, int, Any, Any]) -> None:
        """The bookkeeping every append shares, then the entry point's own answer."""
        key, size, sink, sink_context = context
        if type(result) is not Failure:
            # an AppendInfo: refused (idempotence error), a duplicate, or stored
            if result.error is not None:
                sink(Failure(result.error), key, sink_context)
                return
            if result.duplicate:
                sink(result, key, sink_context)
                return
            first, last = result
            core = self._core
            stats = core.stats
            stats.bytes_in += size
            stats.records_in += last - first + 1
            self._lanes.mark_dirty(key)
            core.waiters.wake(key)
        sink(result, key, sink_context)


def write_batches(
    plog: PartitionStore,
    items: list[tuple[bytes, list[tuple[int, BatchHeader]] | int]],
    known_schema_id: SchemaIdCheck | None = None,
) -> list[AppendInfo]:
    """Runs on the pool: one coalesced write (and fsync) for queued appends.

    The items are made ready by `prepare_batches`; refused payloads answer with
    their error and are left out of the write.
    """
    prepared = prepare_batches(plog.config, items, known_schema_id)
    results = plog.append_many(prepared.payloads, prepared.headers) if prepared.payloads else []
    return prepared.answers(results)


@dataclass(slots=True)
class PreparedBatches:
    """Queued appends made ready for a partition's write, and those refused."""

    count: int
    payloads: list[bytes]
    headers: list[list[tuple[int, BatchHeader]]]
    refused: dict[int, AppendInfo]
    log_append_time: int | None
    """The broker time a LogAppendTime topic stamps every batch with; None on CreateTime."""

    def answers(self, results: list[AppendInfo]) -> list[AppendInfo]:
        """One AppendInfo per item: the write's ``results`` for the payloads it took (in
        order), the refusals for the others."""
        stamp = self.log_append_time
        if stamp is not None:
            for info in results:
                if info.error is None and not info.duplicate:
                    info.log_append_time = stamp
        if not self.refused:
            return results
        stored = iter(results)
        refused = self.refused
        return [refused[i] if i in refused else next(stored) for i in range(self.count)]


def prepare_batches(
    config: LogConfig,
    items: list[tuple[bytes, list[tuple[int, BatchHeader]] | int]],
    known_schema_id: SchemaIdCheck | None = None,
) -> PreparedBatches:
    """Runs on the pool: validate, stamp and recompress queued appends for one write.

    An item carries its validated batch headers (built by the broker, as for the
    seed Produce) or the batch size limit, meaning a client's bytes still to be
    accepted here (`accept_batches`: validated, and a wrong maxTimestamp
    rewritten as Kafka does, so what is stored is what the headers say). On a
    compacted partition every record needs a key (docs/kafka.md, "Log compaction").

    The partition's LogConfig, read once per write, is its topic's configs
    (docs/kafka.md, "Topic configs"): max.message.bytes is the size limit when
    set, the timestamp window applies to client records, and on a
    LogAppendTime topic every batch, the seed Produce's too, is stamped with
    one broker time, which the results carry; compression.type other than
    producer rebuilds batches in that codec. Both storage engines take what
    this makes (`write_batches`, rustka/broker/diskless_writer.py).

    With confluent.value.schema.validation (or .key.) on, every record's value (key)
    must be framed as Confluent's serializers frame it, with a schema id
    ``known_schema_id`` knows; anything else refuses its payload (INVALID_RECORD).
    """
    framed = config.confluent_value_schema_validation or config.confluent_key_schema_validation
    require_keys = config.compact
    stamp = config.message_timestamp_type == "LogAppendTime"
    codec = _topic_codec(config)
    now = ms_now()
    payloads: list[bytes] = []
    headers: list[list[tuple[int, BatchHeader]]] = []
    refused: dict[int, AppendInfo] = {}
    limit = config.max_message_bytes
    for index, (payload, checked) in enumerate(items):
        if isinstance(checked, int):
            try:
                payload, checked = accept_batches(
                    payload,
                    max_batch_bytes=checked if limit is None else limit,
                    require_keys=require_keys,
                    now=now,
                    log_append_time=stamp,
                    before_max_ms=config.message_timestamp_before_max_ms,
                    after_max_ms=config.message_timestamp_after_max_ms,
                    codec=codec,
                )
            except RustkaError as e:
                refused[index] = AppendInfo(-1, -1, error=e)
                continue
        elif stamp or codec is not None:
            payload, checked = restamp_batches(
                payload, checked, codec=codec, log_append_time=now if stamp else None
            )
        if framed:
            unframed = _unframed(config, payload, checked, known_schema_id)
            if unframed is not None:
                refused[index] = AppendInfo(-1, -1, error=InvalidBatch(unframed))
                continue
        payloads.append(payload)
        headers.append(checked)
    return PreparedBatches(len(items), payloads, headers, refused, now if stamp else None)


def _unframed(
    config: LogConfig,
    payload: bytes,
    checked: list[tuple[int, BatchHeader]],
    known_schema_id: SchemaIdCheck | None,
) -> str | None:
    """Why a payload breaks its topic's schema validation, or None when it does not:
    Confluent's framing is magic byte 0 and a 4-byte big-endian schema id."""
    parts = []
    if config.confluent_value_schema_validation:
        parts.append("value")
    if config.confluent_key_schema_validation:
        parts.append("key")
    known: set[bytes] = set()
    for pos, header in checked:
        if header.attributes & CONTROL_BIT:
            continue
        for key, value in record_prefixes(payload, pos, header, 5):
            for part in parts:
                data = value if part == "value" else key
                if data is None or len(data) < 5 or data[0] != 0:
                    return (
                        f"Record {part} is not framed with a schema id (magic byte 0, then 4 "
                        f"bytes), as confluent.{part}.schema.validation requires"
                    )
                if data in known:
                    continue
                schema_id = int.from_bytes(data[1:5], "big")
                if known_schema_id is None or not known_schema_id(schema_id):
                    return (
                        f"Record {part} names schema id {schema_id}, which the schema "
                        "registry does not know"
                    )
                known.add(data)
    return None


def _topic_codec(config: LogConfig) -> int | None:
    """The codec a topic's compression.type stores batches in; None keeps the producer's."""
    kind = config.compression_type
    if kind == "producer":
        return None
    return codec_of("none" if kind == "uncompressed" else kind)


def _records_early(answer: EarlyAnswer, tokens: list[Any], partition: int, result: Any) -> None:
    """On the pool thread: hand a stored group's offsets to the front-end that offered to
    answer from there; a refusal or a duplicate is answered on the reactor only."""
    if result.error is None and not result.duplicate:
        answer(tokens, partition, result[0])


def _batches_early(early: BatchesEarly, plog: PartitionStore, result: Any) -> None:
    """On the pool thread: a stored payload's result for the front-end that offered to
    answer from there; a refusal or a duplicate is answered on the reactor only."""
    if result.error is None and not result.duplicate:
        early(_append_result(result, plog))


def _append_result(result: Any, plog: PartitionStore) -> AppendResult:
    return AppendResult(
        result[0], result[1], plog.log_start_offset, result.duplicate, result.log_append_time
    )


def _records_appended(result: Any, key: PartitionKey, context: tuple[Any, ...]) -> None:
    tokens, reply, reply_context = context
    if type(result) is Failure:
        reply(tokens, key[1], result, reply_context)
    else:
        reply(tokens, key[1], result[0], reply_context)


def _batches_appended(
    result: Any, key: PartitionKey, context: tuple[defer.Deferred[AppendResult], PartitionStore]
) -> None:
    d, plog = context
    if type(result) is Failure:
        d.errback(result)
    else:
        d.callback(_append_result(result, plog))
