"""The batched hot paths: Lane.append_to, Broker.produce_many, the server's burst, send_many."""

from __future__ import annotations

import struct
import threading
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer
from twisted.python.failure import Failure

from rustka import protocol as p
from rustka.client import RustkaClientProtocol
from rustka.errors import UnknownTopic
from rustka.lanes import IOPool, Lane
from rustka.partitioner import partition_for_key
from rustka.producer import BatchingProducer
from rustka.record_batch import Record, encode_batch, scan_batches
from tests.conftest import RunningBroker, within
from tests.test_server import close, connect_raw, frame, produce, produced, s


@pytest.fixture
def io() -> Any:
    from twisted.internet import reactor

    pool = IOPool(reactor, threads=2)
    pool.startService()
    yield pool
    if pool.running:
        pool.stopService()


class Collector:
    """Burst answers as the broker hands them back, with a Deferred per expected count."""

    def __init__(self, expected: int) -> None:
        self.answers: dict[Any, p.Response] = {}
        self.calls = 0
        self.expected = expected
        self.done: defer.Deferred[None] = defer.Deferred()

    def reply(self, tokens: list[Any], responses: list[p.Response]) -> None:
        self.calls += 1
        self.answers.update(zip(tokens, responses, strict=True))
        if len(self.answers) == self.expected and not self.done.called:
            self.done.callback(None)


@pytest_twisted.ensureDeferred
async def test_append_to_delivers_results_in_order_with_context(io: IOPool) -> None:
    """Callback appends coalesce with Deferred appends and each gets its own result."""
    gate = threading.Event()
    calls: list[list[int]] = []

    def write_many(items: list[int]) -> list[int]:
        if not calls:
            gate.wait(10)
        calls.append(list(items))
        return [i * 10 for i in items]

    lane = Lane(io, write_many)
    seen: list[tuple[int, str]] = []
    both: defer.Deferred[None] = defer.Deferred()

    def on_result(result: int, context: str) -> None:
        seen.append((result, context))
        if len(seen) == 2:
            both.callback(None)

    first = lane.append(0)
    lane.append_to(1, on_result, "one")
    second = lane.append(2)
    lane.append_to(3, on_result, "three")
    gate.set()
    assert await within(defer.gatherResults([first, second])) == [0, 20]
    await within(both)
    assert seen == [(10, "one"), (30, "three")]
    assert calls == [[0], [1, 2, 3]]


@pytest_twisted.ensureDeferred
async def test_append_to_reports_a_failed_write_and_survives_a_raising_callback(
    io: IOPool,
) -> None:
    """A failed write reaches the callback as a Failure; a callback that raises is contained."""

    def write_many(items: list[str]) -> list[str]:
        if "bad" in items:
            raise OSError("disk full")
        return items

    lane = Lane(io, write_many)
    outcomes: list[Any] = []

    def explode(result: Any, context: Any) -> None:
        raise RuntimeError("callback bug")

    lane.append_to("bad", lambda result, context: outcomes.append(result), None)
    await within(lane.when_idle())
    lane.append_to("ok", explode, None)
    assert await within(lane.append("after")) == "after"
    assert len(outcomes) == 1 and isinstance(outcomes[0], Failure)
    assert outcomes[0].check(OSError)


@pytest_twisted.ensureDeferred
async def test_produce_many_stores_a_burst_in_one_write(broker: RunningBroker) -> None:
    """A partition's burst is one lane append of one-record batches with contiguous offsets."""
    await within(broker.broker.handle(p.CreateTopic("burst", 1)))
    requests = [p.Produce("burst", b"k%d" % i, b"v%d" % i) for i in range(50)]
    tokens = list(range(50))
    collector = Collector(50)
    before = broker.broker.stats.completed.get("Produce", 0)
    broker.broker.produce_many(requests, tokens, collector.reply)
    await within(collector.done)
    assert [collector.answers[i] for i in tokens] == [p.Produced(0, i) for i in range(50)]
    assert collector.calls == 1
    assert broker.broker.stats.completed["Produce"] == before + 50
    plog = broker.broker.logs.topics["burst"].partitions[0]
    data = plog.read(0, 1 << 20)
    batches, _ = scan_batches(data)
    # one write for the burst, but each seed record is its own one-record batch
    assert [h.record_count for _, h in batches] == [1] * 50
    assert [h.base_offset for _, h in batches] == list(range(50))


