"""One broker's diskless engine: uploads payloads as one object, commits their order,
serves reads back from the store (docs/diskless.md).

Plain blocking code run on the broker's I/O pool. A write is the whole diskless
produce path below the broker: the payloads of many partitions, already
validated by the produce path, are laid out in one object, the object is
uploaded with a conditional create, and only then are the payloads' coordinates
committed to the catalog in one transaction, which assigns their offsets. A
payload is acknowledged only after both, so nothing is acknowledged that a crash
can lose; a crash between the two leaves an object no row points to, which the
collector (`collect`) deletes once it is older than the grace period.

A payload is one catalog entry: its batches are stored back to back exactly as
validated, with the producer's base offsets. The offsets the catalog assigns are
written into each batch's baseOffset when it is read (the CRC does not cover
that field), so an object never has to be rewritten.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from rustka.errors import (
    InvalidBatch,
    OutOfOrderSequence,
    ProducerFenced,
    RustkaError,
    UnknownPartition,
)
from rustka.record.batch import BatchHeader, ms_now, set_base_offset
from rustka.record.header import (
    LAST_OFFSET_DELTA,
    LAST_OFFSET_DELTA_AT,
    LOG_OVERHEAD,
    OFFSET_LENGTH,
    TRANSACTIONAL_BIT,
)
from rustka.storage.diskless.catalog import (
    BatchEntry,
    BatchLocation,
    Catalog,
    CommitError,
    Committed,
)
from rustka.storage.diskless.object_cache import ObjectCache
from rustka.storage.diskless.object_store import ObjectStore
from rustka.storage.diskless.wal_object import (
    UPLOADS_PREFIX,
    ObjectBuilder,
    new_object_key,
    object_key_time_ms,
)
from rustka.storage.log_append import AppendInfo

__all__ = ["DisklessEngine", "EngineStats", "PartitionWrite"]

_TRANSACTIONS_REFUSED = (
    "diskless topics (diskless.enable=true) do not support transactions yet: "
    "use a local topic for transactional producers"
)
_MIXED_PRODUCERS = (
    "a diskless topic stores one producer's batches per partition per request; "
    "this request mixes producers"
)


@dataclass(slots=True)
class PartitionWrite:
    """A partition's validated payloads for one upload, and where their answers go."""

    topic: str
    partition: int
    payloads: list[bytes]
    headers: list[list[tuple[int, BatchHeader]]]
    log_append_time: bool = False


@dataclass(slots=True)
class EngineStats:
    """What the engine did, for metrics and the benchmarks (docs/diskless.md, "Metrics")."""

    uploads: int = 0
    upload_bytes: int = 0
    upload_failures: int = 0
    commits: int = 0
    commit_failures: int = 0
    batches_committed: int = 0
    fetch_reads: int = 0
    objects_collected: int = 0
    orphans_collected: int = 0


@dataclass(slots=True)
class _Pending:
    write_index: int
    payload_index: int
    record_count: int
    refusal: RustkaError | None = None


