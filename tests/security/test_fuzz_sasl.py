"""Seeded hostile SASL: the exchange never crashes and never lets anyone in.

Malformed and mutated SCRAM messages, absurd lengths, PLAIN with stray NULs and
replayed client-final messages from an earlier, successful exchange: first
against the pure servers (thousands of cases), then over real sockets against a
broker with a sasl listener, through the Kafka SaslAuthenticate API and the
native ops, after which a request that needs authentication must find the
connection closed, and a genuine login must still work.
"""

from __future__ import annotations

import base64
import random
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer

from rustka.errors import BrokerUnavailable, RustkaError
from rustka.kafka.client import connect_kafka
from rustka.security.credentials import CredentialStore
from rustka.security.sasl import ALL_MECHANISMS, AuthenticationFailed, new_server
from rustka.security.scram import MECHANISMS, ScramClient, derive_credential
from tests.conftest import RunningBroker, start_broker, within

PASSWORD = "fuzz-pw"
CREDENTIALS = {
    (user, name): derive_credential(mechanism, PASSWORD, iterations=4096)
    for user in ("alice",)
    for name, mechanism in MECHANISMS.items()
}


def lookup(user: str, mechanism: str) -> Any:
    return CREDENTIALS.get((user, mechanism))


def genuine(mechanism: str) -> tuple[list[bytes], list[bytes]]:
    """A successful exchange's client messages and the server's answers."""
    server = new_server(mechanism, ALL_MECHANISMS, lookup)
    if mechanism == "PLAIN":
        token = f"\0alice\0{PASSWORD}".encode()
        return [token], [server.step(token)]
    client = ScramClient(MECHANISMS[mechanism], "alice", PASSWORD)
    first = client.first()
    server_first = server.step(first)
    final = client.final(server_first)
    server_final = server.step(final)
    client.verify(server_final)
    assert server.complete
    return [first, final], [server_first, server_final]


class SaslFuzzer:
    """Seeded client messages: mutations of genuine ones, replays, junk, huge ones."""

    PIECES = [b"n,,", b"y,,", b"p=x,,", b"n=", b"r=", b"c=biws", b"p=", b",", b"=", b"=2C",
              b"=3D", b"\0", b"\xff", b"a=alice,", b"i=1", b"s=", b"e=", b"v="]  # fmt: skip

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.recorded = {m: genuine(m)[0] for m in ALL_MECHANISMS}

    def mutate(self, data: bytes) -> bytes:
        rng = self.rng
        out = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            choice = rng.random()
            at = rng.randint(0, len(out))
            if choice < 0.3 and out:
                out[rng.randrange(len(out))] = rng.randrange(256)
            elif choice < 0.5:
                out[at:at] = rng.choice(self.PIECES)
            elif choice < 0.7 and out:
                del out[at : at + rng.randint(1, 8)]
            elif choice < 0.8:
                out[at:at] = out[: rng.randint(0, len(out))]
            else:
                out[at:at] = base64.b64encode(rng.randbytes(rng.randint(1, 64)))
        return bytes(out)

    def message(self, mechanism: str, step: int) -> bytes:
        """Never PLAIN's genuine token itself: replaying that is knowing the password
        (PLAIN has nothing to replay against; TLS is what keeps it secret)."""
        for _ in range(100):
            message = self._message(mechanism, step)
            if message != self.recorded["PLAIN"][0]:
                return message
        raise AssertionError("the generator keeps producing the genuine PLAIN token")

    def _message(self, mechanism: str, step: int) -> bytes:
        rng = self.rng
        recorded = self.recorded[mechanism]
        base = recorded[min(step, len(recorded) - 1)]
        roll = rng.random()
        if roll < 0.55:
            return self.mutate(base)
        if roll < 0.7:
            return base  # a replay: the recorded message of another exchange
        if roll < 0.8:
            return rng.randbytes(rng.randint(0, 300))
        if roll < 0.9:
            return base + b"," + b"x" * rng.choice([5000, 9000, 70_000])
        return self.mutate(rng.choice(self.recorded["SCRAM-SHA-256"] + self.recorded["PLAIN"]))

    def exchange(self, mechanism: str) -> list[bytes]:
        return [self.message(mechanism, i) for i in range(self.rng.randint(1, 3))]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_servers_refuse_every_hostile_exchange_and_never_crash(seed: int) -> None:
    fuzzer = SaslFuzzer(seed)
    refused = 0
    for _ in range(1500):
        mechanism = fuzzer.rng.choice(ALL_MECHANISMS)
        server = new_server(mechanism, ALL_MECHANISMS, lookup)
        for message in fuzzer.exchange(mechanism):
            try:
                server.step(message)
            except AuthenticationFailed:
                refused += 1
                break
        assert not server.complete, (mechanism, message)
        assert server.user is None
    assert refused > 1000


