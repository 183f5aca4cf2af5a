"""``squall doctor``: is this node ready for container training jobs?

Each check returns pass/fail with what it saw and, on failure, the fix. Meant to be
run by hand, as a Slurm HealthCheckProgram or from a prolog (docs/efa.md).
"""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from squall.efa import detect as efa
from squall.errors import SquallError, UsageError


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class DoctorOptions:
    sysfs_root: str = "/sys"
    dev_root: str = "/dev"
    opt_root: str = "/opt/amazon"
    shared_fs: tuple[str, ...] = ("/fsx",)
    enroot: str = "enroot"
    efa: bool = True          # False on nodes without EFA: its checks are skipped


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n // 1024} KiB"


def check_efa_devices(node: efa.EfaNode) -> Check:
    where = node.instance_type or "unknown instance type"
    if node.n_devices == 0:
        return Check("efa-devices", False, f"no EFA device ({where})",
                     "use an EFA-enabled instance type with EFA interfaces attached, "
                     "or run with --no-efa on nodes without EFA")
    if node.n_uverbs == 0:
        return Check("efa-devices", False,
                     f"{node.n_devices} EFA device(s) but no /dev/infiniband/uverbs*",
                     "load ib_uverbs (modprobe ib_uverbs) or reinstall the EFA driver")
    if node.profile_known and node.n_devices < node.profile_max_efa:
        return Check("efa-devices", False,
                     f"{where} has {node.profile_max_efa} EFA interfaces, found "
                     f"{node.n_devices}",
                     "attach every EFA interface (launch template) or replace the node")
    return Check("efa-devices", True,
                 f"{node.n_devices} EFA device(s), {node.n_uverbs} uverbs ({where})")


def check_efa_libraries(node: efa.EfaNode) -> Check:
    missing = []
    if not node.libfabric.found:
        missing.append(f"libfabric under {node.opt_root}/efa")
    if not node.ofi_nccl.found:
        missing.append(f"aws-ofi-nccl under {node.opt_root}/ofi-nccl")
    if missing:
        return Check("efa-libraries", False, "no " + " and no ".join(missing),
                     "run the EFA installer on the node (it installs both), or ship them in "
                     "every image")
    return Check("efa-libraries", True,
                 f"{node.libfabric.dir}/{node.libfabric.file}, "
                 f"{node.ofi_nccl.dir}/{node.ofi_nccl.file}")


def check_memlock(node: efa.EfaNode) -> Check:
    if node.memlock < 0:
        return Check("memlock", True, "unlimited")
    if node.memlock < efa.MEMLOCK_MIN:
        return Check("memlock", False, f"{_gib(node.memlock)}, below 16 GiB",
                     "set LimitMEMLOCK=infinity in slurmd's unit and `* - memlock "
                     "unlimited` in /etc/security/limits.d")
    return Check("memlock", True, _gib(node.memlock))


def check_shared_fs(path: str) -> Check:
    name = f"shared-fs {path}"
    if not os.path.isdir(path):
        return Check(name, False, "not a directory",
                     f"mount the shared filesystem on {path} (or name yours with --shared-fs)")
    if not os.path.ismount(path):
        return Check(name, False, "a directory, but nothing is mounted there",
                     f"mount the shared filesystem on {path} (check /etc/fstab, lfs df)")
    if not os.access(path, os.R_OK | os.X_OK):
        return Check(name, False, "mounted but not readable", f"check the permissions of {path}")
    return Check(name, True, "mounted")


def check_enroot(enroot: str) -> Check:
    try:
        proc = subprocess.run([enroot, "version"], capture_output=True, text=True, timeout=20)
    except FileNotFoundError:
        return Check("enroot", False, f"'{enroot}' not found",
                     "install Enroot (enroot and enroot+caps packages) or name it with --enroot")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("enroot", False, f"'{enroot} version' did not run: {exc}",
                     "check the Enroot installation")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Check("enroot", False, f"'{enroot} version' exited {proc.returncode}: {last}",
                     "check the Enroot installation and its configuration")
    version = (proc.stdout.strip().splitlines() or ["?"])[0]
    return Check("enroot", True, f"version {version}")


def check_fuse(dev_root: str) -> Check:
    path = Path(dev_root) / "fuse"
    try:
        st = path.stat()
    except OSError:
        return Check("/dev/fuse", False, f"{path} missing",
                     "load the fuse module (modprobe fuse); squashfs images mount through it")
    if not stat.S_ISCHR(st.st_mode):
        return Check("/dev/fuse", False, f"{path} is not a character device",
                     "recreate it: mknod -m 666 /dev/fuse c 10 229")
    try:
        os.close(os.open(path, os.O_RDWR))
    except OSError as exc:
        return Check("/dev/fuse", False, f"{path} not usable by uid {os.getuid()}: "
                     f"{exc.strerror}", "make it mode 0666 (the fuse package does)")
    return Check("/dev/fuse", True, "usable")


def run_checks(opts: DoctorOptions) -> list[Check]:
    # Detection reads a missing root as "no EFA"; given by hand, a missing one is a typo.
    for flag, path, what in (("--sysfs-root", opts.sysfs_root, "sysfs (default /sys)"),
                             ("--dev-root", opts.dev_root, "/dev (default /dev)")):
        if not os.path.isdir(path):
            raise UsageError(f"{flag} {path} does not exist: give the node's {what}")
    checks: list[Check] = []
    node = efa.detect(opts.sysfs_root, opts.dev_root, opts.opt_root)
    if opts.efa:
        checks += [check_efa_devices(node), check_efa_libraries(node), check_memlock(node)]
    checks += [check_shared_fs(p) for p in opts.shared_fs]
    checks += [check_enroot(opts.enroot), check_fuse(opts.dev_root)]
    return checks


def table(checks: list[Check]) -> str:
    rows = [("CHECK", "RESULT", "DETAIL")] + [
        (c.name, "pass" if c.ok else "FAIL", c.detail + ("" if c.ok else f" -- fix: {c.fix}"))
        for c in checks]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    return "\n".join(f"{r[0].ljust(w0)}  {r[1].ljust(w1)}  {r[2]}" for r in rows)


def verdict(checks: list[Check]) -> None:
    """Raise the one-line summary when any check failed."""
    failed = [c for c in checks if not c.ok]
    if failed:
        first = failed[0]
        raise SquallError(f"{len(failed)} of {len(checks)} checks failed "
                          f"({', '.join(c.name for c in failed)}); first: {first.name}: "
                          f"{first.detail}: {first.fix}")
