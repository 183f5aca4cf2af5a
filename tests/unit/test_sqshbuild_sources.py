"""References and local sources: docker-archive, oci-archive, oci:DIR[:TAG], through the CLI."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from squall.errors import SquallError
from squall.sqshbuild.refs import parse_source

ROOT = Path(__file__).resolve().parents[2]


def _sha(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


def _layer(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


CONFIG = json.dumps({"architecture": "amd64", "os": "linux",
                     "config": {"Env": ["FROM=local"], "Cmd": ["/bin/true"]}}).encode()
L1 = _layer({"one": "1", "shared": "old"})
L2 = gzip.compress(_layer({"two": "2", "shared": "new", ".wh.one": ""}))


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def docker_archive(path: Path) -> None:
    with tarfile.open(path, "w") as tar:
        _add(tar, "cfg.json", CONFIG)
        _add(tar, "l1/layer.tar", L1)
        _add(tar, "l2/layer.tar", L2)
        _add(tar, "manifest.json", json.dumps([{"Config": "cfg.json", "RepoTags": ["x:1"],
                                                "Layers": ["l1/layer.tar", "l2/layer.tar"]}]
                                              ).encode())


def oci_layout(root: Path) -> str:
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    manifest = json.dumps({"schemaVersion": 2,
                           "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"digest": _sha(CONFIG), "size": len(CONFIG)},
                           "layers": [{"digest": _sha(x), "size": len(x)} for x in (L1, L2)]}
                          ).encode()
    for b in (CONFIG, L1, L2, manifest):
        (blobs / _sha(b).split(":")[1]).write_bytes(b)
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": _sha(manifest),
         "size": len(manifest), "annotations": {"org.opencontainers.image.ref.name": "v1"}}]}))
    return _sha(manifest)


def build(ref: str, tmp: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    return subprocess.run([sys.executable, "-c", "from squall.sqshbuild.cli import main; main()",
                           "build", "--json", "--cache-dir", str(tmp / "cache"), ref],
                          capture_output=True, text=True, env=env, timeout=120)


def files_of(image: str) -> dict[str, str]:
    out = subprocess.run(["unsquashfs", "-lln", "-d", "R", image], capture_output=True,
                         text=True, check=True).stdout
    names = [ln.split(None, 5)[5][2:] for ln in out.splitlines() if " R/" in ln]
    return {n: subprocess.run(["unsquashfs", "-cat", image, n], capture_output=True,
                              text=True).stdout for n in names if "/" not in n and n and n != "etc"}


@pytest.mark.parametrize("kind", ["docker-archive", "oci-archive", "oci-dir"])
def test_local_sources_build(kind, tmp_path):
    if kind == "docker-archive":
        docker_archive(tmp_path / "img.tar")
        ref = f"docker-archive:{tmp_path / 'img.tar'}"
    else:
        digest = oci_layout(tmp_path / "layout")
        if kind == "oci-dir":
            ref = f"oci:{tmp_path / 'layout'}:v1"
        else:
            with tarfile.open(tmp_path / "oci.tar", "w") as tar:
                tar.add(tmp_path / "layout", arcname=".")
            ref = f"oci-archive:{tmp_path / 'oci.tar'}"
    proc = build(ref, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    if kind != "docker-archive":
        assert out["digest"] == digest
    else:
        assert out["digest"] == _sha(CONFIG)
    files = files_of(out["path"])
    assert files == {"two": "2", "shared": "new"}


def test_local_source_errors(tmp_path):
    proc = build(f"oci:{tmp_path}/missing", tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().endswith("does not exist: check the path")
    oci_layout(tmp_path / "layout")
    proc = build(f"oci:{tmp_path / 'layout'}:nope", tmp_path)
    assert "image or tag not found" in proc.stderr.strip().splitlines()[-1]
    (tmp_path / "junk.tar").write_bytes(b"junk" * 300)
    proc = build(f"docker-archive:{tmp_path / 'junk.tar'}", tmp_path)
    assert "docker save" in proc.stderr.strip().splitlines()[-1]


def test_parse_source_forms(tmp_path):
    assert parse_source("docker-archive:x.tar").kind == "docker-archive"
    s = parse_source(f"oci:{tmp_path}")
    assert (s.kind, s.path, s.tag) == ("oci-dir", str(tmp_path), "")
    s = parse_source("oci:/some/dir:v2")
    assert (s.path, s.tag) == ("/some/dir", "v2")
    s = parse_source("ubuntu:24.04")
    assert (s.kind, s.registry, s.repository, s.tag) == ("registry", "registry-1.docker.io",
                                                         "library/ubuntu", "24.04")
    s = parse_source("docker://$oauthtoken@nvcr.io#nvidia/pytorch:24.05-py3")
    assert (s.user, s.registry, s.repository, s.tag) == ("$oauthtoken", "nvcr.io",
                                                         "nvidia/pytorch", "24.05-py3")
    s = parse_source("login:5000/team/img@sha256:" + "a" * 64)
    assert (s.registry, s.digest, s.tag) == ("login:5000", "sha256:" + "a" * 64, "")
    assert parse_source("dockerd://squall-base:trixie").name == "squall-base:trixie"
    for bad in ("", "docker-archive:", "UPPER/Case", "oci:"):
        with pytest.raises(SquallError):
            parse_source(bad)
