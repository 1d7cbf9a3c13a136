"""A Quix Streams application that counts the words it reads, per key, in its state store.

Run by tests/apps/test_quix_streams.py with the interpreter of the Quix Streams
virtualenv (tools/app_venvs.py), as its users run such an app: ``python
quix_counter.py`` until SIGTERM. Everything it needs comes from the environment:

    BOOTSTRAP   the broker, HOST:PORT
    GROUP       the consumer group (also the prefix of the changelog topic's name)
    STATE_DIR   where Quix keeps its RocksDB state stores
    INPUT       the topic of words (key: the word, value: anything)
    OUTPUT      the topic of counts: key the word, value {"word": ..., "count": n}
    COMMIT_EVERY  checkpoint after this many records (Quix's commit_every; 0, the default:
                every second only)
    LOGLEVEL    Quix's log level (INFO when unset)
    PROCESSING_GUARANTEE  at-least-once (the default) or exactly-once, which needs
                transactions

The count is kept with ``State``, so Quix creates the store's changelog topic
(compacted) and, given an empty STATE_DIR, restores the store from it before
processing anything. At each checkpoint Quix writes the latest value of every
key changed since the last one to the changelog: with COMMIT_EVERY=1 that is
every version of every count.
"""

from __future__ import annotations

import os
from typing import Any

from quixstreams import Application, State


def count(value: Any, key: Any, timestamp: int, headers: Any, state: State) -> dict[str, Any]:
    seen = state.get("count", 0) + 1
    state.set("count", seen)
    return {"word": key, "count": seen}


def main() -> None:
    app = Application(
        broker_address=os.environ["BOOTSTRAP"],
        consumer_group=os.environ["GROUP"],
        state_dir=os.environ["STATE_DIR"],
        auto_offset_reset="earliest",
        commit_interval=1.0,
        commit_every=int(os.environ.get("COMMIT_EVERY", "0")),
        processing_guarantee=os.environ.get("PROCESSING_GUARANTEE", "at-least-once"),  # type: ignore[arg-type]
        loglevel=os.environ.get("LOGLEVEL", "INFO"),
    )
    words = app.topic(os.environ["INPUT"], key_deserializer="str", value_deserializer="bytes")
    counts = app.topic(os.environ["OUTPUT"], key_serializer="str", value_serializer="json")
    sdf = app.dataframe(words)
    sdf = sdf.apply(count, stateful=True, metadata=True)
    sdf.to_topic(counts)
    app.run()


if __name__ == "__main__":
    main()
