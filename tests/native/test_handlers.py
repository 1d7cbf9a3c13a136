"""The native handler over a real broker: requests in, responses out, never an errback."""

from __future__ import annotations

import threading
from typing import Any

import pytest_twisted
from twisted.internet import defer

from rustka.native import codec as p
from rustka.record.batch import Record, encode_batch, scan_batches
from tests.conftest import RunningBroker, within


async def ask(broker: RunningBroker, request: p.Request) -> p.Response:
    from twisted.internet import reactor

    return await broker.factory.handler.handle(request).addTimeout(10, reactor)


@pytest_twisted.ensureDeferred
async def test_every_failure_becomes_a_response(broker: RunningBroker) -> None:
    """Seed ops fail with tag 4 Error, extensions with tag 14 Failure or 15 OutOfRange."""
    assert isinstance(await ask(broker, p.Fetch("missing", 0, 0)), p.Error)
    failure = await ask(broker, p.FetchBatch("missing", 0, 0, 1024, 0))
    assert isinstance(failure, p.Failure) and failure.code == 4
    await ask(broker, p.Produce("t", b"k", b"v"))
    out = await ask(broker, p.FetchBatch("t", 0, 99, 1024, 0))
    assert isinstance(out, p.OutOfRange) and out.offset == 99 and out.log_start == 0
    bad = await ask(broker, p.ProduceBatch("t", 0, b"\x00" * 70))
    assert isinstance(bad, p.Failure) and bad.code == 8
    stats = broker.top.factory.request_stats.operations
    assert {op: s.failed for op, s in stats.items() if s.failed} == {
        "Fetch": 1,
        "FetchBatch": 2,
        "ProduceBatch": 1,
    }


@pytest_twisted.ensureDeferred
async def test_produce_batch_keeps_client_bytes_and_rewrites_offsets(
    broker: RunningBroker,
) -> None:
    """Stored batches are the client's bytes except the base offset, which the CRC skips."""
    await ask(broker, p.CreateTopic("b", 1))
    batch = encode_batch([Record(b"k1", b"v1"), Record(b"k2", b"v2")], base_offset=0, timestamp=5)
    assert await ask(broker, p.ProduceBatch("b", 0, batch)) == p.BatchProduced(0, 0, 1)
    assert await ask(broker, p.ProduceBatch("b", 0, batch)) == p.BatchProduced(0, 2, 3)
    fetched = await ask(broker, p.FetchBatch("b", 0, 2, 1 << 20, 0))
    assert isinstance(fetched, p.Batches)
    stored = fetched.batches
    assert stored[8:] == batch[8:]
    assert int.from_bytes(stored[:8], "big") == 2


@pytest_twisted.ensureDeferred
async def test_long_poll_wakes_on_append(broker: RunningBroker) -> None:
    """A FetchBatch at the end waits, and returns as soon as a record arrives."""
    await ask(broker, p.CreateTopic("lp", 1))
    waiting = broker.factory.handler.handle(p.FetchBatch("lp", 0, 0, 1 << 20, 30_000))
    assert not waiting.called
    await ask(broker, p.ProduceBatch("lp", 0, encode_batch([Record(b"k", b"v")])))
    answer = await waiting
    assert isinstance(answer, p.Batches) and answer.high_watermark == 1 and answer.batches


@pytest_twisted.ensureDeferred
async def test_long_poll_times_out_empty(broker_factory: Any) -> None:
    """With no data, a long-poll answers empty after its (capped) wait, never hangs."""
    running = await broker_factory(fetch_max_wait_ms=50)
    try:
        await ask(running, p.CreateTopic("idle", 1))
        answer = await ask(running, p.FetchBatch("idle", 0, 0, 1024, 60_000))
        assert answer == p.Batches(0, 0, b"")
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_concurrent_appends_share_a_lane_hop(broker: RunningBroker) -> None:
    """A burst of produces to one partition is coalesced into far fewer thread hops."""
    await ask(broker, p.Produce("g", b"same", b"warm-up"))
    answers = await defer.gatherResults(
        [broker.factory.handler.handle(p.Produce("g", b"same", b"%d" % i)) for i in range(500)]
    )
    offsets = [a.offset for a in answers]
    assert offsets == list(range(1, 501))
    (lane,) = broker.broker.lanes.all()
    assert lane.items == 501
    assert lane.hops < 50


