"""What a login costs the broker: CPU per SASL exchange, by mechanism, and what a
flood of failing PLAIN logins costs everyone else.

    .venv/bin/python bench/sasl_bench.py [--logins N] [--json PATH]
    .venv/bin/python bench/sasl_bench.py --flood [--quick] [--iterations N] [--json PATH]

Authentication happens once per connection, so this is a per-connection cost,
not a per-request one. The first form times only the broker's side of each
exchange (the ScramServer steps, or PLAIN's check) in this process, and, for
comparison, the whole exchange including the client's PBKDF2. Credentials have
Kafka's default 4096 iterations; the cost of PLAIN and of the client side grows
linearly with them, the SCRAM server side does not (it never derives a key).

``--flood`` runs `twistd rustka` with a sasl listener and measures a K2 probe
(one confluent-kafka producer logged in with SCRAM, one record at a time, each
waited for) alone and then while other processes log in with PLAIN and a wrong
password as fast as the broker answers (the failure delay set to 0). PLAIN's
key derivation runs on the reactor's thread pool (docs/security.md), so the
probe's latency under the flood, as a ratio of its latency alone, is the
figure; run it against an older tree with ``PYTHONPATH=<tree>`` to compare.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _common import TwistdBroker  # noqa: E402

from rustka.kafka import messages  # noqa: E402
from rustka.kafka.messages import ApiKey  # noqa: E402
from rustka.security.credentials import CredentialStore  # noqa: E402
from rustka.security.sasl import ALL_MECHANISMS, new_server  # noqa: E402
from rustka.security.scram import (  # noqa: E402
    MECHANISMS,
    ScramClient,
    ScramServer,
    derive_credential,
)

USER, PASSWORD = "alice", "correct horse battery staple"
#: (probe requests, seconds of flood before the probe starts) per mode.
FLOOD_SIZES = {"full": (2_000, 1.0), "quick": (200, 0.3)}
FLOODERS = 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logins", type=int, default=200)
    parser.add_argument("--flood", action="store_true", help="the flood of failing PLAIN logins")
    parser.add_argument("--quick", action="store_true", help="--flood with a short probe")
    parser.add_argument("--iterations", type=int, default=4096, help="--flood credential")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.flood:
        flood_main(args)
        return
    credentials = {name: derive_credential(m, "pw") for name, m in MECHANISMS.items()}

    def lookup(user: str, mechanism: str):  # type: ignore[no-untyped-def]
        return credentials.get(mechanism) if user == "alice" else None

    results: dict[str, dict[str, float]] = {}
    for name, mechanism in MECHANISMS.items():
        server_time = whole_time = 0.0
        for _ in range(args.logins):
            started = time.perf_counter()
            client = ScramClient(mechanism, "alice", "pw")
            server = ScramServer(mechanism, lookup)
            first = client.first()
            a = time.perf_counter()
            server_first = server.step(first)
            server_time += time.perf_counter() - a
            final = client.final(server_first)
            a = time.perf_counter()
            server_final = server.step(final)
            server_time += time.perf_counter() - a
            client.verify(server_final)
            whole_time += time.perf_counter() - started
        results[name] = {
            "server_us_per_login": server_time / args.logins * 1e6,
            "whole_exchange_ms": whole_time / args.logins * 1e3,
        }
    started = time.perf_counter()
    for _ in range(args.logins):
        new_server("PLAIN", ALL_MECHANISMS, lookup).step(b"\0alice\0pw")
    elapsed = (time.perf_counter() - started) / args.logins
    results["PLAIN"] = {"server_us_per_login": elapsed * 1e6, "whole_exchange_ms": elapsed * 1e3}
    for name, row in results.items():
        print(
            f"{name:14} broker {row['server_us_per_login']:8.0f} us/login   "
            f"whole exchange {row['whole_exchange_ms']:6.2f} ms"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


def _request(sock: socket.socket, api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    frame = messages.encode_request(api, version, 1, "sasl-bench", body)
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    (size,) = struct.unpack(">i", _read(sock, 4))
    return messages.decode_response(api, version, _read(sock, size))[1]


def _read(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return bytes(data)


def _flooder(port: int, stop: Any, counts: Any, index: int) -> None:
    """Failing PLAIN logins, one connection each, until ``stop`` is set."""
    failed = 0
    while not stop.is_set():
        with socket.create_connection(("127.0.0.1", port)) as sock:
            answer = _request(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
            if answer["error_code"]:
                raise RuntimeError(f"SaslHandshake refused PLAIN: {answer}")
            token = f"\0{USER}\0wrong password".encode()
            answer = _request(sock, ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token})
            if not answer["error_code"]:
                raise RuntimeError("a wrong password was accepted")
            failed += 1
    counts[index] = failed


def _probe(port: int, count: int) -> list[float]:
    """Seconds per one-record produce, each waited for, over an authenticated connection."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
            "linger.ms": 0,
            "acks": "all",
        }
    )
    errors: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    times: list[float] = []
    for i in range(count + 20):
        started = time.perf_counter()
        producer.produce("probe", b"x" * 100, key=str(i).encode(), on_delivery=delivered)
        producer.flush(30)
        if i >= 20:  # the first sends find the leader and the topic
            times.append(time.perf_counter() - started)
    if errors:
        raise RuntimeError(f"probe produce failed: {errors[0]}")
    return times


