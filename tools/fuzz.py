"""Throw seeded garbage at a broker over many connections and check it stays sane.

Every connection sends a script from `tools.frames` and must get exactly one
well-formed response per complete frame, in the tag family its op calls for,
or - when the script ends with an oversized length prefix - at most one more
Error and a hang-up. Afterwards the broker must still serve a fresh client,
and every topic directory must be one that a valid request could have created.

    .venv/bin/python -m tools.fuzz                     # 1,000,000 frames
    .venv/bin/python -m tools.fuzz --quick             # 20,000 frames
    .venv/bin/python -m tools.fuzz --kafka --frames 100000   # Kafka framing

With ``--kafka`` the scripts are Kafka requests (`KafkaFuzzer`): well-formed ones
of every implemented API and version, the same with corrupted, cut or extended
bodies, unknown keys and versions, corrupted record batches for audit topics,
absurd length prefixes. Each answer must come in order and decode as its
request's response, or the connection must close; the audit topics' end offsets
must equal the records acknowledged (a rejected produce stores nothing).
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rustka.errors import InvalidRequest
from rustka.kafka import messages as km
from rustka.kafka.errors import ErrorCode
from rustka.native import codec as p
from rustka.record.batch import Record, decode_records, encode_batch
from tools.frames import TOPIC_RE, FrameFuzzer, Script, creatable_topic
from tools.twistd_process import start_broker
from tools.wire import SyncClient, exchange, frame

SEED_TAGS = frozenset(range(1, 7))
#: An extension op is answered with its own tags or, when unparseable, tag 4 Error; its
#: tags come from the codec's declarations, so a new response is never taken for a fault.
EXTENSION_TAGS = frozenset(
    {4} | {m.code for m in p.MESSAGES if m.kind == "response" and m.code not in SEED_TAGS}
)


@dataclass
class FuzzReport:
    """Counts from one fuzz run; ``problems`` must stay empty."""

    frames: int = 0
    responses: int = 0
    connections: int = 0
    dropped: int = 0
    oversized: int = 0
    incomplete: int = 0
    #: Connections whose first frame began with 0x00: malformed native frames (op 0),
    #: answered like any other (docs/protocol.md, "Which first frames go to Kafka").
    first_op_0: int = 0
    creatable: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def check_connection(script: Script, responses: list[bytes], closed: bool) -> list[str]:
    """What is wrong with how the broker answered one script (empty when nothing is)."""
    problems: list[str] = []
    expected = script.expected_responses
    if script.oversized:
        if not closed:
            problems.append("an oversized frame did not close the connection")
        if len(responses) > expected + 1:
            problems.append(f"{len(responses)} responses to {expected} frames + 1 oversized")
        if len(responses) == expected + 1:
            last = p.decode_response(responses[-1])
            if not (type(last) is p.Error and "exceeds the maximum" in last.message):
                problems.append(f"oversized frame answered {last!r:.200}")
            responses = responses[:-1]
    elif closed or len(responses) != expected:
        problems.append(f"{len(responses)} responses to {expected} frames (closed={closed})")
    for index, (request, answer) in enumerate(zip(script.frames, responses, strict=False)):
        try:
            response = p.decode_response(answer)
        except InvalidRequest as e:
            problems.append(f"frame {index}: undecodable response {answer[:40]!r}: {e}")
            continue
        try:
            seed_family = p.decode_request(request).OP in p.SEED_OPS
        except InvalidRequest:
            seed_family = True
            if type(response) is not p.Error:
                problems.append(f"frame {index}: unparseable request answered {response!r:.120}")
        tags = SEED_TAGS if seed_family else EXTENSION_TAGS
        if answer[0] not in tags:
            problems.append(f"frame {index}: request {request[:20]!r} got tag {answer[0]}")
    return problems


_Outcome = tuple[Script, list[str], int, bool]


def _run_one(host: str, port: int, script: Script, timeout: float) -> _Outcome:
    try:
        responses, closed = exchange(
            host,
            port,
            script.writes,
            script.expected_responses,
            expect_close=script.oversized,
            timeout=timeout,
        )
    except TimeoutError as e:
        kind = "oversized" if script.oversized else "normal"
        return script, [f"{kind} connection hung: {e}"], 0, False
    return script, check_connection(script, responses, closed), len(responses), closed


def fuzz(
    host: str,
    port: int,
    *,
    seed: int,
    frames: int,
    max_frame_bytes: int,
    concurrency: int = 20,
    per_connection: tuple[int, int] = (20, 200),
    timeout: float = 120.0,
    progress: Callable[[FuzzReport], None] | None = None,
) -> FuzzReport:
    """Run the fuzzer against ``host:port`` with ``concurrency`` connections at a time."""
    report = FuzzReport()
    fuzzer = FrameFuzzer(seed, max_frame_bytes)
    started = time.perf_counter()
    pending: set[Future[_Outcome]] = set()

    def collect(done: set[Future[_Outcome]]) -> None:
        for future in done:
            script, problems, count, closed = future.result()
            report.connections += 1
            report.frames += script.expected_responses
            report.responses += count
            report.dropped += closed
            report.first_op_0 += bool(script.frames) and script.frames[0][:1] == b"\x00"
            report.oversized += script.oversized
            report.incomplete += script.incomplete_tail
            for payload in script.frames:
                topic = creatable_topic(payload)
                if topic is not None:
                    report.creatable.add(topic)
            report.problems.extend(f"connection {report.connections}: {x}" for x in problems)
            if progress is not None:
                progress(report)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for script in fuzzer.scripts(frames, per_connection):
            if len(pending) >= concurrency * 2:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                collect(done)
            pending.add(pool.submit(_run_one, host, port, script, timeout))
        collect(wait(pending).done)
    report.seconds = time.perf_counter() - started
    return report


def round_trip(host: str, port: int, topic: str = "after-fuzz") -> None:
    """A fresh client can still produce and fetch, byte for byte, on both protocol levels."""
    client = SyncClient(host, port)
    try:
        produced = client.call(p.Produce(topic, b"key", b"value after the storm"))
        assert type(produced) is p.Produced, produced
        fetched = client.call(p.Fetch(topic, produced.partition, produced.offset))
        expected = p.FetchedRecord(produced.offset, b"key", b"value after the storm")
        assert fetched == expected, fetched
        batch = encode_batch([Record(key=b"k2", value=b"v2")])
        answer = client.call(p.ProduceBatch(topic, produced.partition, batch))
        assert type(answer) is p.BatchProduced and answer.base_offset == produced.offset + 1, answer
        got = client.call(p.FetchBatch(topic, produced.partition, answer.base_offset, 1 << 20, 0))
        assert type(got) is p.Batches, got
        records = decode_records(got.batches)
        assert [(r.key, r.value) for r in records] == [(b"k2", b"v2")], records
    finally:
        client.close()


def unexpected_topic_dirs(data_dir: Path, creatable: set[str]) -> list[str]:
    """Directories in the data dir that no valid request could have created."""
    allowed = {*creatable, "__offsets", "after-fuzz"}
    return sorted(
        entry.name
        for entry in os.scandir(data_dir)
        if entry.is_dir()
        and entry.name != "__offsets"
        and not (entry.name in allowed and TOPIC_RE.fullmatch(entry.name))
    )


# -- Kafka framing (issue 11 item 9) ----------------------------------------------------
#
# Kafka requests go to the same port. Every script opens with a well-formed request, as
# a real client does, so the protocol switch hands the connection to the Kafka
# front-end (docs/protocol.md, "Which first frames go to Kafka"); a hostile first frame
# would be a native connection, which the native fuzzer covers. A script mixes
# well-formed requests of every implemented API and version, the same requests with
# corrupted or truncated bodies, unknown keys and versions, random bodies behind
# valid headers, corrupted record batches for topics whose end offsets are checked,
# absurd length prefixes and incomplete tails. What the broker may do (docs/kafka.md,
# "Versions outside the table"): answer a request in order with the response its key
# and version call for (ApiVersions of an unknown version: the v0-layout table), or
# close the connection at a request it cannot take; never crash, never answer after
# a close, and never store anything of a rejected produce.

#: Topics the Kafka fuzzer produces to with known record counts; their end offsets
#: must equal what was acknowledged.
AUDIT_TOPICS = tuple(f"kfz-audit-{i}" for i in range(4))
_SENTINEL_CID = 0x7FFF0000
#: Batch timestamps of the Kafka fuzzer: fixed, so one seed gives the same bytes.
_FUZZ_TIMESTAMP = 1_767_225_600_000
#: The broker's fetch_max_wait_ms for a Kafka fuzz run (a mutated Fetch's wait is capped).
KAFKA_MAX_WAIT_MS = 100
#: The Kafka codec builds each version's encoder and decoder on first use, and that
#: cache is not safe to fill from several threads at once (the broker uses it from the
#: reactor thread only); the fuzzer's threads take turns.
_CODEC_LOCK = threading.Lock()
#: What a corrupted audit batch may be refused with (docs/kafka.md, Produce validation):
#: a bad CRC or record, and, when the damage lands on the attributes, the answers Kafka
#: checks first: the transactional bit (no producer is authorized) or zstd below v7.
_CORRUPT_CODES = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.INVALID_RECORD,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
    }
)


@dataclass
class KafkaFrame:
    """One complete request frame of a script and what the broker may do with it."""

    api_key: int
    version: int
    correlation_id: int
    payload: bytes
    #: "ok": must be answered (unless an earlier frame closed the connection);
    #: "close": must never be answered, and the connection closes;
    #: "any": answered or closed.
    expect: str
    #: For audit produces: (topic, records, corrupted).
    produce: tuple[str, int, bool] | None = None


@dataclass
class KafkaScript:
    frames: list[KafkaFrame]
    writes: list[bytes]
    oversized: bool = False
    incomplete_tail: bool = False
    #: Records of valid audit produces left unanswered, per topic (set by the check).
    uncertain: dict[str, int] = field(default_factory=dict)


@dataclass
class KafkaFuzzReport:
    """Counts from one Kafka fuzz run; ``problems`` must stay empty."""

    frames: int = 0
    responses: int = 0
    connections: int = 0
    closed: int = 0
    oversized: int = 0
    acked: dict[str, int] = field(default_factory=dict)
    uncertain: dict[str, int] = field(default_factory=dict)
    rejected_produces: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _kafka_templates() -> list[tuple[int, int, dict[str, Any]]]:
    """A well-formed request of every implemented API and version (except the writes the
    audit needs to control: Produce and DeleteTopics are made separately or not at all)."""
    topic = "kfx-1"
    bodies: dict[int, Callable[[int], dict[str, Any]]] = {
        1: lambda v: {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 16,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": AUDIT_TOPICS[v % len(AUDIT_TOPICS)],
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 16}
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
        2: lambda v: {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
        3: lambda v: {"topics": [{"name": topic}], "allow_auto_topic_creation": v % 2 == 0},
        10: lambda v: {"key": "kfz-group", "key_type": 0},
        15: lambda v: {"groups": ["kfz-group"], "include_authorized_operations": False},
        16: lambda v: {},
        18: lambda v: (
            {"client_software_name": "fuzz", "client_software_version": "1"} if v >= 3 else {}
        ),
        19: lambda v: {
            "topics": [
                {
                    "name": f"kfx-{v}",
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 5000,
            "validate_only": v % 2 == 1,
        },
        22: lambda v: {"transactional_id": None, "transaction_timeout_ms": 1000},
        32: lambda v: {
            "resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": None}],
            "include_synonyms": False,
        },
        9: lambda v: {
            "group_id": "kfz-group",
            "topics": [{"name": topic, "partition_indexes": [0]}],
        },
    }
    out: list[tuple[int, int, dict[str, Any]]] = []
    for key, make in bodies.items():
        api = km.APIS[key]
        for version in range(api.min_version, api.max_version + 1):
            out.append((key, version, make(version)))
    return out


class KafkaFuzzer:
    """Seeded scripts of Kafka frames; the same seed always gives the same bytes."""

    def __init__(self, seed: int, max_frame_bytes: int) -> None:

        self.rng = random.Random(seed)
        self.max_frame_bytes = max_frame_bytes
        self.templates = _kafka_templates()
        self.apis = km.APIS
        self._cid = 0

    def _next_cid(self) -> int:
        self._cid = (self._cid + 1) % _SENTINEL_CID
        return self._cid

    def _encode(self, key: int, version: int, body: dict[str, Any]) -> tuple[int, bytes]:
        cid = self._next_cid()
        with _CODEC_LOCK:
            return cid, km.encode_request(key, version, cid, "kfz", body)

    def _audit_produce(self, corrupt: str | None) -> KafkaFrame:
        rng = self.rng
        topic = rng.choice(AUDIT_TOPICS)
        count = rng.randint(1, 5)
        batch = bytearray(
            encode_batch(
                [
                    Record(key=b"k%d" % i, value=rng.randbytes(rng.randint(0, 40)))
                    for i in range(count)
                ],
                timestamp=_FUZZ_TIMESTAMP,
            )
        )
        if corrupt == "batch":
            # Bytes the CRC covers (attributes onwards) or the CRC itself: a sure reject.
            pos = rng.randrange(17, len(batch))
            batch[pos] ^= rng.randrange(1, 256)
        version = rng.randint(self.apis[0].min_version, self.apis[0].max_version)
        body = {
            "transactional_id": None,
            "acks": rng.choice((1, -1)),
            "timeout_ms": 5000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": bytes(batch)}]}
            ],
        }
        cid, payload = self._encode(0, version, body)
        if corrupt == "truncate":
            # Cut inside the record set: its length no longer fits, the body cannot parse.
            payload = payload[: len(payload) - rng.randint(1, len(batch))]
            return KafkaFrame(0, version, cid, payload, "close", (topic, count, True))
        expect = "ok"
        return KafkaFrame(0, version, cid, payload, expect, (topic, count, corrupt == "batch"))

    def _clean_frame(self) -> KafkaFrame:
        """A frame the broker must answer: well-formed, a corrupted batch (answered with
        its error), or ApiVersions of an unknown version (answered with the table)."""
        rng = self.rng
        kind = rng.random()
        if kind < 0.55:
            key, version, body = rng.choice(self.templates)
            cid, payload = self._encode(key, version, body)
            return KafkaFrame(key, version, cid, payload, "ok")
        if kind < 0.75:
            return self._audit_produce(None)
        if kind < 0.95:
            return self._audit_produce("batch")
        cid = self._next_cid()
        version = rng.choice((-1, 5, 9, 0x7FFF))
        header = struct.pack("!hhih", 18, version, cid, 3) + b"kfz"
        # A client asking for a newer ApiVersions sends the flexible header v2 (its tagged
        # fields) and a flexible body; the broker answers the v0-layout table.
        payload = header + (b"\x00" + b"\x00\x00\x00" if version >= 3 else b"")
        return KafkaFrame(18, version, cid, payload, "ok")

    def _opening_frame(self) -> KafkaFrame:
        """A well-formed request of any implemented API and version, to open a script."""
        key, version, body = self.rng.choice(self.templates)
        cid, payload = self._encode(key, version, body)
        return KafkaFrame(key, version, cid, payload, "ok")

    def _frame(self) -> KafkaFrame:
        rng = self.rng
        kind = rng.random()
        if kind < 0.30:
            key, version, body = rng.choice(self.templates)
            cid, payload = self._encode(key, version, body)
            return KafkaFrame(key, version, cid, payload, "ok")
        if kind < 0.40:
            return self._audit_produce(None)
        if kind < 0.50:
            return self._audit_produce("batch")
        if kind < 0.55:
            return self._audit_produce("truncate")
        if kind < 0.75:
            # A valid header, then the body mutated: flips, a cut, or garbage appended.
            key, version, body = rng.choice(self.templates)
            cid, payload = self._encode(key, version, body)
            data = bytearray(payload)
            header_end = 10 + 3  # key, version, correlation id, "kfz" with its length
            how = rng.random()
            if how < 0.5 and len(data) > header_end:
                for _ in range(rng.randint(1, 4)):
                    pos = rng.randrange(header_end, len(data))
                    data[pos] = rng.randrange(256)
            elif how < 0.8:
                del data[rng.randrange(header_end, len(data) + 1) :]
            else:
                data += rng.randbytes(rng.randint(1, 64))
            return KafkaFrame(key, version, cid, bytes(data), "any")
        if kind < 0.85:
            # Any key, any version, a random body.
            key = rng.choice((*range(0, 70), 0x00FF, 0x007F))
            version = rng.choice((-1, 0, 1, 3, 5, 8, 11, 12, 15, 0x7FFF))
            cid = self._next_cid()
            header = struct.pack("!hhih", key, version, cid, 3) + b"kfz"
            payload = header + rng.randbytes(rng.randint(0, 200))
            api = self.apis.get(key)
            supported = api is not None and api.min_version <= version <= api.max_version
            if key == 20 or (key == 0 and supported):
                # DeleteTopics and Produce with random bodies could touch the audit topics.
                key, version = 18, 99
                payload = struct.pack("!hhih", key, version, cid, 3) + b"kfz"
                supported = False
            # ApiVersions of an unknown version is answered with the table, or closed
            # when the random bytes do not parse as the header's tagged fields.
            expect = "any" if supported or key == 18 else "close"
            return KafkaFrame(key, version, cid, payload, expect)
        # Shorter than any request header (never first: the front-end closes on it).
        payload = b"\x00" + rng.randbytes(rng.randint(0, 8))
        return KafkaFrame(-1, -1, -1, payload, "close")

    def scripts(self, frames: int, per_connection: tuple[int, int]) -> Any:
        """Scripts whose complete frames add up to ``frames``."""
        rng = self.rng
        left = frames
        while left > 0:
            n = min(left, rng.randint(*per_connection))
            left -= n
            # Most connections are clean, so their answers can all be checked; the rest
            # mix in frames that may or must close the connection.
            make = self._clean_frame if rng.random() < 0.6 else self._frame
            body = [self._opening_frame(), *(make() for _ in range(n - 1))]
            # The sentinel: a plain ApiVersions v0 whose answer ends the exchange.
            with _CODEC_LOCK:
                sentinel = km.encode_request(18, 0, _SENTINEL_CID, "kfz", {})
            stream = b"".join(frame(f.payload) for f in body) + frame(sentinel)
            script = KafkaScript([*body, KafkaFrame(18, 0, _SENTINEL_CID, sentinel, "ok")], [])
            tail = rng.random()
            if tail < 0.05:
                stream += struct.pack("!I", self.max_frame_bytes + rng.randint(1, 1 << 30))
                script.oversized = True
            elif tail < 0.10:
                stream += struct.pack("!I", rng.randint(20, 1000)) + b"\x00\x12"
                script.incomplete_tail = True
            # Split the stream into random writes, some a single byte.
            writes: list[bytes] = []
            pos = 0
            while pos < len(stream):
                step = 1 if rng.random() < 0.05 else rng.randint(1, 4096)
                writes.append(stream[pos : pos + step])
                pos += step
            script.writes = writes
            yield script


def _split_frames(buf: bytearray) -> list[bytes]:
    """The complete frames at the head of ``buf``."""
    out = []
    while len(buf) >= 4:
        (size,) = struct.unpack_from("!I", buf)
        if len(buf) < 4 + size:
            break
        out.append(bytes(buf[4 : 4 + size]))
        del buf[: 4 + size]
    return out


def _kafka_exchange(
    host: str, port: int, script: KafkaScript, timeout: float
) -> tuple[list[bytes], str]:
    """Send the script; read responses until the sentinel's answer or a close.

    Returns the responses and how the exchange ended: "sentinel", "eof" (the
    broker closed after writing everything) or "reset". A broker that closes a
    connection with unread requests in its socket buffer makes the kernel send a
    reset, which may discard answers the client had not read yet, so after a
    reset only the answers that did arrive can be checked.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        buf = bytearray()
        responses: list[bytes] = []
        try:
            for chunk in script.writes:
                sock.sendall(chunk)
                # Read what has arrived meanwhile, so answers are taken before any reset.
                sock.setblocking(False)
                try:
                    while data := sock.recv(1 << 16):
                        buf += data
                except BlockingIOError:
                    pass
                finally:
                    sock.settimeout(timeout)
        except (BrokenPipeError, ConnectionResetError):
            return _split_frames(buf), "reset"
        deadline = time.monotonic() + timeout
        while True:
            while len(buf) >= 4:
                (size,) = struct.unpack_from("!I", buf)
                if len(buf) < 4 + size:
                    break
                responses.append(bytes(buf[4 : 4 + size]))
                del buf[: 4 + size]
                if struct.unpack_from("!i", responses[-1])[0] == _SENTINEL_CID:
                    return responses, "sentinel"
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(responses)} responses, no sentinel and no close")
            try:
                chunk = sock.recv(1 << 16)
            except ConnectionResetError:
                return responses, "reset"
            if not chunk:
                return responses, "eof"
            buf += chunk


