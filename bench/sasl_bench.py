"""What a login costs the broker: CPU per SASL exchange, by mechanism.

    .venv/bin/python bench/sasl_bench.py [--logins N] [--json PATH]

Authentication happens once per connection, so this is a per-connection cost,
not a per-request one. Times only the broker's side of each exchange (the
ScramServer steps, or PLAIN's check), on the reactor thread where it runs, and,
for comparison, the whole exchange including the client's PBKDF2. Credentials
have Kafka's default 4096 iterations; the cost of PLAIN and of the client side
grows linearly with them, the SCRAM server side does not (it never derives a key).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rustka.security.sasl import ALL_MECHANISMS, new_server
from rustka.security.scram import MECHANISMS, ScramClient, ScramServer, derive_credential


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logins", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
