"""The object store client against a real S3 server (SeaweedFS), the object layout and
the cache."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from rustka.errors import StorageError
from rustka.storage.diskless.object_cache import ObjectCache
from rustka.storage.diskless.object_store import (
    ObjectExists,
    ObjectMissing,
    ObjectStore,
    ObjectStoreUnavailable,
)
from rustka.storage.diskless.wal_object import ObjectBuilder, new_object_key, object_key_time_ms
from tests.services.seaweed import S3Place, S3Server


def test_objects_are_created_once_read_by_range_listed_and_deleted(
    s3_bucket: S3Place,
) -> None:
    store = s3_bucket.store("c1/")
    other = s3_bucket.store("c2/")
    try:
        data = bytes(range(256)) * 40
        store.put_new("wal/a", data)
        with pytest.raises(ObjectExists):
            store.put_new("wal/a", b"another broker's bytes")
        assert store.get("wal/a") == data
        assert store.get_range("wal/a", 1000, 300) == data[1000:1300]
        with pytest.raises(ObjectMissing):
            store.get("wal/none")
        for name in ("b", "c", "d", "e"):
            store.put_new(f"wal/{name}", name.encode())
        other.put_new("wal/z", b"z")
        listed = list(store.list_objects("wal/", page_size=2))
        assert [key for key, _, _ in listed] == ["wal/a", "wal/b", "wal/c", "wal/d", "wal/e"]
        assert listed[0][1] == len(data) and listed[0][2] > time.time() - 600
        assert store.stats.lists >= 3  # paginated
        assert [key for key, _, _ in other.list_objects()] == ["wal/z"]
        store.delete("wal/a")
        store.delete("wal/a")  # already gone: fine
        assert "wal/a" not in [key for key, _, _ in store.list_objects()]
        assert store.stats.puts == 5 and store.stats.bytes_up == len(data) + 4
    finally:
        store.close()
        other.close()


def test_ranges_the_object_does_not_hold_are_errors_a_retry_cannot_fix(
    s3_bucket: S3Place,
) -> None:
    store = s3_bucket.store()
    try:
        store.put_new("k", b"0123456789")
        assert store.get_range("k", 0, 0) == b""
        assert store.get_range("k", 9, 1) == b"9"
        with pytest.raises(StorageError) as short:
            store.get_range("k", 8, 5)  # the object ends two bytes in
        with pytest.raises(StorageError) as past:
            store.get_range("k", 20, 5)  # starts past the end: 416
        with pytest.raises(ObjectMissing):
            store.get_range("none", 0, 3)
        for refused in (short.value, past.value):
            assert not isinstance(refused, ObjectStoreUnavailable)
    finally:
        store.close()


def test_a_bucket_the_store_lacks_is_not_a_missing_object(s3_bucket: S3Place) -> None:
    store = ObjectStore(f"absent-{uuid.uuid4().hex[:12]}", endpoint_url=s3_bucket.endpoint_url)
    try:
        with pytest.raises(ObjectStoreUnavailable, match="no such bucket"):
            store.get("k")
        with pytest.raises(StorageError):
            store.delete("k")  # not passed over as already deleted
    finally:
        store.close()


def test_a_store_that_went_away_is_a_retriable_error_then_works_again(
    s3_server: S3Server, s3_bucket: S3Place
) -> None:
    store = s3_bucket.store(timeout_s=2)
    try:
        store.put_new("before", b"1")
        s3_server.stop()
        try:
            started = time.monotonic()
            with pytest.raises(ObjectStoreUnavailable):
                store.put_new("during", b"2")
            assert time.monotonic() - started < 30
        finally:
            s3_server.start()
        store.put_new("after", b"3")
        assert store.get("before") == b"1"
    finally:
        store.close()


def test_object_keys_sort_by_time_and_builders_place_payloads() -> None:
    first = new_object_key(3)
    assert first.startswith("wal/") and "-3-" in first
    stamp = object_key_time_ms(first)
    assert stamp is not None and abs(stamp - time.time() * 1000) < 60_000
    assert object_key_time_ms("elsewhere/x") is None
    assert new_object_key(3) != first
    builder = ObjectBuilder()
    assert builder.add("t", 0, b"abc") == (0, 3)
    assert builder.add("u", 2, b"defgh") == (3, 5)
    assert builder.size == 8 and builder.build() == b"abcdefgh"


def test_the_cache_keeps_recent_objects_within_its_size() -> None:
    cache = ObjectCache(10)
    cache.put("a", b"aaaa")
    cache.put("b", b"bbbb")
    assert cache.get("a", 1, 2) == b"aa"  # a is now the most recent
    cache.put("c", b"cccc")  # b goes
    assert cache.get("b", 0, 1) is None
    assert cache.get("c", 0, 4) == b"cccc"
    assert cache.get("a", 3, 2) is None  # past its end
    cache.put("huge", b"x" * 11)  # larger than the cache: not kept
    assert cache.get("huge", 0, 1) is None
    assert (cache.hits, cache.misses, cache.size) == (2, 3, 8)
    off = ObjectCache(0)
    off.put("a", b"a")
    assert off.get("a", 0, 1) is None


def test_the_cache_is_safe_from_many_threads() -> None:
    cache = ObjectCache(1000)
    errors: list[BaseException] = []

    def use(n: int) -> None:
        try:
            for i in range(500):
                key = f"{n}-{i % 20}"
                cache.put(key, bytes([n]) * 30)
                got = cache.get(key, 0, 30)
                assert got is None or got == bytes([n]) * 30
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=use, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and cache.size <= 1000
