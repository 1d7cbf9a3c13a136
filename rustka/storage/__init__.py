"""Storage: record batches, segments, indexes, partition logs, topics, the offsets store.

Plain blocking Python with no reactor: the broker runs it on its I/O threads and
tests call it directly. Nothing here imports Twisted (tests/storage/test_purity.py).
"""
