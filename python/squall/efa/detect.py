"""Python face of the C core's EFA module (``spank/core/efa.h``).

The same code the SPANK plugin and ``squall-efa-hook`` run: detection of a node
from its sysfs, /dev and /opt/amazon trees, the image scan, and the pure plan.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from squall.core import ERRLEN, c_text, core_error, errbuf, ffi, lib
from squall.errors import SquallError

MEMLOCK_MIN = 16 << 30
MODES = {
    "auto": lib.SQ_EFA_SETTING_AUTO,
    "require": lib.SQ_EFA_SETTING_REQUIRE,
    "off": lib.SQ_EFA_SETTING_OFF,
}


@dataclass
class EfaLib:
    """One library found on the host or in an image; ``dir`` empty means none."""

    prefix: str = ""
    dir: str = ""
    file: str = ""
    plugin_suffix: str = ""
    net_name: str = ""

    @property
    def found(self) -> bool:
        return bool(self.dir)


@dataclass
class EfaNode:
    """What detection found on a node (see ``struct sq_efa_node``)."""

    instance_type: str = ""
    n_devices: int = 0
    first_device: str = ""
    n_uverbs: int = 0
    profile_known: bool = False
    profile_max_efa: int = 0
    profile_gdr: int = -1
    profile_rdma_read: int = -1
    memlock: int = -1
    libfabric: EfaLib = field(default_factory=EfaLib)
    ofi_nccl: EfaLib = field(default_factory=EfaLib)
    opt_root: str = "/opt/amazon"


@dataclass
class EfaImage:
    """The image's own libfabric and aws-ofi-nccl (see ``struct sq_efa_image``)."""

    libfabric: EfaLib = field(default_factory=EfaLib)
    ofi_nccl: EfaLib = field(default_factory=EfaLib)


@dataclass
class Plan:
    """The composition for a step: variables, fstab lines, warnings."""

    active: bool
    env: list[str]
    fstab: list[str]
    warnings: list[str]

    def env_dict(self) -> dict[str, str]:
        return dict(line.split("=", 1) for line in self.env)


def _s(buf: object) -> str:
    return c_text(buf) or ""


def _lib_from_c(c: object) -> EfaLib:
    return EfaLib(**{f.name: _s(getattr(c, f.name)) for f in dataclasses.fields(EfaLib)})


def _lib_to_c(py: EfaLib, c: object) -> None:
    for f in dataclasses.fields(EfaLib):
        setattr(c, f.name, getattr(py, f.name).encode())


def _node_to_c(node: EfaNode) -> object:
    c = ffi.new("struct sq_efa_node *")
    for f in dataclasses.fields(EfaNode):
        value = getattr(node, f.name)
        if isinstance(value, EfaLib):
            _lib_to_c(value, getattr(c, f.name))
        elif isinstance(value, str):
            setattr(c, f.name, value.encode())
        else:
            setattr(c, f.name, int(value))
    return c


def detect(sysfs_root: str = "/sys", dev_root: str = "/dev",
           opt_root: str = "/opt/amazon") -> EfaNode:
    """Detect EFA on this node, reading the given roots (tests point them at trees)."""
    # the char[] buffers must outlive the call: cffi frees them with their last reference
    bufs = [ffi.new("char[]", s.encode()) for s in (sysfs_root, dev_root, opt_root)]
    roots = ffi.new("struct sq_efa_roots *", dict(zip(("sysfs", "dev", "opt"), bufs, strict=True)))
    c = ffi.new("struct sq_efa_node *")
    err = errbuf()
    if lib.sq_efa_detect(roots, c, err, ERRLEN) != 0:
        raise core_error(err)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(EfaNode):
        value = getattr(c, f.name)
        if f.name in ("libfabric", "ofi_nccl"):
            out[f.name] = _lib_from_c(value)
        elif f.type in ("str",):
            out[f.name] = _s(value)
        elif f.type == "bool":
            out[f.name] = bool(value)
        else:
            out[f.name] = int(value)
    return EfaNode(**out)


def scan_image(rootfs: str) -> EfaImage:
    """List an image root for its own libfabric and aws-ofi-nccl."""
    c = ffi.new("struct sq_efa_image *")
    err = errbuf()
    if lib.sq_efa_image_scan(rootfs.encode(), c, err, ERRLEN) != 0:
        raise core_error(err)
    return EfaImage(libfabric=_lib_from_c(c.libfabric), ofi_nccl=_lib_from_c(c.ofi_nccl))


def managed_variables() -> list[str]:
    """The variables a plan may set (a user value for any of them wins)."""
    names = []
    i = 0
    while (p := lib.sq_efa_var_name(i)) != ffi.NULL:
        names.append(ffi.string(p).decode())
        i += 1
    return names


def plan(node: EfaNode, image: EfaImage | None, mode: str = "auto",
         user_set: list[str] | tuple[str, ...] = (), nccl_debug: str | None = None,
         ld_library_path: str | None = None) -> Plan:
    """The plan for a step; ``image=None`` is the host-level plan made before the container."""
    if mode not in MODES:
        raise SquallError(f"unknown EFA mode '{mode}': use auto, require or off")
    cnode = _node_to_c(node)
    cimage = ffi.NULL
    if image is not None:
        cimage = ffi.new("struct sq_efa_image *")
        _lib_to_c(image.libfabric, cimage.libfabric)
        _lib_to_c(image.ofi_nccl, cimage.ofi_nccl)
    bufs = {
        "user_set": ffi.new("char[]", ",".join(user_set).encode()),
        "nccl_debug": ffi.new("char[]", nccl_debug.encode()) if nccl_debug else ffi.NULL,
        "ld_library_path": (ffi.new("char[]", ld_library_path.encode())
                            if ld_library_path else ffi.NULL),
    }
    req = ffi.new("struct sq_efa_request *", {"mode": MODES[mode], **bufs})
    out = ffi.new("struct sq_efa_plan *")
    err = errbuf()
    if lib.sq_efa_plan(cnode, cimage, req, out, err, ERRLEN) != 0:
        raise core_error(err)
    try:
        return Plan(active=bool(out.active),
                    env=_s(out.env).splitlines(),
                    fstab=_s(out.fstab).splitlines(),
                    warnings=_s(out.warnings).splitlines())
    finally:
        lib.sq_efa_plan_free(out)
