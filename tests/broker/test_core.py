"""The broker core's protocol-neutral API, called directly on a running broker."""

from __future__ import annotations

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
    InvalidBatch,
    InvalidConfig,
    InvalidRequest,
    OffsetOutOfRange,
    RecordTooLarge,
    TopicExists,
    UnknownTopic,
)
from rustka.native import codec as p
from rustka.native.handlers import NativeHandler
from rustka.record.batch import Record, encode_batch, ms_now, scan_batches
from tests.conftest import RunningBroker, within


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
    before = int(time.time() * 1000) << 10
    ids = [core.new_producer_id() for _ in range(5000)]
    assert ids[0] >= before
    assert ids == sorted(set(ids))


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
        assert len(configs) == 36
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
