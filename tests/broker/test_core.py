"""The broker core's protocol-neutral API, called directly on a running broker."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer

from rustka.broker.coordinator import GroupCoordinator, JoinRequest
from rustka.broker.core import (
    APPEND,
    DELETE,
    EARLIEST,
    LATEST,
    SET,
    SUBTRACT,
    AppendResult,
    Broker,
    OffsetAtTime,
)
from rustka.broker.groups import GroupErrorCode, JoinResult
from rustka.broker.lanes import IOPool
from rustka.config import SOURCE_DEFAULT, SOURCE_TOPIC, Config
from rustka.errors import (
    BrokerUnavailable,
    CorruptBatch,
    InvalidBatch,
    InvalidConfig,
    InvalidRequest,
    OffsetOutOfRange,
    RecordTooLarge,
    TopicExists,
    UnknownPartition,
    UnknownTopic,
)
from rustka.native import codec as p
from rustka.native.handlers import NativeHandler
from rustka.record.batch import Record, encode_batch, ms_now, scan_batches
from tests.conftest import RunningBroker, within
from tests.storage.test_transactions import txn_batch


def batch(*values: bytes, timestamp: int | None = None) -> bytes:
    """A batch stamped now by default: old timestamps would make segment_ms roll."""
    stamp = ms_now() if timestamp is None else timestamp
    return encode_batch([Record(b"k", v) for v in values], timestamp=stamp)


async def fails_with(d: defer.Deferred[Any], error: type[Exception]) -> Exception:
    with pytest.raises(error) as info:
        await within(d)
    return info.value


@pytest_twisted.ensureDeferred
async def test_append_then_read_returns_the_stored_batches(broker: RunningBroker) -> None:
    """append answers the offsets it assigned; read serves the bytes with the bounds."""
    core = broker.broker
    await within(core.create_topic("a", 1))
    first = await within(core.append("a", 0, batch(b"1", b"2"), auto_create=False))
    second = await within(core.append("a", 0, memoryview(batch(b"3")), auto_create=False))
    assert first == AppendResult(0, 1, 0)
    assert second == AppendResult(2, 2, 0)
    result = await within(core.read("a", 0, 0, 1 << 20))
    assert (result.high_watermark, result.log_start_offset) == (3, 0)
    batches, _ = scan_batches(b"".join(result.chunks))
    assert [h.base_offset for _, h in batches] == [0, 2]
    assert result.size == sum(h.size for _, h in batches)


@pytest_twisted.ensureDeferred
async def test_read_bounds_and_a_first_batch_larger_than_max_bytes(broker: RunningBroker) -> None:
    core = broker.broker
    await within(core.create_topic("r", 1))
    await within(core.append("r", 0, batch(b"x" * 5000), auto_create=False))
    whole = await within(core.read("r", 0, 0, 1))
    assert len(whole.chunks) == 1 and len(whole.chunks[0]) > 5000
    at_end = await within(core.read("r", 0, 1, 1024))
    assert at_end.chunks == () and at_end.high_watermark == 1
    error = await fails_with(core.read("r", 0, 2, 1024), OffsetOutOfRange)
    assert (error.offset, error.log_start, error.end) == (2, 0, 1)  # type: ignore[attr-defined]
    await fails_with(core.read("nope", 0, 0, 1024), UnknownTopic)


@pytest_twisted.ensureDeferred
async def test_append_refuses_bad_batches_and_stores_nothing(broker: RunningBroker) -> None:
    core = broker.broker
    await within(core.create_topic("v", 1))
    good = batch(b"ok")
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    await fails_with(core.append("v", 0, good + bytes(corrupt), auto_create=False), InvalidBatch)
    limit = {"max.message.bytes": str(len(good) - 1)}
    await within(core.create_topic("w", 1, limit))
    error = await fails_with(core.append("w", 0, good, auto_create=False), RecordTooLarge)
    assert f"limit of {len(good) - 1} bytes" in str(error)
    assert core.bounds("v", 0) == (0, 0) == core.bounds("w", 0)


@pytest_twisted.ensureDeferred
async def test_append_auto_creates_only_when_asked_and_allowed(broker_factory: Any) -> None:
    running = await broker_factory(default_partitions=2)
    try:
        core = running.broker
        await fails_with(core.append("new", 0, batch(b"v"), auto_create=False), UnknownTopic)
        assert await within(core.append("new", 1, batch(b"v"), auto_create=True)) == AppendResult(
            0, 0, 0
        )
        assert [len(t.partitions) for t in core.topics_snapshot(["new"])] == [2]
    finally:
        await running.stop()
    disabled = await broker_factory(auto_create_topics=False)
    try:
        error = await fails_with(
            disabled.broker.append("other", 0, batch(b"v"), auto_create=True), UnknownTopic
        )
        assert "auto-create is disabled" in str(error)
    finally:
        await disabled.stop()


@pytest_twisted.ensureDeferred
async def test_both_append_paths_share_one_group_commit(broker: RunningBroker) -> None:
    """Single records and client batches sent in one turn coalesce on one lane, in order."""
    core = broker.broker
    await within(core.create_topic("mix", 1))
    answers: dict[Any, Any] = {}
    done: defer.Deferred[None] = defer.Deferred()

    def reply(tokens: list[Any], partition: int, first: Any, context: Any) -> None:
        for i, token in enumerate(tokens):
            answers[token] = first + i
        if len(answers) == 50 and not done.called:
            done.callback(None)

    appended = []
    for i in range(50):
        core.append_records([("mix", b"k", b"r%d" % i)], [f"r{i}"], reply, None)
        appended.append(core.append("mix", 0, batch(b"b%d" % i), auto_create=False))
    await within(done)
    for i, d in enumerate(appended):
        answers[f"b{i}"] = (await within(d)).base_offset
    expected = [x for i in range(50) for x in (f"r{i}", f"b{i}")]
    assert [answers[token] for token in expected] == list(range(100))
    lane = core.lane("mix", 0)
    assert lane.items == 100 and lane.hops < 20


@pytest_twisted.ensureDeferred
async def test_wait_for_data_spans_partitions(broker: RunningBroker) -> None:
    """A long-poll on several partitions fires on the first append to any of them."""
    core = broker.broker
    await within(core.create_topic("w1", 1))
    await within(core.create_topic("w2", 2))
    waiting = core.wait_for_data([("w1", 0, 0), ("w2", 1, 0), ("gone", 0, 0)], 30)
    assert not waiting.called and len(core.waiters) == 1
    await within(core.append("w2", 1, batch(b"v"), auto_create=False))
    assert await within(waiting) is None
    assert len(core.waiters) == 0
    # data already past the position: no wait at all
    assert core.wait_for_data([("w1", 0, 0), ("w2", 1, 0)], 30).called
    timed_out = core.wait_for_data([("w1", 0, 0)], 0.01)
    assert await within(timed_out) is None and len(core.waiters) == 0


@pytest_twisted.ensureDeferred
async def test_list_offset_earliest_latest_and_by_time(broker: RunningBroker) -> None:
    core = broker.broker
    await within(core.create_topic("t", 1))
    await within(core.append("t", 0, batch(b"a", timestamp=1_000), auto_create=False))
    await within(core.append("t", 0, batch(b"b", timestamp=2_000), auto_create=False))
    assert await within(core.list_offset("t", 0, EARLIEST)) == OffsetAtTime(0, -1)
    assert await within(core.list_offset("t", 0, LATEST)) == OffsetAtTime(2, -1)
    assert await within(core.list_offset("t", 0, 1_500)) == OffsetAtTime(1, 2_000)
    assert await within(core.list_offset("t", 0, 9_000)) is None
    await fails_with(core.list_offset("t", 0, -7), InvalidRequest)


@pytest_twisted.ensureDeferred
async def test_list_offset_under_read_committed_stops_at_the_last_stable_offset(
    broker: RunningBroker,
) -> None:
    """read_committed ListOffsets: latest is the LSO while a transaction is open, and a
    time whose first offset lies at or past the LSO is none; read_uncommitted sees the
    high watermark and the open records; after the commit both agree."""
    from tests.storage.test_transactions import TS

    core = broker.broker
    txn = core.transactions
    await within(core.create_topic("lc", 1))
    await within(core.append("lc", 0, batch(b"plain", timestamp=TS - 1_000), auto_create=False))
    pid, epoch = await within(txn.init_producer_id("lc-t", 60_000))
    await within(txn.add_partitions("lc-t", pid, epoch, [("lc", 0)]))
    await within(
        core.append(
            "lc", 0, txn_batch(pid, 0, epoch=epoch), auto_create=False, transactional_id="lc-t"
        )
    )
    assert await within(core.list_offset("lc", 0, LATEST, committed=True)) == OffsetAtTime(1, -1)
    assert await within(core.list_offset("lc", 0, LATEST)) == OffsetAtTime(3, -1)
    assert await within(core.list_offset("lc", 0, TS, committed=True)) is None
    assert await within(core.list_offset("lc", 0, TS)) == OffsetAtTime(1, TS)
    assert await within(core.list_offset("lc", 0, 0, committed=True)) == OffsetAtTime(0, TS - 1_000)
    await within(txn.end_transaction("lc-t", pid, epoch, True))
    await within(txn.settled("lc-t"))
    assert await within(core.list_offset("lc", 0, LATEST, committed=True)) == OffsetAtTime(4, -1)
    assert await within(core.list_offset("lc", 0, TS, committed=True)) == OffsetAtTime(1, TS)


@pytest_twisted.ensureDeferred
async def test_topic_admin(broker: RunningBroker) -> None:
    core = broker.broker
    info = await within(core.create_topic("adm", 2, {"cleanup.policy": "delete"}))
    assert (info.name, len(info.partitions)) == ("adm", 2)
    assert info.configs == {"cleanup.policy": "delete"}
    await fails_with(core.create_topic("adm", 2), TopicExists)
    error = await fails_with(core.create_topic("x", 1, {"retention.ms": "x"}), InvalidConfig)
    assert "retention.ms" in str(error)
    await fails_with(core.create_topic("y", 1, {"dummy.doesntexist": "1"}), InvalidConfig)
    assert "x" not in core.topics and "y" not in core.topics
    grown = await within(core.alter_topic("adm", 4))
    assert len(grown.partitions) == 4
    await within(core.append("adm", 3, batch(b"v"), auto_create=False))
    [snap] = core.topics_snapshot(["adm"])
    assert [(pi.partition, pi.high_watermark) for pi in snap.partitions][3] == (3, 1)
    await within(core.delete_topic("adm"))
    assert [t.name for t in core.topics_snapshot()] == []
    await fails_with(core.read("adm", 3, 0, 100), UnknownTopic)
    recreated = await within(core.append("adm", 0, batch(b"v"), auto_create=True))
    assert recreated.base_offset == 0


@pytest_twisted.ensureDeferred
async def test_offsets_commit_query_and_lag(broker: RunningBroker) -> None:
    core = broker.broker
    await within(core.create_topic("o", 2))
    for _ in range(3):
        await within(core.append("o", 1, batch(b"v"), auto_create=False))
    await within(core.commit_offsets("g", {("o", 0): 0, ("o", 1): 1}))
    assert core.committed_offsets("g") == {("o", 0): 0, ("o", 1): 1}
    assert core.committed_offsets("g", [("o", 1), ("o", 5)]) == {("o", 1): 1}
    assert [
        (e.partition, e.committed, e.high_watermark, e.lag) for e in core.group_offsets("g")
    ] == [
        (0, 0, 0, 0),
        (1, 1, 3, 2),
    ]
    assert core.group_names() == ["g"]
    await fails_with(core.commit_offsets("g", {("o", 9): 1}), Exception)
    assert core.committed_offsets("g") == {("o", 0): 0, ("o", 1): 1}


@pytest_twisted.ensureDeferred
async def test_requests_before_the_storage_opens_get_the_starting_error(tmp_path: Any) -> None:
    """While recovery runs on the pool, every request is refused with a clear reason."""
    from twisted.internet import reactor

    io = IOPool(reactor, threads=1)
    io.startService()
    core = Broker(Config().updated({"data_dir": str(tmp_path / "d")}), io, reactor)
    handler = NativeHandler(core)
    try:
        ready = core.open_storage()
        assert core.state == "starting" and not ready.called
        answer = await within(handler.handle(p.Produce("t", b"k", b"v")))
        assert answer == p.Error("broker is starting: recovering storage")
        error = await fails_with(
            core.append("t", 0, batch(b"v"), auto_create=True), BrokerUnavailable
        )
        assert "starting" in str(error)
        await within(ready)
        assert core.state == "serving"
        assert isinstance(await within(handler.handle(p.Produce("t", b"k", b"v"))), p.Produced)
        await within(core.drain())
        await within(io.run(core.close_storage))
    finally:
        io.stopService()


@pytest_twisted.ensureDeferred
async def test_storage_that_cannot_open_fails_when_ready(tmp_path: Any) -> None:
    from twisted.internet import reactor

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    io = IOPool(reactor, threads=1)
    io.startService()
    core = Broker(Config().updated({"data_dir": str(blocker / "data")}), io, reactor)
    try:
        with pytest.raises(OSError):
            await within(core.open_storage())
        with pytest.raises(OSError):
            await within(core.when_ready())
        assert core.state == "failed"
        with pytest.raises(BrokerUnavailable, match="storage failed to open"):
            core.check_serving()
    finally:
        io.stopService()


@pytest_twisted.ensureDeferred
async def test_the_core_builds_its_coordinator_from_the_config(tmp_path: Any) -> None:
    """No service tree needed: a bare core has its coordinator, with the config's bounds,
    and the coordinator sees the core's committed groups (its `CommittedGroups`)."""
    from twisted.internet import reactor

    settings = {
        "data_dir": str(tmp_path / "d"),
        "group_min_session_timeout_ms": 2000,
        "group_max_session_timeout_ms": 5000,
        "group_initial_rebalance_delay_ms": 0,
    }
    io = IOPool(reactor, threads=1)
    io.startService()
    core = Broker(Config().updated(settings), io, reactor)
    try:
        groups = core.groups
        assert isinstance(groups, GroupCoordinator) and groups.offsets is core

        def join(session_ms: int) -> defer.Deferred[JoinResult]:
            return groups.join(JoinRequest("g", "", "consumer", [("range", b"")], session_ms))

        for outside in (1999, 5001):
            assert (await within(join(outside))).error == GroupErrorCode.INVALID_SESSION_TIMEOUT
        inside = await within(join(2000))
        assert (inside.error, inside.generation_id) == (GroupErrorCode.NONE, 1)  # no delay
        await within(core.open_storage())
        await within(core.create_topic("t", 1))
        await within(core.commit_offsets("native", {("t", 0): 0}))
        assert groups.list_groups() == [
            ("g", "consumer", "CompletingRebalance"),
            ("native", "consumer", "Empty"),
        ]
        groups.close()
        await within(core.drain())
        await within(io.run(core.close_storage))
    finally:
        io.stopService()


