"""Kafka's record format: RecordBatch v2 and its codecs.

Batches are the wire format of both protocols and the disk format of storage,
so they sit below all of them (as aiokafka's ``record`` package and Kafka's
``common.record`` do): storage, the broker, both front-ends and the client
library use this package; it uses none of them.
"""
