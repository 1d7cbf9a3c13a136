"""Listeners are Twisted endpoint strings: TLS, UNIX sockets, several at once, bad ones refused.

The TLS certificate is generated here with ``cryptography`` (a throwaway CA-less
self-signed certificate for 127.0.0.1), so the test exercises real TLS on both
sides: the broker's ``ssl:`` listener and the client's verifying ``tls:`` endpoint.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from rustka.client.protocol import ConnectionClosed
from rustka.config import Config, ConfigError
from rustka.errors import BrokerUnavailable

# Twisted 26.10's ssl: endpoint still hands pyOpenSSL X509 objects to pyOpenSSL 26,
# which deprecates that; the warning is Twisted's to fix, not a fault in rustka.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Passing pyOpenSSL X509 objects is deprecated:DeprecationWarning",
    "ignore:Passing pyOpenSSL PKey objects is deprecated:DeprecationWarning",
)

TIMEOUT = 20
BIN = Path(sys.executable).parent


def make_certificate(directory: Path, common_name: str = "rustka test") -> tuple[Path, Path]:
    """A self-signed certificate valid for 127.0.0.1; returns (key path, cert path)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_path = directory / "key.pem"
    cert_path = directory / "cert.pem"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


def trust_dir(tmp_path: Path, cert_path: Path, name: str = "trust") -> Path:
    """A directory holding only ``cert_path``, the shape Twisted's trustRoots= expects."""
    directory = tmp_path / name
    directory.mkdir()
    (directory / "root.pem").write_bytes(cert_path.read_bytes())
    return directory


async def connect(address: str) -> Any:
    from twisted.internet import reactor

    from rustka.client.protocol import connect as client_connect

    return await client_connect(reactor, address, timeout=TIMEOUT)


async def test_produce_and_fetch_over_tls(
    tmp_path: Path, broker_factory: Callable[..., Any]
) -> None:
    """A TLS listener serves the native protocol to a client that verifies its certificate."""
    key, cert = make_certificate(tmp_path / "tls")
    roots = trust_dir(tmp_path, cert)
    running = await broker_factory(
        listen=[
            "tcp:0:interface=127.0.0.1",
            f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}",
        ]
    )
    try:
        ssl_port = running.top.listeners[1].port.getHost().port
        client = await connect(f"tls:127.0.0.1:{ssl_port}:trustRoots={roots}")
        partition, offset = await client.produce("secure", b"k", b"over tls").addTimeout(
            TIMEOUT, running.factory.reactor
        )
        peer = client.transport.getPeerCertificate()
        assert peer is not None
        subject = peer.to_cryptography().subject
        assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "rustka test"
        record = await client.fetch("secure", partition, offset).addTimeout(
            TIMEOUT, running.factory.reactor
        )
        assert record is not None and record.value == b"over tls"
        await client.close()

        plain = await running.client()
        again = await plain.fetch("secure", partition, offset)
        assert again is not None and again.value == b"over tls"
        await plain.close()
    finally:
        await running.stop()


async def test_tls_client_rejects_an_untrusted_certificate(
    tmp_path: Path, broker_factory: Callable[..., Any]
) -> None:
    """A client trusting a different certificate gets no answer from the TLS listener."""
    key, cert = make_certificate(tmp_path / "tls")
    _, other_cert = make_certificate(tmp_path / "other", common_name="somebody else")
    roots = trust_dir(tmp_path, other_cert)
    running = await broker_factory(
        listen=[f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}"]
    )
    try:
        port = running.top.listeners[0].port.getHost().port
        with pytest.raises((ConnectionClosed, BrokerUnavailable)):
            client = await connect(f"tls:127.0.0.1:{port}:trustRoots={roots}")
            await client.hello().addTimeout(TIMEOUT, running.factory.reactor)
        assert running.top.factory.request_stats.operations == {}
    finally:
        await running.stop()


async def test_unix_socket_listener(tmp_path: Path, broker_factory: Callable[..., Any]) -> None:
    """A unix: listener serves the protocol on a socket file, next to the TCP one."""
    path = tmp_path / "rustka.sock"
    running = await broker_factory(listen=["tcp:0:interface=127.0.0.1", f"unix:{path}:mode=600"])
    try:
        await running.top.listeners[1].listening
        assert path.is_socket()
        assert path.stat().st_mode & 0o777 == 0o600
        client = await connect(f"unix:path={path}")
        partition, offset = await client.produce("local", b"k", b"via unix")
        await client.close()
        tcp = await running.client()
        record = await tcp.fetch("local", partition, offset)
        assert record is not None and record.value == b"via unix"
        await tcp.close()
    finally:
        await running.stop()


