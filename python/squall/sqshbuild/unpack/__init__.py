"""Merge image layers into one root filesystem, top layer first, exactly as overlay semantics say.

The layers are read once each, from the top layer down (:mod:`.merge`). An entry of a lower
layer is kept only if no upper layer shadows it (:mod:`.tree`): the same path present above,
a whiteout (``.wh.NAME``) for it or one of its parents, an opaque marker (``.wh..wh..opq``)
on one of its parents, or a parent replaced by a non-directory. Every kept entry is final,
so the merged result can be written in one pass either as a tar stream (for ``tar2sqfs``)
or into a directory (for ``mksquashfs``): see :mod:`.sinks`.

Normalisation follows what ``enroot import`` produces: every file owned by root, ``u+r`` on
everything and ``u+x`` where any execute bit is set (``chmod u+rX``), ``u+w`` on
directories, setuid/setgid bits kept, extended attributes dropped, device nodes skipped and
nothing under ``dev/`` kept.

Entries that would escape the root are refused with the layer digest and the entry named:
absolute names, ``..`` components, and a path written through a symlink (or other
non-directory) that the same layer created. Hard links are written last, once their target
is known to be in the image (:mod:`.links`).
"""

from squall.sqshbuild.unpack.entries import Entry, EntryObserver, Layer, Sink
from squall.sqshbuild.unpack.merge import merge_layers
from squall.sqshbuild.unpack.sinks import DirSink, TarSink

__all__ = ["DirSink", "Entry", "EntryObserver", "Layer", "Sink", "TarSink", "merge_layers"]