@pytest_twisted.ensureDeferred
async def test_the_cluster_id_is_created_once_and_kept_across_a_restart(
    broker_factory: Any, data_dir: Any
) -> None:
    running = await broker_factory()
    try:
        assert not (data_dir / "cluster-id").exists()  # created on first use only
        first, second = running.broker.cluster_id(), running.broker.cluster_id()
        ids = {await within(first), await within(second)}
        (cluster,) = ids
        assert len(cluster) == 22
        assert (data_dir / "cluster-id").read_text().strip() == cluster
    finally:
        await running.stop()
    again = await broker_factory()
    try:
        assert await within(again.broker.cluster_id()) == cluster
    finally:
        await again.stop()


@pytest_twisted.ensureDeferred
async def test_a_cluster_id_that_cannot_be_read_fails_its_callers_and_is_retried(
    broker_factory: Any, data_dir: Any
) -> None:
    running = await broker_factory()
    try:
        blocker = data_dir / "cluster-id"
        blocker.mkdir()
        waiting = [running.broker.cluster_id(), running.broker.cluster_id()]
        for d in waiting:
            with pytest.raises(OSError, match="cannot read"):
                await within(d)
        blocker.rmdir()
        cluster = await within(running.broker.cluster_id())
        assert blocker.read_text().strip() == cluster
    finally:
        await running.stop()


