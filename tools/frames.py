"""Seeded hostile traffic: random and mutated frames of every op, as connection scripts.

The same seed always yields the same bytes, so a failure found by the
million-frame script can be replayed by the test. A `Script` is what one
connection sends: a list of separate writes (a frame may be dribbled one byte
per write, or several frames glued into one write), the complete frames the
broker must answer one by one, and how the connection ends - normally, with a
frame whose declared length exceeds the broker's maximum (the broker answers
at most one Error and hangs up), or with a frame cut short (never answered).

A connection's first frame is often a Kafka lookalike (op 0, then what reads as
a Kafka request header that breaks one rule of docs/protocol.md, "Which first
frames go to Kafka"), so the shared port's switch is tried with the frames
closest to Kafka's that are still native. A first frame that is a Kafka request
by that rule is drawn again: such a connection is Kafka's, not a native one.
"""

from __future__ import annotations

import random
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from rustka.errors import InvalidRequest
from rustka.kafka import messages as km
from rustka.native import codec as p
from rustka.ops.protocol_switch import is_kafka_request
from rustka.record.batch import Record, encode_batch

GOOD_TOPICS = ("fz-0", "fz-1", "fz.2", "fz_3")
BAD_TOPICS = (
    "",
    ".",
    "..",
    "../x",
    "../../etc",
    "/etc",
    "/tmp/fz",
    "a/b",
    "a\\b",
    "x" * 250,
    "__offsets",
    "__fz",
    "con\x00trol",
    "ü",
    "sp ace",
    "new\nline",
    ".clean-shutdown",
)
GROUPS = ("g", "group-1", "", "g\x00", "x" * 256, "ü-grp")
INTERESTING_U32 = (0, 1, 2, 3, 0x7F, 0x80, 0xFF, 0xFFFF, 0x10000, 0x7FFF_FFFF, 0xFFFF_FFFF)
INTERESTING_U64 = (0, 1, 0x7FFF_FFFF_FFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF)

# Independent of rustka.names on purpose: the fuzz test must not trust the
# validator it is checking.
TOPIC_RE = re.compile(r"(?!\.{1,2}$)(?!__)[A-Za-z0-9._-]{1,249}")

_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
#: How often a connection opens with a Kafka lookalike.
KAFKA_LOOKALIKE_SHARE = 0.25


def frame(payload: bytes) -> bytes:
    return _U32.pack(len(payload)) + payload


def _s(text: str) -> bytes:
    raw = text.encode("utf-8")
    return _U32.pack(len(raw)) + raw


def _b(raw: bytes) -> bytes:
    return _U32.pack(len(raw)) + raw


@dataclass
class Script:
    """One connection's worth of traffic and what the broker owes it."""

    writes: list[bytes] = field(default_factory=list)
    frames: list[bytes] = field(default_factory=list)
    oversized: bool = False
    incomplete_tail: bool = False

    @property
    def expected_responses(self) -> int:
        return len(self.frames)


