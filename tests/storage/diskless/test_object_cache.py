"""The cache of whole objects (pure: no store)."""

from __future__ import annotations

import threading

from rustka.storage.diskless.object_cache import ObjectCache


def test_the_cache_keeps_recent_objects_within_its_size() -> None:
    cache = ObjectCache(10)
    cache.put("a", b"aaaa")
    cache.put("b", b"bbbb")
    assert cache.get("a", 1, 2) == b"aa"  # a is now the most recent
    cache.put("c", b"cccc")  # b goes
    assert cache.get("b", 0, 1) is None
    assert cache.get("c", 0, 4) == b"cccc"
    assert cache.get("a", 3, 2) is None  # past its end
    cache.put("huge", b"x" * 11)  # larger than the cache: not kept, nothing evicted
    assert cache.get("huge", 0, 1) is None
    assert (cache.hits, cache.misses, cache.size) == (2, 3, 8)
    assert cache.get("a", 0, 4) == b"aaaa" and cache.get("c", 0, 4) == b"cccc"


def test_an_object_as_large_as_the_cache_evicts_everything_else() -> None:
    cache = ObjectCache(10)
    for key in "abc":
        cache.put(key, key.encode() * 3)
    cache.put("all", b"z" * 10)
    assert cache.size == 10
    assert [cache.get(key, 0, 1) for key in "abc"] == [None, None, None]
    assert cache.get("all", 9, 1) == b"z"


def test_putting_a_key_again_replaces_it_and_its_size() -> None:
    cache = ObjectCache(10)
    cache.put("a", b"aaaa")
    cache.put("a", b"AAAAAA")
    assert cache.size == 6 and cache.get("a", 0, 6) == b"AAAAAA"


def test_a_cache_of_no_bytes_keeps_nothing_and_counts_misses() -> None:
    off = ObjectCache(0)
    off.put("a", b"a")
    off.put("empty", b"")
    assert off.get("a", 0, 1) is None
    assert off.get("empty", 0, 0) is None
    assert (off.hits, off.misses, off.size) == (0, 2, 0)


def test_ranges_outside_the_object_are_misses() -> None:
    cache = ObjectCache(100)
    cache.put("a", b"0123456789")
    assert cache.get("a", -1, 2) is None
    assert cache.get("a", 8, 3) is None
    assert cache.get("a", 8, 2) == b"89"
    assert (cache.hits, cache.misses) == (1, 2)


def test_the_cache_is_safe_from_many_threads() -> None:
    cache = ObjectCache(1000)
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def use(n: int) -> None:
        try:
            start.wait(10)
            for i in range(500):
                key = f"{n}-{i % 20}"
                cache.put(key, bytes([n]) * 30)
                got = cache.get(key, 0, 30)
                assert got is None or got == bytes([n]) * 30
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=use, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)
    assert cache.size <= 1000 and cache.size % 30 == 0
    assert cache.hits + cache.misses == 4 * 500