def test_a_genuine_exchange_still_completes_after_fuzzing() -> None:
    for mechanism in ALL_MECHANISMS:
        assert genuine(mechanism)[1]


# -- over real sockets --------------------------------------------------------------------


@pytest_twisted.async_yield_fixture
async def sasl_broker(data_dir: Path) -> Any:
    store = CredentialStore(data_dir / "credentials")
    for (user, name), credential in CREDENTIALS.items():
        store.upsert(user, name, credential)
    running = await start_broker(
        data_dir, listen_security="sasl", connection_failed_authentication_delay_ms=0
    )
    try:
        yield running
    finally:
        await running.stop()


async def kafka_attempt(running: RunningBroker, mechanism: str, messages: list[bytes]) -> bool:
    """One hostile exchange over Kafka; whether a Metadata was then served (it must not be)."""
    from twisted.internet import reactor

    conn = await within(defer.ensureDeferred(connect_kafka(reactor, running.address)))
    try:
        answer = await within(conn.request(17, {"mechanism": mechanism}, version=1))
        assert answer["error_code"] == 0
        for message in messages:
            reply = await within(conn.request(36, {"auth_bytes": message}))
            if reply["error_code"]:
                assert reply["error_code"] == 58 and reply["error_message"]
                break
        await within(conn.request(3, {"topics": []}))
        return True
    except (BrokerUnavailable, RustkaError):
        return False
    finally:
        conn.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_hostile_kafka_exchanges_over_sockets_never_authenticate(
    sasl_broker: RunningBroker,
) -> None:
    fuzzer = SaslFuzzer(11)
    for _ in range(60):
        mechanism = fuzzer.rng.choice(ALL_MECHANISMS)
        served = await kafka_attempt(sasl_broker, mechanism, fuzzer.exchange(mechanism))
        assert not served
    stats = sasl_broker.top.authenticator.stats
    assert stats.successes == {}
    assert sum(stats.failures.values()) >= 50
    from twisted.internet import reactor

    from rustka.kafka.client import SaslLogin

    conn = await within(
        defer.ensureDeferred(
            connect_kafka(reactor, sasl_broker.address, sasl=SaslLogin("alice", PASSWORD))
        )
    )
    assert (await within(conn.request(3, {"topics": []})))["brokers"]
    await conn.close()


@pytest_twisted.ensureDeferred
async def test_hostile_native_exchanges_over_sockets_never_authenticate(
    sasl_broker: RunningBroker,
) -> None:
    from twisted.internet import reactor

    from rustka.client.protocol import connect
    from rustka.native import codec as p

    fuzzer = SaslFuzzer(12)
    for _ in range(60):
        mechanism = fuzzer.rng.choice(ALL_MECHANISMS)
        c = await within(defer.ensureDeferred(connect(reactor, sasl_broker.address)))
        messages = fuzzer.exchange(mechanism)
        try:
            answer = await within(c._call(p.SaslAuthenticate(mechanism, messages[0]), lambda r: r))
            for message in messages[1:]:
                if not isinstance(answer, p.SaslToken):
                    break
                answer = await within(c._call(p.SaslContinue(message), lambda r: r))
            assert not (isinstance(answer, p.SaslToken) and answer.complete), messages
            with pytest.raises(RustkaError):
                await within(c.metadata())
        except RustkaError:
            pass
        finally:
            await c.close()
    assert sasl_broker.top.authenticator.stats.successes == {}
    ok = await within(
        defer.ensureDeferred(connect(reactor, sasl_broker.address, user="alice", password=PASSWORD))
    )
    assert await within(ok.metadata()) == []
    await ok.close()
