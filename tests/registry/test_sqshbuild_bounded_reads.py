"""Everything sqshbuild reads from outside is bounded (issue 26, "Reads without bounds"):
JSON nesting of manifests, indexes and configs; squash options refused before the first
byte is downloaded."""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import one_error_line, run_env, sqshbuild_cmd
from imagekit import OCI_INDEX, OCI_MANIFEST, Image, layer, sha

pytestmark = pytest.mark.registry

MANIFEST = r"/manifests/"


def sqshbuild(args: list[str], home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*sqshbuild_cmd(), *args], env={**run_env(home), **env},
                          capture_output=True, text=True, timeout=120)


def push(registry, image: Image) -> str:
    repo = f"bounded/{uuid.uuid4().hex[:8]}"
    registry.pusher.push(repo, "v1", image)
    return repo


def deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


@pytest.mark.parametrize("body", [
    deep(100_000),
    b'{"mediaType": "%s", "layers": [], "config": ' % OCI_MANIFEST.encode()
    + deep(100_000) + b"}",
], ids=["list", "in-a-manifest"])
def test_a_deep_manifest_is_one_line(registry, faulty, cache_dir, clean_env, body):
    """A 100,000-deep JSON manifest was RecursionError: 'internal error'."""
    repo = push(registry, Image([layer(("file", "a", "a"))], {"Cmd": ["x"]}))
    faulty.add(MANIFEST, "replace", body, OCI_MANIFEST, times=None)
    proc = sqshbuild(["--cache-dir", str(cache_dir), f"{faulty.host}/{repo}:v1"], clean_env)
    err = one_error_line(proc)
    assert "internal error" not in err
    assert f"{repo} manifest v1 nests JSON deeper than 64 levels" in err, err


@pytest.mark.parametrize("doc", [
    {"mediaType": OCI_INDEX, "manifests": [1, "x"]},
    {"mediaType": OCI_INDEX, "manifests": [{"digest": 5, "platform": "linux"}]},
    {"mediaType": OCI_INDEX, "manifests": {"a": 1}},
    {"mediaType": OCI_INDEX, "manifests": [{"digest": "sha256:" + "0" * 64,
                                            "platform": {"os": "linux",
                                                         "architecture": 7}}]},
    [1, 2, 3],
], ids=["numbers", "digest-and-platform", "a-mapping", "platform-values", "a-list"])
def test_a_malformed_index_is_one_line(registry, faulty, cache_dir, clean_env, doc):
    repo = push(registry, Image([layer(("file", "a", "a"))], {"Cmd": ["x"]}))
    faulty.add(MANIFEST, "replace", json.dumps(doc).encode(), OCI_INDEX, times=None)
    proc = sqshbuild(["--cache-dir", str(cache_dir), f"{faulty.host}/{repo}:v1"], clean_env)
    err = one_error_line(proc)
    assert "internal error" not in err, err
    assert "malformed" in err or "not a JSON object" in err or "no image for the platform" \
        in err, err


@pytest.mark.parametrize("layers", ['{"x": 1}', '[{"digest": 7}]'], ids=["mapping", "digest"])
def test_a_malformed_manifest_is_one_line(registry, faulty, cache_dir, clean_env, layers):
    repo = push(registry, Image([layer(("file", "a", "a"))], {"Cmd": ["x"]}))
    body = (f'{{"mediaType": "{OCI_MANIFEST}", "config": {{"digest": "sha256:{"0" * 64}"}}, '
            f'"layers": {layers}}}').encode()
    faulty.add(MANIFEST, "replace", body, OCI_MANIFEST, times=None)
    proc = sqshbuild(["--cache-dir", str(cache_dir), f"{faulty.host}/{repo}:v1"], clean_env)
    err = one_error_line(proc)
    assert "is malformed" in err or "names digest 7: only sha256" in err, err


@dataclass
class DeepConfig(Image):
    """An image whose config blob (digest and all) nests 100,000 deep."""

    def config_blob(self) -> bytes:
        return b'{"config": ' + deep(100_000) + b"}"


def test_a_deep_config_is_one_line(registry, cache_dir, clean_env):
    image = DeepConfig([layer(("file", "a", "a"))])
    repo = push(registry, image)
    proc = sqshbuild(["--cache-dir", str(cache_dir), f"{registry.host}/{repo}:v1"], clean_env)
    err = one_error_line(proc)
    assert f"config {sha(image.config_blob())} of " in err, err
    assert "nests JSON deeper than 64 levels" in err, err


# -- squash options ---------------------------------------------------------------------------
@pytest.mark.parametrize("args, says", [
    (["--level", "99"], "--level 99 is out of range for zstd: give 1 to 22"),
    (["--compressor", "gzip", "--level", "0"], "--level 0 is out of range for gzip: give 1 to 9"),
    (["--compressor", "xz", "--level", "10"], "--level 10 is out of range for xz: give 0 to 9"),
    (["--level", "-1"], "--level -1 is out of range for zstd: give 1 to 22"),
    (["--processors", "-2"], "--processors -2: give at least 1 (or 0 for all CPUs)"),
])
def test_squash_options_are_refused_before_the_download(registry, faulty, cache_dir, clean_env,
                                                        args, says):
    """--level 99 was refused by tar2sqfs after every layer was downloaded."""
    repo = push(registry, Image([layer(("file", "a", "a"))], {"Cmd": ["x"]}))
    proc = sqshbuild(["--cache-dir", str(cache_dir), *args, f"{faulty.host}/{repo}:v1"],
                     clean_env)
    err = one_error_line(proc)
    assert says in err, err
    assert faulty.log == []  # not even the manifest was asked for
