"""One diskless partition as the layers above storage see it (`PartitionStore`).

Its records live in the object store and its order in the catalog
(rustka/storage/diskless/engine.py); this object answers the broker's questions
about the partition. The offsets (log start, high watermark, size) are kept here
as last seen, because the broker reads them on the reactor thread for every
Metadata, ListOffsets and long-poll check and must not wait for PostgreSQL
there: the engine's commits raise them, and `refresh` (the pool, on a timer, or
before a read past them) takes what other brokers committed.

What a diskless partition does not have is answered as the local log would
answer for a partition without it: no producer state kept here (the catalog
checks idempotent producers), no transactions (refused at produce), no segments
(nothing on disk), no cleaner.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from rustka.errors import OffsetOutOfRange
from rustka.record.batch import BatchHeader, Record, decode_records, scan_batches
from rustka.storage.diskless.engine import DisklessEngine, PartitionWrite
from rustka.storage.log_append import AppendInfo
from rustka.storage.log_config import LogConfig
from rustka.storage.log_files import CleanerCheckpoint
from rustka.storage.producer_state import AbortedTxn, ProducerStateManager

__all__ = ["DisklessPartition"]

_NO_CLEANING = CleanerCheckpoint()
#: A byte budget no partition reaches: find_batches then pages by its row limit alone.
_WHOLE_PARTITION = 1 << 62


class DisklessPartition:
    """A partition of a diskless topic; see the module docstring."""

    def __init__(
        self,
        engine: DisklessEngine,
        topic: str,
        index: int,
        config: LogConfig,
        bounds: tuple[int, int] = (0, 0),
    ) -> None:
        self.engine = engine
        self.topic = topic
        self.index = index
        self.config = config
        self._lock = threading.Lock()
        self._log_start, self._end = bounds
        self._producers = ProducerStateManager()

    # -- offsets ---------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def end_offset(self) -> int:
        return self._end

    @property
    def last_stable_offset(self) -> int:
        """No transactions on a diskless topic: everything below the end is stable."""
        return self._end

    @property
    def size_bytes(self) -> int:
        """Not tracked per broker: the bytes live in the object store (0)."""
        return 0

    @property
    def segments(self) -> Sequence[object]:
        return ()

    def observe(self, log_start: int, end: int) -> None:
        """Take bounds seen in the catalog or a commit; they only ever move up."""
        with self._lock:
            if log_start > self._log_start:
                self._log_start = log_start
            if end > self._end:
                self._end = end

    def refresh(self) -> tuple[int, int]:
        """Re-read the bounds from the catalog (blocking); the bounds now known."""
        self.observe(*self.engine.catalog.bounds(self.topic, self.index))
        return self._log_start, self._end

    def describe(self) -> dict[str, Any]:
        return {
            "log_start_offset": self._log_start,
            "end_offset": self._end,
            "size_bytes": 0,
            "segments": 0,
            "diskless": True,
        }

    # -- appends ---------------------------------------------------------------------------

    def append_many(
        self,
        payloads: Sequence[bytes | bytearray | memoryview],
        validated: Sequence[list[tuple[int, BatchHeader]]] | None = None,
    ) -> list[AppendInfo]:
        """Upload these payloads as one object of their own and commit them.

        The broker's produce path gathers many partitions into one upload instead
        (rustka/broker/diskless_writer.py); this is the same write for one partition.
        """
        data = [bytes(p) for p in payloads]
        headers = (
            [list(h) for h in validated]
            if validated is not None
            else [scan_batches(p)[0] for p in data]
        )
        write = PartitionWrite(
            self.topic,
            self.index,
            data,
            headers,
            self.config.message_timestamp_type == "LogAppendTime",
        )
        [infos] = self.engine.write([write])
        self.stored(infos)
        return infos

    def append(self, data: bytes | bytearray | memoryview) -> AppendInfo:
        [info] = self.append_many([data])
        if info.error is not None:
            raise info.error
        return info

    def stored(self, infos: Sequence[AppendInfo]) -> None:
        """Raise the known end past what a write just committed."""
        ends = [info.last + 1 for info in infos if info.error is None and not info.duplicate]
        if ends:
            self.observe(self._log_start, max(ends))

    def append_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int = 0
    ) -> int:
        """Never called: a transactional produce to a diskless topic is refused."""
        raise NotImplementedError("diskless topics do not support transactions")

    # -- reads -----------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Payloads from the one holding ``offset``, under the budget (at least one)."""
        if offset > self._end or offset < self._log_start:
            self.refresh()
        if offset < self._log_start or offset > self._end:
            raise OffsetOutOfRange(offset, self._log_start, self._end)
        if offset == self._end:
            return b""
        data = self.engine.read(self.topic, self.index, offset, max_bytes)
        if data:
            # The catalog may hold more than this broker has seen: the end it reports
            # must never trail the records it returns.
            found = scan_batches(data)[0]
            self.observe(self._log_start, found[-1][1].next_offset)
        return data

    def read_committed(self, offset: int, max_bytes: int) -> tuple[bytes, int]:
        data = self.read(offset, max_bytes)
        return data, self._end

    def read_record(self, offset: int) -> Record | None:
        if offset >= self._end:
            self.refresh()
            if offset >= self._end:
                return None
        for record in _records(self.read(offset, 1), offset):
            if record.offset == offset:
                return record
        return None

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """Kafka's ListOffsets by time: the first record at or above the log start whose
        timestamp reaches ``timestamp``.

        DeleteRecords can put the log start inside a payload, so the payload the catalog
        finds may reach the time only with records below it; the answer is then in the
        first later payload that reaches it.
        """
        catalog = self.engine.catalog
        hit = catalog.offset_for_timestamp(self.topic, self.index, timestamp)
        if hit is None:
            return None
        offset = max(hit[0], self.refresh()[0])
        while True:
            locations = catalog.find_batches(self.topic, self.index, offset, _WHOLE_PARTITION)
            if not locations:
                return None
            for location in locations:
                if location.max_timestamp < timestamp:
                    continue
                start = max(location.base_offset, offset)
                data = self.engine.read(self.topic, self.index, start, 1)
                for record in _records(data, start):
                    if record.timestamp is not None and record.timestamp >= timestamp:
                        assert record.offset is not None
                        return record.offset, record.timestamp
            offset = locations[-1].last_offset + 1

    # -- producers and transactions --------------------------------------------------------

    @property
    def producer_state(self) -> ProducerStateManager:
        """Empty: the catalog keeps diskless producers' state (docs/diskless.md)."""
        return self._producers

    def open_transactions(self) -> dict[int, int]:
        return {}

    def aborted_transactions(self, start: int, upto: int) -> list[AbortedTxn]:
        return []

    def is_aborted(self, producer_id: int, offset: int) -> bool:
        return False

    # -- deletion and retention ------------------------------------------------------------

    def delete_records(self, offset: int) -> int:
        start = self.engine.catalog.delete_records(self.topic, self.index, offset)
        self.observe(start, self._end)
        return start

    def enforce_retention(self, now_ms: int) -> list[int]:
        """Drop whole payloads past retention.ms or over retention.bytes, oldest first;
        the old log start if it moved (the objects go later, to the collector)."""
        config = self.config
        if not config.delete:
            return []
        before = self._log_start
        start = self.engine.catalog.enforce_retention(
            self.topic,
            self.index,
            retention_ms=config.retention_ms,
            retention_bytes=config.retention_bytes,
            now_ms=now_ms,
        )
        self.observe(start, self._end)
        return [before] if start > before else []

    def release_deleted(self) -> int:
        return 0

    @property
    def cleaner_checkpoint(self) -> CleanerCheckpoint:
        return _NO_CLEANING

    # -- durability and life ---------------------------------------------------------------

    def flush(self) -> None:
        """Nothing to do: a payload is durable in the store and the catalog once answered."""

    def roll(self) -> None:
        """Nothing to roll: every upload is an object of its own."""

    def close(self) -> None:
        """Nothing held per partition: the engine owns the connections."""


def _records(data: bytes, min_offset: int) -> list[Record]:
    """The records of every batch in ``data`` (a payload can hold several), CRC-checked,
    from ``min_offset`` on."""
    records: list[Record] = []
    for pos, header in scan_batches(data)[0]:
        if header.next_offset > min_offset:
            records.extend(decode_records(data, pos, verify=True, min_offset=min_offset))
    return records
