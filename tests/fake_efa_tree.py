"""Stand-in for EFA hardware (a test double): directory trees that look like a node.

No EFA device exists where squall is tested, so detection is pointed at prepared
trees instead of ``/sys``, ``/dev`` and ``/opt/amazon``. The trees hold what the
detection reads -- the DMI product name, ``class/infiniband/X/device/driver``
symlinks, ``infiniband/uverbs*`` entries (regular files: device nodes need root),
and library files whose bytes carry the strings the real libraries carry -- and
nothing that would make them usable by libfabric or NCCL.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# What a plugin library carries: its init banner and its ncclNet name string.
# 1.12 and newer name the network "Libfabric"; older ones "AWS Libfabric".
PLUGIN_NET_NAMES = {"new": b"Libfabric", "old": b"AWS Libfabric"}


@dataclass
class FakeNode:
    """The three roots of a stand-in node, as detection and the hook take them."""

    sysfs: Path
    dev: Path
    opt: Path


def _write(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)


def fake_plugin_bytes(wording: str = "new", version: str = "1.14.0") -> bytes:
    """Bytes standing in for libnccl-net-ofi.so: only the strings detection looks for."""
    return (b"\x7fELF stand-in for aws-ofi-nccl, not a library\0"
            + f"NET/OFI Initializing aws-ofi-nccl {version}".encode() + b"\0"
            + PLUGIN_NET_NAMES[wording] + b"\0")


def make_libs(opt: Path, *, libfabric: bool = True, ofi_nccl: bool = True,
              ofi_dir: str = "ofi-nccl", libdir: str = "lib", wording: str = "new",
              suffixed: bool = True) -> None:
    """Host-style /opt/amazon: efa/lib/libfabric.so.1 and <ofi_dir>/lib/libnccl-net*.so."""
    opt.mkdir(parents=True, exist_ok=True)
    if libfabric:
        _write(opt / "efa" / libdir / "libfabric.so.1", b"\x7fELF stand-in libfabric\0")
        (opt / "efa" / libdir / "libfabric.so").symlink_to("libfabric.so.1")
    if ofi_nccl:
        d = opt / ofi_dir / libdir
        if suffixed:
            _write(d / "libnccl-net-ofi.so", fake_plugin_bytes(wording))
            (d / "libnccl-net.so").symlink_to("libnccl-net-ofi.so")
        else:
            _write(d / "libnccl-net.so", fake_plugin_bytes(wording))


def make_node(root: Path, instance_type: str | None, n_devices: int, *,
              uverbs: bool = True, libfabric: bool = True, ofi_nccl: bool = True,
              other_devices: tuple[str, ...] = (), **lib_options: object) -> FakeNode:
    """A stand-in node: ``n_devices`` EFA devices (driver ``efa``) plus ``other_devices``
    (driver ``mlx5_core``), their uverbs entries, and host libraries."""
    node = FakeNode(root / "sys", root / "dev", root / "opt" / "amazon")
    node.sysfs.mkdir(parents=True, exist_ok=True)
    node.dev.mkdir(parents=True, exist_ok=True)
    if instance_type is not None:
        _write(node.sysfs / "devices/virtual/dmi/id/product_name", instance_type + "\n")
    ib = node.sysfs / "class" / "infiniband"
    ib.mkdir(parents=True, exist_ok=True)
    names = [(f"rdmap{16 + i}s27", "efa") for i in range(n_devices)]
    names += [(name, "mlx5_core") for name in other_devices]
    for i, (name, driver) in enumerate(names):
        dev = ib / name / "device"
        dev.mkdir(parents=True)
        (dev / "driver").symlink_to(f"../../../../bus/pci/drivers/{driver}")
        if uverbs:
            _write(node.dev / "infiniband" / f"uverbs{i}", b"")
    if libfabric or ofi_nccl:
        make_libs(node.opt, libfabric=libfabric, ofi_nccl=ofi_nccl,
                  **lib_options)  # type: ignore[arg-type]
    return node


def make_image(root: Path, *, libfabric: bool = False, ofi_nccl: bool = False,
               ofi_dir: str = "opt/amazon/ofi-nccl/lib", wording: str = "new",
               ld_library_path: str | None = "/usr/local/cuda/lib64") -> Path:
    """A stand-in image root: its own libraries where the EFA installer puts them,
    and /etc/environment as `enroot import` writes it."""
    root.mkdir(parents=True, exist_ok=True)
    if libfabric:
        _write(root / "opt/amazon/efa/lib/libfabric.so.1", b"\x7fELF stand-in libfabric\0")
    if ofi_nccl:
        _write(root / ofi_dir / "libnccl-net-ofi.so", fake_plugin_bytes(wording))
    env = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
    if ld_library_path is not None:
        env += f"LD_LIBRARY_PATH={ld_library_path}\n"
    _write(root / "etc/environment", env)
    return root
