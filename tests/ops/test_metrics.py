"""/metrics over real HTTP against a real broker fed over a real TCP connection."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import defer
from twisted.protocols.basic import Int32StringReceiver

from rustka.native import codec as p
from rustka.ops.metrics import metrics_service
from rustka.record.batch import Record, encode_batch
from tests.conftest import reactor_turns, within
from tests.ops import join_consumer_group

TIMEOUT = 10


class RawClient(Int32StringReceiver):
    """Frames by hand: one request out, responses matched in order (the protocol's rule)."""

    MAX_LENGTH = 16 * 1024 * 1024

    def __init__(self) -> None:
        self._waiting: deque[defer.Deferred[p.Response]] = deque()
        self.closed: defer.Deferred[None] = defer.Deferred()

    def stringReceived(self, payload: bytes) -> None:
        self._waiting.popleft().callback(p.decode_response(payload))

    def connectionLost(self, reason: Any = None) -> None:
        self.closed.callback(None)

    def call(self, request: p.Request) -> defer.Deferred[p.Response]:
        d: defer.Deferred[p.Response] = defer.Deferred()
        self._waiting.append(d)
        self.sendString(p.encode_request(request))
        return d


async def _connect(port: int) -> RawClient:
    from twisted.internet import reactor
    from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

    client = RawClient()
    await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), client)
    return client


async def _call(client: RawClient, request: p.Request) -> p.Response:
    from twisted.internet import reactor

    return await client.call(request).addTimeout(TIMEOUT, reactor)


async def _get(
    port: int, path: str = "/metrics", accept: str | None = None
) -> tuple[int, Any, bytes]:
    from twisted.internet import reactor
    from twisted.web.client import Agent, readBody
    from twisted.web.http_headers import Headers

    headers = Headers({"Accept": [accept]} if accept else {})
    response = (
        await Agent(reactor)
        .request(b"GET", f"http://127.0.0.1:{port}{path}".encode(), headers)
        .addTimeout(TIMEOUT, reactor)
    )
    body = await readBody(response).addTimeout(TIMEOUT, reactor)
    return response.code, response.headers, body


async def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    code, _, body = await _get(port)
    assert code == 200
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


class Metrics:
    """A running broker plus its metrics listener."""

    def __init__(self, running: Any, listener: Any) -> None:
        self.running = running
        self.listener = listener

    @property
    def port(self) -> int:
        return self.listener.port.getHost().port


async def _start(running: Any) -> Metrics:
    from twisted.internet import reactor

    svc = metrics_service(
        "tcp:0:interface=127.0.0.1",
        running.broker,
        running.factory,
        running.broker.io,
        reactor,
    )
    svc.startService()
    await svc.listening
    return Metrics(running, svc)


