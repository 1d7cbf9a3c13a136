"""The transaction coordinator's durable state, kept as a log in ``data_dir/__transactions/``.

Like Kafka's ``__transaction_state``, every change of a transactional id's
metadata (producer id and epoch, timeout, state, partitions, and here also the
offsets a TxnOffsetCommit staged) is one record whose key is the id, and
startup replays the log keeping the last record per key. The coordinator
writes the record of a state before acting on it (PrepareCommit before any
marker, CompleteCommit after the last one), so a restart finds every decision
it has to roll forward (docs/kafka.md, "Transactions").

Replay survives damage as the offsets log does (`rustka.storage.offsets.salvage`:
a damaged batch is skipped and reported, the rest applies); then the live
entries are compacted into a fresh segment. Compaction also runs once the log
holds many times more records than ids.

Record formats (big-endian; ``str`` is a u16 byte length then UTF-8):

- key, version 1: ``u16 version=1, str transactional_id``
- value: ``i64 producer id, i16 epoch, i32 timeout ms, u8 state, i64 last update
  ms, i64 transaction start ms, u32 n, n x (str topic, u32 partition), u32 g,
  g x (str group, u32 m, m x (str topic, u32 partition, i64 offset, str
  metadata))``; a null value deletes the id (Kafka's transactional id expiry).
"""

from __future__ import annotations

import dataclasses
import enum
import struct
import threading
from collections.abc import Mapping
from pathlib import Path

from rustka.errors import InvalidRequest
from rustka.record.batch import Record, encode_batch, ms_now
from rustka.storage.log_config import LogConfig
from rustka.storage.offsets import SkippedBatch, salvage
from rustka.storage.partition_log import PartitionLog

__all__ = [
    "TRANSACTIONS_DIR",
    "TransactionLog",
    "TxnMetadata",
    "TxnState",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]

TRANSACTIONS_DIR = "__transactions"
KEY_VERSION = 1
COMPACT_RATIO = 4
COMPACT_MIN_RECORDS = 10_000

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">qhiBqq")


