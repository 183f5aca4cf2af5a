"""The text that keeps a job's image in its AdminComment (spank/core/jobrecord.c, via
cffi; issue 41, docs/admin.md).

A registry image is kept as the reference the user gave and the digest the job ran
(``squall-image=REF@sha256:HEX``: the shared cache names an image by its digest); a
``.sqsh`` named by path as its path, size and modification time (a multi-GB file is not
hashed at a step's start). Entries are space separated in the comment: a space or a ``%``
in a path is percent-encoded, and a text that does not fit is refused, never cut.
"""

from __future__ import annotations

import pytest

from squall._core import ffi, lib

HEX = "ab" * 32


def entry(ref: str, path: str, registry: bool, size: int = 0, mtime: int = 0,
          room: int = 512) -> str | None:
    out = ffi.new("char[]", room)
    rc = lib.sq_jobrecord_entry(ref.encode(), path.encode(), int(registry), size, mtime, out,
                                room)
    return ffi.string(out).decode() if rc == 0 else None


def test_a_registry_tag_is_kept_with_its_digest() -> None:
    got = entry("login:5000/team/train:v1", f"/fsx/squall/images/sha256-{HEX}.sqsh", True)
    assert got == f"squall-image=login:5000/team/train:v1@sha256:{HEX}"


def test_a_variant_of_the_cached_image_still_names_the_digest() -> None:
    got = entry("nvcr.io#nvidia/pytorch:24.05-py3",
                f"/fsx/squall/images/sha256-{HEX}-arm64.sqsh", True)
    assert got == f"squall-image=nvcr.io#nvidia/pytorch:24.05-py3@sha256:{HEX}"


def test_a_reference_by_digest_is_not_given_it_twice() -> None:
    ref = f"login:5000/team/train@sha256:{HEX}"
    got = entry(ref, f"/home/u/.cache/squall/images/sha256-{HEX}.sqsh", True)
    assert got == f"squall-image={ref}"


@pytest.mark.parametrize("path", ["/fsx/squall/images/not-a-digest.sqsh",
                                  f"/fsx/sha256-{HEX[:-1]}.sqsh", f"/fsx/sha256-{HEX}x.sqsh"])
def test_a_registry_image_without_a_digest_name_keeps_the_reference_alone(path: str) -> None:
    assert entry("login:5000/a:v1", path, True) == "squall-image=login:5000/a:v1"


def test_a_file_is_kept_with_its_size_and_mtime() -> None:
    got = entry("/fsx/img.sqsh", "/fsx/img.sqsh", False, size=1234, mtime=1796601600)
    assert got == "squall-image=/fsx/img.sqsh@size=1234,mtime=2026-12-07T00:00:00Z"


def test_spaces_and_percents_in_a_path_are_encoded() -> None:
    got = entry("./my img.sqsh", "/fsx/my img%1.sqsh", False, size=1, mtime=0)
    assert got == "squall-image=/fsx/my%20img%251.sqsh@size=1,mtime=1970-01-01T00:00:00Z"


def test_a_space_in_a_reference_cannot_split_the_entry() -> None:
    assert entry("a b", f"/x/sha256-{HEX}.sqsh", True) == f"squall-image=a%20b@sha256:{HEX}"


def test_a_text_that_does_not_fit_is_refused() -> None:
    assert entry("login:5000/a:v1", f"/x/sha256-{HEX}.sqsh", True, room=40) is None
    assert entry("/x", "/x", False, room=10) is None
