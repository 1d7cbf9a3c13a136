"""A consume-transform-produce program as users write it with confluent-kafka, run as
its own process by tests/kafka/test_transactions_clients.py so that it can be killed.

It reads ``ctp-in`` (one partition) as group ``ctp-kill`` and writes each value
upper-cased to ``ctp-out``, one transaction per batch of at most three records,
the group's offsets sent with the output (``send_offsets_to_transaction``). It
exits once a transaction it committed took its position to END. With STOP_AFTER=n it commits n
transactions, then opens one more, has its output stored and its offsets staged,
prints "in the middle of a transaction" and waits to be killed.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

BOOTSTRAP = os.environ["BOOTSTRAP"]
END = int(os.environ["END"])
STOP_AFTER = int(os.environ.get("STOP_AFTER", "-1"))
QUICK = {"socket.timeout.ms": 10000, "message.timeout.ms": 15000}


def main() -> int:
    producer = Producer(
        {"bootstrap.servers": BOOTSTRAP, "transactional.id": "t-ctp-kill", "linger.ms": 5, **QUICK}
    )
    # A newer producer with this id: the killed one's open transaction is aborted here.
    producer.init_transactions(30)
    consumer = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": "ctp-kill",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "socket.timeout.ms": 10000,
            # The killed run's member holds the group until its session ends.
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe(["ctp-in"])
    committed = 0
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(3, 0.5)
            if not batch:
                continue
            producer.begin_transaction()
            for msg in batch:
                if msg.error():
                    raise RuntimeError(str(msg.error()))
                producer.produce("ctp-out", value=msg.value().upper(), partition=0)
            [position] = consumer.position([TopicPartition("ctp-in", 0)])
            producer.send_offsets_to_transaction([position], consumer.consumer_group_metadata(), 30)
            if committed == STOP_AFTER:
                producer.flush(30)  # the output is stored, the offsets staged
                print("in the middle of a transaction", flush=True)
                signal.pause()  # the test's SIGKILL ends it here
                return 3
            producer.commit_transaction(30)
            committed += 1
            if position.offset >= END:
                print(f"done after {committed} transactions", flush=True)
                return 0
        print("gave up: the committed position never reached the end", flush=True)
        return 2
    finally:
        consumer.close()


if __name__ == "__main__":
    sys.exit(main())