def _summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "p50_us": statistics.median(ordered) * 1e6,
        "p99_us": ordered[int(len(ordered) * 0.99) - 1] * 1e6,
    }


def flood_main(args: argparse.Namespace) -> None:
    requests, warm_s = FLOOD_SIZES["quick" if args.quick else "full"]
    work = Path(tempfile.mkdtemp(prefix="rustka-sasl-bench-"))
    try:
        data_dir = work / "data"
        data_dir.mkdir()
        store = CredentialStore(data_dir / "credentials")
        for name, mechanism in MECHANISMS.items():
            store.upsert(
                USER, name, derive_credential(mechanism, PASSWORD, iterations=args.iterations)
            )
        broker = TwistdBroker(
            data_dir,
            {
                "listen_security": "sasl",
                "connection_failed_authentication_delay_ms": 0,
                "auto_create_topics": True,
            },
        )
        try:
            alone = _probe(broker.port, requests)
            stop = multiprocessing.Event()
            counts = multiprocessing.Array("q", FLOODERS)
            flooders = [
                multiprocessing.Process(target=_flooder, args=(broker.port, stop, counts, i))
                for i in range(FLOODERS)
            ]
            for process in flooders:
                process.start()
            time.sleep(warm_s)  # the flood is under way before the probe starts
            started = time.perf_counter()
            flooded = _probe(broker.port, requests)
            elapsed = time.perf_counter() - started
            stop.set()
            for process in flooders:
                process.join(60)
                if process.exitcode != 0:
                    raise RuntimeError("a flooder failed; see its traceback above")
        finally:
            broker.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    logins = sum(counts)
    result = {
        "iterations": args.iterations,
        "alone": _summary(alone),
        "flooded": _summary(flooded),
        "failed_logins": logins,
        "failed_logins_per_s": logins / (elapsed + warm_s),
    }
    result["p50_ratio"] = result["flooded"]["p50_us"] / result["alone"]["p50_us"]
    print(
        f"K2 probe alone    p50 {result['alone']['p50_us']:8.0f} us  "
        f"p99 {result['alone']['p99_us']:8.0f} us\n"
        f"K2 probe flooded  p50 {result['flooded']['p50_us']:8.0f} us  "
        f"p99 {result['flooded']['p99_us']:8.0f} us  "
        f"({result['p50_ratio']:.2f}x alone)\n"
        f"failing PLAIN logins: {logins}, {result['failed_logins_per_s']:.0f}/s "
        f"({args.iterations} iterations)"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
