"""Debian's kcat and `rustka mirror` against a two-broker cluster: kcat sees both
brokers, writes lz4 batches through one and reads them through the other; the mirror
copies a single broker's local topic into a diskless topic of the cluster. What was
stored is checked in the catalog and the bucket, not only what is read back."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import threads

from rustka.record.batch import crc_ok, decode_records, scan_batches
from rustka.record.header import CODEC_MASK
from tests.conftest import reactor_turns, start_broker, within
from tests.diskless.test_cluster import cluster_of_two
from tests.diskless.test_diskless_clients import catalog_rows, create_topic, stored_objects
from tests.kafka import real_clients as rc
from tests.ops.test_mirror import run_cli
from tests.services.seaweed import S3Place

pytestmark = pytest.mark.clients

LZ4 = 3


@pytest_twisted.ensureDeferred
async def test_kcat_lists_both_brokers_writes_through_one_and_reads_through_the_other(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    one, two = await cluster_of_two(tmp_path, postgres_dsn, s3_bucket)
    try:
        made = await threads.deferToThread(
            create_topic, one.address, "lines", 1, {"diskless.enable": "true"}
        )
        assert made is None
        await reactor_turns(lambda: "lines" in two.broker.topics, 30)
        listing = json.loads(
            await threads.deferToThread(rc.kcat, "-b", two.address, "-L", "-J", "-t", "lines")
        )
        assert sorted(b["id"] for b in listing["brokers"]) == [1, 2]
        [topic] = listing["topics"]
        assert topic["partitions"][0]["leader"] in (1, 2)
        lines = b"".join(b"line-%d\n" % i for i in range(200))
        await within(
            threads.deferToThread(
                rc.kcat,
                "-b",
                two.address,
                "-P",
                "-t",
                "lines",
                "-z",
                "lz4",
                "-X",
                "batch.num.messages=50",
                stdin=lines,
            ),
            90,
        )
        out = await within(
            threads.deferToThread(
                rc.kcat,
                "-b",
                one.address,
                "-C",
                "-t",
                "lines",
                "-o",
                "beginning",
                "-c",
                "200",
                "-e",
                "-f",
                "%o %s\n",
            ),
            90,
        )
        assert out.splitlines() == [f"{i} line-{i}" for i in range(200)]
        # Stored: lz4 batches with good CRCs, at offsets 0..199 in the catalog's rows.
        rows = catalog_rows(
            postgres_dsn,
            "SELECT b.base_offset, b.last_offset FROM batches b JOIN topics t USING (topic_id) "
            "WHERE t.name = 'lines' ORDER BY b.base_offset",
        )
        assert rows[0][0] == 0 and rows[-1][1] == 199
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(rows))
        values: list[bytes] = []
        batches = 0
        for data in stored_objects(s3_bucket).values():
            found, end = scan_batches(data)
            assert end == len(data)
            for pos, header in found:
                batches += 1
                assert crc_ok(data, pos, header)
                assert header.attributes & CODEC_MASK == LZ4
                values.extend(
                    r.value or b"" for r in decode_records(data[pos : pos + header.size], 0)
                )
        assert batches >= 4  # kcat's batches of 50, kept as it sent them
        assert sorted(values) == sorted(b"line-%d" % i for i in range(200))
        assert not (tmp_path / "b1" / "lines-0").exists()
        assert not (tmp_path / "b2" / "lines-0").exists()
    finally:
        await two.stop()
        await one.stop()


@pytest_twisted.ensureDeferred
async def test_rustka_mirror_copies_a_local_topic_into_a_diskless_one(
    tmp_path: Path, postgres_dsn: str, s3_bucket: S3Place
) -> None:
    source = await start_broker(tmp_path / "single")
    one, two = await cluster_of_two(tmp_path, postgres_dsn, s3_bucket)
    try:
        records = [(b"k%d" % i, b"v%d" % i) for i in range(120)]
        await within(
            threads.deferToThread(rc.confluent_produce, source.address, "orders", records), 60
        )
        # The target topic first, diskless, as many partitions as the source's (auto-created
        # with the default 3): the mirror keeps an existing topic's configs.
        made = await threads.deferToThread(
            create_topic, two.address, "orders", 3, {"diskless.enable": "true"}
        )
        assert made is None
        code, _out, err = await within(
            threads.deferToThread(
                run_cli,
                "mirror",
                "--broker",
                source.address,
                "--to",
                two.address,
                "--state",
                str(tmp_path / "mirror.json"),
                "--json",
                "orders",
            ),
            120,
        )
        assert code == 0, err
        await reactor_turns(lambda: "orders" in one.broker.topics, 30)
        read = await within(
            threads.deferToThread(rc.confluent_read, one.address, "orders", 0, 120), 90
        )
        assert [(o, k, v) for o, k, v in read] == [(i, k, v) for i, (k, v) in enumerate(records)]
        assert one.broker.diskless is not None
        assert one.broker.diskless.engine.catalog.bounds("orders", 0) == (0, 120)
        assert one.broker.topics["orders"].directory is None
    finally:
        await two.stop()
        await one.stop()
        await source.stop()
