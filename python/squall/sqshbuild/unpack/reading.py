"""Open a layer's tar for the merge: a file of the layer cache (members read at known
offsets, data copied in the kernel) or a stream."""

from __future__ import annotations

import tarfile
from collections.abc import Iterable
from typing import BinaryIO

from squall.errors import SquallError
from squall.sqshbuild import tarhead
from squall.sqshbuild.unpack.entries import COPY_CHUNK, Layer

Opened = tuple[BinaryIO, Iterable[tarfile.TarInfo], tarfile.TarFile | None]


def open_layer(layer: Layer) -> Opened:
    """The layer's stream, its members, and the TarFile when members come from a stream."""
    if layer.path is None and layer.resolve is not None:
        layer.path = layer.resolve()  # a download: waits until the layer is verified
    if layer.path is not None:
        try:
            stream: BinaryIO = open(layer.path, "rb")
        except OSError as exc:
            raise SquallError(f"cannot read layer {layer.digest} at {layer.path}: "
                              f"{exc.strerror}") from None
    elif layer.open is not None:
        stream = layer.open()
    else:
        raise SquallError(f"layer {layer.digest} has no data")
    try:
        if layer.path is not None:
            return stream, tarhead.Reader(stream), None
        tar = tarfile.open(fileobj=stream, mode="r|", bufsize=COPY_CHUNK)
        return stream, tar, tar
    except tarfile.TarError as exc:
        stream.close()
        raise SquallError(f"layer {layer.digest} is not a tar archive ({exc}): "
                          "the image is corrupt; rebuild or re-push it") from None
    except BaseException:
        stream.close()
        raise
