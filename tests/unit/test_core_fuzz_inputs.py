"""Inputs the libFuzzer targets (spank/fuzz/) found, replayed through the same C entry
points via cffi. spank/fuzz/regressions/TARGET/ keeps each crashing input as the fuzzer
wrote it; each test checks what was wrong with it, so it fails on the unfixed core."""

from __future__ import annotations

from pathlib import Path

import pytest

from squall.core import ffi, lib, parse_image_ref
from squall.errors import SquallError

REGRESSIONS = Path(__file__).resolve().parents[2] / "spank" / "fuzz" / "regressions"
LLONG_MIN, LLONG_MAX = -(2**63), 2**63 - 1


def _inputs(target: str) -> list[Path]:
    files = sorted((REGRESSIONS / target).iterdir())
    assert files, f"no regression inputs for {target}"
    return files


@pytest.mark.parametrize("path", _inputs("fuzz_imageref"), ids=lambda p: p.name)
def test_imageref_canonical_form_parses_back(path: Path) -> None:
    """A Docker Hub name of up to 255 bytes became library/NAME over the limit: accepted,
    but its canonical form was refused. The limit now holds for the name as sent."""
    text = path.read_bytes().decode()
    try:
        ref = parse_image_ref(text)
    except SquallError as exc:
        assert "limit is 255" in str(exc) and "\n" not in str(exc)
        return
    assert parse_image_ref(ref.canonical).canonical == ref.canonical


def test_imageref_hub_limit_counts_library_prefix() -> None:
    assert parse_image_ref("a" * 247).repository == "library/" + "a" * 247
    with pytest.raises(SquallError, match="256 bytes long, the limit is 255"):
        parse_image_ref("a" * 248)
    # with a namespace nothing is added, so the whole 255 bytes are usable
    assert len(parse_image_ref("a/" + "b" * 253).repository) == 255


def _merge(block: bytes) -> list[str]:
    """sq_env_merge over a block with no NUL after its last byte (an exact-size buffer)."""
    buf = ffi.new("char[]", len(block) or 1)
    ffi.memmove(buf, block, len(block))
    out = ffi.new("char ***")
    err = ffi.new("char[]", 256)
    assert lib.sq_env_merge(ffi.NULL, buf, len(block), ffi.NULL, out, err, 256) == 0
    result = []
    i = 0
    while out[0][i] != ffi.NULL:
        result.append(ffi.string(out[0][i]).decode(errors="replace"))
        i += 1
    lib.sq_env_free(out[0])
    return result


@pytest.mark.parametrize("path", _inputs("fuzz_env"), ids=lambda p: p.name)
def test_env_block_without_final_nul(path: Path) -> None:
    """The last entry of a block not ending in NUL was compared with "ENROOT_" past its
    end (strncmp on a name shorter than 7 bytes): found by the fuzzer's comparison hook."""
    entries = _merge(path.read_bytes())
    assert all(not e.startswith("ENROOT_") for e in entries)
    assert "A=3" in entries


def test_env_block_short_last_name_and_enroot_names() -> None:
    assert _merge(b"ENROOT_X=1\0ENR=2\0E=3") == ["ENR=2", "E=3"]
    assert _merge(b"A=1\0ENROOT_=x") == ["A=1"]


def _evict(entries: list[tuple[int, int, int]], max_bytes: int, max_age: int,
           now: int) -> list[int]:
    arr = ffi.new("struct sq_cache_entry[]", len(entries))
    for i, (size, last_use, in_use) in enumerate(entries):
        arr[i].bytes, arr[i].last_use, arr[i].in_use = size, last_use, in_use
    mark = ffi.new("int[]", len(entries))
    lib.sq_cache_evict_plan(arr, len(entries), max_bytes, max_age, now, mark)
    return list(mark)


def test_nodecache_mtime_extremes_do_not_overflow() -> None:
    """An entry's last use is its lock file's mtime, which the owner can set to anything:
    `now - last_use` overflowed (undefined behaviour; in practice a long-unused entry
    looked brand new and was never evicted)."""
    now = 1_700_000_000
    assert _evict([(10, LLONG_MIN, 0)], 1 << 40, 3600, now) == [1]   # unused since forever
    assert _evict([(10, LLONG_MAX, 0)], 1 << 40, 3600, now) == [0]   # "used" in the future
    assert _evict([(10, now - 7200, 0), (10, now, 0)], 1 << 40, 3600, now) == [1, 0]
    assert _evict([(10, LLONG_MIN, 1)], 0, 3600, now) == [0]          # in use: never


@pytest.mark.parametrize("path", _inputs("fuzz_nodecache"), ids=lambda p: p.name)
def test_nodecache_fuzz_input(path: Path) -> None:
    data = path.read_bytes()
    n = data[0] % 32
    take = lambda off: int.from_bytes(data[off:off + 8], "big")  # noqa: E731
    signed = lambda v: v - (1 << 64) if v >= 1 << 63 else v  # noqa: E731
    entries, off = [], 25
    while len(entries) < n and off + 17 <= len(data):
        entries.append((take(off) >> 8, signed(take(off + 8)), data[off + 16] & 1))
        off += 17
    max_age, now = signed(take(9)), signed(take(17))
    mark = _evict(entries, take(1), max_age, now)
    for (_, last_use, in_use), m in zip(entries, mark, strict=True):
        assert not (m and in_use)
        if not in_use and now - last_use > max_age:   # Python integers: the true age
            assert m == 1


@pytest.mark.parametrize("path", _inputs("fuzz_cache_list"), ids=lambda p: p.name)
def test_cache_list_line_with_a_year_past_9999_is_refused(path: Path) -> None:
    """A listing line dated in year 2777777777776 overflowed the mtime's seconds (signed
    overflow, undefined behaviour). No squashfs time is past 2106: such a line is refused
    (the extraction starts from scratch)."""
    raw = path.read_bytes()
    e = ffi.new("struct sq_list_entry *")
    assert lib.sq_cache_list_parse(ffi.new("char[]", raw), len(raw), e) == -1
    line = b"-rw-r--r-- 0/0 5 9999-12-31 23:59 squashfs-root/f"
    assert lib.sq_cache_list_parse(ffi.new("char[]", line), len(line), e) == 0
    assert e.mtime == 253402300740   # 9999-12-31 23:59 UTC
    line = line.replace(b"9999-", b"10000-")
    assert lib.sq_cache_list_parse(ffi.new("char[]", line), len(line), e) == -1


def test_efa_refusal_with_newline_in_opt_root_is_one_line() -> None:
    """The EFA refusal printed the opt root raw: a newline in it split the error line."""
    node = ffi.new("struct sq_efa_node *")
    node.n_devices, node.n_uverbs, node.memlock = 1, 1, -1
    node.opt_root = b"/opt/ama\nzon"
    image = ffi.new("struct sq_efa_image *")
    req = ffi.new("struct sq_efa_request *")
    req.mode = 2  # require
    plan = ffi.new("struct sq_efa_plan *")
    err = ffi.new("char[]", 512)
    assert lib.sq_efa_plan(node, image, req, plan, err, 512) == -1
    msg = ffi.string(err).decode()
    assert "\n" not in msg and "require" in msg
