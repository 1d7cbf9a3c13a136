"""Throw seeded garbage at a broker over many connections and check it stays sane.

Every connection sends a script from `tools.frames` and must get exactly one
well-formed response per complete frame, in the tag family its op calls for,
or - when the script ends with an oversized length prefix - at most one more
Error and a hang-up. Afterwards the broker must still serve a fresh client,
and every topic directory must be one that a valid request could have created.

    .venv/bin/python -m tools.fuzz                     # 1,000,000 frames
    .venv/bin/python -m tools.fuzz --quick             # 20,000 frames
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from rustka.errors import InvalidRequest
from rustka.native import codec as p
from rustka.storage.record_batch import Record, decode_records, encode_batch
from tools.frames import TOPIC_RE, FrameFuzzer, Script, creatable_topic
from tools.twistd_process import start_broker
from tools.wire import SyncClient, exchange

SEED_TAGS = frozenset(range(1, 7))
EXTENSION_TAGS = frozenset({4, *range(7, 16)})


@dataclass
class FuzzReport:
    """Counts from one fuzz run; ``problems`` must stay empty."""

    frames: int = 0
    responses: int = 0
    connections: int = 0
    dropped: int = 0
    oversized: int = 0
    incomplete: int = 0
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="20,000 frames")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--connections", type=int, default=20, help="concurrent connections")
    parser.add_argument("--max-frame-bytes", type=int, default=64 * 1024)
    parser.add_argument("--flush", choices=("always", "interval", "never"), default="always")
    args = parser.parse_args(argv)
    frames = 20_000 if args.quick else args.frames
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
