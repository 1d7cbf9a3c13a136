"""Diskless topics end to end need a real PostgreSQL and a real S3 server."""

from tests.services.postgres import postgres_dsn, postgres_server  # noqa: F401  (fixtures)
from tests.services.seaweed import s3_bucket, s3_server  # noqa: F401  (fixtures)