class TxnState(enum.IntEnum):
    """Kafka's TransactionState, with its stored numbers."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's admin tools show (DescribeTransactions, ListTransactions)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


PartitionKey = tuple[str, int]
# group -> {(topic, partition): (offset, metadata)}
PendingOffsets = Mapping[str, Mapping[PartitionKey, tuple[int, str]]]


@dataclasses.dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id's coordinator state (Kafka's TransactionMetadata); replaced
    as a whole at every change."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    last_update_ms: int
    start_ms: int = -1
    partitions: frozenset[PartitionKey] = frozenset()
    offsets: PendingOffsets = dataclasses.field(default_factory=dict)

    def but(self, **changes: object) -> TxnMetadata:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _str(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > 0xFFFF:
        raise InvalidRequest(f"name of {len(data)} bytes is too long (at most 65535)")
    return _U16.pack(len(data)) + data


def _read_str(data: bytes, pos: int) -> tuple[str, int]:
    (length,) = _U16.unpack_from(data, pos)
    pos += 2
    if pos + length > len(data):
        raise struct.error("string runs past the value")
    return data[pos : pos + length].decode("utf-8"), pos + length


def encode_key(transactional_id: str) -> bytes:
    return _U16.pack(KEY_VERSION) + _str(transactional_id)


def decode_key(data: bytes) -> str | None:
    try:
        (version,) = _U16.unpack_from(data, 0)
        if version != KEY_VERSION:
            return None
        name, end = _read_str(data, 2)
    except (struct.error, UnicodeDecodeError):
        return None
    return name if end == len(data) else None


def encode_value(meta: TxnMetadata) -> bytes:
    parts = [
        _HEAD.pack(
            meta.producer_id,
            meta.producer_epoch,
            meta.timeout_ms,
            int(meta.state),
            meta.last_update_ms,
            meta.start_ms,
        ),
        _U32.pack(len(meta.partitions)),
    ]
    for topic, partition in sorted(meta.partitions):
        parts += [_str(topic), _U32.pack(partition)]
    parts.append(_U32.pack(len(meta.offsets)))
    for group, offsets in sorted(meta.offsets.items()):
        parts += [_str(group), _U32.pack(len(offsets))]
        for (topic, partition), (offset, metadata) in sorted(offsets.items()):
            parts += [_str(topic), _U32.pack(partition), _I64.pack(offset), _str(metadata)]
    return b"".join(parts)


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata | None:
    """The metadata a value holds, or None if it does not parse (skipped on replay)."""
    try:
        pid, epoch, timeout, state, updated, started = _HEAD.unpack_from(data, 0)
        pos = _HEAD.size
        (count,) = _U32.unpack_from(data, pos)
        pos += 4
        partitions = set()
        for _ in range(count):
            topic, pos = _read_str(data, pos)
            (partition,) = _U32.unpack_from(data, pos)
            pos += 4
            partitions.add((topic, partition))
        (groups,) = _U32.unpack_from(data, pos)
        pos += 4
        offsets: dict[str, dict[PartitionKey, tuple[int, str]]] = {}
        for _ in range(groups):
            group, pos = _read_str(data, pos)
            (n,) = _U32.unpack_from(data, pos)
            pos += 4
            entries = offsets.setdefault(group, {})
            for _ in range(n):
                topic, pos = _read_str(data, pos)
                (partition,) = _U32.unpack_from(data, pos)
                (offset,) = _I64.unpack_from(data, pos + 4)
                metadata, pos = _read_str(data, pos + 12)
                entries[(topic, partition)] = (offset, metadata)
        if pos != len(data):
            return None
        return TxnMetadata(
            transactional_id,
            pid,
            epoch,
            timeout,
            TxnState(state),
            updated,
            started,
            frozenset(partitions),
            offsets,
        )
    except (struct.error, UnicodeDecodeError, ValueError):
        return None


class TransactionLog:
    """Every transactional id's last stored metadata, and the log it is replayed from.

    Writes come from the coordinator's one lane; ``entries`` may be read from
    any thread.
    """

    def __init__(
        self, log: PartitionLog | None, directory: Path, config: LogConfig | None = None
    ) -> None:
        # No directory until the first transactional id: a data dir without
        # transactions looks as it did before them.
        self.log = log
        self.directory = directory
        self._config = config
        self.replay_skipped = 0
        self.skipped_batches: list[SkippedBatch] = []
        self._state: dict[str, TxnMetadata] = {}
        self._records = 0
        self._lock = threading.Lock()

    @classmethod
    def open(cls, data_dir: Path, config: LogConfig, *, recover: bool = False) -> TransactionLog:
        """Open (or create) the log and replay it; retention never applies to it."""
        # The coordinator decides which records to fsync (``write``'s ``durable``), so
        # the broker's flush policy must not fsync every one of them.
        log_config = dataclasses.replace(
            config, retention_ms=None, retention_bytes=None, flush="never"
        )
        directory = Path(data_dir) / TRANSACTIONS_DIR
        if not directory.is_dir():
            return cls(None, directory, log_config)
        records, skipped = salvage(directory, torn_tail_ok=recover)
        log = PartitionLog.open(directory, log_config, recover=recover)
        store = cls(log, directory, log_config)
        try:
            for record in records:
                store._records += 1
                store._apply(record)
            store.skipped_batches = skipped
            if skipped:
                store.compact()
        except BaseException:
            log.close()
            raise
        return store

    def _apply(self, record: Record) -> None:
        name = decode_key(record.key) if record.key is not None else None
        if name is not None and record.value is None:
            self._state.pop(name, None)
            return
        meta = None if name is None or record.value is None else decode_value(name, record.value)
        if meta is None:
            self.replay_skipped += 1
            return
        self._state[meta.transactional_id] = meta

    def entries(self) -> dict[str, TxnMetadata]:
        """A snapshot of every id's metadata."""
        with self._lock:
            return dict(self._state)

    def write(self, meta: TxnMetadata, *, remove: bool = False, durable: bool = True) -> None:
        """Append ``meta`` (or its id's tombstone), and fsync it unless ``durable`` is
        False: the coordinator acts on a state only once it is durable, except for
        those a crash may lose (`rustka.broker.transactions`, "Durability"). One file
        holds the log, so an fsync also makes every record before it durable."""
        key = encode_key(meta.transactional_id)
        value = None if remove else encode_value(meta)
        if self.log is None:
            assert self._config is not None
            self.log = PartitionLog.open(self.directory, self._config)
        self.log.append(encode_batch([Record(key, value)], timestamp=ms_now()))
        if durable:
            self.log.flush()
        self._records += 1
        with self._lock:
            if remove:
                self._state.pop(meta.transactional_id, None)
            else:
                self._state[meta.transactional_id] = meta
        if self._records > max(COMPACT_RATIO * len(self._state), COMPACT_MIN_RECORDS):
            self.compact()

    def compact(self) -> None:
        """Rewrite the live entries into a fresh segment and drop the older ones (crash-safe
        by order, as `OffsetsStore.compact`: the copy is durable before anything goes)."""
        with self._lock:
            items = list(self._state.values())
        log = self.log
        if log is None:
            return
        log.roll()
        start = log.end_offset
        if items:
            log.append(
                encode_batch(
                    [Record(encode_key(m.transactional_id), encode_value(m)) for m in items]
                )
            )
        log.flush()
        log.delete_before(start)
        self._records = len(items)

    @property
    def records_in_log(self) -> int:
        return self._records

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
