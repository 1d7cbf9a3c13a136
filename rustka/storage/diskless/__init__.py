"""Diskless topics' storage engine: batches in an S3-compatible object store, their
order in PostgreSQL (docs/diskless.md).

Plain blocking code, like the rest of storage: the broker runs it on its I/O pool.
The drivers (psycopg, boto3) are imported only by the modules here that use them,
and only a broker configured for diskless topics imports those modules, so the
embedded broker needs neither.
"""
