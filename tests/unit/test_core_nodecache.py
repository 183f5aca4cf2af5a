"""The node-local cache of extracted images: key and eviction (spank/core/nodecache.c)."""

from squall._core import ffi, lib

SB = bytes(range(96))


def key(identity: str, superblock: bytes = SB) -> str:
    out = ffi.new("char[33]")
    assert lib.sq_cache_key(identity.encode(), superblock, len(superblock), out) == 0
    return ffi.string(out).decode()


def test_key_changes_with_the_identity_and_the_superblock():
    k = key("0123456789abcdef")
    assert len(k) == 32 and key("0123456789abcdef") == k
    assert key("0123456789abcdee") != k
    rewritten = bytearray(SB)
    rewritten[8] ^= 1                      # mkfs_time of a rewritten image
    assert key("0123456789abcdef", bytes(rewritten)) != k
    assert key("0123456789abcdef", SB + b"more") == k   # only the superblock counts


def plan(entries, max_bytes, max_age=1000, now=10_000):
    arr = ffi.new("struct sq_cache_entry[]", [
        {"bytes": b, "last_use": t, "in_use": u} for b, t, u in entries])
    mark = ffi.new("int[]", max(len(entries), 1))
    n = lib.sq_cache_evict_plan(arr, len(entries), max_bytes, max_age, now, mark)
    marked = [i for i in range(len(entries)) if mark[i]]
    assert n == len(marked)
    return marked


def test_nothing_to_evict_under_the_limits():
    assert plan([(10, 9500, 0), (20, 9900, 0)], max_bytes=100) == []


def test_least_recently_used_first_until_under_the_size_limit():
    entries = [(40, 9600, 0), (40, 9300, 0), (40, 9900, 0)]
    assert plan(entries, max_bytes=80) == [1]
    assert plan(entries, max_bytes=40) == [0, 1]


def test_too_old_goes_whatever_the_size():
    assert plan([(1, 8000, 0), (1, 9990, 0)], max_bytes=10**9) == [0]


def test_an_entry_in_use_is_never_evicted():
    entries = [(100, 1, 1), (100, 9999, 0)]
    assert plan(entries, max_bytes=50) == [1]
    assert plan([(100, 1, 1)], max_bytes=0) == []
