"""`rustka mirror`: copy topics and group positions into any Kafka-protocol cluster.

The road past one machine (docs/scaling.md). Both ends are spoken to over the
Kafka protocol with rustka's own client (`rustka.kafka.client`): stored batches
are fetched from rustka and produced to the target byte for byte, so keys,
headers, timestamps and compression arrive as they were written, in order, one
batch per partition per request as Kafka requires. Only the producer fields of
idempotent batches are cleared (the target has never heard of those producer
ids and would refuse their sequences), which means recomputing that batch's CRC.

Resuming: the state file records, per partition, the next source offset and the
target offset it maps to. On start the target's end offset is compared with the
state, so batches acknowledged just before a crash (produced but not yet
recorded) are skipped rather than copied twice. Offsets map 1:1 inside a run of
contiguous source offsets; the state keeps the map's breakpoints, and committed
group offsets are translated through it before they are committed on the target.
"""

from __future__ import annotations

import json
import os
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import crc32c
from twisted.internet import defer

from rustka.errors import RustkaError
from rustka.kafka.client import KafkaClientProtocol, KafkaError, SaslLogin, connect_kafka
from rustka.names import OFFSETS_TOPIC
from rustka.ops.progress import Progress
from rustka.record.header import (
    ATTRIBUTES_AT,
    CRC_AT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    PRODUCER_AT,
    PRODUCER_FIELDS,
)

_PRODUCE, _FETCH, _LIST_OFFSETS, _METADATA = 0, 1, 2, 3
_OFFSET_COMMIT, _OFFSET_FETCH, _LIST_GROUPS, _CREATE_TOPICS = 8, 9, 16, 19
_DESCRIBE_CONFIGS = 32
_TOPIC_RESOURCE = 2
_TOPIC_ALREADY_EXISTS = 36
# DescribeConfigs' config_source of a topic's own config (Kafka's DYNAMIC_TOPIC_CONFIG).
_TOPIC_OVERRIDE = 1
_OFFSET_OUT_OF_RANGE = 1
_FETCH_BYTES = 4 * 1024 * 1024
_SAVE_EVERY_S = 1.0


@dataclass
class PartitionState:
    """Where one partition's copy stands, and how its offsets map."""

    next_source: int
    next_target: int
    # (first source offset, target offset - source offset) from that offset on.
    breakpoints: list[tuple[int, int]] = field(default_factory=list)
    # Records the target holds beyond ``next_target`` when a run starts: copied just
    # before a crash, acknowledged, but not yet in the state file. Not persisted.
    ahead: int = 0

    def to_target(self, source_offset: int) -> int:
        delta = None
        for start, d in self.breakpoints:
            if start <= source_offset:
                delta = d
        if delta is None:
            return self.next_target if source_offset >= self.next_source else 0
        return max(0, source_offset + delta)

    def record(self, source_first: int, target_first: int) -> None:
        delta = target_first - source_first
        if not self.breakpoints or self.breakpoints[-1][1] != delta:
            self.breakpoints.append((source_first, delta))


@dataclass
class MirrorStats:
    records: int = 0
    bytes: int = 0
    batches: int = 0
    groups: int = 0
    skipped_after_crash: int = 0