def check_kafka_connection(
    script: KafkaScript, responses: list[bytes], ended: str
) -> tuple[list[str], dict[str, int], int]:
    """Problems with one connection's answers; records acknowledged per audit topic;
    rejected audit produces."""
    problems: list[str] = []
    acked: dict[str, int] = {}
    rejected = 0
    frames = script.frames
    uncertain = script.uncertain
    index = 0
    for answer in responses:
        if len(answer) < 4:
            problems.append(f"response of {len(answer)} bytes")
            break
        (cid,) = struct.unpack_from("!i", answer)
        # Answers come in request order; unanswered frames between are "any" or "close".
        while index < len(frames) and frames[index].correlation_id != cid:
            f = frames[index]
            if f.expect == "ok":
                problems.append(f"frame {index} (key {f.api_key} v{f.version}) was skipped")
            index += 1
        if index == len(frames):
            problems.append(f"answer with correlation id {cid} matches no request")
            break
        f = frames[index]
        index += 1
        if f.expect == "close":
            problems.append(f"frame {index - 1} (key {f.api_key} v{f.version}) was answered")
            continue
        api = km.APIS.get(f.api_key)
        unsupported = api is None or not api.min_version <= f.version <= api.max_version
        version = 0 if (f.api_key == 18 and unsupported) else f.version
        try:
            with _CODEC_LOCK:
                _, body = km.decode_response(f.api_key, version, answer)
        except Exception as e:  # any decode failure is a problem to report, not a crash
            problems.append(f"undecodable answer to key {f.api_key} v{f.version}: {e}")
            continue
        if f.api_key == 18 and unsupported and body.get("error_code") != 35:
            problems.append(f"ApiVersions v{f.version} answered {body.get('error_code')}")
        if f.produce is not None:
            topic, count, corrupted = f.produce
            [part] = [q for t in body["responses"] for q in t["partition_responses"]]
            code = part["error_code"]
            if corrupted:
                rejected += 1
                if code not in _CORRUPT_CODES:
                    problems.append(f"corrupted batch for {topic} answered error {code}")
            elif code == 0:
                acked[topic] = acked.get(topic, 0) + count
            else:
                problems.append(f"valid batch for {topic} answered error {code}")
    # A valid audit produce whose answer did not arrive may or may not be stored: when
    # the broker closes with the client's later requests unread, the kernel resets the
    # connection and answers already written can be lost on the way.
    answered = {struct.unpack_from("!i", a)[0] for a in responses if len(a) >= 4}
    for f in frames:
        if f.produce is not None and not f.produce[2] and f.correlation_id not in answered:
            topic = f.produce[0]
            uncertain[topic] = uncertain.get(topic, 0) + f.produce[1]
    answered_all = bool(responses) and struct.unpack_from("!i", responses[-1])[0] == _SENTINEL_CID
    clean = all(f.expect == "ok" for f in frames) and not script.oversized
    if clean and not answered_all:
        problems.append(f"a clean script's connection ended ({ended}) before the sentinel")
    if not answered_all:
        if ended == "sentinel":
            problems.append("the exchange ended without the sentinel's answer")
        must_close = any(f.expect == "close" for f in frames) or script.oversized
        maybe_close = any(f.expect == "any" for f in frames)
        if not must_close and not maybe_close:
            problems.append("closed with only well-formed requests sent")
    elif any(f.expect == "close" for f in frames):
        problems.append("the sentinel was answered after a request that must close")
    return problems, acked, rejected


