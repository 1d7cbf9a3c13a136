"""The schema registry's costs, in the same run: what a registration, a lookup by id and
per-topic schema validation on produce cost (docs/schema-registry.md, "Figures").

    .venv/bin/python bench/registry_bench.py [--quick] [--rounds N] [--json PATH]

Starts one ``twistd rustka`` with the registry on a port of its own, then:

- registers a chain of Avro versions under one subject, each adding an optional field
  (every registration parses the schema and checks BACKWARD against the latest, then
  appends to ``_schemas``, fsyncs and reads back), and reports ms per registration;
- asks for one schema by id over and over (``GET /schemas/ids/1``, the call a
  deserializer makes once per id), and reports µs per request, client included;
- produces the same framed records (Confluent's magic byte and schema id, then an Avro
  body) with confluent-kafka to two topics, one with ``confluent.value.schema.validation
  = true`` and one without, alternating which goes first, and reports records/s and the
  broker's CPU per 100,000 records for each, and validation's ratio to none.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _common import TwistdBroker, free_port, process_cpu  # noqa: E402

SUBJECT = "bench-value"
CONTENT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def _call(conn: http.client.HTTPConnection, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body)
    conn.request(method, path, body=data, headers=CONTENT)
    response = conn.getresponse()
    raw = response.read()
    if response.status != 200:
        raise RuntimeError(f"{method} {path}: {response.status} {raw[:200]!r}")
    return json.loads(raw)


def _schema(fields: int) -> str:
    extra = [{"name": f"f{i}", "type": ["null", "string"], "default": None} for i in range(fields)]
    return json.dumps(
        {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}, *extra]}
    )


def _wait_ready(port: int) -> http.client.HTTPConnection:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("GET", "/subjects")
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                return conn
        except OSError:
            pass
        conn.close()
        time.sleep(0.1)
    raise RuntimeError("the registry did not become ready")


def registrations(conn: http.client.HTTPConnection, count: int, start: int) -> float:
    """ms per registration of a new, compatible version."""
    t0 = time.perf_counter()
    for i in range(start, start + count):
        _call(conn, "POST", f"/subjects/{SUBJECT}/versions", {"schema": _schema(i)})
    return (time.perf_counter() - t0) * 1000 / count


def lookups(conn: http.client.HTTPConnection, count: int) -> float:
    """µs per GET /schemas/ids/1."""
    t0 = time.perf_counter()
    for _ in range(count):
        _call(conn, "GET", "/schemas/ids/1")
    return (time.perf_counter() - t0) * 1e6 / count


def _framed(schema_id: int, count: int) -> list[bytes]:
    from io import BytesIO

    from fastavro import parse_schema, schemaless_writer

    parsed = parse_schema(json.loads(_schema(0)))
    out = []
    header = b"\x00" + struct.pack(">i", schema_id)
    for i in range(count):
        body = BytesIO()
        schemaless_writer(body, parsed, {"id": i})
        out.append(header + body.getvalue())
    return out


def _create(bootstrap: str, name: str, validate: bool) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    configs = {"confluent.value.schema.validation": "true"} if validate else {}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(60)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> float:
    """Seconds to produce ``values`` and have them all acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    t0 = time.perf_counter()
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("records not delivered")
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, one round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    versions = 10 if args.quick else 50
    gets = 200 if args.quick else 2000
    records = 20_000 if args.quick else 200_000
    results: dict[str, list[float]] = {
        "register_ms": [],
        "lookup_us": [],
        "validated_rps": [],
        "plain_rps": [],
        "validated_cpu": [],
        "plain_cpu": [],
    }
    with tempfile.TemporaryDirectory(prefix="rustka-registry-bench-") as tmp:
        port = free_port()
        broker = TwistdBroker(
            Path(tmp) / "data", {"schema_registry_listen": f"tcp:{port}:interface=127.0.0.1"}
        )
        try:
            bootstrap = f"127.0.0.1:{broker.port}"
            conn = _wait_ready(port)
            schema_id = _call(
                conn, "POST", f"/subjects/{SUBJECT}/versions", {"schema": _schema(0)}
            )["id"]
            values = _framed(schema_id, records)
            for r in range(rounds):
                results["register_ms"].append(registrations(conn, versions, 1 + r * versions))
                results["lookup_us"].append(lookups(conn, gets))
                order = [("validated", True), ("plain", False)]
                if r % 2:
                    order.reverse()
                for name, validate in order:
                    topic = f"bench-{name}-{r}"
                    _create(bootstrap, topic, validate)
                    cpu0 = process_cpu(broker.proc.pid)
                    seconds = produce(bootstrap, topic, values)
                    cpu = process_cpu(broker.proc.pid) - cpu0
                    results[f"{name}_rps"].append(records / seconds)
                    results[f"{name}_cpu"].append(cpu * 100_000 / records)
        finally:
            broker.stop()
    medians = {k: statistics.median(v) for k, v in results.items()}
    print(f"rounds: {rounds}, {versions} registrations, {gets} lookups, {records:,} records")
    print(
        "registration (parse, BACKWARD check, append, fsync, read back): "
        f"{medians['register_ms']:.2f} ms"
    )
    print(f"GET /schemas/ids/1, client included: {medians['lookup_us']:.0f} µs")
    for name in ("plain", "validated"):
        print(
            f"produce, {name:9}: {medians[name + '_rps']:,.0f} rec/s, broker CPU "
            f"{medians[name + '_cpu']:.3f} s per 100k records"
        )
    print(
        f"validation / none: {medians['validated_rps'] / medians['plain_rps']:.2f}x rec/s, "
        f"{medians['validated_cpu'] / medians['plain_cpu']:.2f}x broker CPU"
    )
    if args.json:
        args.json.write_text(json.dumps({"rounds": results, "medians": medians}, indent=2))


if __name__ == "__main__":
    main()
