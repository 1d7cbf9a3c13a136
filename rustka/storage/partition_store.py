"""What the broker needs from one partition's storage, whatever engine keeps it.

The broker core, its lanes, produce path, maintenance, log cleaner scheduler,
transaction coordinator and the front-ends and ops tools above them talk to a
partition through this protocol rather than through the local segment log
(`rustka.storage.partition_log.PartitionLog`), so that a second engine -- such
as diskless topics, batches in an object store and offsets in a database --
can serve a partition without the layers above storage changing. Only what
those layers call is here (docs/architecture.md, "The partition store"); how
a log is opened from a directory, its segments cleaned or swapped, is each
engine's own business.

Today the local segment log is the only engine; tests/storage/test_partition_store.py
checks that it satisfies this protocol member by member.

Threading is the local log's (rustka/storage/local_log.py): writes and
maintenance on the partition's lane, one at a time; the offsets, ``read*``,
``offset_for_timestamp`` and ``describe`` from any thread, each answering
from one consistent snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from rustka.record.batch import BatchHeader, Record
from rustka.storage.log_append import AppendInfo
from rustka.storage.log_config import LogConfig
from rustka.storage.log_files import CleanerCheckpoint
from rustka.storage.producer_state import AbortedTxn, ProducerStateManager

__all__ = ["PartitionStore"]


@runtime_checkable
class PartitionStore(Protocol):
    """One partition's log as the layers above storage use it."""

    # ------------------------------------------------------------------ configuration

    @property
    def config(self) -> LogConfig:
        """The topic's log settings (cleanup policy, flush, file.delete.delay.ms, ...)."""
        ...

    # ------------------------------------------------------------------ appending

    def append_many(
        self,
        payloads: Sequence[bytes | bytearray | memoryview],
        validated: Sequence[list[tuple[int, BatchHeader]]] | None = None,
    ) -> list[AppendInfo]:
        """Group commit of several payloads, all or nothing; one AppendInfo each."""
        ...

    def append(self, data: bytes | bytearray | memoryview) -> AppendInfo:
        """Append one payload; a producer's sequence or epoch error is raised."""
        ...

    def append_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int = 0
    ) -> int:
        """End a producer's transaction with a commit or abort marker; its offset.

        Only the transaction coordinator calls it. A producer with no open
        transaction here still gets its marker, which changes nothing, so a
        decision rolled forward twice is harmless.
        """
        ...

    # ------------------------------------------------------------------ reading

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding ``offset``, under the byte budget ``max_bytes``."""
        ...

    def read_committed(self, offset: int, max_bytes: int) -> tuple[bytes, int]:
        """`read` cut at the last stable offset, and that offset."""
        ...

    def read_record(self, offset: int) -> Record | None:
        """The record at ``offset``, or None at or after the end."""
        ...

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """The earliest (offset, timestamp) at or after ``timestamp`` (ListOffsets)."""
        ...

    # ------------------------------------------------------------------ offsets and size

    @property
    def log_start_offset(self) -> int:
        """The first readable offset (retention and DeleteRecords move it up)."""
        ...

    @property
    def end_offset(self) -> int:
        """The next offset to be written; what Fetch answers as the high watermark."""
        ...

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction has ended (Kafka's LSO)."""
        ...

    @property
    def size_bytes(self) -> int:
        """The bytes the partition's records take (metrics, DescribeLogDirs)."""
        ...

    @property
    def segments(self) -> Sequence[object]:
        """The units the records are stored in, oldest first; above storage only counted."""
        ...

    def describe(self) -> dict[str, Any]:
        """Bounds, segment count and bytes, for operators."""
        ...

    # ------------------------------------------------------- producers and transactions

    @property
    def producer_state(self) -> ProducerStateManager:
        """The committed idempotent producer state (epochs of open transactions)."""
        ...

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of each transaction open on this partition."""
        ...

    def aborted_transactions(self, start: int, upto: int) -> list[AbortedTxn]:
        """The aborted transactions with records in [start, upto) (read_committed Fetch)."""
        ...

    def is_aborted(self, producer_id: int, offset: int) -> bool:
        """Whether the transactional batch of ``producer_id`` at ``offset`` was aborted."""
        ...

    # ------------------------------------------------------- deletion, retention, cleaning

    def delete_records(self, offset: int) -> int:
        """Move the log start up to ``offset`` (-1: the end), durably; the new start."""
        ...

    def enforce_retention(self, now_ms: int) -> list[int]:
        """One retention pass (maintenance); the base offsets of what it deleted."""
        ...

    def release_deleted(self) -> int:
        """Free what deletions kept for readers once file.delete.delay.ms is over."""
        ...

    @property
    def cleaner_checkpoint(self) -> CleanerCheckpoint:
        """Where compaction's last round left the log (DescribeLogCleaning)."""
        ...

    # ------------------------------------------------------------------ durability and life

    def flush(self) -> None:
        """Make what was appended durable (the transaction coordinator's markers)."""
        ...

    def roll(self) -> None:
        """Start a new storage unit now, if the current one holds anything."""
        ...

    def close(self) -> None:
        """Flush, record the clean state, release the resources; idempotent."""
        ...
