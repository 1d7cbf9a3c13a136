"""A faust-streaming application that counts the words it reads, per key, in a Table.

Run by tests/apps/test_faust.py with the interpreter of the faust virtualenv
(tools/app_venvs.py), as faust's users run a worker: ``python faust_counter.py
worker --without-web`` until SIGTERM (faust's worker command starts its web
server, on 0.0.0.0:6066, unless told not to; ``web_enabled`` alone does not
stop it). Everything it needs comes from the environment:

    BOOTSTRAP   the broker, HOST:PORT
    APP_ID      faust's application id: the consumer group, and the prefix of the
                table's changelog topic (APP_ID-counts-changelog)
    DATA_DIR    faust's data dir, where the RocksDB table lives
    INPUT       the topic of words (key: the word, value: anything), 2 partitions
    OUTPUT      the topic of counts: key the word, value {"word": ..., "count": n}
    PROCESSING_GUARANTEE  optional: faust's processing_guarantee (default at_least_once;
                exactly_once: a transactional producer per source partition, whose
                transactions carry the output, the changelog and the consumed offsets)
    STORE       optional: faust's table store (default rocksdb://)
    COMMIT_INTERVAL  optional: faust's broker_commit_interval, in seconds; under
                exactly_once each commit ends the partitions' transactions
    COMMIT_EVERY  optional: faust's broker_commit_every (commit once that many records
                were processed, checked as the next one arrives)

The table is kept in RocksDB (faust's rocksdb store, through rocksdict), so a
worker started with an empty DATA_DIR rebuilds it from the changelog topic
faust created (compacted) before its agent sees a record.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import faust

PARTITIONS = 2

app = faust.App(
    os.environ["APP_ID"],
    broker=f"kafka://{os.environ['BOOTSTRAP']}",
    store=os.environ.get("STORE", "rocksdb://"),
    datadir=os.environ["DATA_DIR"],
    topic_partitions=PARTITIONS,
    topic_replication_factor=1,
    consumer_auto_offset_reset="earliest",
    processing_guarantee=os.environ.get("PROCESSING_GUARANTEE", "at_least_once"),
    broker_commit_interval=float(os.environ.get("COMMIT_INTERVAL", "2.8")),
    broker_commit_every=int(os.environ.get("COMMIT_EVERY", "10000")),
)
words = app.topic(
    os.environ["INPUT"],
    key_type=str,
    value_type=bytes,
    value_serializer="raw",
    partitions=PARTITIONS,
)
counts_out = app.topic(os.environ["OUTPUT"], key_type=str, value_serializer="json", partitions=1)
counts = app.Table("counts", default=int, partitions=PARTITIONS)


@app.agent(words)
async def count(stream: faust.StreamT[bytes]) -> AsyncIterator[None]:
    async for word, _ in stream.items():
        counts[word] += 1
        await counts_out.send(key=word, value={"word": word, "count": counts[word]})
        yield None


if __name__ == "__main__":
    app.main()
