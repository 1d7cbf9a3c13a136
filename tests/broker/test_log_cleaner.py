"""The broker's log cleaner (rustka/broker/log_cleaner.py) on a real broker and I/O pool:
which partition, when, at what pace, and what happens around it (stop, topic
deletion, damage), plus the produce path's refusal of keyless records."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from prometheus_client import generate_latest
from twisted.internet import defer
from twisted.python.failure import Failure

from rustka.broker.core import SET
from rustka.broker.log_cleaner import BURST_S
from rustka.errors import InvalidBatch
from rustka.ops.metrics import metrics_registry
from rustka.record.batch import Record, decode_records, encode_batch, ms_now, parse_header
from rustka.storage.log_files import CLEANED_SUFFIX
from rustka.storage.partition_log import PartitionLog
from tests.conftest import RunningBroker, within

COMPACTED = {
    "cleanup_policy": "compact",
    "flush": "never",
    "segment_bytes": 4096,
    "cleaner_backoff_ms": 3_600_000,
    "cleaner_io_max_bytes_per_second": -1,
}


async def produce(
    running: RunningBroker, topic: str, rounds: int, keys: int = 10, size: int = 0
) -> None:
    core = running.broker
    if topic not in core.topics:
        await within(core.create_topic(topic, 1))
    for i in range(rounds):
        batch = encode_batch(
            [Record(b"key-%d" % k, b"value-%d-%d" % (i, k) + b"x" * size) for k in range(keys)],
            timestamp=ms_now(),
        )
        await within(core.append(topic, 0, batch, auto_create=False))


def stored(plog: PartitionLog) -> list[Record]:
    out: list[Record] = []
    offset = plog.log_start_offset
    while offset < plog.end_offset:
        data = plog.read(offset, 1 << 20)
        pos = 0
        while pos < len(data):
            header = parse_header(data, pos)
            out.extend(decode_records(data, pos))
            pos += header.size
            offset = header.next_offset
    return out


@pytest_twisted.ensureDeferred
async def test_the_broker_cleans_the_dirtiest_compacted_partition(broker_factory: Any) -> None:
    running = await broker_factory(**COMPACTED)
    try:
        core = running.broker
        await produce(running, "light", 30)
        await produce(running, "heavy", 120)
        heavy = core.partition("heavy", 0)
        light = core.partition("light", 0)
        assert len(heavy.segments) > 5
        await within(core.cleaner.run_pass())
        totals = core.cleaner.totals
        assert totals.rounds == 1
        # Both were due (every byte dirty); ties go to the first found, and both end up
        # clean after a second pass.
        await within(core.cleaner.run_pass())
        assert totals.rounds == 2
        for plog in (heavy, light):
            records = [r for r in stored(plog) if r.offset < plog.segments[-1].base_offset]
            assert len({r.key for r in records}) == len(records)
        state = totals.partitions[("heavy", 0)]
        assert state.rounds == 1 and state.last_clean_ms is not None
        assert state.bytes_read > state.bytes_written > 0
        assert totals.bytes_read == sum(s.bytes_read for s in totals.partitions.values())
        before = totals.rounds
        await within(core.cleaner.run_pass())  # nothing is due now
        assert totals.rounds == before
        assert totals.partitions[("heavy", 0)].dirty_ratio == 0.0
        assert core.stats.background_failures.get("cleaner", 0) == 0
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_topic_that_does_not_compact_is_never_cleaned(broker_factory: Any) -> None:
    running = await broker_factory(segment_bytes=4096, cleaner_backoff_ms=3_600_000)
    try:
        core = running.broker
        await produce(running, "plain", 60)
        await within(core.cleaner.run_pass())
        assert core.cleaner.totals.rounds == 0 and not core.cleaner.totals.partitions
        assert len(stored(core.partition("plain", 0))) == 600
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_the_cleaner_keeps_to_its_rate_limit(broker_factory: Any) -> None:
    """A lower bound only: the round cannot finish before its bytes fit the limit."""
    limit = 128 * 1024
    running = await broker_factory(**{**COMPACTED, "cleaner_io_max_bytes_per_second": limit})
    try:
        core = running.broker
        await produce(running, "paced", 100, size=100)
        started = time.monotonic()
        await within(core.cleaner.run_pass(), 60)
        elapsed = time.monotonic() - started
        stats = core.cleaner.totals.last_round
        assert stats is not None
        moved = stats.bytes_read + stats.bytes_written
        step = core.cleaner.step_bytes
        assert step == limit // 10 and moved > 10 * step  # many steps, each paced
        # The last step runs without waiting after it, a step may overshoot by a chunk,
        # and the bucket lends BURST_S worth of bytes.
        allowance = 2 * step + limit * BURST_S
        assert elapsed >= 0.9 * (moved - allowance) / limit, (elapsed, moved)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_stopping_the_broker_abandons_a_round_cleanly(
    broker_factory: Any, data_dir: Path
) -> None:
    running = await broker_factory(**{**COMPACTED, "cleaner_io_max_bytes_per_second": 65536})
    core = running.broker
    await produce(running, "slow", 100, size=100)
    before = stored(core.partition("slow", 0))
    core.cleaner.run_pass()
    # The map (a few steps of 6.4 KB), then the first cleaned segment is being written.
    for _ in range(100):
        await within(core.cleaner.after_next_step())
        if any(n.endswith(CLEANED_SUFFIX) for n in os.listdir(data_dir / "slow" / "0")):
            break
    assert core.cleaner.cleaning == ("slow", 0)
    await running.stop()
    assert not [n for n in os.listdir(data_dir / "slow" / "0") if n.endswith(CLEANED_SUFFIX)]
    again = await broker_factory(**COMPACTED)
    try:
        after = stored(again.broker.partition("slow", 0))
        latest = {r.key: r for r in before}
        # Whatever swaps completed, every key's latest record is there, at its offset.
        assert all(r in after for r in latest.values())
    finally:
        await again.stop()


@pytest_twisted.ensureDeferred
async def test_deleting_a_topic_during_its_round(broker_factory: Any, data_dir: Path) -> None:
    running = await broker_factory(**{**COMPACTED, "cleaner_io_max_bytes_per_second": 65536})
    try:
        core = running.broker
        await produce(running, "doomed", 100, size=100)
        done = core.cleaner.run_pass()
        await within(core.cleaner.after_next_step())
        assert core.cleaner.cleaning == ("doomed", 0)
        await within(core.delete_topic("doomed"))
        await within(done, 30)
        assert core.cleaner.totals.rounds_aborted == 1
        assert not (data_dir / "doomed").exists()
        assert core.stats.background_failures.get("cleaner", 0) == 0
        await produce(running, "doomed", 30)  # a new topic of the same name is cleaned
        await within(core.cleaner.run_pass())
        assert core.cleaner.totals.rounds == 1
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_damaged_partition_becomes_uncleanable_and_the_others_go_on(
    broker_factory: Any, data_dir: Path
) -> None:
    running = await broker_factory(**COMPACTED)
    try:
        core = running.broker
        await produce(running, "damaged", 100)
        await produce(running, "healthy", 50)
        seg = core.partition("damaged", 0).segments[1]
        with open(seg.log_path, "r+b") as f:
            f.seek(70)
            f.write(b"\xff\xff")
        await within(core.cleaner.run_pass())
        await within(core.cleaner.run_pass())
        totals = core.cleaner.totals
        assert totals.partitions[("damaged", 0)].uncleanable is not None
        assert "CRC" in (totals.partitions[("damaged", 0)].uncleanable or "")
        assert totals.partitions[("healthy", 0)].rounds == 1
        assert core.stats.background_failures["cleaner"] == 1
        await within(core.cleaner.run_pass())
        assert core.stats.background_failures["cleaner"] == 1  # not tried again
        text = generate_latest(metrics_registry(core, running.factory, core.io)).decode()
        assert "rustka_cleaner_uncleanable_partitions 1.0" in text
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_cleaner_metrics(broker_factory: Any) -> None:
    running = await broker_factory(**COMPACTED)
    try:
        core = running.broker
        await produce(running, "metered", 80)
        await within(core.cleaner.run_pass())
        registry = metrics_registry(core, running.factory, core.io)
        text = generate_latest(registry).decode()
        totals = core.cleaner.totals
        assert f"rustka_cleaner_bytes_read_total {float(totals.bytes_read)}" in text
        assert f"rustka_cleaner_bytes_written_total {float(totals.bytes_written)}" in text
        assert 'rustka_cleaner_dirty_ratio{partition="0",topic="metered"}' in text
        assert 'rustka_cleaner_last_clean_timestamp_seconds{partition="0",topic="metered"}' in text
        assert "rustka_cleaner_rounds_total 1.0" in text
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_topic_compacts_by_its_own_cleanup_policy(broker_factory: Any) -> None:
    """The cleaner takes everything from the partition's LogConfig: a topic created with
    cleanup.policy=compact is cleaned beside one that is not, and a topic altered to
    compact is cleaned from then on."""
    running = await broker_factory(cleaner_backoff_ms=3_600_000, flush="never")
    try:
        core = running.broker
        small = {"segment.bytes": "4096"}
        await within(core.create_topic("table", 1, {"cleanup.policy": "compact", **small}))
        await within(core.create_topic("events", 1, small))
        await produce(running, "table", 60)
        await produce(running, "events", 60)
        await within(core.cleaner.run_pass())
        partitions = core.cleaner.totals.partitions
        assert partitions[("table", 0)].rounds == 1 and ("events", 0) not in partitions
        assert len(stored(core.partition("events", 0))) == 600
        await within(core.alter_topic_configs("events", [("cleanup.policy", SET, "compact")]))
        assert core.partition("events", 0).config.compact
        await within(core.cleaner.run_pass())
        assert partitions[("events", 0)].rounds == 1
        events = core.partition("events", 0)
        sealed = [r for r in stored(events) if r.offset < events.segments[-1].base_offset]
        assert len({r.key for r in sealed}) == len(sealed) == 10
    finally:
        await running.stop()


# ---------------------------------------------------------------------- the produce path


@pytest_twisted.ensureDeferred
async def test_a_compacted_topic_refuses_records_without_a_key(broker_factory: Any) -> None:
    running = await broker_factory(cleanup_policy="compact")
    try:
        core = running.broker
        await within(core.create_topic("keys", 1))
        keyless = encode_batch([Record(b"k", b"v"), Record(None, b"v")], timestamp=ms_now())
        with pytest.raises(InvalidBatch, match="compacted topic cannot accept a record without"):
            await within(core.append("keys", 0, keyless, auto_create=False))
        replies: list[tuple[list[Any], Any]] = []
        answered: defer.Deferred[None] = defer.Deferred()

        def reply(tokens: list[Any], partition: int, result: Any, context: Any) -> None:
            replies.append((tokens, result))
            if sum(len(t) for t, _ in replies) == 3:
                answered.callback(None)

        core.append_records(
            [("keys", b"a", b"1"), ("keys", None, b"2"), ("keys", b"b", b"3")],
            ["first", "keyless", "third"],
            reply,
            None,
        )
        await within(answered)
        outcome = {tuple(tokens): result for tokens, result in replies}
        refused = outcome[("keyless",)]
        assert isinstance(refused, Failure) and refused.check(InvalidBatch)
        assert outcome[("first", "third")] == 0  # both stored, from offset 0
        assert [(r.key, r.value) for r in stored(core.partition("keys", 0))] == [
            (b"a", b"1"),
            (b"b", b"3"),
        ]
    finally:
        await running.stop()
