"""The object store holding diskless topics' batches: any S3-compatible store, via boto3.

Blocking calls on one thread-safe client, each bounded by a timeout and a small
retry budget, so a store that went away costs a flush a few seconds, never a hang.
Errors become storage errors the broker answers with: `ObjectStoreUnavailable`
(retriable) for an unreachable or failing store, `ObjectMissing` and `ObjectExists`
for what the caller must hear about (docs/diskless.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from rustka.errors import StorageError

__all__ = [
    "ObjectExists",
    "ObjectMissing",
    "ObjectStore",
    "ObjectStoreStats",
    "ObjectStoreUnavailable",
]

_MISSING = {"404", "NoSuchKey", "NotFound"}
_EXISTS = {"412", "PreconditionFailed"}
_NO_BUCKET = {"404", "NoSuchBucket", "NotFound"}
_BUSY = {
    "429",
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "ServiceUnavailable",
    "InternalError",
}
"""Answers that say "not now" rather than "never": a retry may succeed."""


def _retried(e: Exception) -> bool:
    """Whether the client sent the request more than once before this answer."""
    if not isinstance(e, ClientError):
        return False
    return int(e.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0


class ObjectStoreUnavailable(StorageError):
    """The store cannot be reached, timed out, or failed the request: try again."""


class ObjectMissing(StorageError):
    """The key the caller expected is not in the store."""


class ObjectExists(StorageError):
    """A conditional create found the key taken (HTTP 412)."""


@dataclass
class ObjectStoreStats:
    """Requests by kind, for metrics and the benchmarks."""

    puts: int = 0
    gets: int = 0
    range_gets: int = 0
    deletes: int = 0
    lists: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    errors: int = 0


class ObjectStore:
    """One bucket (and key prefix) of an S3-compatible store."""

    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        access_key: str | None = None,
        secret_key: str | None = None,
        prefix: str = "",
        timeout_s: float = 10.0,
    ) -> None:
        if (access_key is None) != (secret_key is None):
            raise ValueError(
                "give the object store both an access key and a secret key, or neither"
            )
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint = endpoint_url or f"s3.{region}.amazonaws.com"
        self.stats = ObjectStoreStats()
        self._lock = threading.Lock()
        session = boto3.session.Session(
            region_name=region, aws_access_key_id=access_key, aws_secret_access_key=secret_key
        )
        if session.get_credentials() is None:
            # None given and none in the environment: a store without access control
            # (SeaweedFS with no IAM, a test server) accepts any signature, and an
            # unsigned request is refused by some stores that would accept it signed.
            session = boto3.session.Session(
                region_name=region, aws_access_key_id="rustka", aws_secret_access_key="rustka"
            )
        self._client = session.client(
            "s3",
            endpoint_url=endpoint_url,
            config=BotoConfig(
                connect_timeout=timeout_s,
                read_timeout=timeout_s,
                retries={"max_attempts": 2, "mode": "standard"},
                s3={"addressing_style": "path"},
                max_pool_connections=16,
            ),
        )

    def _key(self, key: str) -> str:
        return self.prefix + key

    def _count(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self.stats, name, getattr(self.stats, name) + value)

    def _failed(self, e: Exception, what: str) -> StorageError:
        self._count(errors=1)
        where = f"{what} in bucket {self.bucket!r} at {self.endpoint}"
        if isinstance(e, ParamValidationError):
            # A request boto3 would not send: a bug here, not the store being away.
            return StorageError(f"{where} refused before sending: {e}")
        if isinstance(e, ClientError):
            code = str(e.response.get("Error", {}).get("Code", ""))
            status = str(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if code in _EXISTS or status in _EXISTS:
                return ObjectExists(f"{where}: the key exists")
            if code == "NoSuchBucket":
                # The configuration names a bucket the store does not have: not a
                # missing object (a delete must not pass over it as already done).
                return ObjectStoreUnavailable(f"{where}: no such bucket")
            if code in _MISSING or status == "404":
                return ObjectMissing(f"{where}: no such key")
            if code in _BUSY or status in _BUSY or status.startswith("5"):
                return ObjectStoreUnavailable(f"{where} failed: {code or status} {e}")
            # Refused for good (access denied, a range past the object's end): retrying
            # the same request cannot help.
            return StorageError(f"{where} refused: {code or status} {e}")
        return ObjectStoreUnavailable(f"{where} failed: {e}")

    def ensure_bucket(self) -> None:
        """Create the bucket if it is not there (first start, tests)."""
        try:
            self._client.head_bucket(Bucket=self.bucket)
            return
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code not in _NO_BUCKET:
                raise self._failed(e, "checking the bucket") from e
        except BotoCoreError as e:
            raise self._failed(e, "checking the bucket") from e
        try:
            self._client.create_bucket(Bucket=self.bucket)
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code not in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                raise self._failed(e, "creating the bucket") from e
        except BotoCoreError as e:
            raise self._failed(e, "creating the bucket") from e

    def put_new(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Create ``key`` with ``data``; `ObjectExists` if it is taken (If-None-Match: *),
        so a retried upload never overwrites an object another broker made.

        An attempt whose answer was lost may have stored the object all the same: the
        client's own retry then finds the key taken. The object is ours if it holds
        exactly ``data`` (keys are unique per upload), so that is a success, not a
        failed upload that would leave an orphan and fail the produce."""
        body = data if isinstance(data, (bytes, bytearray)) else bytes(data)  # boto3 takes no views
        try:
            self._client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=body, IfNoneMatch="*"
            )
        except (ClientError, BotoCoreError) as e:
            failure = self._failed(e, f"uploading {key}")
            if not (isinstance(failure, ObjectExists) and _retried(e) and self._holds(key, body)):
                raise failure from e
        self._count(puts=1, bytes_up=len(body))

    def _holds(self, key: str, data: bytes | bytearray) -> bool:
        try:
            return self.get(key) == data
        except StorageError:
            return False

    def get(self, key: str) -> bytes:
        try:
            answer = self._client.get_object(Bucket=self.bucket, Key=self._key(key))
            data: bytes = answer["Body"].read()
        except (ClientError, BotoCoreError) as e:
            raise self._failed(e, f"reading {key}") from e
        self._count(gets=1, bytes_down=len(data))
        return data

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Exactly ``length`` bytes of ``key`` from ``start``; a `StorageError` if the
        object is shorter than that (it is not what the catalog recorded)."""
        if start < 0 or length < 0:
            raise ValueError(f"no range of {length} bytes at {start}")
        if length == 0:
            # "bytes=n-(n-1)" is not a range: a store would answer with the whole object.
            return b""
        try:
            answer = self._client.get_object(
                Bucket=self.bucket, Key=self._key(key), Range=f"bytes={start}-{start + length - 1}"
            )
            data: bytes = answer["Body"].read()
        except (ClientError, BotoCoreError) as e:
            raise self._failed(e, f"reading {key}") from e
        self._count(range_gets=1, bytes_down=len(data))
        if len(data) != length:
            raise StorageError(
                f"object {key} in bucket {self.bucket!r} gave {len(data)} bytes at {start}, "
                f"not the {length} the catalog records"
            )
        return data

    def delete(self, key: str) -> None:
        """Delete ``key``; a key already gone is not an error."""
        try:
            self._client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as e:
            failure = self._failed(e, f"deleting {key}")
            if not isinstance(failure, ObjectMissing):
                raise failure from e
        except BotoCoreError as e:
            raise self._failed(e, f"deleting {key}") from e
        self._count(deletes=1)

    def list_objects(
        self, prefix: str = "", page_size: int = 1000
    ) -> Iterator[tuple[str, int, float]]:
        """(key, size, last modified in epoch seconds) of every object under ``prefix``,
        keys without the store's own prefix, page by page."""
        token: str | None = None
        full = self._key(prefix)
        while True:
            args: dict[str, object] = {"Bucket": self.bucket, "Prefix": full, "MaxKeys": page_size}
            if token is not None:
                args["ContinuationToken"] = token
            try:
                page = self._client.list_objects_v2(**args)
            except (ClientError, BotoCoreError) as e:
                raise self._failed(e, "listing objects") from e
            self._count(lists=1)
            for item in page.get("Contents", ()):
                name: str = item["Key"]
                yield name[len(self.prefix) :], int(item["Size"]), item["LastModified"].timestamp()
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")
            if not token:
                # Without it the next request would start over: the collector would
                # list the same first page for ever.
                raise StorageError(
                    f"listing bucket {self.bucket!r} at {self.endpoint}: a truncated page "
                    "without a continuation token"
                )

    def close(self) -> None:
        self._client.close()
