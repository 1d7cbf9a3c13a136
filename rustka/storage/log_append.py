"""What one payload becomes at append: its producer checks and its `AppendInfo`.

Kafka's LogAppendInfo and UnifiedLog's analyzeAndValidateProducerState: a
payload's idempotent and transactional batches are checked against the
producer state staged so far in the group commit (a retry is answered with
its original offsets, a gap or an old epoch is refused) before anything is
written; the checked batches become state through the same
`rustka.storage.producer_state.apply_batch` that replay uses at open.
"""

from __future__ import annotations

from collections.abc import Sequence

from rustka.errors import OutOfOrderSequence, ProducerFenced, RustkaError
from rustka.record.batch import BatchHeader
from rustka.record.control import COMMIT, CONTROL_BIT, marker_type
from rustka.storage.producer_state import BatchMetadata, PendingProducerState, apply_batch

__all__ = ["AppendInfo", "stage_producers"]


class AppendInfo(tuple[int, int]):
    """Where one payload landed: ``(first, last)`` offsets, plus what happened to it.

    Still a 2-tuple, so ``first, last = info`` keeps working. ``duplicate``:
    a retried idempotent batch, not stored again, answered with its original
    offsets. ``error``: the payload was refused (offsets -1) and nothing of it
    was stored, e.g. OutOfOrderSequence or ProducerFenced. ``log_append_time``:
    the time a LogAppendTime topic stamped the payload's batches with, else -1
    (set by the produce path, which stamps them).
    """

    duplicate: bool
    error: RustkaError | None
    log_append_time: int

    def __new__(
        cls, first: int, last: int, *, duplicate: bool = False, error: RustkaError | None = None
    ) -> AppendInfo:
        info = super().__new__(cls, (first, last))
        info.duplicate = duplicate
        info.error = error
        info.log_append_time = -1
        return info

    @property
    def first(self) -> int:
        return self[0]

    @property
    def last(self) -> int:
        return self[1]

    def __repr__(self) -> str:
        extra = ", duplicate" if self.duplicate else ""
        if self.error is not None:
            extra += f", error={self.error!r}"
        return f"AppendInfo({self[0]}, {self[1]}{extra})"


def stage_producers(
    stage: PendingProducerState,
    batches: Sequence[tuple[int, BatchHeader]],
    offset: int,
    payload: bytes | bytearray | memoryview,
) -> AppendInfo | None:
    """Check one payload's idempotent batches; None if it is to be written at ``offset``.

    Stages the batches' sequences (with the offsets they will get) so that a
    later payload of the same group commit is checked against them. A
    payload that is entirely a retry is a duplicate; one that mixes a retry
    with new batches cannot be stored or answered whole, so it is refused.
    """
    inner = stage.begin()
    duplicates: list[BatchMetadata] = []
    fresh = 0
    try:
        for pos, header in batches:
            count = header.last_offset_delta + 1
            if header.producer_id < 0:
                fresh += 1
            elif header.attributes & CONTROL_BIT:
                # Only the coordinator writes these (`append_marker`), one per payload.
                inner.check_marker(header.producer_id, header.producer_epoch)
                apply_batch(inner, header, offset, marker_type(payload, pos) == COMMIT)
                fresh += 1
            else:
                original = inner.check(
                    header.producer_id, header.producer_epoch, header.base_sequence, count
                )
                if original is not None:
                    duplicates.append(original)
                else:
                    fresh += 1
                    apply_batch(inner, header, offset)
            offset += count
        if duplicates and fresh:
            raise OutOfOrderSequence(
                "a payload mixes a retried idempotent batch with new batches; send them separately"
            )
    except (OutOfOrderSequence, ProducerFenced) as e:
        return AppendInfo(-1, -1, error=e)
    if duplicates:
        return AppendInfo(duplicates[0].first_offset, duplicates[-1].last_offset, duplicate=True)
    inner.commit()
    return None
