"""The shared cache against a real registry, with the CLI run in process (coverage sees it):
digest-pinned hits, the offline fallback, squash options in the cache key, -o without a
writable cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import free_port
from imagekit import Image, layer

from squall.sqshbuild.cli import main

pytestmark = pytest.mark.registry


def sqshbuild(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``sqshbuild ARGV...``, in this process."""
    monkeypatch.setattr(sys, "argv", ["sqshbuild", *argv])
    rc = 0
    try:
        main()
    except SystemExit as exc:
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return rc, out, err


def small_image(tag: str = "") -> Image:
    return Image([layer(("dir", "etc"), ("file", "etc/os-release", f"ID=keys{tag}\n")),
                  layer(("file", "hello", "hi\n"))], {"Cmd": ["/bin/true"]})


@pytest.fixture
def pushed(registry) -> tuple[str, str]:
    repo = f"test/keys-{uuid.uuid4().hex[:8]}"
    digest = registry.pusher.push(repo, "v1", small_image(repo))
    return f"{registry.host}/{repo}", digest


def build_json(monkeypatch, capsys, *argv: str) -> dict:
    rc, out, err = sqshbuild(monkeypatch, capsys, "build", "--json", *argv)
    assert rc == 0, err
    return json.loads(out.strip().splitlines()[-1])


def compression(path: str | Path) -> str:
    out = subprocess.run(["unsquashfs", "-s", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return out


def test_digest_pinned_reference_is_a_hit_the_second_time(pushed, cache_dir, clean_env,
                                                          monkeypatch, capsys):
    repo, digest = pushed
    ref = f"{repo}@{digest}"
    first = build_json(monkeypatch, capsys, "--cache-dir", str(cache_dir), ref)
    assert first["cached"] is False and first["digest"] == digest
    second = build_json(monkeypatch, capsys, "--cache-dir", str(cache_dir), ref)
    assert second["cached"] is True and second["path"] == first["path"]
    # and with -o: copied out of the cache
    out = cache_dir.parent / "pinned.sqsh"
    third = build_json(monkeypatch, capsys, "--cache-dir", str(cache_dir), "-o", str(out), ref)
    assert third["cached"] is True and out.is_file()
    assert out.read_bytes() == Path(first["path"]).read_bytes()


def test_offline_fallback_serves_the_last_digest_of_a_tag(pushed, cache_dir, clean_env,
                                                          monkeypatch, capsys, registry):
    repo, digest = pushed
    host = registry.host
    first = build_json(monkeypatch, capsys, "--cache-dir", str(cache_dir), f"{repo}:v1")
    # The same index entry under an unreachable registry name: copy the cache's index file
    # for a reference on a closed port (what a registry outage looks like).
    from squall.sqshbuild.cache import index
    from squall.sqshbuild.cache.image_cache import open_shared
    cache = open_shared(cache_dir)
    # A name that never resolves (RFC 2606): a registry of this node alone (a loopback
    # port) is never served offline (test_builder_deputy.py).
    dead = f"dead-registry.invalid:{free_port()}"
    dead_ref = f"{repo.replace(host, dead)}:v1"
    monkeypatch.setenv("SQSHBUILD_RETRIES", "1")
    platform = f"linux/{os.uname().machine.replace('x86_64', 'amd64').replace('aarch64', 'arm64')}"
    from squall.sqshbuild.refs import parse_source
    index.remember(cache, parse_source(dead_ref).canonical, platform, digest)
    rc, out, err = sqshbuild(monkeypatch, capsys, "build", "--cache-dir", str(cache_dir),
                             dead_ref)
    assert rc == 0, err
    assert out.strip().splitlines()[-1] == first["path"]
    assert "registry unreachable" in err and "using the cached image" in err


@pytest.mark.parametrize("extra,expect", [
    (["--compressor", "gzip"], "Compression gzip"),
    (["--level", "15"], "Compression zstd"),
    (["--block-size", "64K"], "Block size 65536"),
    (["--enroot-compat"], "Compression lzo"),
])
def test_squash_options_are_part_of_the_cache_key(pushed, cache_dir, clean_env, monkeypatch,
                                                  capsys, tmp_path, extra, expect):
    repo, digest = pushed
    ref = f"{repo}:v1"
    default = build_json(monkeypatch, capsys, "--cache-dir", str(cache_dir), ref)
    assert "Compression zstd" in compression(default["path"])
    other = build_json(monkeypatch, capsys, "--cache-dir", str(cache_dir), *extra, ref)
    assert other["cached"] is False, "an image squashed with other options was returned"
    assert other["path"] != default["path"] and other["digest"] == digest
    assert expect in compression(other["path"])
    # each variant is a hit for its own options, also with -o
    again = build_json(monkeypatch, capsys, "--cache-dir", str(cache_dir), *extra, ref)
    assert again["cached"] is True and again["path"] == other["path"]
    out = tmp_path / "variant.sqsh"
    copied = build_json(monkeypatch, capsys, "--cache-dir", str(cache_dir), "-o", str(out),
                        *extra, ref)
    assert copied["cached"] is True and expect in compression(out)
    side = json.loads(Path(other["path"]).with_suffix(".json").read_text())
    assert side["manifest_digest"] == digest
    assert build_json(monkeypatch, capsys, "--cache-dir", str(cache_dir), ref)["path"] == \
        default["path"]


def test_output_file_without_a_writable_cache(pushed, tmp_path, clean_env, monkeypatch,
                                              capsys):
    repo, digest = pushed
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the cache would be")
    out = tmp_path / "out" / "image.sqsh"
    out.parent.mkdir()
    res = build_json(monkeypatch, capsys, "--cache-dir", str(blocked / "cache"), "-o",
                     str(out), f"{repo}:v1")
    assert res["cached"] is False and res["digest"] == digest
    assert res["path"] == str(out) and "Compression zstd" in compression(out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["image.json", "image.sqsh"]