@pytest_twisted.async_yield_fixture
async def metrics(broker_factory: Callable[..., Any]) -> AsyncIterator[Metrics]:
    running = await broker_factory(default_partitions=1)
    started = await _start(running)
    try:
        yield started
    finally:
        await started.listener.stopService()
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_counters_after_produce_fetch_commit(metrics: Metrics) -> None:
    """Produce, fetch, commit and a failing fetch show up as exact counter and gauge values."""
    from rustka.storage.file_io import SYNC_STATS

    fsyncs_before = SYNC_STATS.count
    client = await _connect(metrics.running.port)
    values = [b"one", b"two!", b"three"]
    for i, value in enumerate(values):
        assert await _call(client, p.Produce("orders", b"k%d" % i, value)) == p.Produced(0, i)
    fetched = await _call(client, p.Fetch("orders", 0, 1))
    assert fetched == p.FetchedRecord(1, b"k1", b"two!")
    assert await _call(client, p.Commit("billing", "orders", 0, 1)) == p.CommitOk()
    assert isinstance(await _call(client, p.Fetch("nope", 0, 0)), p.Error)

    samples = await _scrape(metrics.port)
    batch_sizes = [
        len(encode_batch([Record(key=b"k%d" % i, value=v)], timestamp=0))
        for i, v in enumerate(values)
    ]
    assert _value(samples, "rustka_requests_total", op="produce", outcome="ok") == 3
    assert _value(samples, "rustka_requests_total", op="produce", outcome="error") == 0
    assert _value(samples, "rustka_requests_total", op="fetch", outcome="ok") == 1
    assert _value(samples, "rustka_requests_total", op="fetch", outcome="error") == 1
    assert _value(samples, "rustka_requests_total", op="commit", outcome="ok") == 1
    assert _value(samples, "rustka_requests_total", op="fetch_batch", outcome="ok") == 0
    assert _value(samples, "rustka_request_errors_total", op="fetch") == 1
    assert _value(samples, "rustka_request_duration_seconds_count", op="produce") == 3
    assert _value(samples, "rustka_request_duration_seconds_bucket", op="produce", le="+Inf") == 3
    assert _value(samples, "rustka_request_duration_seconds_sum", op="produce") > 0
    assert _value(samples, "rustka_request_duration_seconds_count", op="fetch") == 2
    assert _value(samples, "rustka_requests_in_flight", op="produce") == 0
    assert _value(samples, "rustka_request_errors_total", op="produce") == 0
    assert _value(samples, "rustka_records_in_total") == 3
    assert _value(samples, "rustka_bytes_in_total") == sum(batch_sizes)
    assert _value(samples, "rustka_bytes_out_total") == len(b"two!")
    assert _value(samples, "rustka_connections") == 1
    assert _value(samples, "rustka_io_queue_depth") == 0
    # flush=always: each of the three produces and the commit fsynced a log and its index
    # (fsync counts are process-wide, hence measured as a difference).
    assert _value(samples, "rustka_fsync_total") - fsyncs_before >= 4
    assert _value(samples, "rustka_fsync_total") == SYNC_STATS.count
    assert _value(samples, "rustka_fsync_seconds_total") > 0
    assert _value(samples, "rustka_corrupt_batches_total") == 0
    assert _value(samples, "rustka_retention_deleted_segments_total") == 0
    part = {"topic": "orders", "partition": "0"}
    assert _value(samples, "rustka_partition_log_start_offset", **part) == 0
    assert _value(samples, "rustka_partition_end_offset", **part) == 3
    assert _value(samples, "rustka_partition_size_bytes", **part) == sum(batch_sizes)
    assert _value(samples, "rustka_partition_segments", **part) == 1
    assert _value(samples, "rustka_group_lag", group="billing", **part) == 2

    client.transport.loseConnection()
    await client.closed
    after = await _scrape(metrics.port)
    assert _value(after, "rustka_connections") == 0


@pytest_twisted.ensureDeferred
async def test_values_are_read_at_scrape_time(metrics: Metrics) -> None:
    """A second scrape reflects records produced after the first one."""
    client = await _connect(metrics.running.port)
    await _call(client, p.Produce("events", b"a", b"1"))
    first = await _scrape(metrics.port)
    await _call(client, p.Produce("events", b"a", b"2"))
    await _call(client, p.Commit("g", "events", 0, 2))
    second = await _scrape(metrics.port)
    part = {"topic": "events", "partition": "0"}
    assert _value(first, "rustka_partition_end_offset", **part) == 1
    assert ("rustka_group_lag", (("group", "g"), ("partition", "0"), ("topic", "events"))) not in (
        first
    )
    assert _value(second, "rustka_partition_end_offset", **part) == 2
    assert _value(second, "rustka_group_lag", group="g", **part) == 0
    client.transport.loseConnection()
    await client.closed


