"""Large frames stay linear: time the receive path at 1, 8 and 16 MiB frames.

    .venv/bin/python bench/framing_bench.py [--quick] [--json PATH]

Each frame (u32 length + payload) is fed in 64 KiB chunks, as a socket would
hand it over, to three receivers whose ``stringReceived`` only counts:

- Twisted's stock ``Int32StringReceiver``, which rebuilds its ``bytes``
  buffer on every read, so one frame costs O(size^2 / chunk);
- ``rustka.native.server.BrokerProtocol`` (requests, up to ``max_frame_bytes``);
- ``rustka.client.protocol.RustkaClientProtocol`` (responses such as a big FetchBatch).

Linear means: ms per MiB stays flat as the frame grows. The transport is
Twisted's in-memory StringTransport, so only the deframing is timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twisted.internet.testing import StringTransport
from twisted.protocols.basic import Int32StringReceiver

from rustka.client.protocol import RustkaClientProtocol
from rustka.native.server import BrokerProtocol

CHUNK = 64 * 1024
SIZES_MIB = (1, 8, 16)


class _Sink:
    """Mixin: count frames instead of acting on them, so only deframing is measured."""

    frames = 0
    frame_bytes = 0

    def stringReceived(self, string: bytes) -> None:
        self.frames += 1
        self.frame_bytes += len(string)


class StockReceiver(_Sink, Int32StringReceiver):
    MAX_LENGTH = 1 << 30


class ServerReceiver(_Sink, BrokerProtocol):
    MAX_LENGTH = 1 << 30


class ClientReceiver(_Sink, RustkaClientProtocol):
    MAX_LENGTH = 1 << 30


def _stock() -> Any:
    proto = StockReceiver()
    proto.makeConnection(StringTransport())
    return proto


def _server() -> Any:
    # connectionMade needs a broker factory; the receive path needs only a transport.
    proto = ServerReceiver()
    proto.transport = StringTransport()
    return proto


def _client() -> Any:
    proto = ClientReceiver()
    proto.makeConnection(StringTransport())
    return proto


RECEIVERS: dict[str, Callable[[], Any]] = {
    "twisted Int32StringReceiver": _stock,
    "rustka BrokerProtocol": _server,
    "rustka RustkaClientProtocol": _client,
}


def chunks_for(size: int) -> list[bytes]:
    """One frame of `size` payload bytes, cut into CHUNK-sized reads."""
    frame = struct.pack("!I", size) + bytes(size)
    return [frame[i : i + CHUNK] for i in range(0, len(frame), CHUNK)]


def time_frame(make: Callable[[], Any], chunks: list[bytes], size: int) -> float:
    """Seconds to receive one frame; checks it arrived whole."""
    proto = make()
    feed = proto.dataReceived
    start = time.perf_counter()
    for chunk in chunks:
        feed(chunk)
    elapsed = time.perf_counter() - start
    if proto.frames != 1 or proto.frame_bytes != size:
        raise RuntimeError(f"{type(proto).__name__} delivered {proto.frames} frames")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one repetition instead of five")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    reps = 1 if args.quick else 5

    rows: list[dict[str, Any]] = []
    for mib in SIZES_MIB:
        size = mib * 1024 * 1024
        chunks = chunks_for(size)
        row: dict[str, Any] = {"frame_mib": mib, "chunks": len(chunks)}
        for name, make in RECEIVERS.items():
            row[name] = statistics.median(time_frame(make, chunks, size) for _ in range(reps)) * 1e3
        rows.append(row)

    names = list(RECEIVERS)
    print(f"frame fed in {CHUNK // 1024} KiB chunks; ms per frame (median of {reps})")
    print(f"{'frame':>7}" + "".join(f"{n:>32}" for n in names) + f"{'stock / broker':>16}")
    for row in rows:
        cells = "".join(f"{row[n]:>16.1f} ms ({row[n] / row['frame_mib']:5.2f}/MiB)" for n in names)
        ratio = row[names[0]] / row[names[1]]
        print(f"{row['frame_mib']:>4} MiB{cells}{ratio:>15.1f}x")
    if args.json:
        args.json.write_text(json.dumps({"chunk_bytes": CHUNK, "reps": reps, "rows": rows}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