def test_producer_ids_only_grow_and_start_from_the_clock(tmp_path: Any) -> None:
    from twisted.internet import reactor

    core = Broker(Config().updated({"data_dir": str(tmp_path / "d")}), IOPool(reactor), reactor)
    before = int(time.time() * 1000) << 20
    ids = [core.new_producer_id() for _ in range(5000)]
    assert ids[0] >= before
    assert ids == sorted(set(ids))


def test_brokers_with_different_ids_never_give_the_same_producer_id(tmp_path: Any) -> None:
    """Brokers sharing a diskless catalog share its producers' state: their ids must
    not meet, even when handed out in the same millisecond."""
    from twisted.internet import reactor

    cores = [
        Broker(
            Config().updated({"data_dir": str(tmp_path / str(n)), "broker_id": n}),
            IOPool(reactor),
            reactor,
        )
        for n in (1, 2)
    ]
    given = [[core.new_producer_id() for _ in range(500)] for core in cores]
    assert not set(given[0]) & set(given[1])
    assert all(0 < i < 2**63 for ids in given for i in ids)


# -- topic configs ------------------------------------------------------------------------


def configs_of(core: Broker, name: str) -> dict[str, tuple[str | None, str]]:
    return {e.name: (e.value, e.source) for e in core.topic_configs(name)}


