"""Layers as tar archives for the layer-merge tests (test_sqshbuild_unpack.py,
test_sqshbuild_hostile.py): a layer from entries, a layer set read as streams or as files,
and what merge_layers makes of it as a tar or a directory."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

from squall.sqshbuild.unpack import DirSink, Layer, TarSink, merge_layers


def tar_layer(*entries) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            kind, name = e[0], e[1]
            info = tarfile.TarInfo(name)
            info.uid = info.gid = 1234
            info.mtime = 1_600_000_000
            data = None
            if kind == "file":
                data = e[2].encode() if isinstance(e[2], str) else e[2]
                info.size = len(data)
                info.mode = e[3] if len(e) > 3 else 0o644
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, (e[2] if len(e) > 2 else 0o755)
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, e[2]
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, e[2]
            elif kind == "chr":
                info.type = tarfile.CHRTYPE
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


_LAYER_DIR: list[Path] = []  # set by read_layers_as: layers are files there
LAYER_KINDS = ["stream", "file"]


def read_layers_as(kind: str, tmp_path_factory) -> Iterator[str]:
    """The body of a test module's autouse ``layer_kind`` fixture (params=LAYER_KINDS):
    layers() makes streams (archives: tarfile) or files (the layer cache: tarhead's reader
    and sendfile) while the test runs."""
    _LAYER_DIR[:] = [tmp_path_factory.mktemp("layers")] if kind != "stream" else []
    yield kind
    _LAYER_DIR.clear()


def layers(*tars: bytes) -> list[Layer]:
    if _LAYER_DIR:
        where = _LAYER_DIR[0] / f"set{len(list(_LAYER_DIR[0].iterdir()))}"
        return file_layers(where, *tars)
    return [Layer(f"sha256:{i:064d}", (lambda t=t: io.BytesIO(t))) for i, t in enumerate(tars)]


def merged_tar(ls: list[Layer], **kw) -> dict[str, tarfile.TarInfo]:
    out = io.BytesIO()
    merge_layers(ls, TarSink(out), **kw)
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        return {m.name: m for m in tar.getmembers()}


def merged_dir(ls: list[Layer], root: Path, **kw) -> set[str]:
    merge_layers(ls, DirSink(root), **kw)
    found = set()
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            found.add(os.path.relpath(os.path.join(dirpath, n), root))
    return found


def file_layers(tmp_path: Path, *tars: bytes) -> list[Layer]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = []
    for i, t in enumerate(tars):
        p = tmp_path / f"layer{i}.tar"
        p.write_bytes(t)
        out.append(Layer(f"sha256:{i:064d}", path=p))
    return out
