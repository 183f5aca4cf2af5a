"""JSON from outside is parsed with its nesting bounded (issue 26): a deep document is one
SquallError naming it, never RecursionError ("internal error")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from squall.errors import SquallError
from squall.sqshbuild import jsonbound
from squall.sqshbuild.sources import load_oci


def test_depth_counts_brackets_outside_strings() -> None:
    assert jsonbound.depth(b'{"a": [1, {"b": "[[[{{{"}], "c\\"[[": 2}') == 3
    assert jsonbound.depth(b'"just text"') == 0


def test_a_deep_document_is_one_error_naming_it() -> None:
    with pytest.raises(SquallError, match=r"^the manifest nests JSON deeper than 64 levels"):
        jsonbound.loads(b"[" * 100_000 + b"]" * 100_000, "the manifest")
    assert jsonbound.loads(b"[" * 64 + b"]" * 64, "x") is not None


def test_not_json_is_one_error_naming_it() -> None:
    with pytest.raises(SquallError, match=r"^the index is not valid JSON"):
        jsonbound.loads(b'{"a": ', "the index")


def _layout(tmp_path: Path, index: bytes) -> Path:
    (tmp_path / "blobs" / "sha256").mkdir(parents=True)
    (tmp_path / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (tmp_path / "index.json").write_bytes(index)
    return tmp_path


@pytest.mark.parametrize("index, says", [
    (b"[" * 100_000 + b"]" * 100_000, "index.json nests JSON deeper than 64 levels"),
    (b"[1, 2]", "index.json is not a JSON object"),
    (json.dumps({"manifests": [1, "x"]}).encode(), "index.json is malformed"),
    (json.dumps({"manifests": [{"digest": 3}]}).encode(), "index.json is malformed"),
    (json.dumps({"manifests": [{"digest": "sha256:" + "0" * 64, "annotations": 1}]}).encode(),
     "index.json is malformed"),
])
def test_a_malformed_oci_index_is_one_error(tmp_path: Path, index: bytes, says: str) -> None:
    with pytest.raises(SquallError, match=says):
        load_oci(_layout(tmp_path, index), "", archive=False, arch="amd64")
