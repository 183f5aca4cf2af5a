"""The core's string arrays (spank/core/strv.c), driven through cffi: the one grower the
plugin uses for the runtime's environment, the conf file's lines, the importer's
environment and `enroot list`'s names."""

from __future__ import annotations

from typing import Any

from squall._core import ffi, lib


def _strings(arr: Any, n: int) -> list[bytes]:
    assert arr[n] == ffi.NULL   # always NULL-terminated
    return [ffi.string(arr[i]) for i in range(n)]


def test_push_copies_and_keeps_the_array_terminated() -> None:
    arr, n = ffi.new("char ***"), ffi.new("size_t *")
    word = ffi.new("char[]", b"first")
    assert lib.sq_strv_push(arr, n, word) == 0
    word[0] = b"F"                             # a copy, not the caller's buffer
    assert lib.sq_strv_push(arr, n, b"second") == 0
    assert n[0] == 2 and _strings(arr[0], 2) == [b"first", b"second"]
    lib.sq_strv_free(arr[0])


def test_pushn_takes_only_the_bytes_asked_for() -> None:
    arr, n = ffi.new("char ***"), ffi.new("size_t *")
    assert lib.sq_strv_pushn(arr, n, b"name  rest", 4) == 0
    assert _strings(arr[0], n[0]) == [b"name"]
    lib.sq_strv_free(arr[0])


def test_push_lines_skips_empty_lines_and_appends() -> None:
    arr, n = ffi.new("char ***"), ffi.new("size_t *")
    assert lib.sq_strv_push(arr, n, b"before") == 0
    assert lib.sq_strv_push_lines(arr, n, b"A=1\n\nB=2\nlast") == 0
    assert _strings(arr[0], n[0]) == [b"before", b"A=1", b"B=2", b"last"]
    lib.sq_strv_free(arr[0])


def test_push_lines_of_nothing_still_makes_an_empty_array() -> None:
    for text in (ffi.NULL, b"", b"\n\n"):
        arr, n = ffi.new("char ***"), ffi.new("size_t *")
        assert lib.sq_strv_push_lines(arr, n, text) == 0
        assert arr[0] != ffi.NULL and n[0] == 0 and arr[0][0] == ffi.NULL
        lib.sq_strv_free(arr[0])


def test_free_of_nothing_is_fine() -> None:
    lib.sq_strv_free(ffi.NULL)
