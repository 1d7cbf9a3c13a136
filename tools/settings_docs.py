"""Write (or check) what is derived from the settings' declarations in rustka/config.py.

    python tools/settings_docs.py --write   # regenerate etc/rustka.toml and the docs table
    python tools/settings_docs.py           # exit 1 if either is out of date

etc/rustka.toml is generated whole; docs/operations.md holds the settings table
between the ``settings:begin``/``settings:end`` comment markers, and docs/kafka.md
the table of every Kafka topic config between ``topic-configs:begin``/``:end``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rustka.config import TOML_PREAMBLE, Config, render_topic_configs_table  # noqa: E402
from rustka.settings import render_table, render_toml  # noqa: E402

TOML = ROOT / "etc" / "rustka.toml"
DOCS = ROOT / "docs" / "operations.md"
BEGIN = "<!-- settings:begin (tools/settings_docs.py --write) -->\n"
END = "<!-- settings:end -->\n"
KAFKA_DOCS = ROOT / "docs" / "kafka.md"
TOPIC_BEGIN = "<!-- topic-configs:begin (tools/settings_docs.py --write) -->\n"
TOPIC_END = "<!-- topic-configs:end -->\n"


def expected_toml() -> str:
    return render_toml(Config, TOML_PREAMBLE)


def expected_docs(current: str) -> str:
    """docs/operations.md with the table between the markers replaced."""
    return _between(current, DOCS, BEGIN, END, render_table(Config))


def expected_kafka_docs(current: str) -> str:
    """docs/kafka.md with the topic-config table between its markers replaced."""
    return _between(current, KAFKA_DOCS, TOPIC_BEGIN, TOPIC_END, render_topic_configs_table())


def _between(current: str, path: Path, begin: str, end: str, table: str) -> str:
    if begin not in current or end not in current:
        raise SystemExit(f"{path}: the {begin.strip()} markers are missing")
    head, rest = current.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + begin + table + end + tail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--write", action="store_true", help="rewrite the files instead of checking")
    args = ap.parse_args(argv)
    stale = []
    targets = (
        (TOML, expected_toml()),
        (DOCS, expected_docs(DOCS.read_text())),
        (KAFKA_DOCS, expected_kafka_docs(KAFKA_DOCS.read_text())),
    )
    for path, want in targets:
        if path.read_text() != want:
            if args.write:
                path.write_text(want)
                print(f"wrote {path.relative_to(ROOT)}")
            else:
                stale.append(str(path.relative_to(ROOT)))
    if stale:
        print(f"out of date: {', '.join(stale)}; run tools/settings_docs.py --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