class MirrorState:
    """The state file: written atomically, so a crash leaves the old or the new one."""

    def __init__(self, path: Path, target: str) -> None:
        self.path = path
        self.target = target
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self._saved_at = 0.0

    def load(self) -> None:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            raise RustkaError(f"cannot read mirror state {self.path}: {e}") from e
        if raw.get("target") != self.target:
            raise RustkaError(
                f"{self.path} records a mirror into {raw.get('target')!r}, not {self.target!r}; "
                "use another --state file"
            )
        for key, entry in raw.get("partitions", {}).items():
            topic, _, part = key.rpartition("/")
            self.partitions[(topic, int(part))] = PartitionState(
                entry["next_source"],
                entry["next_target"],
                [tuple(b) for b in entry.get("breakpoints", [])],  # type: ignore[misc]
            )

    def save(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._saved_at < _SAVE_EVERY_S:
            return
        self._saved_at = now
        data = {
            "target": self.target,
            "partitions": {
                f"{t}/{p}": {
                    "next_source": s.next_source,
                    "next_target": s.next_target,
                    "breakpoints": s.breakpoints,
                }
                for (t, p), s in sorted(self.partitions.items())
            },
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


def as_client_batch(batch: bytearray) -> None:
    """Make a stored batch one a Kafka broker takes from a client, in place.

    Kafka's log validator refuses a client batch whose baseOffset is not 0 (the
    broker assigns offsets), and the source's producer id means nothing to the
    target, so the id, epoch and sequence are cleared and the CRC fixed. The base
    offset lies outside the CRC.
    """
    struct.pack_into("!q", batch, 0, 0)
    pid, _epoch, _seq = PRODUCER_FIELDS.unpack_from(batch, PRODUCER_AT)
    if pid == -1:
        return
    PRODUCER_FIELDS.pack_into(batch, PRODUCER_AT, -1, -1, -1)
    struct.pack_into("!I", batch, CRC_AT, crc32c.crc32c(memoryview(batch)[ATTRIBUTES_AT:]))


def split_batches(records: Any) -> list[tuple[int, int, bytearray]]:
    """(base offset, last offset, bytes) of each whole batch in a fetched record set."""
    view = memoryview(records) if not isinstance(records, list) else memoryview(b"".join(records))
    out = []
    pos = 0
    while len(view) - pos >= HEADER_SIZE:
        base, length = struct.unpack_from("!qi", view, pos)
        size = length + LOG_OVERHEAD
        if pos + size > len(view):
            break  # a partial batch at the end of a fetch: fetched again next time
        (last_delta,) = struct.unpack_from("!i", view, pos + 23)
        out.append((base, base + last_delta, bytearray(view[pos : pos + size])))
        pos += size
    return out


class Mirror:
    """One mirror run from a rustka broker into a target cluster."""

    def __init__(
        self,
        reactor: Any,
        source: str,
        target: str,
        topics: list[str],
        state_path: Path,
        *,
        follow: bool = False,
        out: TextIO | None = None,
        source_login: SaslLogin | None = None,
        target_login: SaslLogin | None = None,
    ) -> None:
        self.reactor = reactor
        self.source_login = source_login
        self.target_login = target_login
        self.source_address = source
        self.target_address = target
        self.topics = topics
        self.state = MirrorState(state_path, target)
        self.follow = follow
        self.stats = MirrorStats()
        self.out = out
        self.stopping = False
        self.src: KafkaClientProtocol | None = None
        self.dst: KafkaClientProtocol | None = None
        self.partition_counts: dict[str, int] = {}
        self.ends: dict[tuple[str, int], int] = {}

    async def run(self, progress: Progress | None = None) -> MirrorStats:
        self.state.load()
        self.src = await connect_kafka(self.reactor, self.source_address, sasl=self.source_login)
        self.dst = await connect_kafka(self.reactor, self.target_address, sasl=self.target_login)
        try:
            await self._match_topics()
            await self._start_positions()
            while True:
                copied = await self._copy_round(progress)
                caught_up = all(
                    self.state.partitions[k].next_source >= end for k, end in self.ends.items()
                )
                if caught_up:
                    await self._copy_groups()
                    self.state.save(force=True)
                    if not self.follow or self.stopping:
                        break
                if self.stopping:
                    break
                if not copied and not self.follow and caught_up:
                    break
            return self.stats
        finally:
            self.state.save(force=True)
            await self.src.close()
            await self.dst.close()

    # -- topics ---------------------------------------------------------------------

    async def _match_topics(self) -> None:
        assert self.src is not None and self.dst is not None
        wanted = self.topics or None
        meta = await self.src.request(
            _METADATA, {"topics": _topic_list(wanted), "allow_auto_topic_creation": False}
        )
        for t in meta["topics"]:
            if t["error_code"]:
                raise KafkaError(t["error_code"], f"source topic {t['name']}")
            if t["name"] == OFFSETS_TOPIC or t.get("is_internal"):
                continue
            self.partition_counts[t["name"]] = len(t["partitions"])
        if not self.partition_counts:
            raise RustkaError("nothing to mirror: the source has no such topics")
        names = sorted(self.partition_counts)
        theirs = await self.dst.request(
            _METADATA, {"topics": _topic_list(names), "allow_auto_topic_creation": False}
        )
        existing = {
            t["name"]: len(t["partitions"]) for t in theirs["topics"] if t["error_code"] == 0
        }
        create = [n for n in names if n not in existing]
        for name in names:
            if name in existing and existing[name] != self.partition_counts[name]:
                raise RustkaError(
                    f"topic {name} has {existing[name]} partitions on the target and "
                    f"{self.partition_counts[name]} here: keys would land elsewhere"
                )
        if create:
            overrides = await self._topic_overrides(create)
            answer = await self.dst.request(
                _CREATE_TOPICS,
                {
                    "topics": [
                        {
                            "name": n,
                            "num_partitions": self.partition_counts[n],
                            "replication_factor": -1,
                            "assignments": [],
                            "configs": [
                                {"name": key, "value": value}
                                for key, value in sorted(overrides[n].items())
                            ],
                        }
                        for n in create
                    ],
                    "timeout_ms": 30000,
                },
            )
            for t in answer["topics"]:
                if t["error_code"] not in (0, _TOPIC_ALREADY_EXISTS):
                    why = t.get("error_message") or ""
                    raise KafkaError(
                        t["error_code"],
                        f"creating {t['name']} on the target with its configs "
                        f"{overrides.get(t['name'], {})}{': ' + why if why else ''}",
                    )
            await self._wait_for_target_topics(create)

    async def _topic_overrides(self, names: list[str]) -> dict[str, dict[str, str]]:
        """Each source topic's own configs (DescribeConfigs, those whose source is the topic),
        which the target's copy is created with: a compacted topic must stay compacted
        there, and its retention must not become the target's default. The broker-wide
        settings a topic inherits are not copied; the target has its own."""
        assert self.src is not None
        answer = await self.src.request(
            _DESCRIBE_CONFIGS,
            {
                "resources": [
                    {
                        "resource_type": _TOPIC_RESOURCE,
                        "resource_name": n,
                        "configuration_keys": None,
                    }
                    for n in names
                ],
                "include_synonyms": False,
            },
            1,
        )
        overrides: dict[str, dict[str, str]] = {n: {} for n in names}
        for result in answer["results"]:
            name = result["resource_name"]
            if result["error_code"]:
                raise KafkaError(result["error_code"], f"describing the configs of {name}")
            overrides[name] = {
                c["name"]: c["value"]
                for c in result["configs"]
                if c["config_source"] == _TOPIC_OVERRIDE and c["value"] is not None
            }
        return overrides

    async def _wait_for_target_topics(self, names: list[str]) -> None:
        assert self.dst is not None
        for _ in range(100):
            meta = await self.dst.request(
                _METADATA, {"topics": _topic_list(names), "allow_auto_topic_creation": False}
            )
            if all(t["error_code"] == 0 and t["partitions"] for t in meta["topics"]):
                return
            await _sleep(self.reactor, 0.1)
        raise RustkaError(f"the target did not make topics {names} available")

    # -- positions ------------------------------------------------------------------

    async def _list(
        self, conn: KafkaClientProtocol, keys: list[tuple[str, int]], timestamp: int
    ) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[int]] = {}
        for t, p in keys:
            by_topic.setdefault(t, []).append(p)
        answer = await conn.request(
            _LIST_OFFSETS,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": t,
                        "partitions": [{"partition_index": p, "timestamp": timestamp} for p in ps],
                    }
                    for t, ps in by_topic.items()
                ],
            },
        )
        out = {}
        for t in answer["topics"]:
            for p in t["partitions"]:
                if p["error_code"]:
                    raise KafkaError(
                        p["error_code"], f"ListOffsets {t['name']}/{p['partition_index']}"
                    )
                out[(t["name"], p["partition_index"])] = p["offset"]
        return out

    async def _start_positions(self) -> None:
        assert self.src is not None and self.dst is not None
        keys = [(t, p) for t, n in sorted(self.partition_counts.items()) for p in range(n)]
        starts = await self._list(self.src, keys, -2)
        self.ends = await self._list(self.src, keys, -1)
        fresh = [k for k in keys if k not in self.state.partitions]
        if fresh:
            target_ends = await self._list(self.dst, fresh, -1)
            for key in fresh:
                self.state.partitions[key] = PartitionState(starts[key], target_ends[key])
        for key in keys:
            state = self.state.partitions[key]
            state.ahead = await self._records_from(key, state.next_target)

    async def _records_from(self, key: tuple[str, int], offset: int) -> int:
        """How many records the target holds from ``offset`` on.

        Read with Fetch rather than trusted from ListOffsets: that is what the
        target really stores (some Kafka-compatible brokers report a high
        watermark that lags their last batch). Records found here were copied
        just before a crash and acknowledged, but never recorded in the state.
        """
        assert self.dst is not None
        total = 0
        position = offset
        while True:
            answer = await self.dst.request(
                _FETCH,
                {
                    "replica_id": -1,
                    # A short wait rather than none: some brokers answer a zero-wait
                    # fetch with nothing at all, even when they hold data there.
                    "max_wait_ms": 100,
                    "min_bytes": 1,
                    "max_bytes": _FETCH_BYTES,
                    "isolation_level": 0,
                    "topics": [
                        {
                            "topic": key[0],
                            "partitions": [
                                {
                                    "partition": key[1],
                                    "fetch_offset": position,
                                    "partition_max_bytes": _FETCH_BYTES,
                                }
                            ],
                        }
                    ],
                },
            )
            parts = [p for t in answer["responses"] for p in t["partitions"]]
            if not parts:
                return total  # some brokers leave out a partition with nothing to send
            part = parts[0]
            if part["error_code"] == _OFFSET_OUT_OF_RANGE and position == offset:
                raise RustkaError(
                    f"{key[0]}/{key[1]}: the target has no offset {offset}, but the state "
                    f"says {offset} records were copied there: it lost data"
                )
            if part["error_code"]:
                raise KafkaError(part["error_code"], f"reading {key[0]}/{key[1]} on the target")
            batches = [b for b in split_batches(part["records"] or b"") if b[1] >= position]
            if not batches:
                return total
            for base, last, _data in batches:
                total += last - max(base, position) + 1
                position = last + 1

    # -- copying ---------------------------------------------------------------------

    async def _copy_round(self, progress: Progress | None) -> bool:
        assert self.src is not None and self.dst is not None
        todo = [
            (k, s)
            for k, s in sorted(self.state.partitions.items())
            if s.next_source < self.ends.get(k, 0) or self.follow
        ]
        if not todo:
            return False
        answer = await self.src.request(
            _FETCH,
            {
                "replica_id": -1,
                "max_wait_ms": 500 if self.follow else 0,
                "min_bytes": 1,
                "max_bytes": _FETCH_BYTES,
                "isolation_level": 0,
                "topics": [
                    {
                        "topic": t,
                        "partitions": [
                            {
                                "partition": p,
                                "fetch_offset": s.next_source,
                                "partition_max_bytes": _FETCH_BYTES,
                            }
                        ],
                    }
                    for (t, p), s in todo
                ],
            },
        )
        produce: list[tuple[tuple[str, int], list[tuple[int, int, bytearray]]]] = []
        for t in answer["responses"]:
            for p in t["partitions"]:
                key = (t["topic"], p["partition_index"])
                if p["error_code"]:
                    raise KafkaError(p["error_code"], f"fetching {key[0]}/{key[1]}")
                self.ends[key] = p["high_watermark"]
                state = self.state.partitions[key]
                batches = [
                    b for b in split_batches(p["records"] or b"") if b[1] >= state.next_source
                ]
                if batches:
                    produce.append((key, batches))
        if not produce:
            return False
        # One batch per partition per Produce request (Kafka's rule for RecordBatch v2).
        depth = max(len(b) for _, b in produce)
        for i in range(depth):
            round_ = [(key, batches[i]) for key, batches in produce if i < len(batches)]
            await self._produce(round_)
            if progress is not None:
                progress.total = self.total()
                progress.label = f"mirror {self.stats.bytes / 1e6:,.1f} MB"
                progress.update(self.stats.records, self._done())
        self.state.save()
        return True

    async def _produce(
        self, batches: list[tuple[tuple[str, int], tuple[int, int, bytearray]]]
    ) -> None:
        assert self.dst is not None
        send = []
        for key, (base, last, data) in batches:
            state = self.state.partitions[key]
            count = last - base + 1
            if state.ahead >= count:
                # Acknowledged by the target before the last crash, not yet recorded.
                state.ahead -= count
                state.record(base, state.next_target)
                state.next_source = last + 1
                state.next_target += count
                self.stats.skipped_after_crash += count
                continue
            as_client_batch(data)
            send.append((key, base, last, data))
        if not send:
            return
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (t, p), _b, _l, data in send:
            by_topic.setdefault(t, []).append({"index": p, "records": bytes(data)})
        answer = await self.dst.request(
            _PRODUCE,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 30000,
                "topic_data": [{"name": t, "partition_data": ps} for t, ps in by_topic.items()],
            },
        )
        results = {
            (t["name"], p["index"]): p
            for t in answer["responses"]
            for p in t["partition_responses"]
        }
        for key, base, last, data in send:
            result = results.get(key)
            if result is None or result["error_code"]:
                code = -1 if result is None else result["error_code"]
                raise KafkaError(code, f"producing to {key[0]}/{key[1]} on the target")
            state = self.state.partitions[key]
            state.record(base, result["base_offset"])
            state.next_source = last + 1
            state.next_target = result["base_offset"] + (last - base + 1)
            self.stats.records += last - base + 1
            self.stats.bytes += len(data)
            self.stats.batches += 1

    def _done(self) -> int:
        return sum(s.next_source for s in self.state.partitions.values())

    def total(self) -> int:
        return sum(self.ends.values())

    # -- groups ----------------------------------------------------------------------

    async def _copy_groups(self) -> None:
        assert self.src is not None and self.dst is not None
        if _LIST_GROUPS not in self.src.versions or _OFFSET_FETCH not in self.src.versions:
            return
        listed = await self.src.request(_LIST_GROUPS, {})
        for group in listed.get("groups", []):
            gid = group["group_id"]
            # One group per request: OffsetFetch v8+ batches groups in another shape.
            version = min(self.src.version_for(_OFFSET_FETCH), 7)
            fetched = await self.src.request(
                _OFFSET_FETCH, {"group_id": gid, "topics": None}, version
            )
            commits: dict[str, list[dict[str, Any]]] = {}
            for t in fetched.get("topics", []):
                for p in t["partitions"]:
                    key = (t["name"], p["partition_index"])
                    state = self.state.partitions.get(key)
                    if state is None or p["error_code"] or p["committed_offset"] < 0:
                        continue
                    if p["committed_offset"] > state.next_source:
                        continue  # not copied yet: committed on a later pass
                    commits.setdefault(t["name"], []).append(
                        {
                            "partition_index": p["partition_index"],
                            "committed_offset": state.to_target(p["committed_offset"]),
                            "committed_metadata": p.get("metadata"),
                        }
                    )
            if not commits:
                continue
            answer = await self.dst.request(
                _OFFSET_COMMIT,
                {
                    "group_id": gid,
                    "generation_id_or_member_epoch": -1,
                    "member_id": "",
                    "retention_time_ms": -1,
                    "topics": [{"name": t, "partitions": ps} for t, ps in commits.items()],
                },
            )
            for t in answer["topics"]:
                for p in t["partitions"]:
                    if p["error_code"]:
                        raise KafkaError(p["error_code"], f"committing group {gid} on the target")
            self.stats.groups += 1