@pytest.mark.parametrize("restart", [False, True])
@pytest_twisted.ensureDeferred
async def test_a_topics_configs_are_stored_reported_and_survive_a_restart(
    broker_factory: Any, restart: bool
) -> None:
    running = await broker_factory()
    core = running.broker
    try:
        created = await within(
            core.create_topic("t", 2, {"cleanup.policy": "compact, delete", "retention.ms": "-1"})
        )
        assert created.configs == {"cleanup.policy": "compact,delete", "retention.ms": "-1"}
        if restart:
            await running.stop()
            running = await broker_factory()
            core = running.broker
        configs = configs_of(core, "t")
        assert configs["cleanup.policy"] == ("compact,delete", SOURCE_TOPIC)
        assert configs["retention.ms"] == ("-1", SOURCE_TOPIC)
        assert configs["segment.bytes"] == ("1073741824", SOURCE_DEFAULT)
        assert len(configs) == 39  # with confluent.*.schema.validation (schema registry)
        [log0, log1] = core.topic("t").partitions
        assert log0.config.compact and log0.config.delete and log1.config.retention_ms is None
        assert core.topics_snapshot(["t"])[0].configs == created.configs
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_create_topic_validate_only_checks_everything_and_creates_nothing(
    broker: RunningBroker,
) -> None:
    core = broker.broker
    info = await within(core.create_topic("v", 3, {"segment.ms": "100"}, validate_only=True))
    assert info.configs == {"segment.ms": "100"}
    assert "v" not in core.topics
    await fails_with(
        core.create_topic("v", 1, {"segment.bytes": "1"}, validate_only=True), InvalidConfig
    )
    await within(core.create_topic("v", 1))
    await fails_with(core.create_topic("v", 1, validate_only=True), TopicExists)