async def test_several_listeners_share_one_broker(
    tmp_path: Path, broker_factory: Callable[..., Any]
) -> None:
    """Three listeners (TCP, TCP, TLS) all reach the same topics and offsets."""
    key, cert = make_certificate(tmp_path / "tls")
    roots = trust_dir(tmp_path, cert)
    running = await broker_factory(
        listen=[
            "tcp:0:interface=127.0.0.1",
            "tcp:0:interface=127.0.0.1",
            f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}",
        ]
    )
    try:
        ports = [listener.port.getHost().port for listener in running.top.listeners]
        assert len(set(ports)) == 3
        addresses = [
            f"127.0.0.1:{ports[0]}",
            f"127.0.0.1:{ports[1]}",
            f"tls:127.0.0.1:{ports[2]}:trustRoots={roots}",
        ]
        offsets = []
        for index, address in enumerate(addresses):
            client = await connect(address)
            # one partition, so the offsets from the three listeners form one sequence
            if index == 0:
                await client.create_topic("shared", 1)
            offsets.append((await client.produce("shared", b"k", address.encode()))[1])
            await client.close()
        assert offsets == [0, 1, 2]
        assert len(running.factory.connections) == 0
    finally:
        await running.stop()


def test_bad_endpoint_names_the_setting(tmp_path: Path) -> None:
    """build_service refuses an unparseable listener with a ConfigError naming `listen`."""
    from twisted.internet import reactor

    from rustka.ops.tap import build_service

    config = Config().updated({"data_dir": str(tmp_path / "d"), "listen": ["bogus:1"]})
    with pytest.raises(ConfigError, match=r"^listen: bad endpoint 'bogus:1'"):
        build_service(config, reactor)
    assert not (tmp_path / "d" / ".clean-shutdown").exists()


def test_bad_endpoint_fails_twistd_at_startup(tmp_path: Path) -> None:
    """`twistd rustka --listen bogus:1` exits non-zero and says which setting is wrong."""
    result = subprocess.run(
        [
            str(BIN / "twistd"),
            "--nodaemon",
            "--pidfile=",
            "rustka",
            "--data-dir",
            str(tmp_path / "d"),
            "--listen",
            "bogus:1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "listen: bad endpoint 'bogus:1': Unknown endpoint type: 'bogus'" in output, output
    assert "Traceback" not in output, output


def test_unusable_tls_key_fails_at_startup(tmp_path: Path) -> None:
    """An ssl: listener whose key file is missing is refused before anything listens."""
    from twisted.internet import reactor

    from rustka.ops.tap import build_service

    _, cert = make_certificate(tmp_path / "tls")
    missing = tmp_path / "tls" / "missing.pem"
    config = Config().updated(
        {
            "data_dir": str(tmp_path / "d"),
            "listen": [f"ssl:0:interface=127.0.0.1:privateKey={missing}:certKey={cert}"],
        }
    )
    with pytest.raises((ConfigError, OSError)):
        build_service(config, reactor)


def _kcat_over_tls(address: str, ca: Path, *args: str, stdin: bytes | None = None) -> str:
    """Debian's kcat (librdkafka) speaking Kafka over TLS, verifying the broker's certificate."""
    from tests.kafka.real_clients import kcat

    return kcat(
        "-b",
        address,
        "-X",
        "security.protocol=ssl",
        "-X",
        f"ssl.ca.location={ca}",
        *args,
        stdin=stdin,
    )


async def test_kcat_over_tls_lists_and_produces(
    tmp_path: Path, broker_factory: Callable[..., Any]
) -> None:
    """The first-frame sniffing works behind TLS: kcat with security.protocol=ssl against an
    ssl: listen endpoint lists topics and produces; the records are the ones it sent."""
    import json

    from twisted.internet import threads

    key, cert = make_certificate(tmp_path / "tls")
    running = await broker_factory(
        listen=[
            "tcp:0:interface=127.0.0.1",
            f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}",
        ],
        default_partitions=1,
    )
    try:
        ssl_port = running.top.listeners[1].port.getHost().port
        address = f"127.0.0.1:{ssl_port}"
        lines = [f"secret {i}" for i in range(5)]
        await threads.deferToThread(
            _kcat_over_tls,
            address,
            cert,
            "-P",
            "-t",
            "tls-topic",
            "-p",
            "0",
            "-X",
            "acks=all",
            stdin=("\n".join(lines) + "\n").encode(),
        ).addTimeout(60, running.factory.reactor)
        listing = await threads.deferToThread(_kcat_over_tls, address, cert, "-L", "-J").addTimeout(
            60, running.factory.reactor
        )
        meta = json.loads(listing)
        assert meta["brokers"] == [{"id": 0, "name": address}]
        assert {t["topic"]: len(t["partitions"]) for t in meta["topics"]} == {"tls-topic": 1}
        assert running.top.kafka_factory.bad_requests == 0
        plain = await running.client()
        got = await plain.fetch_batch("tls-topic", 0, 0)
        assert [r.value for r in got.records] == [line.encode() for line in lines]
        await plain.close()
    finally:
        await running.stop()
