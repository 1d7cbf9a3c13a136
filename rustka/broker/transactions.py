"""The transaction coordinator: Kafka's TransactionCoordinator for one node, protocol-neutral.

Each transactional id has one `TxnMetadata` (rustka/storage/txn_log.py): its
producer id and epoch, timeout, state (Kafka's Empty, Ongoing, PrepareCommit,
PrepareAbort, CompleteCommit, CompleteAbort, Dead), the partitions its
transaction added and the offsets TxnOffsetCommit staged. Requests of one id
run one at a time (a lock per id); every new state is written to the
transaction log on the I/O pool ("Durability" says which are fsynced first), so:

- EndTxn writes PrepareCommit (or PrepareAbort), fsynced; then, holding the
  id's lock (so the producer's next request waits for it), a marker goes to
  every partition of the transaction (each on its partition's lane, after the
  batches queued before it) and the staged offsets are committed (commit
  only). EndTxn is answered then, once the outcome is what every reader sees:
  Kafka answers at the durable decision and writes the markers after, and
  programs (and librdkafka's own tests) that read right after a commit or
  abort see the markers there only because Kafka writes them within
  milliseconds. CompleteCommit (CompleteAbort) is written last, fsynced, while
  the producer starts its next transaction; `settled` fires once that is done.
- InitProducerId with the id of an open transaction fences the old producer:
  the epoch is bumped and the transaction aborted with markers of the new
  epoch, so the old producer's batches and markers are refused from then on.
- A transaction open longer than its timeout is aborted the same way (with
  the epoch bumped, as Kafka does), by a pass every ``abort_interval_ms``.
- At startup (`load`) and on every pass, a Prepare state found in the log is
  rolled forward: its markers are written again (a second marker changes
  nothing, `PartitionStore.append_marker`) and the transaction completed.

Durability. Fsynced before the coordinator acts on them or answers: a new
producer id or epoch (else a fenced zombie would be let back in), PrepareCommit
or PrepareAbort (the decision; it carries every partition, group and staged
offset of the transaction), and CompleteCommit or CompleteAbort once every
marker is durable. Complete must be durable before the producer's next
transaction writes anything: a Prepare record left last in the log is rolled
forward with markers of the same producer id and epoch, which would also end
that next transaction's records in the partition. The rest is written without
an fsync, answered as soon as it is the id's current state (the write follows
under the id's lock): Ongoing as partitions and groups are added, and the
offsets TxnOffsetCommit stages. The log is one file, so each fsync makes every
record before it durable, and a clean shutdown leaves it whole. After a crash
the log's Ongoing states may lack what was answered after its last fsync, so
`load` aborts every open transaction with its producer's epoch bumped, adding
the partitions whose producer state holds the producer's records open: no
transaction a crash cut short can be committed in part.

Produce calls `verify` for every transactional batch: the id must be this
producer's, with its current epoch, in an Ongoing transaction that added the
partition; otherwise Kafka's errors (docs/kafka.md, "Transactions").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from rustka.errors import (
    ConcurrentTransactions,
    InvalidBatch,
    InvalidProducerIdMapping,
    InvalidTransactionTimeout,
    InvalidTxnState,
    ProducerFenced,
    UnknownPartition,
    UnknownTopic,
)
from rustka.storage.txn_log import TransactionLog, TxnMetadata, TxnState

__all__ = [
    "TransactionCoordinator",
    "TransactionsCore",
    "TxnOutcome",
]

T = TypeVar("T")
PartitionKey = tuple[str, int]
MAX_EPOCH = 32767
ONGOING, EMPTY = TxnState.ONGOING, TxnState.EMPTY
PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
# Begun and not yet completed: what holds a last stable offset or staged offsets back.
OPEN = (ONGOING, *PREPARING)


class TransactionsCore(Protocol):
    """What the coordinator needs of the broker core."""

    def new_producer_id(self) -> int: ...

    def run(self, f: Callable[..., T], *args: Any) -> defer.Deferred[T]: ...

    def write_marker(
        self, topic: str, partition: int, producer_id: int, epoch: int, commit: bool
    ) -> defer.Deferred[int]: ...

    def commit_offsets(
        self,
        group: str,
        offsets: Mapping[PartitionKey, int],
        metadata: Mapping[PartitionKey, str] | None = None,
    ) -> defer.Deferred[None]: ...

    def partition_exists(self, topic: str, partition: int) -> bool: ...

    def open_transactions(self) -> list[tuple[str, int, int, int]]:
        """(topic, partition, producer id, epoch) of every transaction the logs hold open."""
        ...


@dataclass
class TxnOutcome:
    """Transactions ended since start, by how (for metrics)."""

    committed: int = 0
    aborted: int = 0
    timed_out: int = 0
    fenced: int = 0


def _now(reactor: IReactorTime) -> int:
    return int(reactor.seconds() * 1000)


class TransactionCoordinator:
    """Kafka's transaction coordinator; see the module docstring."""

    log = Logger()

    def __init__(
        self,
        reactor: IReactorTime,
        core: TransactionsCore,
        *,
        max_timeout_ms: int,
        abort_interval_ms: int,
    ) -> None:
        self.reactor = reactor
        self.core = core
        self.max_timeout_ms = max_timeout_ms
        self.abort_interval_ms = abort_interval_ms
        self.outcomes = TxnOutcome()
        self._store: TransactionLog | None = None
        self._meta: dict[str, TxnMetadata] = {}
        self._locks: dict[str, defer.DeferredLock] = {}
        self._loop: task.LoopingCall | None = None
        # Ids whose current (Complete) state is not in the log yet.
        self._unsaved: set[str] = set()
        # The (producer id, epoch) each id had before its last bump that named them
        # (InitProducerId v3+), so a retry of that bump is answered, not fenced.
        self._last_bump: dict[str, tuple[int, int]] = {}

    # -- lifecycle ---------------------------------------------------------------

    def load(self, store: TransactionLog, *, clean: bool = True) -> defer.Deferred[None]:
        """Take the replayed log, roll forward what it left prepared, abort what the
        partitions hold open that the log does not know of, start the timeouts.

        After a crash (``clean`` false) every open transaction is also aborted, its
        producer fenced: the log may have lost what was answered after its last
        fsync ("Durability")."""
        self._store = store
        self._meta = store.entries()
        self._loop = task.LoopingCall(self._pass)
        self._loop.clock = self.reactor
        self._loop.start(self.abort_interval_ms / 1000, now=False).addErrback(
            lambda f: self.log.failure("transaction timeout pass stopped", f)
        )
        jobs = [self._finish_prepared()]
        if not clean:
            jobs.append(self._fence_after_crash())
        jobs.append(self._abort_orphans())
        return defer.gatherResults(jobs).addCallback(lambda _: None)

    def _fence_after_crash(self) -> defer.Deferred[None]:
        """Abort, with the epoch bumped, each transaction a crash may have cut short.

        Its Ongoing record may lack partitions, groups or offsets added after the log's
        last fsync, so letting its producer go on could commit part of what it sent.
        The partitions themselves say where its records are: each open transaction of
        an id's producer joins that id's abort, so every marker is written."""
        lost: dict[str, set[PartitionKey]] = {}
        owners = {m.producer_id: m.transactional_id for m in self._meta.values()}
        for topic, partition, producer_id, _epoch in self.core.open_transactions():
            owner = owners.get(producer_id)
            if owner is not None and self._meta[owner].state not in PREPARING:
                lost.setdefault(owner, set()).add((topic, partition))
        jobs = []
        for meta in list(self._meta.values()):
            tid = meta.transactional_id
            if meta.state in PREPARING or (meta.state != ONGOING and tid not in lost):
                continue
            known = meta.partitions if meta.state == ONGOING else frozenset()
            cut = meta.but(state=ONGOING, partitions=known | lost.get(tid, set()))
            self._meta[tid] = cut
            self.log.warn(
                "aborting the transaction of {tid} (producer {pid}) on {partitions}: the "
                "broker stopped without a clean shutdown while it was open",
                tid=tid,
                pid=cut.producer_id,
                partitions=sorted(f"{t}-{p}" for t, p in cut.partitions),
            )
            jobs.append(self._locked(tid, self._abort_cut, cut))
        d = defer.gatherResults(jobs, consumeErrors=True)
        return d.addCallbacks(lambda _: None, lambda f: self._logged(f, "a crash's abort"))

    @defer.inlineCallbacks
    def _abort_cut(self, meta: TxnMetadata) -> Any:
        yield self._abort_fenced(meta)
        self.outcomes.fenced += 1
        return None

    def _abort_orphans(self) -> defer.Deferred[None]:
        """The log is the truth: a partition holding a transaction open that no
        transactional id's Ongoing or Prepare state covers (the transaction log was
        damaged or removed) would hold its last stable offset back for ever, so it is
        aborted there, with the epoch the partition last saw."""
        covered = {
            (m.producer_id, topic, partition)
            for m in self._meta.values()
            if m.state in OPEN
            for topic, partition in m.partitions
        }
        jobs = []
        for topic, partition, producer_id, epoch in self.core.open_transactions():
            if (producer_id, topic, partition) in covered:
                continue
            self.log.warn(
                "aborting the transaction of producer {pid} open on {topic}-{partition}: "
                "no transactional id in the transaction log covers it",
                pid=producer_id,
                topic=topic,
                partition=partition,
            )
            jobs.append(self.core.write_marker(topic, partition, producer_id, epoch, False))
        d = defer.gatherResults(jobs, consumeErrors=True)
        return d.addCallbacks(lambda _: None, lambda f: self._logged(f, "an orphan abort"))

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    def _finish_prepared(self) -> defer.Deferred[None]:
        jobs = [
            self._locked(meta.transactional_id, self._roll_forward, meta.transactional_id)
            for meta in list(self._meta.values())
            if meta.state in PREPARING
        ]
        return defer.gatherResults(jobs, consumeErrors=True).addCallbacks(
            lambda _: None, lambda f: self._logged(f, "rolling a transaction forward")
        )

    def _logged(self, failure: Failure, what: str) -> None:
        self.log.failure("{what} failed; retried on the next pass", failure, what=what)

    def _pass(self) -> defer.Deferred[None]:
        """Abort expired transactions and retry completions a failure left prepared."""
        now = _now(self.reactor)
        jobs = [self._locked(tid, self._save, tid) for tid in sorted(self._unsaved)]
        for meta in list(self._meta.values()):
            if meta.state in PREPARING:
                jobs.append(
                    self._locked(meta.transactional_id, self._roll_forward, meta.transactional_id)
                )
            elif meta.state == ONGOING and now - meta.start_ms > meta.timeout_ms:
                jobs.append(
                    self._locked(meta.transactional_id, self._expire, meta.transactional_id)
                )
        d = defer.gatherResults(jobs, consumeErrors=True)
        return d.addCallbacks(
            lambda _: None, lambda f: self._logged(f, "a transaction timeout pass")
        )

    # -- views -------------------------------------------------------------------

    def transactions(self) -> list[TxnMetadata]:
        """Every transactional id's metadata (admin views)."""
        return sorted(self._meta.values(), key=lambda m: m.transactional_id)

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        return self._meta.get(transactional_id)

    def open_count(self) -> int:
        """Transactions open or being completed (metrics)."""
        return sum(1 for m in self._meta.values() if m.state in OPEN)

    def pending_offsets(self, group: str) -> set[PartitionKey]:
        """``group``'s partitions with an offset staged by a transaction not yet
        completed (until just after EndTxn's answer): a consumer asking for stable
        offsets (OffsetFetch ``require_stable``) must wait for them, or it would start
        from the offset before the commit and process the transaction's input again."""
        pending: set[PartitionKey] = set()
        for meta in self._meta.values():
            if meta.state in OPEN:
                pending.update(meta.offsets.get(group, ()))
        return pending

    # -- plumbing ----------------------------------------------------------------

    def _locked(self, transactional_id: str, f: Callable[..., Any], *args: Any) -> Any:
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = defer.DeferredLock()
        return lock.run(f, *args)

    def _write(self, meta: TxnMetadata, durable: bool = True) -> defer.Deferred[TxnMetadata]:
        """Write ``meta`` (fsynced if ``durable``: "Durability" above), then make it current."""
        store = self._store
        if store is None:
            raise InvalidTxnState("the transaction coordinator is still loading")

        self._unsaved.discard(meta.transactional_id)

        def done(_: None) -> TxnMetadata:
            self._meta[meta.transactional_id] = meta
            return meta

        return self.core.run(_write_record, store, meta, durable).addCallback(done)

    def _current(self, transactional_id: str, producer_id: int, epoch: int) -> TxnMetadata:
        """Kafka's checks of a request naming a transaction's producer id and epoch."""
        meta = self._meta.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise InvalidProducerIdMapping(
                f"transactional id {transactional_id!r} does not belong to producer {producer_id}"
            )
        if epoch != meta.producer_epoch:
            raise ProducerFenced(
                f"producer {producer_id} of {transactional_id!r} has epoch {epoch}, but epoch "
                f"{meta.producer_epoch} is current: this producer was fenced"
            )
        if meta.state in PREPARING:
            raise ConcurrentTransactions(
                f"the transaction of {transactional_id!r} is being completed; retry"
            )
        return meta

    # -- InitProducerId ------------------------------------------------------------

    def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> defer.Deferred[tuple[int, int]]:
        """(producer id, epoch) for a transactional producer starting up; fences the old one.

        ``expected`` is the (producer id, epoch) of InitProducerId v3+ (KIP-360): the
        producer bumps its own epoch to recover from an error rather than fence itself.
        As Kafka's TransactionCoordinator checks it: another producer id is
        PRODUCER_FENCED; the current epoch is bumped; the epoch before the last bump
        that came with one is answered with the current epoch (a retry whose answer was
        lost; remembered in memory only, so after a restart such a retry is fenced);
        any other epoch is PRODUCER_FENCED; an open transaction is aborted with the
        epoch bumped and CONCURRENT_TRANSACTIONS answered, so the retry is fenced."""
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return defer.fail(
                InvalidTransactionTimeout(
                    f"transaction.timeout.ms {timeout_ms} is not within 1.."
                    f"{self.max_timeout_ms} (transaction_max_timeout_ms)"
                )
            )
        if not transactional_id:
            return defer.fail(InvalidBatch("the transactional id is empty"))
        return self._locked(transactional_id, self._init, transactional_id, timeout_ms, expected)

    @defer.inlineCallbacks
    def _init(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> Any:
        now = _now(self.reactor)
        meta = self._meta.get(transactional_id)
        if meta is None:
            meta = TxnMetadata(
                transactional_id, self.core.new_producer_id(), 0, timeout_ms, EMPTY, now
            )
            meta = yield self._write(meta)
            return meta.producer_id, meta.producer_epoch
        last_pid, last_epoch = self._last_bump.get(transactional_id, (-1, -1))
        rotated = expected is not None and expected[0] == last_pid and expected[1] >= MAX_EPOCH - 1
        if expected is not None and expected[0] != meta.producer_id and not rotated:
            raise ProducerFenced(
                f"producer {expected[0]} of {transactional_id!r} is not its current "
                f"producer {meta.producer_id}: it was fenced"
            )
        if meta.state in PREPARING:
            meta = yield self._roll_forward(transactional_id)
        last = None
        if meta.state == ONGOING:
            meta = yield self._abort_fenced(meta)
            self.outcomes.fenced += 1
            if expected is not None:
                self._last_bump.pop(transactional_id, None)
                raise ConcurrentTransactions(
                    f"the open transaction of {transactional_id!r} was aborted; retry"
                )
            epoch = meta.producer_epoch
        elif expected is None or expected == (meta.producer_id, meta.producer_epoch):
            epoch = meta.producer_epoch + 1
            last = expected
        elif expected == (last_pid, last_epoch):
            epoch, last = meta.producer_epoch, expected
        else:
            raise ProducerFenced(
                f"producer {expected[0]} of {transactional_id!r} has epoch {expected[1]}, but "
                f"epoch {meta.producer_epoch} is current: this producer was fenced"
            )
        if last is None:
            self._last_bump.pop(transactional_id, None)
        else:
            self._last_bump[transactional_id] = last
        producer_id = meta.producer_id
        if epoch >= MAX_EPOCH:
            producer_id, epoch = self.core.new_producer_id(), 0
        meta = yield self._write(
            meta.but(
                producer_id=producer_id,
                producer_epoch=epoch,
                timeout_ms=timeout_ms,
                state=EMPTY,
                last_update_ms=now,
                start_ms=-1,
                partitions=frozenset(),
                offsets={},
            )
        )
        return meta.producer_id, meta.producer_epoch

    # -- AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit ----------------------

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[PartitionKey],
    ) -> defer.Deferred[None]:
        """Add partitions to the transaction (starting it); unknown ones fail the request."""
        wanted = frozenset(partitions)
        return self._answered_early(
            transactional_id, self._add, transactional_id, producer_id, epoch, wanted
        )

    def _answered_early(
        self, transactional_id: str, change: Callable[..., TxnMetadata | None], *args: Any
    ) -> defer.Deferred[None]:
        """Run ``change`` under the id's lock; the state it returns is current (and the
        request answered) at once, and its record is written, without an fsync, while
        the lock is still held, so the id's records stay in order and its next request
        waits for the write ("Durability")."""
        answered: defer.Deferred[None] = defer.Deferred()

        def job() -> defer.Deferred[Any] | None:
            try:
                changed = change(*args)
            except Exception:
                answered.errback(Failure())
                return None
            if changed is not None:
                self._meta[transactional_id] = changed
            answered.callback(None)
            if changed is None:
                return None
            return defer.maybeDeferred(self._write, changed, False).addErrback(
                self._unwritten, transactional_id
            )

        self._locked(transactional_id, job)
        return answered

    def _unwritten(self, failure: Failure, transactional_id: str) -> None:
        """A state the log could not take is current anyway: the pass writes it again."""
        self._unsaved.add(transactional_id)
        self._logged(failure, "writing a transaction's state")

    def _add(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: frozenset[PartitionKey],
        group: str | None = None,
    ) -> TxnMetadata | None:
        meta = self._current(transactional_id, producer_id, epoch)
        for topic, partition in sorted(partitions):
            if not self.core.partition_exists(topic, partition):
                raise UnknownPartition(f"unknown partition {topic}-{partition}")
        now = _now(self.reactor)
        offsets = dict(meta.offsets)
        if group is not None and group not in offsets:
            offsets[group] = {}
        if (
            meta.state == ONGOING
            and partitions <= meta.partitions
            and offsets.keys() == meta.offsets.keys()
        ):
            return None
        started = meta.start_ms if meta.state == ONGOING else now
        if meta.state != ONGOING:
            offsets = {} if group is None else {group: {}}
        changed = meta.but(
            state=ONGOING,
            start_ms=started,
            last_update_ms=now,
            partitions=(meta.partitions if meta.state == ONGOING else frozenset()) | partitions,
            offsets=offsets,
        )
        return changed

    def add_offsets(
        self, transactional_id: str, producer_id: int, epoch: int, group: str
    ) -> defer.Deferred[None]:
        """Make ``group``'s offsets part of the transaction (AddOffsetsToTxn)."""
        return self._answered_early(
            transactional_id, self._add, transactional_id, producer_id, epoch, frozenset(), group
        )

    def txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group: str,
        offsets: Mapping[PartitionKey, tuple[int, str]],
    ) -> defer.Deferred[None]:
        """Stage offsets, visible to OffsetFetch only once the transaction commits."""
        return self._answered_early(
            transactional_id, self._stage, transactional_id, producer_id, epoch, group, offsets
        )

    def _stage(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group: str,
        offsets: Mapping[PartitionKey, tuple[int, str]],
    ) -> TxnMetadata:
        meta = self._current(transactional_id, producer_id, epoch)
        if meta.state != ONGOING or group not in meta.offsets:
            raise InvalidTxnState(
                f"TxnOffsetCommit for group {group!r} before AddOffsetsToTxn added it to the "
                f"transaction of {transactional_id!r}"
            )
        for topic, partition in offsets:
            if not self.core.partition_exists(topic, partition):
                raise UnknownPartition(f"unknown partition {topic}-{partition}")
        staged = {g: dict(o) for g, o in meta.offsets.items()}
        staged[group].update(offsets)
        return meta.but(offsets=staged, last_update_ms=_now(self.reactor))

    # -- EndTxn ----------------------------------------------------------------------

    def end_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> defer.Deferred[None]:
        """Commit or abort: the durable decision, then markers everywhere (and a
        commit's offsets), then the answer; the completion follows it."""
        marked: defer.Deferred[None] = defer.Deferred()
        return self._locked(
            transactional_id, self._end, transactional_id, producer_id, epoch, commit, marked
        ).addCallback(lambda settling: marked if settling else None)

    def settled(self, transactional_id: str) -> defer.Deferred[None]:
        """Fires once everything queued for the id so far (a completion) has run."""
        return self._locked(transactional_id, lambda: None)

    @defer.inlineCallbacks
    def _end(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        commit: bool,
        marked: defer.Deferred[None],
    ) -> Any:
        """True once the decision is durable and `_settle` queued to fire ``marked``."""
        meta = self._current(transactional_id, producer_id, epoch)
        if meta.state == ONGOING:
            prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            yield self._write(meta.but(state=prepare, last_update_ms=_now(self.reactor)))
            # Queued before the lock is released, so ahead of the producer's next request.
            self._locked(
                transactional_id, self._settle, transactional_id, commit, marked
            ).addErrback(self._logged, "completing a transaction")
            return True
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if meta.state == done:
            return False  # a retried EndTxn (Kafka answers it as done)
        raise InvalidTxnState(
            f"{'commit' if commit else 'abort'} of {transactional_id!r} in state "
            f"{meta.state.kafka_name}"
        )

    @defer.inlineCallbacks
    def _settle(self, transactional_id: str, commit: bool, marked: defer.Deferred[None]) -> Any:
        """The markers, offsets and completion of a decision EndTxn made durable;
        ``marked`` (EndTxn's answer) fires once the markers and offsets are written,
        or failed to be (the decision stands and the timeout pass rolls it forward),
        and at the latest when this ends."""
        try:
            meta = self._meta[transactional_id]
            if meta.state not in PREPARING:
                return None
            yield self._finish(meta, marked)
        finally:
            if not marked.called:
                marked.callback(None)
        if commit:
            self.outcomes.committed += 1
        else:
            self.outcomes.aborted += 1
        return None

    @defer.inlineCallbacks
    def _complete(self, meta: TxnMetadata, commit: bool, epoch: int | None = None) -> Any:
        """Prepare, markers, offsets, complete; ``epoch`` is a bumped one (fencing)."""
        prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        prepared = meta.but(
            state=prepare,
            producer_epoch=meta.producer_epoch if epoch is None else epoch,
            last_update_ms=_now(self.reactor),
        )
        prepared = yield self._write(prepared)
        result = yield self._finish(prepared)
        return result

    @defer.inlineCallbacks
    def _markers_and_offsets(self, meta: TxnMetadata) -> Any:
        """A prepared transaction's markers on every partition, then (commit) its offsets."""
        commit = meta.state == TxnState.PREPARE_COMMIT
        marks = []
        for topic, partition in sorted(meta.partitions):
            d = self.core.write_marker(
                topic, partition, meta.producer_id, meta.producer_epoch, commit
            )
            # A partition deleted since it was added has nothing left to mark.
            d.addErrback(lambda f: f.trap(UnknownTopic, UnknownPartition) and None)
            marks.append(d)
        yield defer.gatherResults(marks, consumeErrors=True).addErrback(_first_error)
        if commit:
            for group, offsets in sorted(meta.offsets.items()):
                present = {
                    key: value for key, value in offsets.items() if self.core.partition_exists(*key)
                }
                if present:
                    yield self.core.commit_offsets(
                        group,
                        {key: offset for key, (offset, _m) in present.items()},
                        {key: text for key, (_o, text) in present.items()},
                    )
        return None

    @defer.inlineCallbacks
    def _finish(self, meta: TxnMetadata, marked: defer.Deferred[None] | None = None) -> Any:
        """Carry out a prepared decision, holding the id's lock; ``marked`` fires
        between the markers (and offsets) and the completion.

        Complete is fsynced once every marker is durable, before the id's next
        request: a Prepare record still last in the log after a crash is rolled
        forward with markers of the same producer epoch, which would end a later
        transaction's records in the partition as well ("Durability")."""
        try:
            yield self._markers_and_offsets(meta)
        finally:
            if marked is not None:
                marked.callback(None)
        done = yield self._write(_completed(meta, _now(self.reactor)))
        return done

    def _save(self, transactional_id: str) -> defer.Deferred[Any]:
        if transactional_id not in self._unsaved:
            return defer.succeed(None)
        return self._write(self._meta[transactional_id], durable=False)

    def unsaved(self) -> list[TxnMetadata]:
        """States the log could not take when they became current, for the core to
        write before it closes the log."""
        states = [self._meta[tid] for tid in sorted(self._unsaved)]
        self._unsaved.clear()
        return states

    def _roll_forward(self, transactional_id: str) -> defer.Deferred[TxnMetadata]:
        meta = self._meta[transactional_id]
        if meta.state not in PREPARING:
            return defer.succeed(meta)
        self.log.info(
            "completing the {state} transaction of {tid} the log left prepared",
            state=meta.state.kafka_name,
            tid=transactional_id,
        )
        return self._finish(meta)

    def _abort_fenced(self, meta: TxnMetadata) -> defer.Deferred[TxnMetadata]:
        """Abort ``meta``'s open transaction with the epoch bumped, fencing its producer.

        InitProducerId hands out epochs below MAX_EPOCH, so the bump always has one
        left: at MAX_EPOCH itself the next InitProducerId gives a new producer id, as
        Kafka's coordinator does when fencing exhausts a producer id's epochs."""
        return self._complete(meta, False, min(meta.producer_epoch + 1, MAX_EPOCH))

    @defer.inlineCallbacks
    def _expire(self, transactional_id: str) -> Any:
        meta = self._meta.get(transactional_id)
        now = _now(self.reactor)
        if meta is None or meta.state != ONGOING or now - meta.start_ms <= meta.timeout_ms:
            return None
        self.log.info(
            "aborting the transaction of {tid} (producer {pid}): open for {ms} ms, its "
            "timeout is {timeout} ms",
            tid=transactional_id,
            pid=meta.producer_id,
            ms=now - meta.start_ms,
            timeout=meta.timeout_ms,
        )
        yield self._abort_fenced(meta)
        self.outcomes.timed_out += 1
        return None

    def abort(self, transactional_id: str) -> defer.Deferred[TxnMetadata]:
        """An operator's abort of a hanging transaction (fences its producer). Fires with
        what ended: its partitions and groups, the epoch its markers carried and the
        state it ended in (CompleteCommit when a decided commit was being completed)."""

        @defer.inlineCallbacks
        def go() -> Any:
            meta = self._meta.get(transactional_id)
            if meta is None:
                raise InvalidProducerIdMapping(f"no transactional id {transactional_id!r}")
            if meta.state in PREPARING:
                done = yield self._roll_forward(transactional_id)
            elif meta.state != ONGOING:
                raise InvalidTxnState(
                    f"{transactional_id!r} has no open transaction ({meta.state.kafka_name})"
                )
            else:
                done = yield self._abort_fenced(meta)
                self.outcomes.aborted += 1
            return meta.but(
                producer_id=done.producer_id,
                producer_epoch=done.producer_epoch,
                state=done.state,
                last_update_ms=done.last_update_ms,
            )

        return self._locked(transactional_id, go)

    # -- transactional.id.expiration.ms ------------------------------------------------

    def expire_ids(self, now_ms: int, expiration_ms: int) -> defer.Deferred[list[str]]:
        """Forget every transactional id idle for ``expiration_ms`` (Kafka's
        transactional.id.expiration.ms), as Kafka's TransactionStateManager does: an id
        whose state is Empty, CompleteCommit or CompleteAbort and whose last update is
        that old gets a tombstone in the log (so the log's compaction drops it, and a
        restart does not bring it back) and leaves the coordinator; an id with a
        transaction open or being completed never expires. Its next InitProducerId gets
        a new producer id. Fires with the ids removed."""
        due = sorted(tid for tid, meta in self._meta.items() if _idle(meta, now_ms, expiration_ms))
        jobs = [self._locked(tid, self._expire_id, tid, now_ms, expiration_ms) for tid in due]
        d = defer.gatherResults(jobs, consumeErrors=True).addErrback(_first_error)
        return d.addCallback(lambda names: [self._forget_lock(n) for n in names if n])

    def _expire_id(
        self, transactional_id: str, now_ms: int, expiration_ms: int
    ) -> defer.Deferred[str | None]:
        meta = self._meta.get(transactional_id)
        store = self._store
        if meta is None or store is None or not _idle(meta, now_ms, expiration_ms):
            return defer.succeed(None)
        self._unsaved.discard(transactional_id)

        def gone(_: None) -> str:
            self._meta.pop(transactional_id, None)
            self._last_bump.pop(transactional_id, None)
            self.log.info(
                "transactional id {tid} expired: idle for {ms} ms (producer {pid}, "
                "transactional_id_expiration_ms {expiration})",
                tid=transactional_id,
                ms=now_ms - meta.last_update_ms,
                pid=meta.producer_id,
                expiration=expiration_ms,
            )
            return transactional_id

        return self.core.run(_write_tombstone, store, meta).addCallback(gone)

    def _forget_lock(self, transactional_id: str) -> str:
        lock = self._locks.get(transactional_id)
        if lock is not None and not lock.locked and not lock.waiting:
            del self._locks[transactional_id]
        return transactional_id

    # -- Produce -----------------------------------------------------------------------

    def verify(
        self,
        transactional_id: str | None,
        producer_id: int,
        epoch: int,
        topic: str,
        partition: int,
    ) -> None:
        """May this transactional batch be appended? Raises Kafka's error if not."""
        if transactional_id is None:
            raise InvalidBatch(
                "a transactional batch needs the producer's transactional id in the request"
            )
        meta = self._meta.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            raise InvalidProducerIdMapping(
                f"transactional id {transactional_id!r} does not belong to producer {producer_id}"
            )
        if epoch != meta.producer_epoch:
            raise ProducerFenced(
                f"producer {producer_id} of {transactional_id!r} wrote with epoch {epoch}, "
                f"but epoch {meta.producer_epoch} is current: this producer was fenced"
            )
        if meta.state != ONGOING or (topic, partition) not in meta.partitions:
            raise InvalidTxnState(
                f"partition {topic}-{partition} is not part of an ongoing transaction of "
                f"{transactional_id!r} (AddPartitionsToTxn first)"
            )


def _write_record(store: TransactionLog, meta: TxnMetadata, durable: bool) -> None:
    store.write(meta, durable=durable)


def _write_tombstone(store: TransactionLog, meta: TxnMetadata) -> None:
    store.write(meta, remove=True)


#: Kafka's states from which a transactional id may expire (isExpirationAllowed).
EXPIRABLE = frozenset({EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


def _idle(meta: TxnMetadata, now_ms: int, expiration_ms: int) -> bool:
    return meta.state in EXPIRABLE and meta.last_update_ms <= now_ms - expiration_ms


def _first_error(failure: Failure) -> Failure:
    """gatherResults' FirstError unwrapped, so callers see the marker's own error."""
    inner = getattr(failure.value, "subFailure", None)
    return inner if isinstance(inner, Failure) else failure


def _completed(prepared: TxnMetadata, now: int) -> TxnMetadata:
    commit = prepared.state == TxnState.PREPARE_COMMIT
    return prepared.but(
        state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
        last_update_ms=now,
        partitions=frozenset(),
        offsets={},
    )