@pytest_twisted.ensureDeferred
async def test_produces_waiting_for_topic_creation_keep_their_order(
    broker: RunningBroker,
) -> None:
    """Bursts sent while their topic is being auto-created are appended in arrival order."""
    collector = Collector(6)
    for burst in range(3):
        requests = [p.Produce("fresh", b"same", b"%d" % (burst * 2 + i)) for i in range(2)]
        broker.broker.produce_many(requests, [burst * 2, burst * 2 + 1], collector.reply)
    await within(collector.done)
    offsets = [collector.answers[i].offset for i in range(6)]  # type: ignore[attr-defined]
    assert offsets == list(range(6))
    responses = [
        await within(broker.broker.handle(p.Fetch("fresh", collector.answers[i][0], i)))
        for i in range(6)
    ]
    assert [r.value for r in responses] == [b"%d" % i for i in range(6)]  # type: ignore[attr-defined]


@pytest_twisted.ensureDeferred
async def test_produce_many_during_shutdown_answers_errors(broker: RunningBroker) -> None:
    """A burst that arrives once the broker stopped accepting gets one Error per request."""
    broker.broker.accepting = False
    try:
        collector = Collector(2)
        requests = [p.Produce("late", b"k", b"v"), p.Produce("late", b"k", b"w")]
        broker.broker.produce_many(requests, ["a", "b"], collector.reply)
        await within(collector.done)
    finally:
        broker.broker.accepting = True
    assert all(isinstance(r, p.Error) for r in collector.answers.values())
    assert "shutting down" in collector.answers["a"].message  # type: ignore[attr-defined]


@pytest_twisted.ensureDeferred
async def test_a_batch_between_seed_produces_keeps_its_place(broker: RunningBroker) -> None:
    """Produce, ProduceBatch, Produce in one write land at offsets 0, 1, 2 of the partition."""
    from twisted.internet import reactor

    from rustka.client import connect

    setup = await within(defer.ensureDeferred(connect(reactor, broker.address)))
    await within(setup.create_topic("mixed", 1))
    await within(setup.close())
    batch = encode_batch([Record(b"middle", b"from a batch")])
    produce_batch = frame(b"\x06" + s("mixed") + struct.pack("!II", 0, len(batch)) + batch)
    c = await connect_raw(broker)
    answers = await c.ask(
        produce("mixed", b"a", b"first"), produce_batch, produce("mixed", b"c", b"last")
    )
    assert answers[0] == produced(0, 0)
    assert answers[1][0] == 8 and struct.unpack_from("!IQQ", answers[1], 1) == (0, 1, 1)
    assert answers[2] == produced(0, 2)
    await close(c)


@pytest_twisted.ensureDeferred
async def test_send_many_fires_with_each_records_place(client: RustkaClientProtocol) -> None:
    """send_many's records get (partition, offset)s in order, interleaved with send()s."""
    await within(client.create_topic("many", 3))
    producer = BatchingProducer(client, batch_bytes=500, linger_ms=1)
    pairs = [(b"key-%d" % (i % 7), b"value-%d" % i) for i in range(400)]
    single = producer.send("many", b"key-1", b"alone")
    many = producer.send_many("many", pairs)
    empty = producer.send_many("many", [])
    results = await within(many)
    assert await within(empty) == []
    await within(producer.close())
    lone_partition, lone_offset = await within(single)
    per_partition: dict[int, list[int]] = {}
    for (partition, offset), (key, _) in zip(results, pairs, strict=True):
        assert partition == partition_for_key(key, 3)
        per_partition.setdefault(partition, []).append(offset)
    for offsets in per_partition.values():
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert lone_offset not in per_partition.get(lone_partition, [])
    fetched = await within(client.fetch_batch("many", results[10][0], results[10][1]))
    assert (fetched.records[0].key, fetched.records[0].value) == pairs[10]


@pytest_twisted.ensureDeferred
async def test_send_many_to_a_missing_topic_fails_when_creation_is_off(
    client: RustkaClientProtocol,
) -> None:
    """Without auto-creation, a send_many to an unknown topic fails with UnknownTopic."""
    producer = BatchingProducer(client, new_topic_partitions=None)
    with pytest.raises(UnknownTopic):
        await within(producer.send_many("nowhere", [(b"k", b"v"), (b"k2", b"v2")]))
    assert producer.buffered_bytes == 0
