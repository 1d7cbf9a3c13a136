"""AlterUserScramCredentials and DescribeUserScramCredentials (rustka/kafka/sasl_handlers.py)
with confluent-kafka's AdminClient against a real broker: a user created over the wire
logs in, is described without any secret, is refused when Kafka refuses it, and is
gone once deleted; every change is an audit line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, threads

from rustka.security.credentials import CredentialStore
from rustka.security.principal import Principal
from rustka.security.scram import MECHANISMS, derive_credential
from tests.conftest import start_broker, within

ADMIN_PASSWORD = "admin-pw"


def admin_client(address: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(
        {
            "bootstrap.servers": address,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin",
            "sasl.password": ADMIN_PASSWORD,
        }
    )


def alter(address: str, changes: list[Any]) -> dict[str, str | None]:
    client = admin_client(address)  # held until the answers are in
    futures = client.alter_user_scram_credentials(changes)
    out: dict[str, str | None] = {}
    for user, future in futures.items():
        try:
            future.result(timeout=20)
            out[user] = None
        except Exception as e:
            out[user] = str(e)
    return out


def describe(address: str, users: list[str] | None) -> dict[str, Any]:
    client = admin_client(address)  # held until the answers are in
    result = client.describe_user_scram_credentials(users)
    futures = result if isinstance(result, dict) else {None: result}
    out: dict[str, Any] = {}
    for user, future in futures.items():
        try:
            value = future.result(timeout=20)
        except Exception as e:
            out[str(user)] = str(e)
            continue
        descriptions = value if isinstance(value, dict) else {user: value}
        for name, d in descriptions.items():
            out[name] = sorted(
                (str(i.mechanism).split(".")[-1], i.iterations) for i in d.scram_credential_infos
            )
    return out


def can_log_in(address: str, user: str, password: str, mechanism: str) -> bool:
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": address,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            "error_cb": lambda e: errors.append(str(e)),
        }
    )
    metadata_ok = False
    for _ in range(30):
        try:
            producer.list_topics(timeout=0.5)
            metadata_ok = True
            break
        except Exception:
            if errors:
                break
    return metadata_ok and not errors


@pytest.mark.clients
@pytest_twisted.ensureDeferred
async def test_users_made_described_and_deleted_by_an_admin_client(
    data_dir: Path, log_watcher: Any
) -> None:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    store = CredentialStore(data_dir / "credentials")
    store.upsert(
        "admin", "SCRAM-SHA-512", derive_credential(MECHANISMS["SCRAM-SHA-512"], ADMIN_PASSWORD)
    )
    running = await start_broker(data_dir, listen_security="sasl")
    address = running.address

    def run(f: Any, *args: Any) -> Any:
        return within(threads.deferToThread(f, *args), 60)

    try:
        sha256 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
        sha512 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        answer = await run(
            alter,
            address,
            [
                UserScramCredentialUpsertion("bob", sha256, b"bob-pw"),
                UserScramCredentialUpsertion("carol", sha512, b"carol-pw", b"pinch-of-salt"),
            ],
        )
        assert answer == {"bob": None, "carol": None}
        stored = store.users()
        assert stored["bob"]["SCRAM-SHA-256"].iterations == 8192
        assert stored["carol"]["SCRAM-SHA-512"].salt == b"pinch-of-salt"
        assert "bob-pw" not in (data_dir / "credentials").read_text()
        await log_watcher.wait_for("audit user_upserted")
        assert await run(can_log_in, address, "bob", "bob-pw", "SCRAM-SHA-256")
        assert await run(can_log_in, address, "carol", "carol-pw", "PLAIN")
        assert not await run(can_log_in, address, "bob", "nope", "SCRAM-SHA-256")

        described = await run(describe, address, None)
        assert described == {
            "admin": [("SCRAM_SHA_512", 4096)],
            "bob": [("SCRAM_SHA_256", 8192)],
            "carol": [("SCRAM_SHA_512", 4096)],
        }
        unknown = await run(describe, address, ["nobody"])
        assert "does not exist" in json.dumps(unknown)

        refused = await run(
            alter,
            address,
            [
                UserScramCredentialUpsertion(
                    "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"x"
                ),
                UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_256),
            ],
        )
        assert refused["dave"] is not None and "Too few iterations" in refused["dave"]
        assert refused["erin"] is not None and "does not exist" in refused["erin"]
        assert "dave" not in store.users()

        gone = await run(
            alter, address, [UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)]
        )
        assert gone == {"bob": None}
        assert "bob" not in store.users()
        assert not await run(can_log_in, address, "bob", "bob-pw", "SCRAM-SHA-256")
        deleted = await log_watcher.wait_for("audit user_deleted")
        assert "'bob'" in deleted and "User:admin" in deleted
    finally:
        await running.stop()


@pytest.mark.clients
@pytest.mark.parametrize("twice", ["upsert", "mixed"])
@pytest_twisted.ensureDeferred
async def test_one_user_twice_in_a_request_is_refused_whole(data_dir: Path, twice: str) -> None:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    CredentialStore(data_dir / "credentials").upsert(
        "admin", "SCRAM-SHA-512", derive_credential(MECHANISMS["SCRAM-SHA-512"], ADMIN_PASSWORD)
    )
    running = await start_broker(data_dir, listen_security="sasl")
    try:
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
        second = (
            UserScramCredentialUpsertion(
                "frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"y"
            )
            if twice == "upsert"
            else UserScramCredentialDeletion("frank", ScramMechanism.SCRAM_SHA_512)
        )
        answer = await within(
            threads.deferToThread(
                alter, running.address, [UserScramCredentialUpsertion("frank", info, b"x"), second]
            ),
            60,
        )
        assert "twice" in str(answer["frank"])
        assert "frank" not in CredentialStore(data_dir / "credentials").users()
    finally:
        await running.stop()


class _RawKafka:
    """A bare socket speaking Kafka frames, for SaslHandshake v0's header-less tokens."""

    def __init__(self, port: int) -> None:
        import socket

        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def send(self, payload: bytes) -> None:
        self.sock.sendall(len(payload).to_bytes(4, "big") + payload)

    def receive(self) -> bytes | None:
        head = self._exactly(4)
        if head is None:
            return None
        return self._exactly(int.from_bytes(head, "big"))

    def _exactly(self, n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def v0_exchange(port: int, password: str) -> tuple[bool, bool]:
    """SaslHandshake v0 then SCRAM in bare frames; (authenticated, metadata served)."""
    from rustka.kafka import messages
    from rustka.security.scram import ScramClient, ScramError

    conn = _RawKafka(port)
    try:
        conn.send(messages.encode_request(17, 0, 1, "raw", {"mechanism": "SCRAM-SHA-256"}))
        answer = conn.receive()
        assert answer is not None
        _, body = messages.decode_response(17, 0, answer)
        assert body["error_code"] == 0 and "SCRAM-SHA-256" in body["mechanisms"]
        scram = ScramClient(MECHANISMS["SCRAM-SHA-256"], "admin", password)
        conn.send(scram.first())
        server_first = conn.receive()
        assert server_first is not None and server_first.startswith(b"r=")
        conn.send(scram.final(server_first))
        server_final = conn.receive()
        if server_final is None:
            return False, False  # v0 has no error field: the broker just hangs up
        try:
            scram.verify(server_final)
        except ScramError:
            return False, False
        conn.send(messages.encode_request(3, 1, 2, "raw", {"topics": []}))
        meta = conn.receive()
        return True, meta is not None
    finally:
        conn.close()


def v0_plain(port: int, password: str, pipelined: bool) -> tuple[bytes | None, bool]:
    """SaslHandshake v0 then PLAIN's one bare token, a Metadata request behind it sent
    at once when ``pipelined``; (the bare answer, metadata served)."""
    from rustka.kafka import messages

    conn = _RawKafka(port)
    try:
        conn.send(messages.encode_request(17, 0, 1, "raw", {"mechanism": "PLAIN"}))
        assert conn.receive() is not None
        metadata = messages.encode_request(3, 1, 2, "raw", {"topics": []})
        conn.send(b"\0admin\0" + password.encode())
        if pipelined:
            conn.send(metadata)
        answer = conn.receive()
        if answer is None:
            return None, False
        if not pipelined:
            conn.send(metadata)
        return answer, conn.receive() is not None
    finally:
        conn.close()


@pytest_twisted.ensureDeferred
async def test_a_v0_plain_token_is_checked_on_a_thread_and_holds_what_follows(
    data_dir: Path,
) -> None:
    """The bare PLAIN token's check runs off the reactor; a request pipelined behind it
    waits for its answer and is then served as the user; a wrong password hangs up."""
    CredentialStore(data_dir / "credentials").upsert(
        "admin", "SCRAM-SHA-256", derive_credential(MECHANISMS["SCRAM-SHA-256"], ADMIN_PASSWORD)
    )
    running = await start_broker(
        data_dir, listen_security="sasl", connection_failed_authentication_delay_ms=0
    )
    try:
        for pipelined in (False, True):
            served = await within(
                threads.deferToThread(v0_plain, running.port, ADMIN_PASSWORD, pipelined), 30
            )
            assert served == (b"", True)
        refused = await within(threads.deferToThread(v0_plain, running.port, "wrong", True), 30)
        assert refused == (None, False)
        stats = running.top.authenticator.stats
        assert stats.successes == {"PLAIN": 2} and stats.failures == {"PLAIN": 1}
    finally:
        await running.stop()


def v1_plain_pipelined(port: int, password: str) -> tuple[int, str | None]:
    """SaslHandshake v1, then SaslAuthenticate with PLAIN's token and a Metadata request
    in one write; (the login's error code, how the Metadata request ended: "served",
    or None when the connection closed before answering it)."""
    from rustka.kafka import messages

    conn = _RawKafka(port)
    try:
        conn.send(messages.encode_request(17, 1, 1, "raw", {"mechanism": "PLAIN"}))
        assert conn.receive() is not None
        token = b"\0admin\0" + password.encode()
        login = messages.encode_request(36, 1, 2, "raw", {"auth_bytes": token})
        metadata = messages.encode_request(3, 1, 3, "raw", {"topics": []})
        conn.sock.sendall(b"".join(len(f).to_bytes(4, "big") + f for f in (login, metadata)))
        answer = conn.receive()
        assert answer is not None
        correlation, body = messages.decode_response(36, 1, answer)
        assert correlation == 2
        served = conn.receive()
        if served is None:
            return body["error_code"], None
        correlation, meta = messages.decode_response(3, 1, served)
        assert correlation == 3 and meta["brokers"]
        return body["error_code"], "served"
    finally:
        conn.close()


@pytest_twisted.ensureDeferred
async def test_a_request_pipelined_behind_a_plain_login_waits_for_it(data_dir: Path) -> None:
    """SaslAuthenticate's PLAIN check runs on a thread; a Metadata request in the same
    write is read only once the login is answered, so it is served as the user, not
    refused as sent before authenticating; after a failed login it is never served."""
    CredentialStore(data_dir / "credentials").upsert(
        "admin", "SCRAM-SHA-256", derive_credential(MECHANISMS["SCRAM-SHA-256"], ADMIN_PASSWORD)
    )
    running = await start_broker(
        data_dir, listen_security="sasl", connection_failed_authentication_delay_ms=0
    )
    try:
        ok = await within(threads.deferToThread(v1_plain_pipelined, running.port, ADMIN_PASSWORD))
        assert ok == (0, "served")
        refused = await within(threads.deferToThread(v1_plain_pipelined, running.port, "wrong"))
        assert refused == (58, None)
        stats = running.top.authenticator.stats
        assert stats.successes == {"PLAIN": 1} and stats.failures == {"PLAIN": 1}
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_v0_handshake_exchanges_bare_tokens(data_dir: Path) -> None:
    """Kafka before 1.0: after SaslHandshake v0 the tokens travel as bare frames."""
    CredentialStore(data_dir / "credentials").upsert(
        "admin", "SCRAM-SHA-256", derive_credential(MECHANISMS["SCRAM-SHA-256"], ADMIN_PASSWORD)
    )
    running = await start_broker(
        data_dir, listen_security="sasl", connection_failed_authentication_delay_ms=0
    )
    try:
        ok = await within(threads.deferToThread(v0_exchange, running.port, ADMIN_PASSWORD), 30)
        assert ok == (True, True)
        refused = await within(threads.deferToThread(v0_exchange, running.port, "wrong"), 30)
        assert refused == (False, False)
        stats = running.top.authenticator.stats
        assert stats.successes == {"SCRAM-SHA-256": 1} and stats.failures == {"SCRAM-SHA-256": 1}
    finally:
        await running.stop()


@pytest_twisted.ensureDeferred
async def test_a_plain_login_is_checked_off_the_reactor(data_dir: Path) -> None:
    """PLAIN derives the key from the password: a credential of 1,000,000 iterations
    (the most rustka stores) costs ~0.3 s. While one client's SaslAuthenticate waits
    on it, another client is served; then the login completes as its user."""
    from twisted.internet import reactor

    from rustka.kafka.client import SaslLogin, connect_kafka
    from rustka.security.sasl import PlainServer
    from tests.conftest import reactor_turns

    store = CredentialStore(data_dir / "credentials")
    sha = MECHANISMS["SCRAM-SHA-256"]
    store.upsert("slow", "SCRAM-SHA-256", derive_credential(sha, "pw", iterations=1_000_000))
    store.upsert("admin", "SCRAM-SHA-256", derive_credential(sha, ADMIN_PASSWORD))
    running = await start_broker(data_dir, listen_security="sasl")
    factory = running.top.kafka_factory
    try:
        slow = defer.ensureDeferred(
            connect_kafka(reactor, running.address, sasl=SaslLogin("slow", "pw", "PLAIN"))
        )
        await reactor_turns(
            lambda: any(
                isinstance(k.auth.server, PlainServer) and k.pending for k in factory.connections
            )
        )
        other = await within(
            defer.ensureDeferred(
                connect_kafka(
                    reactor,
                    running.address,
                    sasl=SaslLogin("admin", ADMIN_PASSWORD, "SCRAM-SHA-256"),
                )
            )
        )
        metadata = await within(defer.ensureDeferred(other.request(3, {"topics": []}, version=1)))
        assert metadata["brokers"]
        assert not slow.called, "the PLAIN check held the reactor"
        proto = await within(slow)
        [mine] = [
            k
            for k in factory.connections
            if k.transport.getPeer().port == proto.transport.getHost().port
        ]
        assert mine.principal == Principal("User", "slow")
        await proto.close()
        await other.close()
        stats = running.top.authenticator.stats
        assert stats.successes == {"PLAIN": 1, "SCRAM-SHA-256": 1}
    finally:
        await running.stop()