@dataclass
class DisklessEngine:
    """The catalog, the object store and the cache of one broker."""

    catalog: Catalog
    store: ObjectStore
    cache: ObjectCache
    broker_id: int = 0
    orphan_grace_ms: int = 10 * 60 * 1000
    """An object no row points to is deleted only once it is this old: younger, it may
    still be between its upload and its commit on some broker."""
    stats: EngineStats = field(default_factory=EngineStats)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    # -- writes --------------------------------------------------------------------------

    def write(self, writes: Sequence[PartitionWrite]) -> list[list[AppendInfo]]:
        """Upload every payload of ``writes`` as one object, then commit them; one
        AppendInfo per payload, in order. Raises (nothing acknowledged) when the upload
        or the commit fails: `ObjectStoreUnavailable` or `CatalogUnavailable`."""
        builder = ObjectBuilder()
        entries: list[BatchEntry] = []
        pending: list[_Pending] = []
        answers: list[list[AppendInfo | None]] = [[None] * len(w.payloads) for w in writes]
        for wi, write in enumerate(writes):
            pairs = zip(write.payloads, write.headers, strict=True)
            for pi, (payload, headers) in enumerate(pairs):
                entry = self._entry(write, payload, headers)
                if isinstance(entry, RustkaError):
                    answers[wi][pi] = AppendInfo(-1, -1, error=entry)
                    continue
                offset, size = builder.add(write.topic, write.partition, payload)
                entries.append(entry_at(entry, offset, size))
                pending.append(_Pending(wi, pi, entry.record_count))
        if entries:
            now = ms_now()
            data = builder.build()
            key = new_object_key(self.broker_id)
            try:
                self.store.put_new(key, data)
            except Exception:
                self.stats.upload_failures += 1
                raise
            self.stats.uploads += 1
            self.stats.upload_bytes += len(data)
            self.cache.put(key, data)
            try:
                committed = self.catalog.commit(key, self.broker_id, len(data), entries, now)
            except Exception:
                self.stats.commit_failures += 1
                raise
            self.stats.commits += 1
            self.stats.batches_committed += len(entries)
            for done, result in zip(pending, committed, strict=True):
                answers[done.write_index][done.payload_index] = _answer(result, done.record_count)
        return [[a if a is not None else AppendInfo(-1, -1) for a in row] for row in answers]

    def _entry(
        self, write: PartitionWrite, payload: bytes, headers: list[tuple[int, BatchHeader]]
    ) -> BatchEntry | RustkaError:
        first = headers[0][1]
        if any(h.attributes & TRANSACTIONAL_BIT for _, h in headers):
            return InvalidBatch(_TRANSACTIONS_REFUSED)
        if any(
            h.producer_id != first.producer_id or h.producer_epoch != first.producer_epoch
            for _, h in headers
        ):
            return InvalidBatch(_MIXED_PRODUCERS)
        records = sum(h.last_offset_delta + 1 for _, h in headers)
        return BatchEntry(
            topic=write.topic,
            partition=write.partition,
            byte_offset=0,
            byte_size=len(payload),
            record_count=records,
            base_timestamp=first.base_timestamp,
            max_timestamp=max(h.max_timestamp for _, h in headers),
            timestamp_type=1 if write.log_append_time else 0,
            producer_id=first.producer_id,
            producer_epoch=first.producer_epoch,
            base_sequence=first.base_sequence,
        )

    # -- reads ---------------------------------------------------------------------------

    def read(self, topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
        """Whole payloads from the one holding ``offset``, under ``max_bytes`` (at least one),
        with the offsets the catalog assigned written into their batches."""
        locations = self.catalog.find_batches(topic, partition, offset, max_bytes)
        if not locations:
            return b""
        self.stats.fetch_reads += 1
        out = bytearray()
        used = 0
        for location in locations:
            if used and used + location.byte_size > max_bytes:
                break
            chunk = self._bytes_of(location)
            start = len(out)
            out += chunk
            _assign_offsets(out, start, location.base_offset)
            used += location.byte_size
        return bytes(out)

    def _bytes_of(self, location: BatchLocation) -> bytes:
        cached = self.cache.get(location.object_key, location.byte_offset, location.byte_size)
        if cached is not None:
            return cached
        return self.store.get_range(location.object_key, location.byte_offset, location.byte_size)

    # -- collection ------------------------------------------------------------------------

    def collect(self, now_ms: int | None = None, limit: int = 1000) -> tuple[int, int]:
        """Delete the objects no row uses any more, then the orphans of crashed uploads
        older than the grace period; (objects, orphans) deleted. Rows always go first
        (deletion and retention), so an object a row points to is never deleted."""
        now = ms_now() if now_ms is None else now_ms
        unused = self.catalog.objects_to_delete(limit)
        for key in unused:
            self.store.delete(key)
        if unused:
            self.catalog.forget_objects(unused)
        orphans: list[str] = []
        seen: list[str] = []
        # Only keys of the uploads' own shape (wal_object.py): a bucket or prefix shared
        # with anything else never loses that thing's objects.
        for key, _size, modified in self.store.list_objects(UPLOADS_PREFIX):
            if object_key_time_ms(key) is None:
                continue
            if (now - modified * 1000) >= self.orphan_grace_ms:
                seen.append(key)
            if len(seen) >= limit:
                break
        if seen:
            known = self.catalog.known_objects(seen)
            orphans = [key for key in seen if key not in known]
            for key in orphans:
                self.store.delete(key)
        self.stats.objects_collected += len(unused)
        self.stats.orphans_collected += len(orphans)
        return len(unused), len(orphans)

    def close(self) -> None:
        """Release the catalog's connections and the store's client."""
        try:
            self.catalog.close()
        finally:
            self.store.close()


def entry_at(entry: BatchEntry, byte_offset: int, byte_size: int) -> BatchEntry:
    """``entry`` placed at its bytes in the object."""
    return BatchEntry(
        topic=entry.topic,
        partition=entry.partition,
        byte_offset=byte_offset,
        byte_size=byte_size,
        record_count=entry.record_count,
        base_timestamp=entry.base_timestamp,
        max_timestamp=entry.max_timestamp,
        timestamp_type=entry.timestamp_type,
        producer_id=entry.producer_id,
        producer_epoch=entry.producer_epoch,
        base_sequence=entry.base_sequence,
    )


def _answer(result: Committed, record_count: int) -> AppendInfo:
    error = result.error
    if error == CommitError.NONE:
        info = AppendInfo(result.base_offset, result.base_offset + record_count - 1)
        info.log_append_time = result.log_append_time
        return info
    if error == CommitError.DUPLICATE:
        return AppendInfo(result.base_offset, result.base_offset + record_count - 1, duplicate=True)
    if error == CommitError.OUT_OF_ORDER_SEQUENCE:
        return AppendInfo(-1, -1, error=OutOfOrderSequence("out of order sequence number"))
    if error == CommitError.INVALID_PRODUCER_EPOCH:
        return AppendInfo(-1, -1, error=ProducerFenced("the producer's epoch is fenced"))
    return AppendInfo(-1, -1, error=UnknownPartition("unknown partition"))


def _assign_offsets(buf: bytearray, start: int, base_offset: int) -> None:
    """Give the batches from ``start`` on consecutive offsets from ``base_offset``."""
    pos = start
    end = len(buf)
    next_offset = base_offset
    while pos + LOG_OVERHEAD <= end:
        _, length = OFFSET_LENGTH.unpack_from(buf, pos)
        (delta,) = LAST_OFFSET_DELTA.unpack_from(buf, pos + LAST_OFFSET_DELTA_AT)
        set_base_offset(buf, pos, next_offset)
        next_offset += delta + 1
        pos += length + LOG_OVERHEAD
