"""The object store client against a real S3 server (SeaweedFS)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest

from rustka.errors import StorageError
from rustka.storage.diskless.object_store import (
    ObjectExists,
    ObjectMissing,
    ObjectStore,
    ObjectStoreUnavailable,
)
from tests.services.seaweed import S3Place, S3Server


class AnswerDropper:
    """A TCP relay to the store that can lose the next answer on its way back: the
    store has acted on the request, the client never hears (a connection broken after
    the fact), so the client's retry meets its own earlier attempt."""

    def __init__(self, endpoint_url: str) -> None:
        target = urlsplit(endpoint_url)
        self._upstream = (target.hostname or "127.0.0.1", target.port or 80)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint_url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.drop_next = threading.Event()
        self.dropped = 0
        self.sent = bytearray()
        """Every request as it went to the store."""
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def _spawn(self, target: Callable[..., None], *args: socket.socket | bool) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._upstream, timeout=10)
            with self._lock:
                self._sockets += [client, upstream]
            self._spawn(self._pump, client, upstream, False)
            self._spawn(self._pump, upstream, client, True)

    def _pump(self, source: socket.socket, sink: socket.socket, answers: bool) -> None:
        try:
            while chunk := source.recv(65536):
                # "100 Continue" only lets the body go: the answer is what comes after.
                interim = chunk.startswith(b"HTTP/1.1 100 ")
                if answers and not interim and self.drop_next.is_set():
                    self.drop_next.clear()
                    self.dropped += 1
                    break
                if not answers:
                    with self._lock:
                        self.sent += chunk
                sink.sendall(chunk)
        except OSError:
            pass
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._listener.close()
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for thread in threads:
            thread.join(10)
        assert not any(thread.is_alive() for thread in threads)


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


def test_an_upload_whose_answer_was_lost_is_not_refused_by_its_own_retry(
    s3_bucket: S3Place,
) -> None:
    relay = AnswerDropper(s3_bucket.endpoint_url)
    store = ObjectStore(
        s3_bucket.bucket, endpoint_url=relay.endpoint_url, prefix=s3_bucket.prefix, timeout_s=5
    )
    direct = s3_bucket.store()
    try:
        store.put_new("warm", b"w")  # the relay passes answers until told
        relay.drop_next.set()
        store.put_new("mine", b"stored by the attempt whose answer was lost")
        assert relay.dropped == 1
        assert direct.get("mine") == b"stored by the attempt whose answer was lost"
        assert store.stats.puts == 2
        # Another writer's object under the key stays a conflict, retried or not.
        direct.put_new("theirs", b"another broker's bytes")
        relay.drop_next.set()
        with pytest.raises(ObjectExists):
            store.put_new("theirs", b"my bytes")
        assert relay.dropped == 2
        assert direct.get("theirs") == b"another broker's bytes"
    finally:
        store.close()
        direct.close()
        relay.close()


def test_views_upload_their_bytes_and_credentials_can_be_given(s3_bucket: S3Place) -> None:
    # SeaweedFS without IAM takes any signature: the relay shows the keys are used.
    relay = AnswerDropper(s3_bucket.endpoint_url)
    store = ObjectStore(
        s3_bucket.bucket,
        endpoint_url=relay.endpoint_url,
        prefix=s3_bucket.prefix,
        access_key="some-key",
        secret_key="some-secret",
    )
    try:
        store.put_new("view", memoryview(b"..payload..")[2:9])
        store.put_new("array", bytearray(b"abc"))
        assert store.get("view") == b"payload" and store.get("array") == b"abc"
        assert store.stats.bytes_up == 10
        assert relay.sent.count(b"Credential=some-key/") == 4
    finally:
        store.close()
        relay.close()
    with pytest.raises(ValueError):
        ObjectStore("bucket", access_key="only-half")


def test_a_store_that_accepts_and_never_answers_times_out_as_unavailable() -> None:
    # Connections are taken into the listen queue and never read: a hung store.
    with socket.create_server(("127.0.0.1", 0), backlog=16) as silent:
        port = silent.getsockname()[1]
        store = ObjectStore("bucket", endpoint_url=f"http://127.0.0.1:{port}", timeout_s=0.5)
        try:
            started = time.monotonic()
            with pytest.raises(ObjectStoreUnavailable):
                store.get_range("k", 0, 10)
            # Two attempts of one 0.5 s read timeout each, plus a retry's backoff.
            assert time.monotonic() - started < 5
            assert store.stats.errors == 1 and store.stats.range_gets == 0
        finally:
            store.close()