@pytest_twisted.ensureDeferred
async def test_content_negotiation_and_other_paths(metrics: Metrics) -> None:
    """Plain text by default, OpenMetrics when asked for, and 404 outside /metrics."""
    code, headers, body = await _get(metrics.port)
    assert code == 200
    assert headers.getRawHeaders(b"content-type")[0].startswith(b"text/plain; version=0.0.4")
    assert b"# TYPE rustka_requests_total counter" in body
    code, headers, body = await _get(metrics.port, accept="application/openmetrics-text")
    assert code == 200
    assert headers.getRawHeaders(b"content-type")[0].startswith(b"application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    code, _, _ = await _get(metrics.port, path="/")
    assert code == 404


@pytest_twisted.ensureDeferred
async def test_two_brokers_in_one_process(metrics: Metrics, tmp_path: Path) -> None:
    """Each metrics service has its own registry: a second broker neither clashes nor leaks in."""
    from twisted.internet import reactor

    from rustka.config import Config
    from rustka.ops.tap import build_service

    config = Config().updated(
        {
            "data_dir": str(tmp_path / "other"),
            "listen": ["tcp:0:interface=127.0.0.1"],
            "default_partitions": 1,
        }
    )
    other_top = build_service(config, reactor)
    other_top.startService()
    other = await _start(other_top)
    try:
        client = await _connect(metrics.running.port)
        await _call(client, p.Produce("only-first", b"k", b"v"))
        client.transport.loseConnection()
        await client.closed
        mine = await _scrape(metrics.port)
        theirs = await _scrape(other.port)
        assert _value(mine, "rustka_records_in_total") == 1
        assert _value(theirs, "rustka_records_in_total") == 0
        part = {"topic": "only-first", "partition": "0"}
        assert _value(mine, "rustka_partition_end_offset", **part) == 1
        assert ("rustka_partition_end_offset", tuple(sorted(part.items()))) not in theirs
    finally:
        await other.listener.stopService()
        await other_top.stopService()


# -- the Kafka side (issue 11 item 7) ------------------------------------------------


def _kcat_list(address: str) -> str:
    from tests.kafka.real_clients import kcat

    return kcat("-b", address, "-L", "-J")


@pytest.mark.clients
@pytest_twisted.ensureDeferred
async def test_kafka_requests_errors_latency_and_connections_by_protocol(
    broker_factory: Callable[..., Any],
) -> None:
    """After kcat and a raw Kafka client: per-API counts, errors by name, histograms, and
    open connections by protocol, all from the metrics listener `build_service` wires."""
    from twisted.internet import reactor, threads

    from rustka.kafka.client import connect_kafka

    running = await broker_factory(default_partitions=1, metrics="tcp:0:interface=127.0.0.1")
    try:
        await running.top.metrics.listening
        port = running.top.metrics.port.getHost().port
        before = await _scrape(port)
        assert _value(before, "rustka_kafka_requests_total", api="Fetch") == 0
        assert _value(before, "rustka_kafka_request_duration_seconds_count", api="Produce") == 0
        await threads.deferToThread(_kcat_list, running.address).addTimeout(60, reactor)
        native = await _connect(running.port)
        await _call(native, p.Produce("kt", b"k", b"v"))
        k = await connect_kafka(reactor, running.address, client_id="metrics-test")
        fetch = {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": "kt",
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20},
                        {"partition": 7, "fetch_offset": 0, "partition_max_bytes": 1 << 20},
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        answer = await k.request(1, fetch).addTimeout(TIMEOUT, reactor)
        codes = [q["error_code"] for t in answer["responses"] for q in t["partitions"]]
        assert codes == [0, 3]
        samples = await _scrape(port)
        assert _value(samples, "rustka_kafka_requests_total", api="Fetch") == 1
        assert _value(samples, "rustka_kafka_request_duration_seconds_count", api="Fetch") == 1
        assert (
            _value(
                samples,
                "rustka_kafka_errors_total",
                api="Fetch",
                error="UNKNOWN_TOPIC_OR_PARTITION",
            )
            == 1
        )
        # kcat's ApiVersions and Metadata, then the raw client's ApiVersions.
        assert _value(samples, "rustka_kafka_requests_total", api="ApiVersions") >= 2
        assert _value(samples, "rustka_kafka_requests_total", api="Metadata") >= 1
        assert _value(
            samples, "rustka_kafka_request_duration_seconds_bucket", api="Metadata", le="+Inf"
        ) == _value(samples, "rustka_kafka_requests_total", api="Metadata")
        assert _value(samples, "rustka_protocol_connections", protocol="kafka") == 1
        assert _value(samples, "rustka_protocol_connections", protocol="native") == 1
        assert _value(samples, "rustka_connections") == 2
        await k.close()
        native.transport.loseConnection()
        await native.closed
        factory = running.top.kafka_factory
        await reactor_turns(lambda: not factory.connections and not running.factory.connections)
        after = await _scrape(port)
        assert _value(after, "rustka_protocol_connections", protocol="kafka") == 0
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_authorization_denials_and_acls(broker_factory: Callable[..., Any]) -> None:
    """With ACLs on: how many there are, how often they changed, and the denials by
    operation; without, no such family at all (the plain broker above)."""
    from rustka.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType

    running = await broker_factory(authorizer_enabled=True, super_users="User:root")
    started = await _start(running)
    try:
        anonymous = "User:ANONYMOUS"
        await running.broker.access.create(
            [
                AclBinding(
                    ResourceType.TOPIC,
                    "t",
                    PatternType.LITERAL,
                    anonymous,
                    "*",
                    Operation.READ,
                    Permission.ALLOW,
                ),
                AclBinding(
                    ResourceType.TOPIC,
                    "u",
                    PatternType.PREFIXED,
                    anonymous,
                    "*",
                    Operation.WRITE,
                    Permission.ALLOW,
                ),
            ],
            "User:root",
        )
        client = await _connect(running.port)
        denied = await _call(client, p.Produce("t", b"k", b"v"))
        assert isinstance(denied, p.Error) and "not authorized" in denied.message
        denied = await _call(client, p.FetchBatch("u", 0, 0, 1000, 0))
        assert isinstance(denied, p.Failure) and denied.code == 20
        await _call(client, p.FetchBatch("x", 0, 0, 1000, 0))
        samples = await _scrape(started.port)
        assert _value(samples, "rustka_authorization_denials_total", operation="WRITE") == 1
        assert _value(samples, "rustka_authorization_denials_total", operation="READ") == 2
        assert _value(samples, "rustka_acls") == 2
        assert _value(samples, "rustka_acl_changes_total") == 1
        client.transport.loseConnection()
        await client.closed
    finally:
        await started.listener.stopService()
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_no_authorization_families_while_it_is_off(metrics: Metrics) -> None:
    samples = await _scrape(metrics.port)
    assert not [name for name, _ in samples if "acl" in name or "authorization" in name]


@pytest_twisted.ensureDeferred
async def test_authentications_by_mechanism_and_result(
    broker_factory: Callable[..., Any], data_dir: Path
) -> None:
    """Logins of both protocols in one family; a credential file that cannot be read
    shows as rustka_credential_file_error 1."""
    from twisted.internet import defer, reactor

    from rustka.client.protocol import connect
    from rustka.errors import AuthenticationFailed
    from rustka.security.credentials import CredentialStore
    from rustka.security.scram import MECHANISMS, derive_credential

    store = CredentialStore(data_dir / "credentials")
    store.upsert("alice", "SCRAM-SHA-512", derive_credential(MECHANISMS["SCRAM-SHA-512"], "pw"))
    running = await broker_factory(
        listen_security="sasl", connection_failed_authentication_delay_ms=0
    )
    started = await _start(running)
    try:
        good = await defer.ensureDeferred(
            connect(
                reactor, running.address, user="alice", password="pw", mechanism="SCRAM-SHA-512"
            )
        )
        await good.close()
        for mechanism in ("SCRAM-SHA-512", "PLAIN"):
            with pytest.raises(AuthenticationFailed):
                await defer.ensureDeferred(
                    connect(
                        reactor, running.address, user="alice", password="x", mechanism=mechanism
                    )
                )
        samples = await _scrape(started.port)
        name = "rustka_authentications_total"
        assert _value(samples, name, mechanism="SCRAM-SHA-512", result="success") == 1
        assert _value(samples, name, mechanism="SCRAM-SHA-512", result="failure") == 1
        assert _value(samples, name, mechanism="PLAIN", result="failure") == 1
        assert _value(samples, "rustka_credential_file_error") == 0
        (data_dir / "credentials").write_text("{")
        samples = await _scrape(started.port)
        assert _value(samples, "rustka_credential_file_error") == 1
    finally:
        await started.listener.stopService()
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_transactions_by_outcome_and_the_last_stable_offset(metrics: Metrics) -> None:
    """rustka_transactions_total counts ended transactions by outcome, the open ones are a
    gauge, and each partition reports its last stable offset."""
    from tests.storage.test_transactions import txn_batch

    core = metrics.running.broker
    txn = core.transactions
    await core.create_topic("tx", 1)
    pid, epoch = await txn.init_producer_id("m", 60_000)
    await txn.add_partitions("m", pid, epoch, [("tx", 0)])
    await core.append("tx", 0, txn_batch(pid, 0), auto_create=False, transactional_id="m")
    samples = await _scrape(metrics.port)
    assert _value(samples, "rustka_transactions_open") == 1
    assert _value(samples, "rustka_partition_last_stable_offset", topic="tx", partition="0") == 0
    await txn.end_transaction("m", pid, epoch, True)
    await txn.settled("m")
    pid2, epoch2 = await txn.init_producer_id("n", 60_000)
    await txn.add_partitions("n", pid2, epoch2, [("tx", 0)])
    await txn.end_transaction("n", pid2, epoch2, False)
    await txn.settled("n")
    samples = await _scrape(metrics.port)
    assert _value(samples, "rustka_transactions_total", outcome="committed") == 1
    assert _value(samples, "rustka_transactions_total", outcome="aborted") == 1
    assert _value(samples, "rustka_transactions_total", outcome="timed_out") == 0
    assert _value(samples, "rustka_transactions_open") == 0
    assert _value(samples, "rustka_partition_last_stable_offset", topic="tx", partition="0") == 4


@pytest_twisted.ensureDeferred
async def test_fenced_timed_out_and_operator_aborts_and_open_per_partition(
    broker_factory: Callable[..., Any],
) -> None:
    """A producer fenced by a newer one, a transaction past its timeout and one an
    operator aborts are each counted under their outcome; each partition's open
    transactions are a gauge that goes back to 0."""
    from twisted.internet import reactor, task

    from rustka.storage.txn_log import TxnState
    from tests.storage.test_transactions import txn_batch

    running = await broker_factory(default_partitions=1, transaction_abort_interval_ms=50)
    started = await _start(running)
    try:
        core = running.broker
        txn = core.transactions
        await core.create_topic("tx", 2)

        async def open_on(tid: str, partition: int, timeout_ms: int = 60_000) -> None:
            pid, epoch = await txn.init_producer_id(tid, timeout_ms)
            await txn.add_partitions(tid, pid, epoch, [("tx", partition)])
            batch = txn_batch(pid, 0, epoch=epoch)
            await core.append("tx", partition, batch, auto_create=False, transactional_id=tid)

        await open_on("fenced", 0)
        await open_on("operator", 0)
        samples = await _scrape(started.port)
        assert _value(samples, "rustka_transactions_open") == 2
        assert _value(samples, "rustka_partition_open_transactions", topic="tx", partition="0") == 2
        assert _value(samples, "rustka_partition_open_transactions", topic="tx", partition="1") == 0
        await txn.init_producer_id("fenced", 60_000)
        await txn.abort("operator")
        await open_on("slow", 1, timeout_ms=100)
        for _ in range(100):
            meta = txn.describe("slow")
            if meta is not None and meta.state == TxnState.COMPLETE_ABORT:
                break
            await task.deferLater(reactor, 0.05, lambda: None)
        samples = await _scrape(started.port)
        assert _value(samples, "rustka_transactions_total", outcome="fenced") == 1
        assert _value(samples, "rustka_transactions_total", outcome="aborted") == 1
        assert _value(samples, "rustka_transactions_total", outcome="timed_out") == 1
        assert _value(samples, "rustka_transactions_total", outcome="committed") == 0
        assert _value(samples, "rustka_transactions_open") == 0
        for partition in ("0", "1"):
            labels = {"topic": "tx", "partition": partition}
            assert _value(samples, "rustka_partition_open_transactions", **labels) == 0
            end = _value(samples, "rustka_partition_end_offset", **labels)
            assert _value(samples, "rustka_partition_last_stable_offset", **labels) == end
    finally:
        await started.listener.stopService()
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_share_group_records_by_event_and_lock_expiries(metrics: Metrics) -> None:
    """rustka_share_records_total counts what happened to share groups' records."""
    core = metrics.running.broker
    await core.create_topic("queue", 1)
    client = await metrics.running.client()
    try:
        for i in range(4):
            await within(client.produce("queue", b"k", b"v%d" % i))
        taken = await within(client.share_fetch("g", "m", "queue", 4, 0, 1))
        assert len(taken) == 4
        acks = [(0, 0, 1), (0, 1, 2), (0, 2, 3)]
        assert await within(client.share_acknowledge("g", "m", "queue", acks)) == {0: 0}
    finally:
        await within(client.close())
    samples = await _scrape(metrics.port)
    events = {"acquired": 4, "accepted": 1, "released": 1, "rejected": 1, "archived": 1}
    for event, count in events.items():
        assert _value(samples, "rustka_share_records_total", event=event) == count, event
    assert _value(samples, "rustka_share_lock_expiries_total") == 0


@pytest_twisted.ensureDeferred
async def test_group_heartbeats_and_rebalances_by_type(metrics: Metrics) -> None:
    """rustka_group_heartbeats_total and rustka_group_rebalances_total, per group type."""
    await metrics.running.broker.create_topic("events2", 2)
    k, joined = await join_consumer_group(metrics.running.address, "modern", "m-1", ["events2"])
    try:
        again = {
            "group_id": "modern",
            "member_id": "m-1",
            "member_epoch": joined["member_epoch"],
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout_ms": 30_000,
            "subscribed_topic_names": ["events2"],
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": None,
        }
        assert (await within(k.request(68, again, 1)))["error_code"] == 0
    finally:
        await k.close()
    samples = await _scrape(metrics.port)
    assert _value(samples, "rustka_group_heartbeats_total", type="consumer") == 2
    assert _value(samples, "rustka_group_rebalances_total", type="consumer") == 1
    assert _value(samples, "rustka_group_heartbeats_total", type="classic") == 0
    assert _value(samples, "rustka_group_heartbeats_total", type="share") == 0
