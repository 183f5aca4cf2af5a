"""Images from disk and from the local Docker daemon: docker-archive, oci-archive, OCI layout.

Each yields a :class:`LocalImage`: the config, the layers (bottom first) as openers of their
uncompressed tar streams, and a digest to key the cache (the manifest digest for OCI, the
config digest, i.e. the image ID, for ``docker save`` archives).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

from squall.errors import SquallError
from squall.sqshbuild.jsonbound import check as check_depth
from squall.sqshbuild.refs import Source
from squall.sqshbuild.registry import INDEX_TYPES, select_platform

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class _ProcReader:
    """stdout of a decompressor process; close() waits and reports a failure."""

    def __init__(self, proc: subprocess.Popen[bytes], what: str) -> None:
        self._proc = proc
        self._what = what
        assert proc.stdout is not None
        self._out: IO[bytes] = proc.stdout

    def read(self, n: int = -1) -> bytes:
        return self._out.read(n)

    def close(self) -> None:
        self._out.close()
        rc = self._proc.wait()
        if rc not in (0, -13):  # -13: SIGPIPE when the reader stopped early
            err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
            raise SquallError(f"cannot decompress {self._what} ({err.strip() or rc}): the cached "
                              "layer is corrupt; delete it and build again")
        if self._proc.stderr:
            self._proc.stderr.close()


def open_blob_file(path: Path) -> BinaryIO:
    """An uncompressed tar stream from a cached layer blob (gzip, zstd or plain tar)."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic[:2] == GZIP_MAGIC or magic == ZSTD_MAGIC:
        tool = "gzip" if magic[:2] == GZIP_MAGIC else "zstd"
        exe = shutil.which(tool)
        if exe is None:
            if tool == "gzip":
                return gzip.open(path, "rb")  # type: ignore[return-value]
            raise SquallError(f"layer {path.name} is zstd-compressed and zstd is not installed: "
                              "apt install zstd")
        stdin = open(path, "rb")
        try:
            proc = subprocess.Popen([exe, "-dc"], stdin=stdin, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        finally:
            stdin.close()
        return _ProcReader(proc, f"layer {path.name}")  # type: ignore[return-value]
    return open(path, "rb")


def _extract(tar: tarfile.TarFile, name: str) -> IO[bytes] | None:
    """A member by name, with or without a leading ``./``."""
    for candidate in (name, f"./{name}", name.removeprefix("./")):
        try:
            return tar.extractfile(candidate)
        except KeyError:
            continue
    raise KeyError(name)


def open_member(archive: Path, member: str) -> BinaryIO:
    """A layer inside a tar archive, decompressed if it is gzip."""
    outer = tarfile.open(archive, "r:")
    try:
        raw = _extract(outer, member)
    except KeyError:
        outer.close()
        raise SquallError(f"{archive} has no member {member}: the archive is incomplete") from None
    if raw is None:
        outer.close()
        raise SquallError(f"{archive} member {member} is not a file: the archive is broken")
    head = raw.read(4)
    raw.seek(0)
    if head[:2] == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    if head == ZSTD_MAGIC:
        raise SquallError(f"{archive}: zstd layers inside archives are not supported; "
                          "push the image to a registry instead")
    return raw  # type: ignore[return-value]


@dataclass
class LocalImage:
    key: str  # digest that names the cache entry
    config: dict[str, Any]
    config_digest: str
    layers: list[tuple[str, Callable[[], BinaryIO]]]
    platform: str = ""
    manifest_digest: str = ""


def _json(data: bytes, what: str) -> Any:
    check_depth(data, what)
    try:
        return json.loads(data)
    except ValueError:
        raise SquallError(f"{what} is not valid JSON: the image is corrupt") from None


def _object(data: bytes, what: str) -> dict[str, Any]:
    doc = _json(data, what)
    if not isinstance(doc, dict):
        raise SquallError(f"{what} is not a JSON object: the image is corrupt")
    return doc


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def load_docker_archive(path: Path) -> LocalImage:
    if not path.is_file():
        raise SquallError(f"docker archive {path} does not exist: check the path")
    try:
        with tarfile.open(path, "r:") as tar:
            manifest = _json(tar.extractfile("manifest.json").read(),  # type: ignore[union-attr]
                             f"{path}:manifest.json")
            entry = manifest[0]
            config_bytes = tar.extractfile(entry["Config"]).read()  # type: ignore[union-attr]
            layers = list(entry["Layers"])
    except (tarfile.TarError, KeyError, IndexError, TypeError, AttributeError):
        raise SquallError(f"{path} is not a 'docker save' archive (no usable manifest.json): "
                          "create it with 'docker save IMAGE -o FILE.tar'") from None
    digest = _sha(config_bytes)
    config = _object(config_bytes, f"{path}:{entry['Config']}")
    openers: list[tuple[str, Callable[[], BinaryIO]]] = [
        (f"{path.name}:{m}", functools.partial(open_member, path, m)) for m in layers]
    return LocalImage(key=digest, config=config, config_digest=digest, layers=openers,
                      platform=f"{config.get('os', 'linux')}/{config.get('architecture', '')}")


class _Layout:
    """Blob access for an OCI layout, in a directory or inside a tar archive."""

    def __init__(self, root: Path, archive: bool) -> None:
        self.root = root
        self.archive = archive

    def read(self, name: str) -> bytes:
        if self.archive:
            try:
                with tarfile.open(self.root, "r:") as tar:
                    member = _extract(tar, name)
                    if member is None:
                        raise KeyError(name)
                    return member.read()
            except (KeyError, tarfile.TarError):
                raise SquallError(f"{self.root} has no {name}: not an OCI archive, or "
                                  "incomplete") from None
        try:
            return (self.root / name).read_bytes()
        except OSError:
            raise SquallError(f"{self.root}/{name} is missing: not an OCI layout "
                              "directory, or incomplete") from None

    def blob_name(self, digest: str) -> str:
        algo, _, hexpart = digest.partition(":")
        return f"blobs/{algo}/{hexpart}"

    def open_blob(self, digest: str) -> BinaryIO:
        name = self.blob_name(digest)
        if self.archive:
            return open_member(self.root, name)
        return open_blob_file(self.root / name)


def _index_manifests(layout: _Layout, path: Path, tag: str) -> list[dict[str, Any]]:
    """The index's manifests, those tagged ``tag`` when one is asked for."""
    index = _object(layout.read("index.json"), f"{path}/index.json")
    manifests = index.get("manifests") or []
    if not isinstance(manifests, list) or not all(
            isinstance(m, dict) and isinstance(m.get("digest"), str)
            and isinstance(m.get("annotations") or {}, dict) for m in manifests):
        raise SquallError(f"{path}/index.json is malformed (its manifests must be objects "
                          "with a digest): the layout is corrupt")
    if tag:
        manifests = [m for m in manifests
                     if (m.get("annotations") or {}).get("org.opencontainers.image.ref.name")
                     == tag]
        if not manifests:
            raise SquallError(f"image or tag not found: {path} has no image tagged {tag!r}")
    if not manifests:
        raise SquallError(f"{path} holds no image (index.json lists no manifests)")
    return manifests


def _image_manifest(layout: _Layout, path: Path, tag: str,
                    arch: str) -> tuple[str, str, dict[str, Any]]:
    """(digest, platform, document) of the image manifest for ``arch``, verified."""
    manifests = _index_manifests(layout, path, tag)
    if len(manifests) > 1 and all("platform" in m for m in manifests):
        digest, platform = select_platform({"manifests": manifests}, arch, str(path), tag or "")
    else:
        digest, platform = manifests[0]["digest"], ""
    body = layout.read(layout.blob_name(digest))
    if _sha(body) != digest:
        raise SquallError(f"digest mismatch: manifest {digest} in {path}: the layout is corrupt")
    doc = _object(body, f"manifest {digest}")
    if doc.get("mediaType") in INDEX_TYPES or "manifests" in doc:
        digest, platform = select_platform(doc, arch, str(path), tag or "")
        body = layout.read(layout.blob_name(digest))
        doc = _object(body, f"manifest {digest}")
    return digest, platform, doc


def load_oci(path: Path, tag: str, archive: bool, arch: str) -> LocalImage:
    if archive and not path.is_file():
        raise SquallError(f"OCI archive {path} does not exist: check the path")
    if not archive and not path.is_dir():
        raise SquallError(f"OCI layout directory {path} does not exist: check the path")
    layout = _Layout(path, archive)
    digest, platform, doc = _image_manifest(layout, path, tag, arch)
    try:
        config_digest = doc["config"]["digest"]
        layer_digests = [x["digest"] for x in doc["layers"]]
    except (KeyError, TypeError):
        raise SquallError(f"manifest {digest} in {path} is malformed") from None
    if not isinstance(config_digest, str) or not all(isinstance(d, str) for d in layer_digests):
        raise SquallError(f"manifest {digest} in {path} is malformed (a digest that is not "
                          "text)")
    config_bytes = layout.read(layout.blob_name(config_digest))
    if _sha(config_bytes) != config_digest:
        raise SquallError(f"digest mismatch: config {config_digest} in {path}: layout corrupt")
    config = _object(config_bytes, f"config {config_digest}")
    openers: list[tuple[str, Callable[[], BinaryIO]]] = [
        (str(d), functools.partial(layout.open_blob, d)) for d in layer_digests]
    return LocalImage(key=digest, config=config, config_digest=config_digest, layers=openers,
                      platform=platform, manifest_digest=digest)


def save_from_daemon(name: str, workdir: Path) -> Path:
    """``docker save`` through the Docker SDK into a file under ``workdir``."""
    try:
        # untyped, and optional: Any whether or not it is installed where mypy runs
        docker: Any = importlib.import_module("docker")
        importlib.import_module("docker.errors")
    except ImportError:
        raise SquallError("dockerd:// needs the Docker SDK for Python: pip install docker "
                          "(or apt install python3-docker)") from None
    try:
        client = docker.from_env()
        image = client.images.get(name)
    except docker.errors.ImageNotFound:
        raise SquallError(f"image or tag not found: the Docker daemon has no image {name!r}; "
                          "docker pull it first") from None
    except docker.errors.DockerException as exc:
        raise SquallError(f"cannot reach the Docker daemon ({exc}): is it running and may this "
                          "user use its socket?") from None
    fd, tmp = tempfile.mkstemp(prefix="dockerd-", suffix=".tar", dir=workdir)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in image.save(named=True):
                out.write(chunk)
    except OSError as exc:
        os.unlink(tmp)
        raise SquallError(f"cannot write {tmp}: {exc.strerror}") from None
    return Path(tmp)


def load_source(src: Source, arch: str, workdir: Path) -> LocalImage:
    if src.kind == "docker-archive":
        return load_docker_archive(Path(src.path))
    if src.kind == "oci-archive":
        return load_oci(Path(src.path), "", True, arch)
    if src.kind == "oci-dir":
        return load_oci(Path(src.path), src.tag, False, arch)
    if src.kind == "dockerd":
        return load_docker_archive(save_from_daemon(src.name, workdir))
    raise SquallError(f"{src.text!r} is not a local image source")
