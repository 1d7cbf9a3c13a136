"""`rustka mirror` into a real Kafka-protocol cluster (Tansu), then switch a consumer over."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from rustka.ops.mirror import PartitionState, as_client_batch, split_batches
from rustka.record.batch import Record, crc_ok, encode_batch, parse_header
from tests.conftest import RunningBroker, within
from tests.kafka import real_clients as rc
from tests.kafka.tansu import Tansu

pytestmark = pytest.mark.clients


@pytest.fixture
def tansu(tmp_path: Path) -> Iterator[Tansu]:
    peer = Tansu(tmp_path)
    try:
        yield peer
    finally:
        peer.stop()


def run_cli(*argv: str) -> tuple[int, str, str]:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "rustka.ops.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


async def mirror_orders(broker: RunningBroker, tansu: Tansu, state: Path) -> tuple[int, str, str]:
    """`rustka mirror` of the topic orders, run as a real process."""
    return await within(  # type: ignore[no-any-return]
        threads.deferToThread(
            run_cli,
            "mirror",
            "--broker",
            broker.address,
            "--to",
            tansu.address,
            "--state",
            str(state),
            "--json",
            "orders",
        ),
        120,
    )


def test_a_forwarded_batch_is_a_client_batch_with_base_offset_zero_and_no_producer() -> None:
    """Kafka refuses a client batch whose baseOffset is not 0; the CRC stays valid."""
    batch = bytearray(encode_batch([Record(b"k", b"v")], base_offset=41))
    # Make it look idempotent: producer id 7, epoch 0, sequence 3, with a valid CRC.
    import struct

    import crc32c

    struct.pack_into("!qhi", batch, 43, 7, 0, 3)
    struct.pack_into("!I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    as_client_batch(batch)
    header = parse_header(batch)
    assert header.base_offset == 0
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert crc_ok(batch, 0, header)


def test_split_batches_drops_a_partial_tail() -> None:
    a = encode_batch([Record(b"a", b"1"), Record(b"b", b"2")], base_offset=10)
    b = encode_batch([Record(b"c", b"3")], base_offset=12)
    got = split_batches(a + b + b[:30])
    assert [(base, last) for base, last, _ in got] == [(10, 11), (12, 12)]


def test_offsets_map_through_breakpoints() -> None:
    state = PartitionState(next_source=0, next_target=0)
    state.record(5, 0)  # source 5.. -> target 0..
    state.record(20, 10)  # a gap of 5 source offsets
    state.next_source, state.next_target = 30, 20
    assert state.to_target(5) == 0
    assert state.to_target(12) == 7
    assert state.to_target(20) == 10
    assert state.to_target(30) == 20


@pytest_twisted.ensureDeferred
async def test_mirror_topic_and_group_then_a_consumer_resumes_on_the_target(
    broker: RunningBroker, tansu: Tansu, tmp_path: Path
) -> None:
    sent = {p: [(f"k{p}-{i}".encode(), f"v{p}-{i}".encode()) for i in range(30)] for p in range(3)}
    c = await broker.client()
    overrides = {"retention.ms": "1209600000", "max.message.bytes": "2097152"}
    try:
        await c.create_topic("orders", 3, configs=overrides)
    finally:
        await c.close()
    for p, recs in sent.items():
        await within(
            threads.deferToThread(
                rc.confluent_produce,
                broker.address,
                "orders",
                recs,
                p,
                **{"acks": "all", "enable.idempotence": True},
            ),
            90,
        )

    def commit(bootstrap: str, offsets: dict[int, int]) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing"})
        try:
            consumer.commit(
                offsets=[TopicPartition("orders", p, o) for p, o in offsets.items()],
                asynchronous=False,
            )
        finally:
            consumer.close()

    await within(threads.deferToThread(commit, broker.address, {0: 10, 1: 20, 2: 30}), 60)

    state = tmp_path / "mirror.json"
    code, out, err = await mirror_orders(broker, tansu, state)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["records"] == 90
    assert summary["groups"] == 1

    def target_configs(bootstrap: str) -> dict[str, str]:
        from confluent_kafka.admin import AdminClient, ConfigResource

        admin = AdminClient({"bootstrap.servers": bootstrap})
        [future] = admin.describe_configs([ConfigResource("topic", "orders")]).values()
        return {name: entry.value for name, entry in future.result(30).items()}

    # The copy was created with the source topic's own configs, and only those.
    on_target = await within(threads.deferToThread(target_configs, tansu.address), 60)
    assert {k: on_target.get(k) for k in overrides} == overrides
    assert on_target.get("cleanup.policy", "delete") == "delete"

    # A second run copies only what is new.
    more = [(b"late", b"record")]

    def produce_with_headers() -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": broker.address})
        producer.produce(
            "orders",
            key=b"late",
            value=b"record",
            partition=0,
            headers=[("trace", b"abc")],
            timestamp=1_700_000_000_123,
        )
        assert producer.flush(30) == 0

    await within(threads.deferToThread(produce_with_headers), 60)
    code, out, err = await mirror_orders(broker, tansu, state)
    assert code == 0, err
    assert json.loads(out)["records"] == 1

    # A crash after the target acknowledged but before the state was saved: the
    # next run finds those records on the target and does not copy them again.
    before = json.loads(state.read_text())
    before["partitions"]["orders/0"]["next_source"] -= 1
    before["partitions"]["orders/0"]["next_target"] -= 1
    state.write_text(json.dumps(before))
    code, out, err = await mirror_orders(broker, tansu, state)
    assert code == 0, err
    assert (json.loads(out)["records"], json.loads(out)["skipped_after_crash"]) == (0, 1)

    # The same consumer group, pointed at the new cluster, resumes at the mirrored commits.
    def resume(bootstrap: str) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "billing",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        got: dict[int, list[Any]] = {0: [], 1: [], 2: []}
        try:
            # Assigned, not subscribed: the group's committed offset still decides where
            # each partition starts, without waiting for the target's rebalance delay.
            consumer.assign([TopicPartition("orders", p) for p in range(3)])
            idle = 0
            # Stop after 5 s of silence once everything expected arrived, or after 120 polls.
            for _ in range(240):
                msg = consumer.poll(0.5)
                if msg is None:
                    idle += 1 if sum(map(len, got.values())) >= 31 else 0
                    if idle >= 4:
                        break
                    continue
                if msg.error():
                    raise AssertionError(str(msg.error()))
                got[msg.partition()].append(
                    (msg.key(), msg.value(), msg.headers(), msg.timestamp()[1])
                )
        finally:
            consumer.close()
        return got

    got = await within(threads.deferToThread(resume, tansu.address), 120)
    assert [(k, v) for k, v, _, _ in got[0]] == sent[0][10:] + more
    assert got[0][-1][2:] == ([("trace", b"abc")], 1_700_000_000_123)
    assert [(k, v) for k, v, _, _ in got[1]] == sent[1][20:]
    assert got[2] == []


@pytest_twisted.ensureDeferred
async def test_follow_keeps_copying_until_interrupted(
    broker: RunningBroker, tansu: Tansu, tmp_path: Path
) -> None:
    import signal
    import subprocess
    import sys
    import time

    c = await broker.client()
    try:
        await c.create_topic("live", 1)
        await c.produce("live", b"k", b"first")
    finally:
        await c.close()
    state = tmp_path / "follow.json"

    def copied() -> int:
        try:
            return int(json.loads(state.read_text())["partitions"]["live/0"]["next_source"])
        except (OSError, ValueError, KeyError):
            return 0

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 60
        while copied() < count:
            assert time.monotonic() < deadline, f"the mirror did not reach {count}"
            time.sleep(0.05)

    mirror = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rustka.ops.cli",
            "mirror",
            "--broker",
            broker.address,
            "--to",
            tansu.address,
            "--state",
            str(state),
            "--follow",
            "--json",
            "live",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await within(threads.deferToThread(wait_for, 1), 90)
        c = await broker.client()
        try:
            await c.produce("live", b"k", b"second")
        finally:
            await c.close()
        await within(threads.deferToThread(wait_for, 2), 90)
        mirror.send_signal(signal.SIGINT)
        out, err = await within(threads.deferToThread(mirror.communicate, None, 30), 60)
    finally:
        if mirror.poll() is None:
            mirror.kill()
            mirror.wait()
    assert mirror.returncode == 0, err
    assert json.loads(out)["records"] == 2


@pytest_twisted.ensureDeferred
async def test_mirror_into_a_sasl_protected_cluster(broker: RunningBroker, tmp_path: Path) -> None:
    """The target requires SASL (here a second rustka with a sasl listener): the mirror
    logs in with --to-user and a password from the environment, and a wrong one is one
    line naming the failure."""
    import os
    import subprocess
    import sys

    from rustka.security.credentials import CredentialStore
    from rustka.security.scram import MECHANISMS, derive_credential
    from tests.conftest import start_broker
    from tests.kafka.stored import stored_batches

    target_dir = tmp_path / "target"
    store = CredentialStore(target_dir / "credentials")
    store.upsert("mirror", "SCRAM-SHA-512", derive_credential(MECHANISMS["SCRAM-SHA-512"], "m-pw"))
    target = await start_broker(target_dir, listen_security="sasl")
    try:
        c = await broker.client()
        try:
            await c.create_topic("orders", 1)
            for i in range(5):
                await c.produce("orders", f"k{i}".encode(), f"v{i}".encode())
        finally:
            await c.close()

        def mirror(password: str) -> subprocess.CompletedProcess[str]:
            argv = [
                sys.executable, "-m", "rustka.ops.cli", "mirror", "--broker", broker.address,
                "--to", target.address, "--to-user", "mirror", "--state",
                str(tmp_path / f"state-{password}.json"), "--json", "orders",
            ]  # fmt: skip
            env = {**os.environ, "RUSTKA_TO_PASSWORD": password}
            return subprocess.run(
                argv, capture_output=True, text=True, timeout=120, env=env,
                stdin=subprocess.DEVNULL, check=False,
            )  # fmt: skip

        refused = await within(threads.deferToThread(mirror, "wrong"), 120)
        assert refused.returncode == 1
        assert "SASL_AUTHENTICATION_FAILED" in refused.stderr, refused.stderr
        done = await within(threads.deferToThread(mirror, "m-pw"), 120)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["records"] == 5
        copied = [r.value for _, recs in await stored_batches(target, "orders", 0) for r in recs]
        assert copied == [f"v{i}".encode() for i in range(5)]
        assert target.top.authenticator.stats.successes == {"SCRAM-SHA-512": 1}
    finally:
        await target.stop()
