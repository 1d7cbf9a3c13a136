"""A Go client from Debian's packages against a real rustka broker (issue 16).

The client is Shopify/sarama 1.22 (golang-github-shopify-sarama-dev), driven by
tests/kafka/go/sarama_check/main.go, which each test run builds with Debian's Go
(GO111MODULE=off, the library from /usr/share/gocode). Sarama picks request
versions from its configured Kafka version instead of ApiVersions; at V1_0_0_0 it
writes RecordBatch v2 with headers (Produce v3) and speaks Fetch v4, JoinGroup v1,
SyncGroup/Heartbeat/LeaveGroup v0, OffsetFetch v1 and OffsetCommit v1 (v2 with a
retention set).

Configured for older Kafka versions, sarama sends the versions Kafka 4.0 removed
(KIP-896) and rustka serves as Kafka 3.9 did (docs/kafka.md, "Old versions"):
OffsetCommit v1, and Produce v0-2 / Fetch v0-3 with magic 0/1 message sets.

Each sarama run is a subprocess started from a reactor pool thread, so the broker
keeps serving in the test's own thread; what sarama reports is compared with
what the broker stored.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from rustka.record.batch import Record
from tests.conftest import RunningBroker, within
from tests.kafka.stored import codec_of, stored_batches

pytestmark = pytest.mark.clients

REPO = Path(__file__).resolve().parents[2]
SOURCE = Path(__file__).parent / "go" / "sarama_check" / "main.go"
GOPATH = Path("/usr/share/gocode")
SARAMA = GOPATH / "src" / "github.com" / "Shopify" / "sarama"
BASE_TS = 1_700_000_000_000
MISSING = (
    "{what} is missing: scripts/test installs it (apt-get install golang-go "
    "golang-github-shopify-sarama-dev); run scripts/test once on this machine"
)


@pytest.fixture(scope="module")
def sarama_check(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go driver, built from the repo's source against Debian's sarama."""
    go = shutil.which("go")
    if go is None:
        pytest.fail(MISSING.format(what="Debian's Go compiler (go, package golang-go)"))
    if not SARAMA.is_dir():
        pytest.fail(MISSING.format(what=f"Debian's sarama ({SARAMA})"))
    binary = tmp_path_factory.mktemp("go") / "sarama_check"
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": str(GOPATH),
        # A git-ignored cache in the repo: the second build takes a second, not ten.
        "GOCACHE": str(REPO / ".cache" / "go-build"),
        "GOFLAGS": "",
    }
    built = subprocess.run(
        [go, "build", "-o", str(binary), str(SOURCE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if built.returncode != 0:
        pytest.fail(f"go build of {SOURCE} failed:\n{built.stderr}")
    return binary


def run_sarama(binary: Path, command: str, **flags: Any) -> Any:
    """One sarama_check run; its JSON answer, or a failure carrying sarama's error."""
    argv = [str(binary), command, *(f"-{k.replace('_', '-')}={v}" for k, v in flags.items())]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return json.loads(done.stdout)


async def sarama(binary: Path, command: str, **flags: Any) -> Any:
    return await within(threads.deferToThread(run_sarama, binary, command, **flags), 120)


async def make_topic(running: RunningBroker, topic: str, partitions: int) -> None:
    c = await running.client()
    try:
        await within(c.create_topic(topic, partitions))
    finally:
        await within(c.close())


def sent(i: int, prefix: str = "v") -> dict[str, Any]:
    """What sarama_check's produce sends as record i (see main.go)."""
    return {
        "key": f"key-{i}",
        "value": f"{prefix}-{i}",
        "headers": [["trace", f"t-{i}"], ["empty", ""]],
        "timestamp_ms": BASE_TS + i * 1000,
    }


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
@pytest_twisted.ensureDeferred
async def test_sarama_produces_keys_headers_and_timestamps_as_stored_record_batches(
    broker: RunningBroker, sarama_check: Path, codec: str
) -> None:
    topic, count = f"go-{codec}", 10
    await make_topic(broker, topic, 2)
    delivered = await sarama(
        sarama_check,
        "produce",
        brokers=broker.address,
        topic=topic,
        partitions=2,
        count=count,
        codec=codec,
        prefix=codec,
    )
    # Record i went to partition i % 2, in order: partition p holds i = p, p + 2, ...
    assert [(d["partition"], d["offset"]) for d in delivered] == [
        (i % 2, i // 2) for i in range(count)
    ]

    for partition in (0, 1):
        mine = list(range(partition, count, 2))
        batches = await stored_batches(broker, topic, partition)
        # One SendMessages call: one v2 batch per partition, stored with sarama's codec.
        assert [(h.magic, codec_of(h), h.base_offset, h.record_count) for h, _ in batches] == [
            (2, codec, 0, len(mine))
        ]
        header, records = batches[0]
        assert records == [
            Record(
                f"key-{i}".encode(),
                f"{codec}-{i}".encode(),
                (("trace", f"t-{i}".encode()), ("empty", b"")),
                BASE_TS + i * 1000,
                n,
            )
            for n, i in enumerate(mine)
        ]
        assert header.base_timestamp == BASE_TS + mine[0] * 1000
        # Sarama writes maxTimestamp -1; Kafka's validator stores the largest record
        # timestamp instead, and the time index depends on it.
        assert header.max_timestamp == BASE_TS + mine[-1] * 1000
        hit = await within(broker.broker.list_offset(topic, partition, BASE_TS + mine[2] * 1000))
        assert (hit.offset, hit.timestamp) == (2, BASE_TS + mine[2] * 1000)

        read = await sarama(
            sarama_check,
            "read",
            brokers=broker.address,
            topic=topic,
            partition=partition,
            offset=0,
            count=len(mine),
        )
        assert read == [
            {"partition": partition, "offset": n, **sent(i, codec)} for n, i in enumerate(mine)
        ]


# Sarama's default retention (0s) commits with OffsetCommit v1, which Kafka 4.0 removed
# (KIP-896) and rustka serves as Kafka 3.9 did; a retention selects v2.
@pytest.mark.parametrize("retention", ["0s", "24h"])
@pytest_twisted.ensureDeferred
async def test_a_sarama_group_commits_what_it_read_and_the_next_run_resumes_there(
    broker: RunningBroker, sarama_check: Path, retention: str
) -> None:
    topic, group = f"go-group-{retention}", f"g-sarama-{retention}"
    await make_topic(broker, topic, 2)

    async def produce(start: int, count: int) -> None:
        """Records start..start+count-1, record i to partition i % 2, by the native client."""
        c = await broker.client()
        try:
            for i in range(start, start + count):
                record = Record(f"key-{i}".encode(), f"v-{i}".encode(), (("n", b"%d" % i),))
                await within(c.produce_batch(topic, i % 2, [record]))
        finally:
            await within(c.close())

    def values(run: dict[str, Any]) -> list[str]:
        return sorted(r["value"] for r in run["records"])

    await produce(0, 10)
    first = await sarama(
        sarama_check, "group", brokers=broker.address, topic=topic, group=group, retention=retention
    )
    assert first["claims"] == {topic: [0, 1]}
    assert values(first) == sorted(f"v-{i}" for i in range(10))
    assert all(r["headers"] == [["n", r["value"][2:]]] for r in first["records"])
    # Sarama commits the marked offsets when its session ends, then leaves the group.
    assert broker.broker.committed_offsets(group) == {(topic, 0): 5, (topic, 1): 5}
    described = broker.broker.groups.describe(group)
    assert (described.state, described.members) == ("Empty", ())

    await produce(10, 4)
    again = await sarama(
        sarama_check,
        "group",
        brokers=broker.address,
        topic=topic,
        group=group,
        count=4,
        retention=retention,
    )
    assert values(again) == sorted(f"v-{i}" for i in range(10, 14))
    assert sorted((r["partition"], r["offset"]) for r in again["records"]) == [
        (p, o) for p in (0, 1) for o in (5, 6)
    ]
    assert broker.broker.committed_offsets(group) == {(topic, 0): 7, (topic, 1): 7}


# Sarama's request versions follow its configured Kafka version: 0.8.2 (its default)
# sends Produce v0 and Fetch v0 with magic-0 messages, 0.10.0 Produce v2 and Fetch v2
# with magic-1 messages (timestamps, lz4), all of which Kafka 4.0 removed (KIP-896).
@pytest.mark.parametrize(
    ("kafka_version", "codec"),
    [("0.8.2.0", "none"), ("0.8.2.0", "gzip"), ("0.8.2.0", "snappy"), ("0.10.0.0", "lz4")],
)
@pytest_twisted.ensureDeferred
async def test_sarama_at_old_kafka_versions_writes_and_reads_the_old_message_formats(
    broker: RunningBroker, sarama_check: Path, kafka_version: str, codec: str
) -> None:
    topic, count = f"go-{kafka_version}-{codec}", 6
    await make_topic(broker, topic, 1)
    old = {"kafka_version": kafka_version, "brokers": broker.address, "topic": topic}
    delivered = await sarama(
        sarama_check, "produce", count=count, codec=codec, prefix=codec, headers="false", **old
    )
    assert [(d["partition"], d["offset"]) for d in delivered] == [(0, i) for i in range(count)]
    timestamps = kafka_version != "0.8.2.0"  # magic 0 has none: Kafka stores -1
    expected_ts = [BASE_TS + i * 1000 if timestamps else -1 for i in range(count)]

    # Stored as Kafka 3.9's validator up-converts: one v2 batch with sarama's codec, the
    # keys, values and timestamps, no headers, no producer id.
    batches = await stored_batches(broker, topic, 0)
    assert [(h.magic, codec_of(h), h.base_offset, h.record_count) for h, _ in batches] == [
        (2, codec, 0, count)
    ]
    header, records = batches[0]
    assert (header.producer_id, header.max_timestamp) == (-1, max(expected_ts))
    assert records == [
        Record(f"key-{i}".encode(), f"{codec}-{i}".encode(), (), expected_ts[i], i)
        for i in range(count)
    ]

    # Read back with the same old Fetch version (down-converted message sets), from the
    # middle of the batch: the records below the fetch offset are left out.
    read = await sarama(sarama_check, "read", partition=0, offset=2, count=count - 2, **old)
    assert read == [
        {
            "partition": 0,
            "offset": i,
            "key": f"key-{i}",
            "value": f"{codec}-{i}",
            "headers": [],
            "timestamp_ms": expected_ts[i],
        }
        for i in range(2, count)
    ]