class FrameFuzzer:
    """Generates `Script`s from one seed; see the module docstring."""

    def __init__(self, seed: int, max_frame_bytes: int = 64 * 1024) -> None:
        self.rng = random.Random(seed)
        self.max_frame_bytes = max_frame_bytes
        self._valid: list[Callable[[], bytes]] = [
            self._produce,
            self._fetch,
            self._commit,
            self._offset_fetch,
            self._hello,
            self._produce_batch,
            self._fetch_batch,
            self._metadata,
            self._create_topic,
            self._alter_topic,
            self._list_groups,
            self._describe_group,
        ]
        # Every Kafka request the front-end serves, encoded once here: the Kafka codec
        # compiles on first use and must not do so beside a broker's reactor thread.
        self._kafka_requests = [
            (key, km.encode_request(key, version, 1, client_id, {}))
            for key, api in km.APIS.items()
            for version in range(api.min_version, api.max_version + 1)
            for client_id in (None, "", "fz-client")
        ]
        # Keys 0-127 are Kafka's (served or not: docs/protocol.md, rule 2), so only above.
        self._unknown_keys = list(range(128, 256))

    # -- well-formed requests of every op ------------------------------------------

    def _topic(self) -> str:
        rng = self.rng
        return rng.choice(GOOD_TOPICS) if rng.random() < 0.8 else rng.choice(BAD_TOPICS)

    def _group(self) -> str:
        return self.rng.choice(GROUPS)

    def _small(self) -> int:
        rng = self.rng
        return rng.randrange(4) if rng.random() < 0.8 else rng.choice(INTERESTING_U32)

    def _offset(self) -> int:
        rng = self.rng
        return rng.randrange(50) if rng.random() < 0.8 else rng.choice(INTERESTING_U64)

    def _bytes(self, limit: int = 200) -> bytes:
        return self.rng.randbytes(self.rng.randrange(limit))

    def _batches(self) -> bytes:
        rng = self.rng
        out = b""
        for _ in range(rng.randint(1, 3)):
            records = [
                Record(key=self._bytes(20) if rng.random() < 0.9 else None, value=self._bytes())
                for _ in range(rng.randint(1, 4))
            ]
            out += encode_batch(
                records,
                base_offset=rng.choice((0, 0, 7, 2**40)),
                timestamp=rng.choice((0, 1_700_000_000_000, 2**62)),
            )
        return out

    # Well-formed requests are built by the codec (docs/protocol.md); only the
    # hostile variants below take frames apart by hand. Each argument is drawn in
    # wire order, so a seed yields the same bytes as before.

    def _produce(self) -> bytes:
        return p.encode_request(p.Produce(self._topic(), self._bytes(30), self._bytes()))

    def _fetch(self) -> bytes:
        return p.encode_request(p.Fetch(self._topic(), self._small(), self._offset()))

    def _commit(self) -> bytes:
        # The partition and offset were drawn before the names when this packed by hand.
        partition, offset = self._small(), self._offset()
        return p.encode_request(p.Commit(self._group(), self._topic(), partition, offset))

    def _offset_fetch(self) -> bytes:
        return p.encode_request(p.OffsetFetch(self._group(), self._topic(), self._small()))

    def _hello(self) -> bytes:
        return p.encode_request(p.Hello(self.rng.choice(INTERESTING_U32), "fuzz"))

    def _produce_batch(self) -> bytes:
        topic, partition = self._topic(), self._small()
        return p.encode_request(p.ProduceBatch(topic, partition, self._batches()))

    def _fetch_batch(self) -> bytes:
        rng = self.rng
        partition, offset = self._small(), self._offset()
        max_bytes = rng.choice((0, 1, 100, 1 << 20, 0xFFFF_FFFF))
        max_wait_ms = rng.choice((0, 0, 0, 1, 5))
        topic = self._topic()
        return p.encode_request(p.FetchBatch(topic, partition, offset, max_bytes, max_wait_ms))

    def _metadata(self) -> bytes:
        names = [self._topic() for _ in range(self.rng.randrange(4))]
        return p.encode_request(p.Metadata(tuple(names)))

    def _create_topic(self) -> bytes:
        count = self.rng.randint(1, 4) if self.rng.random() < 0.9 else self._small()
        return p.encode_request(p.CreateTopic(self._topic(), count))

    def _alter_topic(self) -> bytes:
        count = self.rng.randint(1, 6) if self.rng.random() < 0.9 else self._small()
        return p.encode_request(p.AlterTopic(self._topic(), count))

    def _list_groups(self) -> bytes:
        return p.encode_request(p.ListGroups())

    def _describe_group(self) -> bytes:
        return p.encode_request(p.DescribeGroup(self._group()))

    def valid(self) -> bytes:
        """A well-formed request of a random op (its names and numbers may still be bad)."""
        return self.rng.choice(self._valid)()

    # -- hostile variants ----------------------------------------------------------

    def mutated(self) -> bytes:
        """A well-formed request with corrupted bytes or fields, keeping its frame valid."""
        rng = self.rng
        data = bytearray(self.valid())
        for _ in range(rng.randint(1, 4)):
            how = rng.randrange(6)
            if how == 0 or len(data) < 6:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif how == 1:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            elif how == 2:
                pos = rng.randrange(1, len(data) - 3)
                data[pos : pos + 4] = _U32.pack(rng.choice(INTERESTING_U32))
            elif how == 3:
                del data[rng.randrange(1, len(data)) :]
            elif how == 4:
                pos = rng.randrange(len(data))
                data[pos:pos] = rng.randbytes(rng.randint(1, 16))
            else:
                data[0] = rng.choice((0, 13, 14, 15, 99, 255, *range(1, 13)))
        return bytes(data)

    def corrupt_batch(self) -> bytes:
        """A ProduceBatch to a good topic whose batch bytes (not framing) are damaged."""
        rng = self.rng
        batches = bytearray(self._batches())
        how = rng.randrange(4)
        if how == 0:
            batches[rng.randrange(len(batches))] ^= 1 << rng.randrange(8)
        elif how == 1:
            pos = rng.choice((8, 12, 16, 17, 21, 23, 57))
            batches[pos : pos + 4] = _U32.pack(rng.choice(INTERESTING_U32))
        elif how == 2:
            del batches[rng.randrange(len(batches)) :]
        else:
            batches += rng.randbytes(rng.randint(1, 70))
        topic = rng.choice(GOOD_TOPICS)
        return p.encode_request(p.ProduceBatch(topic, rng.randrange(3), bytes(batches)))

    def absurd(self) -> bytes:
        """Extension (and seed) ops whose counts and lengths promise far more than the frame."""
        rng = self.rng
        huge = rng.choice((0x7FFF_FFFF, 0xFFFF_FFFF, 0x1000_0000, self.max_frame_bytes))
        op = rng.choice(range(1, 13))
        body = _U32.pack(huge) + rng.randbytes(rng.randrange(64))
        if op == 8:
            body = _U32.pack(huge) + b"".join(_s("fz-0") for _ in range(rng.randrange(3)))
        elif op == 6 and rng.random() < 0.5:
            body = _s("fz-0") + _U32.pack(0) + _U32.pack(huge) + rng.randbytes(61)
        elif op == 5:
            body = _U32.pack(2) + _U32.pack(huge)
        return bytes([op]) + body

    def kafka_lookalike(self) -> bytes:
        """A Kafka request broken in one way: a malformed native frame (op 0) all the same.

        Each kind breaks a rule of docs/protocol.md's "Which first frames go to
        Kafka" by construction: cut short, bytes after the body, a version or a
        key no Kafka client sends, a client id length that does not fit.
        """
        rng = self.rng
        key, template = rng.choice(self._kafka_requests)
        request = bytearray(template)
        struct.pack_into(">i", request, 4, rng.randrange(-(1 << 31), 1 << 31))
        how = rng.randrange(6)
        if how == 0:
            del request[rng.randrange(1, len(request)) :]
        elif how == 1:
            request += rng.randbytes(rng.randint(1, 16))
        elif how == 2:
            # Versions 0-31 are Kafka's, served or not (docs/protocol.md, rule 3), and an
            # ApiVersions above its range is served (with the table): only negative ones,
            # or far above for the other APIs.
            wrong = [-1, -0x8000]
            if key != km.ApiKey.API_VERSIONS:
                wrong += [32, 0x7FFF]
            _I16.pack_into(request, 2, rng.choice(wrong))
        elif how == 3:
            _I16.pack_into(request, 0, rng.choice(self._unknown_keys))
        elif how == 4:
            _I16.pack_into(request, 8, len(request) - 10 + rng.randint(1, 300))
        else:
            _I16.pack_into(request, 8, rng.randint(-0x8000, -2))
        return bytes(request)

    def first_payload(self) -> bytes:
        """A connection's first frame: often a Kafka lookalike, never a Kafka request."""
        while True:
            if self.rng.random() < KAFKA_LOOKALIKE_SHARE:
                payload = self.kafka_lookalike()
            else:
                payload = self.payload()
            if not is_kafka_request(payload):
                return payload

    def random_bytes(self) -> bytes:
        """Pure noise; now and then a big one close to the frame limit."""
        rng = self.rng
        if rng.random() < 0.02:
            return rng.randbytes(rng.randint(self.max_frame_bytes // 2, self.max_frame_bytes))
        return rng.randbytes(rng.randrange(80))

    def payload(self) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.25:
            return self.valid()
        if roll < 0.6:
            return self.mutated()
        if roll < 0.7:
            return self.corrupt_batch()
        if roll < 0.8:
            return self.absurd()
        if roll < 0.98:
            return self.random_bytes()
        return b""

    # -- connections -----------------------------------------------------------------

    def script(self, frame_count: int) -> Script:
        """One connection: ``frame_count`` complete frames, split in hostile ways, a bad end."""
        rng = self.rng
        script = Script()
        glued = b""
        for index in range(frame_count):
            data = frame(self.first_payload() if index == 0 else self.payload())
            script.frames.append(data[4:])
            how = rng.random()
            if how < 0.6:
                glued += data
                continue
            if glued:
                script.writes.append(glued)
                glued = b""
            if how < 0.7 and len(data) <= 512:
                script.writes.extend(data[i : i + 1] for i in range(len(data)))
            else:
                cut = sorted(rng.sample(range(1, len(data)), min(3, len(data) - 1)))
                bounds = zip([0, *cut], [*cut, len(data)], strict=True)
                script.writes.extend(data[a:b] for a, b in bounds)
        if glued:
            script.writes.append(glued)
        end = rng.random()
        if end < 0.05:
            script.oversized = True
            length = rng.choice((self.max_frame_bytes + 1, 0x7FFF_FFFF, 0xFFFF_FFFF))
            script.writes.append(_U32.pack(length) + rng.randbytes(rng.randrange(100)))
        elif end < 0.1:
            script.incomplete_tail = True
            length = rng.randint(1, self.max_frame_bytes)
            script.writes.append(_U32.pack(length) + rng.randbytes(rng.randrange(min(length, 100))))
        return script

    def scripts(self, total_frames: int, per_connection: tuple[int, int]) -> Iterator[Script]:
        """Scripts until ``total_frames`` complete frames have been planned."""
        planned = 0
        while planned < total_frames:
            count = min(self.rng.randint(*per_connection), total_frames - planned)
            planned += count
            yield self.script(count)


def creatable_topic(payload: bytes) -> str | None:
    """The topic a frame could legitimately create, judged without rustka.names.

    Only Produce, ProduceBatch and CreateTopic create topics, and only under a
    name that matches the protocol's naming rule.
    """
    try:
        request = p.decode_request(payload)
    except InvalidRequest:
        return None
    if isinstance(request, p.Produce | p.ProduceBatch | p.CreateTopic) and TOPIC_RE.fullmatch(
        request.topic
    ):
        return request.topic
    return None