def _topic_list(names: list[str] | None) -> list[dict[str, str]] | None:
    return None if names is None else [{"name": n} for n in names]


def _sleep(reactor: Any, seconds: float) -> defer.Deferred[None]:
    d: defer.Deferred[None] = defer.Deferred()
    reactor.callLater(seconds, d.callback, None)
    return d


async def cmd_mirror(args: Any, out: TextIO) -> int:
    """``rustka mirror --to BOOTSTRAP [TOPIC...]`` (see the module docstring)."""
    import sys

    from twisted.internet import reactor

    from rustka.ops.cli.common import read_password

    source_login = target_login = None
    if getattr(args, "user", None):
        source_login = SaslLogin(args.user, read_password(args.password_file), args.mechanism)
    if getattr(args, "to_user", None):
        password = read_password(
            args.to_password_file,
            env="RUSTKA_TO_PASSWORD",
            prompt=f"Password of {args.to_user} on {args.to}: ",
        )
        target_login = SaslLogin(args.to_user, password, args.to_mechanism)
    mirror = Mirror(
        reactor,
        args.broker,
        args.to,
        list(args.topics),
        Path(args.state),
        follow=args.follow,
        source_login=source_login,
        target_login=target_login,
    )
    progress = Progress(sys.stderr, label="mirror", unit="records")
    running = defer.ensureDeferred(mirror.run(progress))

    def stop() -> defer.Deferred[Any]:
        # Ctrl-C or SIGTERM: finish the batch in flight, record it, then stop.
        mirror.stopping = True
        return running.addErrback(lambda _: None)

    trigger = reactor.addSystemEventTrigger("before", "shutdown", stop)
    try:
        stats = await running
    finally:
        reactor.removeSystemEventTrigger(trigger)
    progress.finish()
    summary = {
        "records": stats.records,
        "bytes": stats.bytes,
        "batches": stats.batches,
        "groups": stats.groups,
        "skipped_after_crash": stats.skipped_after_crash,
        "partitions": len(mirror.state.partitions),
        "state": str(mirror.state.path),
    }
    if args.json:
        out.write(json.dumps(summary) + "\n")
    else:
        out.write(
            f"mirrored {stats.records:,} records ({stats.bytes:,} bytes, {stats.batches:,} "
            f"batches) of {len(mirror.state.partitions)} partitions into {args.to}; "
            f"{stats.groups} group(s) committed; state in {args.state}\n"
        )
    return 0
