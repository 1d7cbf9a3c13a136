"""The diskless catalog against a real PostgreSQL: offsets, idempotence, bounds,
retention, deletion and the objects' use, one and two brokers at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

from rustka.errors import OffsetOutOfRange, TopicExists, UnknownTopic
from rustka.storage.diskless.catalog import BatchEntry, Catalog, CatalogUnavailable, CommitError
from tests.services.postgres import PostgresServer


@pytest.fixture
def catalog(postgres_dsn: str) -> Iterator[Catalog]:
    c = Catalog(postgres_dsn)
    c.migrate()
    yield c
    c.close()


def entry(
    topic: str = "t",
    partition: int = 0,
    count: int = 1,
    *,
    at: int = 0,
    size: int = 100,
    ts: int = 1000,
    pid: int = -1,
    epoch: int = 0,
    seq: int = -1,
) -> BatchEntry:
    return BatchEntry(topic, partition, at, size, count, ts, ts, 0, pid, epoch, seq)


def test_offsets_are_assigned_in_order_within_and_across_commits(catalog: Catalog) -> None:
    catalog.create_topic("t", 2, {"diskless.enable": "true"})
    first = catalog.commit("o1", 1, 300, [entry(count=3), entry(count=2), entry("t", 1)], 5)
    assert [(c.error, c.base_offset) for c in first] == [
        (CommitError.NONE, 0),
        (CommitError.NONE, 3),
        (CommitError.NONE, 0),
    ]
    second = catalog.commit("o2", 1, 100, [entry(count=4)], 6)
    assert second[0].base_offset == 5
    assert catalog.bounds("t", 0) == (0, 9)
    assert catalog.all_bounds() == {("t", 0): (0, 9), ("t", 1): (0, 1)}
    found = catalog.find_batches("t", 0, 4, 1 << 20)
    assert [(b.base_offset, b.last_offset, b.object_key) for b in found] == [
        (3, 4, "o1"),
        (5, 8, "o2"),
    ]
    # The byte budget: always one payload, then only while they fit.
    assert len(catalog.find_batches("t", 0, 0, 1)) == 1
    assert len(catalog.find_batches("t", 0, 0, 200)) == 2


def test_idempotent_producers_are_checked_as_kafka_checks_them(catalog: Catalog) -> None:
    catalog.create_topic("t", 1, {})
    ok = catalog.commit("a", 1, 1, [entry(count=2, pid=7, seq=0)], 1)
    assert ok[0].error == CommitError.NONE
    results = catalog.commit(
        "b",
        1,
        1,
        [
            entry(count=2, pid=7, seq=0),  # a retry: answered with its first offsets
            entry(count=1, pid=7, seq=5),  # a gap
            entry(count=1, pid=7, seq=2),  # the next one
            entry(count=1, pid=9, seq=40),  # unknown producer: any sequence starts it
            entry("nope", 0),
        ],
        2,
    )
    assert [(r.error, r.base_offset) for r in results] == [
        (CommitError.DUPLICATE, 0),
        (CommitError.OUT_OF_ORDER_SEQUENCE, -1),
        (CommitError.NONE, 2),
        (CommitError.NONE, 3),
        (CommitError.UNKNOWN_PARTITION, -1),
    ]
    fenced = catalog.commit("c", 1, 1, [entry(pid=7, epoch=1, seq=3)], 3)
    assert fenced[0].error == CommitError.OUT_OF_ORDER_SEQUENCE  # a new epoch starts at 0
    bumped = catalog.commit("d", 1, 1, [entry(pid=7, epoch=1, seq=0)], 3)
    assert bumped[0].error == CommitError.NONE
    old = catalog.commit("e", 1, 1, [entry(pid=7, epoch=0, seq=3)], 3)
    assert old[0].error == CommitError.INVALID_PRODUCER_EPOCH
    assert catalog.bounds("t", 0) == (0, 5)


def test_two_brokers_committing_at_once_get_contiguous_offsets(postgres_dsn: str) -> None:
    brokers = [Catalog(postgres_dsn), Catalog(postgres_dsn)]
    try:
        brokers[0].migrate()
        brokers[0].create_topic("t", 3, {})
        failures: list[BaseException] = []

        def produce(c: Catalog, name: str) -> None:
            try:
                for i in range(60):
                    c.commit(f"{name}-{i}", 1, 1, [entry("t", p, 2) for p in (2, 0, 1)], i)
            except BaseException as e:
                failures.append(e)

        threads = [
            threading.Thread(target=produce, args=(c, f"b{n}")) for n, c in enumerate(brokers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not failures
        with psycopg.connect(postgres_dsn) as conn:
            rows = conn.execute(
                "SELECT partition, base_offset, last_offset FROM batches ORDER BY 1, 2"
            ).fetchall()
        for p in range(3):
            mine = [(b, last) for part, b, last in rows if part == p]
            assert mine == [(2 * i, 2 * i + 1) for i in range(120)]
            assert brokers[1].bounds("t", p) == (0, 240)
    finally:
        for c in brokers:
            c.close()


def test_topics_are_defined_once_for_every_broker(catalog: Catalog) -> None:
    catalog.create_topic("a", 2, {"retention.ms": "1000"})
    with pytest.raises(TopicExists):
        catalog.create_topic("a", 1, {})
    catalog.add_partitions("a", 4)
    catalog.alter_configs("a", {"retention.ms": "2000"})
    row = catalog.topics()["a"]
    assert (row.partitions, row.configs) == (4, {"retention.ms": "2000"})
    assert catalog.bounds("a", 3) == (0, 0)
    catalog.commit("x", 1, 100, [entry("a", 3, 5)], 1)
    catalog.delete_topic("a")
    assert catalog.topics() == {}
    assert catalog.objects_to_delete() == ["x"]
    with pytest.raises(UnknownTopic):
        catalog.delete_topic("a")


def test_retention_and_delete_records_go_by_whole_payloads_and_free_objects(
    catalog: Catalog,
) -> None:
    catalog.create_topic("t", 1, {})
    catalog.commit("old", 1, 200, [entry(count=2, ts=100), entry(count=3, at=100, ts=200)], 1)
    catalog.commit("new", 1, 100, [entry(count=5, ts=10_000)], 2)
    assert (
        catalog.enforce_retention("t", 0, retention_ms=1000, retention_bytes=None, now_ms=5000) == 5
    )
    assert catalog.objects_to_delete() == ["old"]
    assert catalog.offset_for_timestamp("t", 0, 0) == (5, 10_000)
    assert catalog.find_batches("t", 0, 5, 1 << 20)[0].object_key == "new"
    catalog.forget_objects(["old", "new"])  # only the unused one goes
    assert catalog.known_objects(["old", "new", "never"]) == {"new"}
    with pytest.raises(OffsetOutOfRange):
        catalog.delete_records("t", 0, 11)
    assert catalog.delete_records("t", 0, 7) == 7  # inside a payload: the start moves
    assert catalog.objects_to_delete() == []  # the payload still holds 7..9
    assert catalog.delete_records("t", 0, -1) == 10
    assert catalog.objects_to_delete() == ["new"]
    catalog.commit("more", 1, 100, [entry(count=1, size=100), entry(count=1, at=100)], 3)
    assert catalog.enforce_retention("t", 0, retention_ms=None, retention_bytes=100, now_ms=0) == 11


def test_migrating_twice_and_from_two_brokers_at_once_is_harmless(postgres_dsn: str) -> None:
    brokers = [Catalog(postgres_dsn) for _ in range(3)]
    try:
        threads = [threading.Thread(target=c.migrate) for c in brokers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        brokers[0].migrate()
        brokers[0].create_topic("t", 1, {})
        assert brokers[2].topics()["t"].partitions == 1
    finally:
        for c in brokers:
            c.close()


def test_a_stopped_database_is_a_retriable_error_then_commits_resume(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    catalog = Catalog(postgres_dsn, timeout_s=2)
    try:
        catalog.migrate()
        catalog.create_topic("t", 1, {})
        postgres_server.stop()
        try:
            with pytest.raises(CatalogUnavailable):
                catalog.commit("lost", 1, 1, [entry()], 1)
        finally:
            postgres_server.start()
        assert catalog.commit("kept", 1, 1, [entry()], 2)[0].base_offset == 0
        assert catalog.known_objects(["lost", "kept"]) == {"kept"}
    finally:
        catalog.close()
