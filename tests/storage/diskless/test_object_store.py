"""The object store client against a real S3 server (SeaweedFS)."""

from __future__ import annotations

import time
import uuid

import pytest

from rustka.errors import StorageError
from rustka.storage.diskless.object_store import (
    ObjectExists,
    ObjectMissing,
    ObjectStore,
    ObjectStoreUnavailable,
)
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