@pytest_twisted.ensureDeferred
async def test_alter_topic_configs_set_delete_append_and_subtract(broker: RunningBroker) -> None:
    core = broker.broker
    await within(core.create_topic("a", 1, {"retention.ms": "1000"}))
    got = await within(
        core.alter_topic_configs(
            "a", [("segment.bytes", SET, "500"), ("cleanup.policy", APPEND, "compact")]
        )
    )
    assert got == {
        "retention.ms": "1000",
        "segment.bytes": "500",
        "cleanup.policy": "delete,compact",
    }
    log = core.partition("a", 0)
    assert (log.config.segment_bytes, log.config.compact) == (500, True)
    got = await within(
        core.alter_topic_configs(
            "a", [("cleanup.policy", SUBTRACT, "delete"), ("retention.ms", DELETE, None)]
        )
    )
    assert got == {"segment.bytes": "500", "cleanup.policy": "compact"}
    assert log.config.retention_ms == broker.config.retention_ms and not log.config.delete
    checked = await within(
        core.alter_topic_configs("a", [("segment.bytes", SET, "900")], validate_only=True)
    )
    assert checked["segment.bytes"] == "900" and log.config.segment_bytes == 500
    replaced = await within(
        core.alter_topic_configs("a", [("min.insync.replicas", SET, "2")], replace=True)
    )
    assert replaced == {"min.insync.replicas": "2"}
    assert log.config == broker.config.log_config()
    assert configs_of(core, "a")["min.insync.replicas"] == ("2", SOURCE_TOPIC)


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([("nope", SET, "1")], "Unknown topic config name: nope"),
        ([("retention.ms", SET, "soon")], "Invalid value soon for configuration retention.ms"),
        ([("retention.ms", APPEND, "5")], "Can't APPEND to key retention.ms because its type"),
        ([("cleanup.policy", APPEND, "forever")], "configuration cleanup.policy: String must"),
        ([("retention.ms", SET, None)], "Null value not supported for topic configs"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_a_refused_alter_names_the_config_and_changes_nothing(
    broker: RunningBroker, ops: list[Any], message: str
) -> None:
    core = broker.broker
    await within(core.create_topic("b", 1, {"retention.ms": "1000"}))
    error = await fails_with(core.alter_topic_configs("b", ops), InvalidConfig)
    assert message in str(error)
    assert core.topic("b").overrides == {"retention.ms": "1000"}
    assert core.partition("b", 0).config.retention_ms == 1000
    await fails_with(core.alter_topic_configs("b", [("x", "merge", "1")]), InvalidRequest)
    await fails_with(core.alter_topic_configs("zz", [("x", SET, "1")]), UnknownTopic)


@pytest_twisted.ensureDeferred
async def test_retention_of_one_topic_deletes_only_there(broker_factory: Any) -> None:
    running = await broker_factory(segment_bytes=200)
    core = running.broker
    try:
        await within(core.create_topic("short", 1, {"retention.ms": "0"}))
        await within(core.create_topic("long", 1))
        old = ms_now() - 60_000
        for name in ("short", "long"):
            for i in range(4):
                await within(
                    core.append(name, 0, batch(b"v" * 150, timestamp=old + i), auto_create=False)
                )
        assert (
            len(core.partition("short", 0).segments) == len(core.partition("long", 0).segments) == 4
        )
        await within(core.enforce_retention())
        assert core.bounds("short", 0)[0] == 3
        assert core.bounds("long", 0) == (0, 4)
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_max_message_bytes_and_log_append_time_apply_to_their_topic_only(
    broker: RunningBroker,
) -> None:
    core = broker.broker
    await within(core.create_topic("small", 1, {"max.message.bytes": "100"}))
    await within(core.create_topic("stamped", 1, {"message.timestamp.type": "LogAppendTime"}))
    await within(core.create_topic("plain", 1))
    big = batch(b"x" * 200, timestamp=1000)
    await fails_with(core.append("small", 0, big, auto_create=False), RecordTooLarge)
    assert (await within(core.append("plain", 0, big, auto_create=False))).log_append_time == -1
    before = ms_now()
    stored = await within(core.append("stamped", 0, big, auto_create=False))
    assert before <= stored.log_append_time <= ms_now()
    [(_, header)] = scan_batches((await within(core.read("stamped", 0, 0, 10_000))).chunks[0])[0]
    assert header.attributes & 0x08 and header.max_timestamp == stored.log_append_time
    [(_, plain)] = scan_batches((await within(core.read("plain", 0, 0, 10_000))).chunks[0])[0]
    assert not plain.attributes & 0x08 and plain.max_timestamp == 1000


# -- offsets of a deleted topic -----------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_deleting_a_topic_drops_its_committed_offsets_for_good(broker_factory: Any) -> None:
    """A topic re-created under a deleted one's name starts with no committed positions,
    after a restart too; commits on other topics are untouched."""
    running = await broker_factory()
    try:
        core = running.broker
        await within(core.create_topic("gone", 2))
        await within(core.create_topic("kept", 1))
        await within(core.commit_offsets("g1", {("gone", 0): 5, ("gone", 1): 7, ("kept", 0): 3}))
        await within(core.commit_offsets("g2", {("gone", 1): 9}))
        await within(core.delete_topic("gone"))
        assert core.committed_offsets("g1") == {("kept", 0): 3}
        assert core.committed_offsets("g2") == {}
    finally:
        await running.stop()
    again = await broker_factory()
    try:
        core = again.broker
        await within(core.create_topic("gone", 2))
        assert core.committed_offsets("g1") == {("kept", 0): 3}
        assert core.committed_offsets("g2") == {}
        assert "g2" not in core.group_names()
    finally:
        await again.stop()


@pytest_twisted.ensureDeferred
async def test_commits_left_by_a_crash_during_topic_deletion_are_dropped_at_startup(
    broker_factory: Any, data_dir: Any
) -> None:
    """The broker stops after deleting a topic's directory and before tombstoning its
    commits (the storage's own deletion runs, the core's second step does not). The
    next start drops those commits, durably, before it serves: a topic created again
    under the name starts with no positions, even after another restart, and the
    commits on other topics stay."""
    from rustka.config import Config
    from rustka.storage.offsets import OffsetsStore

    running = await broker_factory()
    try:
        core = running.broker
        await within(core.create_topic("gone", 2))
        await within(core.create_topic("kept", 1))
        await within(core.commit_offsets("g1", {("gone", 0): 5, ("gone", 1): 7, ("kept", 0): 3}))
        await within(core.commit_offsets("g2", {("gone", 1): 9}))
        assert core.logs is not None
        await within(core.io.run(core.logs.delete_topic, "gone"))
        assert not (data_dir / "gone").exists()
        assert core.committed_offsets("g2") == {("gone", 1): 9}  # the crash's state
    finally:
        await running.stop()
    again = await broker_factory()
    try:
        core = again.broker
        assert core.committed_offsets("g1") == {("kept", 0): 3}
        assert core.committed_offsets("g2") == {}
        await within(core.create_topic("gone", 2))
        assert core.committed_offsets("g1") == {("kept", 0): 3}
    finally:
        await again.stop()
    store = OffsetsStore.open(data_dir, Config().log_config())
    try:
        assert store.groups() == {"g1": {("kept", 0): 3}}
    finally:
        store.close()


# -- read_many: Kafka's Fetch of many partitions in one pool job ----------------------


async def filled(core: Broker, topic: str, partitions: int, batches: int) -> list[list[bytes]]:
    """Each partition's stored batches (the same length each: one 1,000-byte record)."""
    await within(core.create_topic(topic, partitions))
    stored: list[list[bytes]] = []
    for index in range(partitions):
        sent = []
        for n in range(batches):
            await within(core.append(topic, index, batch(b"%03d" % n * 333), auto_create=False))
            result = await within(core.read(topic, index, n, 1))
            sent.append(b"".join(result.chunks))
        stored.append(sent)
    return stored


def read_many_in_one_job(
    core: Broker, wanted: list[tuple[str, int, int, int]], max_bytes: int, **kw: Any
) -> defer.Deferred[list[Any]]:
    """`read_many`, asserting it submitted exactly one pool job. Counted around the call,
    which submits synchronously, so no timer's pool work can fall in between."""
    before = core.io.submitted
    d = core.read_many(wanted, max_bytes, **kw)
    assert core.io.submitted - before == 1
    return d


@pytest_twisted.ensureDeferred
async def test_read_many_shares_the_byte_budget_in_request_order(broker: RunningBroker) -> None:
    """Kafka's budget (ReplicaManager.readFromLocalLog): max_bytes is shared in order, the
    first partition with data gets its first batch whole even above both limits, and a
    later partition whose first batch is over what is left gets no records (its bounds
    still come)."""
    core = broker.broker
    stored = await filled(core, "m", 4, 3)
    size = len(stored[0][0])
    big = 1 << 20
    wanted = [("m", p, 0, big) for p in range(4)]
    # 3.5 batches: p0 takes its three, p1 nothing (a batch is over the half left), p2, p3
    # nothing either, since the response already has data.
    results = await within(read_many_in_one_job(core, wanted, 3 * size + size // 2))
    assert [b"".join(r.chunks) for r in results] == [b"".join(stored[0]), b"", b"", b""]
    assert [(r.high_watermark, r.log_start_offset) for r in results] == [(3, 0)] * 4
    # Partition limits: two batches of p0, then one of p1; then the budget is spent
    # exactly, so p2 and p3 are not read at all.
    wanted = [("m", 0, 0, 2 * size), ("m", 1, 1, size), ("m", 2, 0, big), ("m", 3, 0, big)]
    results = await within(read_many_in_one_job(core, wanted, 3 * size))
    assert [b"".join(r.chunks) for r in results] == [
        stored[0][0] + stored[0][1],
        stored[1][1],
        b"",
        b"",
    ]
    assert [r.aborted for r in results] == [None] * 4
    # A partition at the high watermark first, then limits of one byte: the first
    # partition with data still gets one whole batch, the next one nothing.
    wanted = [("m", 0, 3, 1), ("m", 1, 2, 1), ("m", 2, 0, 1)]
    results = await within(read_many_in_one_job(core, wanted, 1))
    assert [b"".join(r.chunks) for r in results] == [b"", stored[1][2], b""]
    assert core.stats.bytes_out >= len(stored[1][2])


@pytest_twisted.ensureDeferred
async def test_read_many_answers_each_error_in_its_place(broker: RunningBroker) -> None:
    """Unknown topics and partitions, offsets out of range and a batch corrupt on disk are
    each answered in their own place; the partitions around them are read, all in one job."""
    core = broker.broker
    stored = await filled(core, "e", 3, 2)
    # The stored copy of partition 2's second batch goes bad under the broker.
    segment = core.partition("e", 2).segments[0]
    fd = os.open(segment.log_path, os.O_WRONLY)
    try:
        os.pwrite(fd, b"\xff\xff", len(stored[2][0]) + len(stored[2][1]) - 2)
    finally:
        os.close(fd)
    big = 1 << 20
    wanted = [
        ("e", 0, 0, big),
        ("nope", 0, 0, big),
        ("e", 7, 0, big),
        ("e", 1, 5, big),
        ("e", 2, 1, big),
        ("e", 1, 0, big),
    ]
    results = await within(read_many_in_one_job(core, wanted, big))
    assert b"".join(results[0].chunks) == b"".join(stored[0])
    assert isinstance(results[1], UnknownTopic)
    assert isinstance(results[2], UnknownPartition)
    assert isinstance(results[3], OffsetOutOfRange)
    assert (results[3].offset, results[3].log_start, results[3].end) == (5, 0, 2)
    assert isinstance(results[4], CorruptBatch)
    assert b"".join(results[5].chunks) == b"".join(stored[1])


@pytest_twisted.ensureDeferred
async def test_read_many_at_the_high_watermark_makes_no_pool_hop(broker: RunningBroker) -> None:
    """Nothing to read anywhere (every partition at its high watermark, or an error): the
    answer is ready at once and the pool never sees the request."""
    core = broker.broker
    await filled(core, "h", 3, 2)
    wanted = [("h", 0, 2, 100), ("h", 1, 2, 100), ("nope", 0, 0, 100), ("h", 2, 2, 100)]
    before = core.io.submitted
    d = core.read_many(wanted, 1 << 20)
    assert d.called and core.io.submitted == before
    results = await d
    assert [r.chunks for r in results if not isinstance(r, Exception)] == [()] * 3
    assert [r.high_watermark for r in results if not isinstance(r, Exception)] == [2] * 3
    assert isinstance(results[2], UnknownTopic)


@pytest_twisted.ensureDeferred
async def test_read_many_read_committed_stops_at_the_lso_with_aborted_transactions(
    broker: RunningBroker,
) -> None:
    """read_committed: a partition with an aborted transaction and a committed batch after
    it is read with the abort listed; one held at its LSO by an open transaction is
    answered without the pool, its LSO beside a higher high watermark."""
    core = broker.broker
    txn = core.transactions
    await within(core.create_topic("c", 2))
    aborting, epoch = await within(txn.init_producer_id("a", 60_000))
    await within(txn.add_partitions("a", aborting, epoch, [("c", 0)]))
    await within(
        core.append(
            "c", 0, txn_batch(aborting, 0, epoch=epoch), auto_create=False, transactional_id="a"
        )
    )
    await within(txn.end_transaction("a", aborting, epoch, False))
    await within(txn.settled("a"))
    await within(core.append("c", 0, batch(b"after"), auto_create=False))
    holding, epoch = await within(txn.init_producer_id("b", 60_000))
    await within(txn.add_partitions("b", holding, epoch, [("c", 1)]))
    await within(
        core.append(
            "c", 1, txn_batch(holding, 0, epoch=epoch), auto_create=False, transactional_id="b"
        )
    )
    open_only = [("c", 1, 0, 1 << 20)]
    before = core.io.submitted
    d = core.read_many(open_only, 1 << 20, committed=True)
    assert d.called and core.io.submitted == before
    (held,) = await d
    assert (held.chunks, held.last_stable_offset, held.high_watermark, held.aborted) == (
        (),
        0,
        2,
        (),
    )
    wanted = [("c", 0, 0, 1 << 20), *open_only]
    first, held = await within(read_many_in_one_job(core, wanted, 1 << 20, committed=True))
    assert first.aborted == ((aborting, 0),)
    assert first.last_stable_offset == first.high_watermark == 4
    headers, _ = scan_batches(b"".join(first.chunks))
    # The aborted batch alone: its old timestamp rolled the segment, and a read never
    # crosses one.
    assert [h.base_offset for _, h in headers] == [0]
    assert held.chunks == () and held.last_stable_offset == 0
