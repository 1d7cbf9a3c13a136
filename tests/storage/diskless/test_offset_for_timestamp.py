"""ListOffsets by time on a diskless partition whose log start DeleteRecords put inside
a payload: records below the log start are no answer, as on the local log (Kafka
searches from its log start offset), against a real PostgreSQL and S3 server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rustka.record.batch import Record, encode_batch
from rustka.storage.diskless.catalog import Catalog
from rustka.storage.diskless.engine import DisklessEngine
from rustka.storage.diskless.object_cache import ObjectCache
from rustka.storage.diskless.partition import DisklessPartition
from rustka.storage.log_config import LogConfig
from tests.services.seaweed import S3Place


@pytest.fixture
def plog(postgres_dsn: str, s3_bucket: S3Place) -> Iterator[DisklessPartition]:
    catalog = Catalog(postgres_dsn)
    catalog.migrate()
    engine = DisklessEngine(catalog, s3_bucket.store(), ObjectCache(0))
    catalog.create_topic("t", 1, {})
    yield DisklessPartition(engine, "t", 0, LogConfig(diskless_enable=True))
    engine.close()


def stamped(*stamps: int) -> bytes:
    """One batch, a record per timestamp."""
    return encode_batch([Record(b"k", b"v%d" % i, timestamp=t) for i, t in enumerate(stamps)])


def test_the_answer_is_never_below_a_log_start_inside_a_payload(
    plog: DisklessPartition,
) -> None:
    plog.append(stamped(*range(1000, 1010)))  # offsets 0..9, one payload
    assert plog.delete_records(5) == 5
    assert plog.offset_for_timestamp(1000) == (5, 1005)
    assert plog.offset_for_timestamp(1007) == (7, 1007)
    assert plog.offset_for_timestamp(1010) is None


def test_a_time_found_only_below_the_log_start_is_looked_for_in_later_payloads(
    plog: DisklessPartition,
) -> None:
    """The payload holding the log start reaches the time only with records DeleteRecords
    removed; the answer is then the first later record that reaches it."""
    plog.append(stamped(5000, 5000, 1000, 1000))  # offsets 0..3
    plog.append(stamped(1000, 1000))  # 4..5: never reaches 3000
    plog.append(stamped(1000, 4000, 6000))  # 6..8
    assert plog.offset_for_timestamp(3000) == (0, 5000)
    assert plog.delete_records(2) == 2
    assert plog.offset_for_timestamp(3000) == (7, 4000)
    assert plog.offset_for_timestamp(5500) == (8, 6000)
    assert plog.offset_for_timestamp(0) == (2, 1000)
    assert plog.offset_for_timestamp(7000) is None