@pytest_twisted.ensureDeferred
async def test_offsets_commit_and_describe_group(broker: RunningBroker) -> None:
    """Commits are visible to OffsetFetch, ListGroups and DescribeGroup with lag."""
    for i in range(5):
        await ask(broker, p.Produce("o", b"k", b"%d" % i))
    part = (await ask(broker, p.Produce("o", b"k", b"last"))).partition
    assert await ask(broker, p.Commit("g1", "o", part, 2)) == p.CommitOk()
    assert await ask(broker, p.OffsetFetch("g1", "o", part)) == p.Offset(2)
    assert await ask(broker, p.ListGroups()) == p.Groups(("g1",))
    described = await ask(broker, p.DescribeGroup("g1"))
    assert isinstance(described, p.GroupOffsets)
    [entry] = described.offsets
    assert (entry.topic, entry.partition, entry.committed, entry.high_watermark) == (
        "o",
        part,
        2,
        6,
    )
    assert entry.lag == 4


@pytest_twisted.ensureDeferred
async def test_hello_negotiates_down(broker: RunningBroker) -> None:
    """A version-1 client is told only the seed ops; a newer one gets version 2."""
    old = await ask(broker, p.Hello(1, "seed-client"))
    assert isinstance(old, p.Welcome) and old.version == 1 and old.ops == (1, 2, 3, 4)
    new = await ask(broker, p.Hello(7, "future-client"))
    assert isinstance(new, p.Welcome) and new.version == 2 and 12 in new.ops


@pytest_twisted.ensureDeferred
async def test_alter_topic_adds_partitions_only_upwards(broker: RunningBroker) -> None:
    """Partitions can be added (keys may then move), never removed."""
    await ask(broker, p.CreateTopic("grow", 2))
    assert await ask(broker, p.AlterTopic("grow", 5)) == p.TopicInfo("grow", 5)
    shrink = await ask(broker, p.AlterTopic("grow", 3))
    assert isinstance(shrink, p.Failure) and shrink.code == 10
    meta = await ask(broker, p.Metadata(("grow",)))
    assert isinstance(meta, p.MetadataResult) and len(meta.topics[0].partitions) == 5


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
async def test_produce_many_stores_a_burst_in_one_write(broker: RunningBroker) -> None:
    """A partition's burst is one lane append of one-record batches with contiguous offsets."""
    await within(broker.factory.handler.handle(p.CreateTopic("burst", 1)))
    requests = [p.Produce("burst", b"k%d" % i, b"v%d" % i) for i in range(50)]
    tokens = list(range(50))
    collector = Collector(50)
    before = broker.top.factory.request_stats.of("Produce").answered
    broker.factory.handler.produce_many(requests, tokens, collector.reply)
    await within(collector.done)
    assert [collector.answers[i] for i in tokens] == [p.Produced(0, i) for i in range(50)]
    assert collector.calls == 1
    assert broker.top.factory.request_stats.of("Produce").answered == before + 50
    plog = broker.broker.logs.topics["burst"].partitions[0]
    data = plog.read(0, 1 << 20)
    batches, _ = scan_batches(data)
    # one write for the burst, but each seed record is its own one-record batch
    assert [h.record_count for _, h in batches] == [1] * 50
    assert [h.base_offset for _, h in batches] == list(range(50))


@pytest_twisted.ensureDeferred
async def test_early_answer_frames_what_the_reply_answers(broker: RunningBroker) -> None:
    """The I/O thread gets, for every partition stored, the framed responses the
    reactor's reply then carries, before that reply; a refused record gets none."""
    await within(broker.factory.handler.handle(p.CreateTopic("early", 3)))
    reactor_thread = threading.get_ident()
    sent: list[tuple[tuple[Any, ...], bytes, bool]] = []

    def send(tokens: list[Any], frames: bytes) -> None:
        sent.append((tuple(tokens), frames, threading.get_ident() == reactor_thread))

    replies: list[tuple[tuple[Any, ...], list[p.Response], int]] = []
    collector = Collector(41)

    def reply(tokens: list[Any], responses: list[p.Response]) -> None:
        replies.append((tuple(tokens), responses, len(sent)))
        collector.reply(tokens, responses)

    requests = [p.Produce("early", b"k%d" % i, b"v") for i in range(40)]
    requests.append(p.Produce("no/such topic", b"k", b"refused"))
    handler = broker.factory.handler
    handler.produce_many(requests, list(range(41)), reply, handler.early_answer(send))
    await within(collector.done)
    stored = {
        tokens: b"".join(part for r in responses for part in p.RESPONSE_FRAMERS[type(r)](r))
        for tokens, responses, _ in replies
        if all(type(r) is p.Produced for r in responses)
    }
    assert len(stored) == 3  # one group per partition of "early"
    assert sorted(t for tokens in stored for t in tokens) == list(range(40))
    assert {tokens: frames for tokens, frames, _ in sent} == stored
    assert not any(on_reactor for _, _, on_reactor in sent)
    for tokens, _, sent_before in replies:
        if tokens in stored:
            assert tokens in [t for t, _, _ in sent[:sent_before]]


