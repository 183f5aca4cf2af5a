"""The bounds on what a registry sends, without a registry (issue 19): a layer's length from
its descriptor and SQSHBUILD_MAX_BLOB_SIZE, and descriptors with negative sizes.
tests/registry/test_registry_bounds.py has the same through sqshbuild."""

from __future__ import annotations

import json

import pytest

from squall.errors import SquallError
from squall.sqshbuild import transport
from squall.sqshbuild.registry import parse_manifest

DIGEST = "sha256:" + "12" * 32


def test_a_descriptor_size_is_the_bound_up_to_the_site_maximum(monkeypatch):
    monkeypatch.delenv("SQSHBUILD_MAX_BLOB_SIZE", raising=False)
    assert transport.blob_bound(DIGEST, 1234, "r/x") == 1234
    assert transport.blob_bound(DIGEST, 0, "r/x") == 64 << 30  # no size: the maximum
    monkeypatch.setenv("SQSHBUILD_MAX_BLOB_SIZE", "8M")
    assert transport.blob_bound(DIGEST, 0, "r/x") == 8 << 20
    assert transport.blob_bound(DIGEST, 8 << 20, "r/x") == 8 << 20
    with pytest.raises(SquallError) as info:
        transport.blob_bound(DIGEST, (8 << 20) + 1, "reg/team/app")
    assert str(info.value) == (
        "layer sha256:121212121212 of reg/team/app is 8388609 bytes (8.0 MiB) by its manifest, "
        "more than the 8388608 (8 MiB) allowed by SQSHBUILD_MAX_BLOB_SIZE: raise "
        "SQSHBUILD_MAX_BLOB_SIZE if the image is real")


@pytest.mark.parametrize("raw", ["lots", "-1G", "0"])
def test_a_bad_maximum_is_one_line(monkeypatch, raw):
    monkeypatch.setenv("SQSHBUILD_MAX_BLOB_SIZE", raw)
    with pytest.raises(SquallError, match=f"SQSHBUILD_MAX_BLOB_SIZE='{raw}'"):
        transport.max_blob_size()


def test_sizes_for_messages():
    assert transport.human(512) == "512 bytes"
    assert transport.human(64 << 30) == "64 GiB"
    assert transport.human(3 << 29) == "1.5 GiB"
    assert transport.short_digest(DIGEST) == "sha256:121212121212"


def test_a_negative_size_is_a_malformed_manifest():
    doc = {"config": {"digest": DIGEST, "size": 10},
           "layers": [{"digest": "sha256:" + "34" * 32, "size": -5}]}
    with pytest.raises(SquallError, match="size -5: the manifest is malformed"):
        parse_manifest(json.dumps(doc).encode(), "", DIGEST, "r/x")