def kafka_fuzz(
    host: str,
    port: int,
    *,
    seed: int,
    frames: int,
    max_frame_bytes: int,
    concurrency: int = 10,
    per_connection: tuple[int, int] = (5, 40),
    timeout: float = 60.0,
) -> KafkaFuzzReport:
    """Run the Kafka fuzzer against ``host:port``; the audit topics must exist already."""
    report = KafkaFuzzReport()
    fuzzer = KafkaFuzzer(seed, max_frame_bytes)
    started = time.perf_counter()

    def one(script: KafkaScript) -> tuple[KafkaScript, list[str], int, bool, dict[str, int], int]:
        try:
            responses, ended = _kafka_exchange(host, port, script, timeout)
        except (TimeoutError, OSError) as e:
            sent = [(f.api_key, f.version, f.expect) for f in script.frames]
            return script, [f"connection hung or failed: {e}; frames {sent}"], 0, False, {}, 0
        problems, acked, rejected = check_kafka_connection(script, responses, ended)
        return script, problems, len(responses), ended != "sentinel", acked, rejected

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for script, problems, count, closed, acked, rejected in pool.map(
            one, fuzzer.scripts(frames, per_connection)
        ):
            report.connections += 1
            report.frames += len(script.frames) - 1
            report.responses += count
            report.closed += closed
            report.oversized += script.oversized
            report.rejected_produces += rejected
            for topic, n in acked.items():
                report.acked[topic] = report.acked.get(topic, 0) + n
            for topic, n in script.uncertain.items():
                report.uncertain[topic] = report.uncertain.get(topic, 0) + n
            report.problems.extend(f"connection {report.connections}: {x}" for x in problems)
    report.seconds = time.perf_counter() - started
    return report