@pytest_twisted.ensureDeferred
async def test_produces_waiting_for_topic_creation_keep_their_order(
    broker: RunningBroker,
) -> None:
    """Bursts sent while their topic is being auto-created are appended in arrival order."""
    collector = Collector(6)
    for burst in range(3):
        requests = [p.Produce("fresh", b"same", b"%d" % (burst * 2 + i)) for i in range(2)]
        broker.factory.handler.produce_many(requests, [burst * 2, burst * 2 + 1], collector.reply)
    await within(collector.done)
    offsets = [collector.answers[i].offset for i in range(6)]  # type: ignore[attr-defined]
    assert offsets == list(range(6))
    responses = [
        await within(broker.factory.handler.handle(p.Fetch("fresh", collector.answers[i][0], i)))
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
        broker.factory.handler.produce_many(requests, ["a", "b"], collector.reply)
        await within(collector.done)
    finally:
        broker.broker.accepting = True
    assert all(isinstance(r, p.Error) for r in collector.answers.values())
    assert "shutting down" in collector.answers["a"].message  # type: ignore[attr-defined]


@pytest_twisted.ensureDeferred
async def test_topic_configs_are_created_altered_and_described(broker: RunningBroker) -> None:
    """Ops 15-17 (docs/protocol.md 7.11): the same configs Kafka clients set, on the same
    topics; a bad one is Failure code 18 naming it and changes nothing."""
    made = await ask(
        broker, p.CreateTopicWithConfigs("c", 2, (p.ConfigValue("cleanup.policy", "compact"),))
    )
    assert made == p.TopicInfo("c", 2)
    assert broker.broker.partition("c", 1).config.compact
    described = await ask(broker, p.DescribeTopicConfigs("c"))
    assert isinstance(described, p.TopicConfigs) and len(described.configs) == 39
    by_name = {c.name: c for c in described.configs}
    assert by_name["cleanup.policy"] == p.TopicConfig("cleanup.policy", "compact", 2)
    assert by_name["retention.ms"].source == 0
    altered = await ask(
        broker,
        p.AlterTopicConfigs("c", (p.ConfigValue("segment.bytes", "1000"),), ("cleanup.policy",), 0),
    )
    assert isinstance(altered, p.TopicConfigs)
    by_name = {c.name: c for c in altered.configs}
    assert by_name["segment.bytes"] == p.TopicConfig("segment.bytes", "1000", 2)
    assert by_name["cleanup.policy"].source == 0
    assert broker.broker.topic("c").overrides == {"segment.bytes": "1000"}
    checked = await ask(
        broker, p.AlterTopicConfigs("c", (p.ConfigValue("segment.bytes", "2000"),), (), 1)
    )
    assert {c.name: c.value for c in checked.configs}["segment.bytes"] == "2000"  # type: ignore[union-attr]
    assert broker.broker.partition("c", 0).config.segment_bytes == 1000
    bad = await ask(broker, p.AlterTopicConfigs("c", (p.ConfigValue("segment.bytes", "x"),), (), 0))
    assert isinstance(bad, p.Failure) and bad.code == 18 and "segment.bytes" in bad.message
    bad = await ask(
        broker, p.CreateTopicWithConfigs("d", 1, (p.ConfigValue("no.such.config", "1"),))
    )
    assert isinstance(bad, p.Failure) and bad.code == 18 and "no.such.config" in bad.message
    twice = (p.ConfigValue("flush.ms", "1"), p.ConfigValue("flush.ms", "2"))
    assert (await ask(broker, p.CreateTopicWithConfigs("d", 1, twice))).code == 2  # type: ignore[union-attr]
    assert (await ask(broker, p.AlterTopicConfigs("c", (), (), 2))).code == 2  # type: ignore[union-attr]
    assert (await ask(broker, p.DescribeTopicConfigs("nope"))).code == 4  # type: ignore[union-attr]
    assert "d" not in broker.broker.topics
