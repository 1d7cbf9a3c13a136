"""Kill a real broker with SIGKILL mid-traffic, restart it, and count what was lost.

Each cycle starts `twistd rustka` on the same data dir, checks everything the
previous cycles had acknowledged, then pipelines produces (seed op 1 and
ProduceBatch op 6, several topics and partitions) and commits from a client
that records every acknowledgement, and kills the broker after a seeded,
random number of acknowledgements - with requests still in flight, so the
kill lands in the middle of writes. A process crash must never lose an
acknowledged record under any flush policy: the data is in the page cache
before the answer leaves.

    .venv/bin/python -m tools.crash_cycles                 # 100 cycles, flush=always
    .venv/bin/python -m tools.crash_cycles --quick --flush never
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rustka.native import codec as p
from rustka.record.batch import Record, decode_records, encode_batch, scan_batches
from tools.twistd_process import RECOVERY, start_broker
from tools.wire import ConnectionDropped, SyncClient

TOPICS = ("crash-a", "crash-b", "crash-c")
PARTITIONS = 3  # the broker's default partition count for auto-created topics
GROUP = "crash-group"
HOST = "127.0.0.1"

PartitionKey = tuple[str, int]


@dataclass
class Ledger:
    """What the client sent and what the broker acknowledged, across all cycles."""

    acked: dict[PartitionKey, dict[int, tuple[bytes, bytes]]] = field(default_factory=dict)
    sent: set[tuple[bytes, bytes]] = field(default_factory=set)
    commits_acked: dict[PartitionKey, int] = field(default_factory=dict)
    commits_sent: dict[PartitionKey, int] = field(default_factory=dict)
    fetch_checked: dict[PartitionKey, int] = field(default_factory=dict)
    acked_records: int = 0
    acked_commits: int = 0

    def ack(self, key: PartitionKey, offset: int, record: tuple[bytes, bytes]) -> None:
        self.acked.setdefault(key, {})[offset] = record
        self.acked_records += 1


@dataclass
class Verification:
    """The outcome of reading a restarted broker back against the ledger."""

    lost: int = 0
    mismatched: int = 0
    gaps: list[str] = field(default_factory=list)
    strangers: int = 0
    unacked_survivors: int = 0
    commits_lost: list[str] = field(default_factory=list)
    not_continuing: list[str] = field(default_factory=list)
    records_checked: int = 0

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.mismatched
            or self.gaps
            or self.strangers
            or self.commits_lost
            or self.not_continuing
        )


@dataclass
class CycleResult:
    acked_records: int
    acked_commits: int
    in_flight_at_kill: int
    recovered: bool
    recovery_lines: list[str]


def _unique_record(rng: random.Random, serial: int) -> tuple[bytes, bytes]:
    """Random binary key and value; the serial makes every record distinguishable."""
    key = serial.to_bytes(8, "big") + rng.randbytes(rng.randint(0, 24))
    value = rng.randbytes(rng.randint(0, 300))
    return key, value


class _Load:
    """Pipelined traffic: a writer thread and a reader thread on one connection.

    The writer appends what it sent to a FIFO before sending; the reader pops
    one entry per response (the protocol answers in order), so every
    acknowledgement is matched to exactly what was sent.
    """

    def __init__(
        self, port: int, ledger: Ledger, rng: random.Random, kill_after: int, window: int
    ) -> None:
        self.client = SyncClient(HOST, port)
        self.ledger = ledger
        self.rng = rng
        self.kill_after = kill_after
        self.window = threading.BoundedSemaphore(window)
        self.fifo: deque[tuple[str, Any]] = deque()
        self.lock = threading.Lock()
        self.acks = 0
        self.commit_acks = 0
        self.kill_now = threading.Event()
        self.dead = threading.Event()
        self.serial = int.from_bytes(rng.randbytes(6), "big") << 16
        self.errors: list[str] = []

    def _next_request(self) -> tuple[p.Request, tuple[str, Any]]:
        rng = self.rng
        roll = rng.random()
        with self.lock:
            known = sorted(self.ledger.acked)
        if roll < 0.15 and known:
            key = rng.choice(known)
            with self.lock:
                offset = self.ledger.commits_sent.get(key, 0) + rng.randint(1, 5)
                self.ledger.commits_sent[key] = offset
            return p.Commit(GROUP, key[0], key[1], offset), ("commit", (key, offset))
        topic = rng.choice(TOPICS)
        if roll < 0.6:
            self.serial += 1
            record = _unique_record(rng, self.serial)
            with self.lock:
                self.ledger.sent.add(record)
            return p.Produce(topic, *record), ("produce", (topic, record))
        partition = rng.randrange(PARTITIONS)
        records: list[tuple[bytes, bytes]] = []
        payload = b""
        for _ in range(rng.randint(1, 3)):
            batch = []
            for _ in range(rng.randint(1, 5)):
                self.serial += 1
                batch.append(_unique_record(rng, self.serial))
            records.extend(batch)
            payload += encode_batch([Record(key=k, value=v) for k, v in batch])
        with self.lock:
            self.ledger.sent.update(records)
        request = p.ProduceBatch(topic, partition, payload)
        return request, ("batch", ((topic, partition), records))

    def write_loop(self) -> None:
        try:
            while not self.kill_now.is_set() and not self.dead.is_set():
                if not self.window.acquire(timeout=0.5):
                    continue
                request, entry = self._next_request()
                with self.lock:
                    self.fifo.append(entry)
                self.client.send(request)
        except OSError:
            pass

    def read_loop(self) -> None:
        try:
            while True:
                response = self.client.recv()
                with self.lock:
                    kind, what = self.fifo.popleft()
                    self._account(kind, what, response)
                self.window.release()
                if self.acks >= self.kill_after:
                    self.kill_now.set()
        except (ConnectionDropped, OSError):
            pass
        finally:
            self.dead.set()
            self.kill_now.set()

    def _account(self, kind: str, what: Any, response: p.Response) -> None:
        ledger = self.ledger
        if kind == "produce" and type(response) is p.Produced:
            topic, record = what
            ledger.ack((topic, response.partition), response.offset, record)
            self.acks += 1
        elif kind == "batch" and type(response) is p.BatchProduced:
            key, records = what
            if response.last_offset - response.base_offset + 1 != len(records):
                self.errors.append(f"{key}: {len(records)} records acked as {response}")
            for i, record in enumerate(records):
                ledger.ack(key, response.base_offset + i, record)
            self.acks += len(records)
        elif kind == "commit" and type(response) is p.CommitOk:
            key, offset = what
            ledger.commits_acked[key] = max(ledger.commits_acked.get(key, 0), offset)
            ledger.acked_commits += 1
            self.commit_acks += 1
        else:
            self.errors.append(f"{kind} {what!r:.80} answered {response!r:.200}")


def read_partition(client: SyncClient, topic: str, partition: int, end: int) -> list[Record]:
    """Every record of a partition from offset 0 to ``end``, through FetchBatch."""
    records: list[Record] = []
    position = 0
    while position < end:
        response = client.call(p.FetchBatch(topic, partition, position, 8 << 20, 0))
        if type(response) is not p.Batches:
            raise AssertionError(f"FetchBatch {topic}/{partition}@{position}: {response!r}")
        batches, valid_end = scan_batches(response.batches)
        if valid_end != len(response.batches) or not batches:
            raise AssertionError(f"{topic}/{partition}@{position}: unreadable batches")
        for pos, _ in batches:
            records.extend(r for r in decode_records(response.batches, pos) if r.offset >= position)
        position = records[-1].offset + 1 if records else end
    return records


def verify(port: int, ledger: Ledger) -> Verification:
    """Read everything back: acked records byte for byte, no gaps, commits, and continuation."""
    result = Verification()
    client = SyncClient(HOST, port)
    try:
        meta = client.call(p.Metadata(()))
        assert type(meta) is p.MetadataResult, meta
        ends: dict[PartitionKey, int] = {}
        for tm in meta.topics:
            for index, pm in enumerate(tm.partitions):
                ends[(tm.name, index)] = pm.high_watermark
                if pm.log_start != 0:
                    result.gaps.append(f"{tm.name}/{index} starts at {pm.log_start}")
        for key in sorted(ledger.acked):
            if key not in ends:
                result.lost += len(ledger.acked[key])
                result.gaps.append(f"{key[0]}/{key[1]} is gone")
        for key, end in sorted(ends.items()):
            acked = ledger.acked.setdefault(key, {})
            records = read_partition(client, key[0], key[1], end)
            offsets = [r.offset for r in records]
            if offsets != list(range(end)):
                result.gaps.append(f"{key[0]}/{key[1]}: offsets are not 0..{end - 1}")
            stored = {r.offset: (r.key or b"", r.value or b"") for r in records}
            for offset, record in acked.items():
                result.records_checked += 1
                got = stored.get(offset)
                if got is None:
                    result.lost += 1
                elif got != record:
                    result.mismatched += 1
            for offset, record in stored.items():
                if record not in ledger.sent:
                    result.strangers += 1
                elif offset not in acked:
                    result.unacked_survivors += 1
                    acked[offset] = record
            # the seed Fetch path must agree with the batch path, record by record
            # (only offsets not cross-checked before, so 100 cycles stay linear)
            pending = [o for o in sorted(acked) if o >= ledger.fetch_checked.get(key, 0)]
            ledger.fetch_checked[key] = end
            for start in range(0, len(pending), 512):
                chunk = pending[start : start + 512]
                for offset in chunk:
                    client.send(p.Fetch(key[0], key[1], offset))
                for offset in chunk:
                    answer = client.recv()
                    if (
                        type(answer) is not p.FetchedRecord
                        or (answer.key, answer.value) != acked[offset]
                    ):
                        result.mismatched += 1
        for key, committed in sorted(ledger.commits_acked.items()):
            answer = client.call(p.OffsetFetch(GROUP, key[0], key[1]))
            stored_offset = answer.offset if type(answer) is p.Offset else None
            if stored_offset is None or not (
                committed <= stored_offset <= ledger.commits_sent[key]
            ):
                result.commits_lost.append(f"{key}: acked {committed}, stored {stored_offset}")
        for key in sorted(ends):
            record = (b"continue-" + str(ends.get(key, 0)).encode(), b"after restart")
            ledger.sent.add(record)
            payload = encode_batch([Record(key=record[0], value=record[1])])
            answer = client.call(p.ProduceBatch(key[0], key[1], payload))
            if type(answer) is not p.BatchProduced or answer.base_offset != ends.get(key, 0):
                result.not_continuing.append(f"{key}: end {ends.get(key)}, produced {answer!r}")
            else:
                ledger.ack(key, answer.base_offset, record)
    finally:
        client.close()
    return result


def crash_cycle(
    data_dir: Path, ledger: Ledger, rng: random.Random, flush: str, *, max_acks: int = 400
) -> tuple[CycleResult, Verification]:
    """Start the broker, verify the previous cycles, load it, SIGKILL it mid-traffic."""
    broker = start_broker(data_dir, "--flush", flush)
    try:
        recovered = broker.logged(RECOVERY)
        recovery_lines = [line for line in broker.output if "recovery:" in line]
        check = verify(broker.port, ledger)
        kill_after = rng.randint(1, max_acks)
        load = _Load(broker.port, ledger, rng, kill_after, window=rng.choice((8, 32, 128)))
        writer = threading.Thread(target=load.write_loop, daemon=True)
        reader = threading.Thread(target=load.read_loop, daemon=True)
        writer.start()
        reader.start()
        if not load.kill_now.wait(timeout=120):
            raise AssertionError("the load never reached its kill point")
        broker.kill()
        reader.join(timeout=30)
        writer.join(timeout=30)
        load.client.close()
        if load.errors:
            raise AssertionError("unexpected answers: " + "; ".join(load.errors[:5]))
    finally:
        broker.kill()
    cycle = CycleResult(load.acks, load.commit_acks, len(load.fifo), recovered, recovery_lines)
    return cycle, check


def final_check(data_dir: Path, ledger: Ledger, flush: str) -> tuple[bool, Verification]:
    """One more start after the last kill: recovery ran and nothing acknowledged is missing."""
    broker = start_broker(data_dir, "--flush", flush)
    try:
        recovered = broker.logged(RECOVERY)
        check = verify(broker.port, ledger)
        broker.stop()
    finally:
        broker.kill()
    return recovered, check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="10 cycles")
    parser.add_argument("--flush", choices=("always", "interval", "never"), default="always")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data-dir", help="keep the data here (default: a temp dir)")
    args = parser.parse_args(argv)
    cycles = 10 if args.quick else args.cycles
    rng = random.Random(args.seed)
    ledger = Ledger()
    started = time.perf_counter()
    failures: list[str] = []
    lost = 0
    survivors = 0
    in_flight = 0
    not_recovered = 0
    with tempfile.TemporaryDirectory(prefix="rustka-crash-") as tmp:
        data_dir = Path(args.data_dir) if args.data_dir else Path(tmp) / "data"
        for n in range(cycles + 1):
            if n < cycles:
                cycle, check = crash_cycle(data_dir, ledger, rng, args.flush)
                recovered = cycle.recovered
                in_flight += cycle.in_flight_at_kill
            else:
                recovered, check = final_check(data_dir, ledger, args.flush)
            if n and not recovered:
                not_recovered += 1
            lost += check.lost + check.mismatched
            survivors += check.unacked_survivors
            if not check.ok:
                failures.append(f"start {n}: {check}")
    elapsed = time.perf_counter() - started
    print(f"flush policy:              {args.flush}")
    print(f"crash cycles (SIGKILL):    {cycles}")
    print(f"acknowledged records:      {ledger.acked_records}")
    print(f"acknowledged commits:      {ledger.acked_commits}")
    print(f"requests in flight at kill:{in_flight:>6}")
    print(f"unacked records kept:      {survivors}")
    print(f"lost records:              {lost}")
    print(f"restarts without recovery: {not_recovered}")
    print(f"time:                      {elapsed:.1f} s")
    for failure in failures:
        print(f"FAILED {failure}")
    return 1 if failures or not_recovered else 0


if __name__ == "__main__":
    raise SystemExit(main())