def kafka_call(host: str, port: int, api_key: int, version: int, body: dict[str, Any]) -> Any:
    """One blocking Kafka request on a fresh connection; the decoded response body."""
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(frame(km.encode_request(api_key, version, 1, "kfz-check", body)))
        buf = bytearray()
        while len(buf) < 4 or len(buf) < 4 + struct.unpack_from("!I", buf)[0]:
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise AssertionError(f"Kafka key {api_key} v{version}: connection closed")
            buf += chunk
        (size,) = struct.unpack_from("!I", buf)
        return km.decode_response(api_key, version, bytes(buf[4 : 4 + size]))[1]


def audit_problems(report: KafkaFuzzReport, ends: dict[str, int]) -> list[str]:
    """End offsets must cover every acknowledged record and nothing of a rejected batch:
    acknowledged <= end <= acknowledged + valid records whose answer was not seen."""
    out = []
    for topic in AUDIT_TOPICS:
        low = report.acked.get(topic, 0)
        high = low + report.uncertain.get(topic, 0)
        end = ends.get(topic, -1)
        if not low <= end <= high:
            out.append(f"{topic}: end offset {end}, expected {low}..{high}")
    return out


def prepare_audit_topics(host: str, port: int) -> None:
    """Create the audit topics (one partition each) before a Kafka fuzz run."""
    client = SyncClient(host, port)
    try:
        for topic in AUDIT_TOPICS:
            answer = client.call(p.CreateTopic(topic, 1))
            assert type(answer) is p.TopicInfo, answer
    finally:
        client.close()


