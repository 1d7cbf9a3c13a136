"""A real PostgreSQL for the tests: Debian's server, its own cluster in a temp dir.

``initdb`` makes a throwaway cluster (trust authentication, on 127.0.0.1 and a Unix
socket in the same dir), started once per session; each test gets a fresh database
(`postgres_dsn`). PostgreSQL refuses to run as root, so as root the server runs as
``nobody`` in a directory it owns. fsync is off: the tests restart the server with a
clean stop, never crash the machine under it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

__all__ = ["PostgresServer", "postgres_dsn", "postgres_server"]

USER = "rustka"


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (scripts/test installs it)")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One throwaway cluster; `stop` and `start` take it away and bring it back."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rustka-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            # initdb and postgres refuse root: the cluster belongs to nobody.
            shutil.chown(self.root, "nobody", "nogroup")
            self._as = ["runuser", "-u", "nobody", "--"]
        self._run(_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", USER, "--no-sync")

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, timeout=120, cwd=self.root
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stdout}{done.stderr}")

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        options = (
            f"-p {self.port} -h 127.0.0.1 -k {self.root} -c fsync=off "
            f"-c full_page_writes=off -c max_connections=200"
        )
        self._run(
            _bin("pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(self.dsn(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def new_database(self) -> str:
        name = f"t{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def remove(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """A fresh, empty database on the session's server."""
    return postgres_server.new_database()
