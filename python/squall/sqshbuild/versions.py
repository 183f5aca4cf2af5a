"""Versions of the stack an image carries, read from its files while the layers are merged.

CUDA (``cuda*/version.json`` or ``version.txt``), cuDNN (``cudnn_version*.h`` or
``libcudnn.so.X.Y.Z``), NCCL (``libnccl.so.X.Y.Z``), aws-ofi-nccl (a path component
``aws-ofi-nccl-X.Y.Z`` or its pkg-config file), libfabric (``libfabric.pc`` or
``libfabric.so.X.Y.Z``), Python (``python3.X`` library directories, the highest) and PyTorch
(``torch/version.py``).
"""

from __future__ import annotations

import posixpath
import re
import tarfile

from squall.errors import SquallError
from squall.sqshbuild import jsonbound

SMALL = 256 * 1024

_SO = {
    "nccl": re.compile(r"^libnccl\.so\.(\d+\.\d+\.\d+)$"),
    "cudnn": re.compile(r"^libcudnn\.so\.(\d+\.\d+\.\d+)$"),
    "libfabric": re.compile(r"^libfabric\.so\.(\d+\.\d+\.\d+)$"),
}
_OFI_DIR = re.compile(r"aws-ofi-nccl[-_/]v?(\d+\.\d+\.\d+)")
_PYDIR = re.compile(r"(?:^|/)lib/python(3\.\d+)(?:/|$)")
_CUDA_JSON = re.compile(r"(?:^|/)cuda[^/]*/version\.json$")
_CUDA_TXT = re.compile(r"(?:^|/)cuda[^/]*/version\.txt$")


# Every file whose data wants_data asks for ends with one of these...
_DATA_ENDINGS = ("version.json", "version.txt", ".h", "torch/version.py", ".pc")
# ...and every name that observe reads a version from holds one of these.
_NAME_WORDS = (".so.", "aws-ofi-nccl", "lib/python3.")


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


class VersionProbe:
    """An observer for :func:`squall.sqshbuild.unpack.merge_layers`."""

    def __init__(self) -> None:
        self.found: dict[str, str] = {}

    def _set(self, key: str, value: str, prefer_high: bool = True) -> None:
        old = self.found.get(key)
        if old is None or (prefer_high and _vkey(value) > _vkey(old)):
            self.found[key] = value

    def wants_data(self, path: str, info: tarfile.TarInfo) -> bool:
        if not info.isfile() or info.size > SMALL or not path.endswith(_DATA_ENDINGS):
            return False
        base = posixpath.basename(path)
        return bool(
            _CUDA_JSON.search(path) or _CUDA_TXT.search(path)
            or base.startswith("cudnn_version") and base.endswith(".h")
            or path.endswith("torch/version.py")
            or base in ("libfabric.pc", "aws-ofi-nccl.pc", "nccl-net-ofi.pc"))

    def observe(self, path: str, info: tarfile.TarInfo, data: bytes | None) -> None:
        if data is None and not any(word in path for word in _NAME_WORDS):
            return  # nothing below can match (checked first: this runs for every entry)
        base = posixpath.basename(path)
        for key, pattern in _SO.items():
            m = pattern.match(base)
            if m and key == "libfabric":
                self.found.setdefault(key, m.group(1))  # libfabric.pc, when present, wins
            elif m:
                self._set(key, m.group(1))
        m = _OFI_DIR.search(path)
        if m:
            self._set("aws-ofi-nccl", m.group(1))
        m = _PYDIR.search(path)
        if m and (info.isdir() or info.isfile()):
            self._set("python", m.group(1))
        if data is not None:
            self._read_text(path, base, data.decode("utf-8", "replace"))

    def _read_text(self, path: str, base: str, text: str) -> None:
        """Versions written in a small file's text (what :meth:`wants_data` asked for)."""
        if _CUDA_JSON.search(path):
            try:
                v = jsonbound.loads(text, path).get("cuda", {}).get("version")
                if v:
                    self._set("cuda", str(v))
            except (SquallError, AttributeError):
                pass
        elif _CUDA_TXT.search(path):
            m = re.search(r"CUDA Version (\d+\.\d+(?:\.\d+)?)", text)
            if m:
                self._set("cuda", m.group(1))
        elif base.startswith("cudnn_version"):
            parts = [re.search(rf"#define CUDNN_{k}\s+(\d+)", text) for k in
                     ("MAJOR", "MINOR", "PATCHLEVEL")]
            if all(parts):
                self.found["cudnn"] = ".".join(p.group(1) for p in parts if p)
        elif path.endswith("torch/version.py"):
            m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
            if m:
                self._set("pytorch", m.group(1))
        elif base.endswith(".pc"):
            m = re.search(r"^Version:\s*(\S+)", text, re.M)
            if m:
                self.found["libfabric" if base == "libfabric.pc" else "aws-ofi-nccl"] = m.group(1)