def audit_end_offsets(host: str, port: int) -> dict[str, int]:
    """Each audit topic's end offset, through Kafka's ListOffsets (latest)."""
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {"name": t, "partitions": [{"partition_index": 0, "timestamp": -1}]}
            for t in AUDIT_TOPICS
        ],
    }
    answer = kafka_call(host, port, 2, 5, body)
    return {t["name"]: t["partitions"][0]["offset"] for t in answer["topics"]}


def kafka_round_trip(host: str, port: int) -> None:
    """A fresh Kafka connection negotiates, produces one record and fetches it back."""
    versions = kafka_call(
        host, port, 18, 3, {"client_software_name": "kfz", "client_software_version": "1"}
    )
    assert versions["error_code"] == 0, versions
    topic = "kfz-after"
    batch = encode_batch([Record(key=b"k", value=b"after the kafka storm")])
    produced = kafka_call(
        host,
        port,
        0,
        8,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    [part] = [q for t in produced["responses"] for q in t["partition_responses"]]
    assert part["error_code"] == 0, part
    fetched = kafka_call(
        host,
        port,
        1,
        11,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": 0,
                            "fetch_offset": part["base_offset"],
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    [got] = [q for t in fetched["responses"] for q in t["partitions"]]
    records = decode_records(bytes(got["records"] or b""))
    assert [(r.key, r.value) for r in records] == [(b"k", b"after the kafka storm")], records


def kafka_main(args: argparse.Namespace, frames: int) -> int:
    """``--kafka``: the Kafka fuzzer against a `twistd rustka` process, with its figures."""
    with tempfile.TemporaryDirectory(prefix="rustka-kfuzz-") as tmp:
        config = Path(tmp) / "fuzz.toml"
        # Short long-polls: a mutated Fetch may ask for any wait, and the sentinel waits
        # behind it.
        config.write_text(
            f"max_frame_bytes = {args.max_frame_bytes}\nfetch_max_wait_ms = {KAFKA_MAX_WAIT_MS}\n"
        )
        data_dir = Path(tmp) / "data"
        broker = start_broker(data_dir, "--config", str(config), "--flush", args.flush)
        try:
            host, port = "127.0.0.1", broker.port
            assert port is not None
            prepare_audit_topics(host, port)
            kafka_round_trip(host, port)
            rss_before = broker.rss_kib()
            report = kafka_fuzz(
                host,
                port,
                seed=args.seed,
                frames=frames,
                max_frame_bytes=args.max_frame_bytes,
                concurrency=args.connections,
            )
            rss_after = broker.rss_kib()
            ends = audit_end_offsets(host, port)
            try:
                kafka_round_trip(host, port)
                round_trip(host, port, "after-kafka-fuzz")
                fresh = "ok"
            except (AssertionError, OSError) as e:
                fresh = f"FAILED: {e}"
            alive = broker.proc.poll() is None
            broker.stop()
        finally:
            broker.kill()
    wrong = audit_problems(report, ends)
    print(f"seed:                     {args.seed}")
    print(f"Kafka frames sent:        {report.frames}")
    print(f"responses:                {report.responses}")
    print(f"connections:              {report.connections} ({args.connections} at a time)")
    print(f"connections closed by the broker: {report.closed} (oversized: {report.oversized})")
    print(f"audit records acknowledged: {sum(report.acked.values())}")
    print(f"corrupted produces rejected: {report.rejected_produces}")
    print(f"valid audit records unanswered (reset): {sum(report.uncertain.values())}")
    print(f"audit end offsets within bounds: {wrong or 'yes'}")
    print(f"frames/s:                 {report.frames / report.seconds:.0f}")
    print(f"broker RSS before:        {rss_before / 1024:.1f} MiB")
    print(f"broker RSS after:         {rss_after / 1024:.1f} MiB")
    print(f"broker alive:             {alive}; fresh Kafka and native clients: {fresh}")
    print(f"problems:                 {len(report.problems)}")
    for problem in report.problems[:20]:
        print(f"  {problem}")
    return 1 if report.problems or wrong or not alive or fresh != "ok" else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="20,000 frames")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--connections", type=int, default=20, help="concurrent connections")
    parser.add_argument("--max-frame-bytes", type=int, default=64 * 1024)
    parser.add_argument("--flush", choices=("always", "interval", "never"), default="always")
    parser.add_argument(
        "--kafka", action="store_true", help="Kafka framing instead of the native protocol"
    )
    args = parser.parse_args(argv)
    frames = 20_000 if args.quick else args.frames
    if args.kafka:
        return kafka_main(args, frames)
    with tempfile.TemporaryDirectory(prefix="rustka-fuzz-") as tmp:
        config = Path(tmp) / "fuzz.toml"
        config.write_text(f"max_frame_bytes = {args.max_frame_bytes}\n")
        data_dir = Path(tmp) / "data"
        broker = start_broker(data_dir, "--config", str(config), "--flush", args.flush)
        try:
            round_trip("127.0.0.1", broker.port, "before-fuzz")
            rss_before = broker.rss_kib()
            fds_before = len(os.listdir(f"/proc/{broker.pid}/fd"))
            step = max(frames // 10, 1)
            marks = [step]

            def progress(r: FuzzReport) -> None:
                if r.frames >= marks[0]:
                    marks[0] += step
                    rate = r.frames / max(time.perf_counter() - started, 1e-9)
                    print(
                        f"  {r.frames:>9} frames  {rate:>8.0f}/s  rss {broker.rss_kib()} KiB",
                        flush=True,
                    )

            started = time.perf_counter()
            report = fuzz(
                "127.0.0.1",
                broker.port,
                seed=args.seed,
                frames=frames,
                max_frame_bytes=args.max_frame_bytes,
                concurrency=args.connections,
                progress=progress,
            )
            rss_after = broker.rss_kib()
            fds_after = len(os.listdir(f"/proc/{broker.pid}/fd"))
            partitions = sum(1 for _ in data_dir.glob("*/[0-9]*"))
            try:
                # an existing topic: after a million frames the fuzz's valid CreateTopic
                # requests may have used up max_partitions, and a new topic is then
                # (correctly) refused
                round_trip("127.0.0.1", broker.port, "before-fuzz")
                fresh_client = "ok"
            except (AssertionError, OSError) as e:
                fresh_client = f"FAILED: {e}"
            strays = unexpected_topic_dirs(data_dir, {*report.creatable, "before-fuzz"})
            alive = broker.proc.poll() is None
            broker.stop()
        finally:
            broker.kill()
    print(f"seed:                    {args.seed}")
    print(f"frames sent:             {report.frames}")
    print(f"responses:               {report.responses}")
    print(f"connections:             {report.connections} ({args.connections} at a time)")
    print(f"connections dropped:     {report.dropped} (oversized frames: {report.oversized})")
    print(f"incomplete final frames: {report.incomplete}")
    print(f"first frames with op 0:  {report.first_op_0} (each answered with an Error)")
    print(f"frames/s:                {report.frames / report.seconds:.0f}")
    print(f"broker RSS before:       {rss_before / 1024:.1f} MiB")
    print(f"broker RSS after:        {rss_after / 1024:.1f} MiB")
    print(f"broker open fds:         {fds_before} before, {fds_after} after")
    print(f"partition dirs on disk:  {partitions}")
    print(f"fresh client round trip: {fresh_client}")
    print(f"topics a request could create: {len(report.creatable)}; stray dirs: {strays}")
    print(f"problems:                {len(report.problems)}")
    for problem in report.problems[:20]:
        print(f"  {problem}")
    return 1 if report.problems or strays or not alive or fresh_client != "ok" else 0


if __name__ == "__main__":
    raise SystemExit(main())
