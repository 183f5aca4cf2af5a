"""Name resolution in the Enroot TEST DOUBLE's containers, as Enroot gives it (issue 20).

Enroot's default install ships ``mounts.d/20-config.fstab``: the host's ``/etc/hosts``,
``/etc/hostname`` and ``/etc/resolv.conf`` bound read-only (``x-create=file,bind,ro,nosuid,
nodev,noexec,private``) into every container, and ``/etc/machine-id`` the same way with
``nofail,silent`` so that a host without one still starts containers. Without these a rank
cannot resolve another node's name and a torchrun rendezvous by host name cannot work.
The double ships the same file and reads it from ``$ENROOT_SYSCONF_PATH/mounts.d`` as
Enroot does; mount targets are resolved inside the root filesystem as Enroot's
``enroot-mount`` resolves them (an image's ``/etc/resolv.conf`` is often a symbolic link).
Runs as root on the host, like test_enroot_test_runtime.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import test_enroot_test_runtime as rt

# The runtime tests' fixtures, registered in this module by name.
prerequisites, base_tree, env, image = rt.prerequisites, rt.base_tree, rt.env, rt.image
enroot, make_image, one_line_error = rt.enroot, rt.make_image, rt.one_line_error

CONFIG_FSTAB = rt.RUNTIME_DIR / "mounts.d" / "20-config.fstab"
HOST_FILES = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/etc/machine-id")
BIND_OPTS = {"x-create=file", "bind", "ro", "nosuid", "nodev", "noexec", "private"}


def install_config_fstab(env: dict[str, str]) -> None:
    assert CONFIG_FSTAB.is_file(), f"{CONFIG_FSTAB} is missing"
    shutil.copy(CONFIG_FSTAB, Path(env["ENROOT_SYSCONF_PATH"]) / "mounts.d")


def fstab_entries() -> dict[str, list[str]]:
    """Target -> [source, type, options] of the shipped file (comments skipped)."""
    entries = {}
    for line in CONFIG_FSTAB.read_text().splitlines():
        fields = line.split()
        if fields and not fields[0].startswith("#"):
            entries[fields[1]] = fields[:1] + fields[2:4]
    return entries


def mountinfo_of(out: str, target: str) -> tuple[set[str], list[str]]:
    """Mount options and optional fields (propagation) of TARGET in a mountinfo dump."""
    for line in out.splitlines():
        f = line.split()
        if len(f) > 6 and f[4] == target:
            optional = f[6:f.index("-")]
            return set(f[5].split(",")), optional
    pytest.fail(f"{target} is not a mount point in the container: {out}")


def test_shipped_fstab_has_enroot_s_default_lines():
    """The lines of Enroot 4.1's conf/mounts/20-config.fstab (its fields are the facts)."""
    entries = fstab_entries()
    assert sorted(entries) == sorted(HOST_FILES)
    for target, (src, fstype, opts) in entries.items():
        assert src == target and fstype == "none"
        extra = {"nofail", "silent"} if target == "/etc/machine-id" else set()
        assert set(opts.split(",")) == BIND_OPTS | extra, (target, opts)


def test_host_name_files_bound_read_only_with_the_host_s_content(env, base_tree, tmp_path):
    install_config_fstab(env)
    # An image with /etc/hosts of its own (the host's wins) and no /etc/hostname (created).
    img = make_image(base_tree, tmp_path / "names.sqsh", **{"etc/hosts": "10.9.9.9 image-only\n"})
    present = [f for f in HOST_FILES if os.path.exists(f)]
    script = "".join(
        f'echo "== {f}"; cat {f}; (echo x >> {f}) 2>/dev/null && echo WRITABLE || echo REFUSED;'
        for f in present) + " echo '== mountinfo'; cat /proc/self/mountinfo"
    r = enroot(env, "start", str(img), "sh", "-c", script)
    assert r.stderr == ""
    parts = r.stdout.split("== ")[1:]
    for f, part in zip(present, parts[:-1], strict=True):
        name, body = part.split("\n", 1)
        assert name == f
        assert body == Path(f).read_text() + "REFUSED\n", (f, body)
    mountinfo = parts[-1]
    for f in present:
        opts, optional = mountinfo_of(mountinfo, f)
        assert {"ro", "nosuid", "nodev", "noexec"} <= opts, (f, opts)
        assert not [o for o in optional if o.startswith(("shared:", "master:"))], (f, optional)
    # Nothing of the host's files changed, and the image still holds its own /etc/hosts.
    assert Path("/etc/hosts").read_text() != "10.9.9.9 image-only\n"


def test_missing_host_file_with_nofail_silent_does_not_fail_the_start(env, image, tmp_path):
    """The machine-id line as shipped, its source missing: the start goes on without a word
    and the target exists, empty, as Enroot's enroot-mount creates it before mounting."""
    src, fstype, opts = fstab_entries()["/etc/machine-id"]
    missing = tmp_path / "no-such-machine-id"
    (Path(env["ENROOT_SYSCONF_PATH"]) / "mounts.d/20-config.fstab").write_text(
        f"{missing} /etc/machine-id {fstype} {opts} 0 -1\n")
    r = enroot(env, "start", str(image), "sh", "-c",
               "ls /etc/machine-id; stat -c %s /etc/machine-id; grep -c ' /etc/machine-id ' "
               "/proc/self/mountinfo; true")
    assert r.stdout.split() == ["/etc/machine-id", "0", "0"], r.stdout
    assert r.stderr == ""
    assert not missing.exists()


def test_a_missing_source_without_nofail_still_fails(env, image, tmp_path):
    missing = tmp_path / "no-such-hosts"
    (Path(env["ENROOT_SYSCONF_PATH"]) / "mounts.d/20-config.fstab").write_text(
        f"{missing} /etc/hosts none x-create=file,bind,ro,nosuid,nodev,noexec,private 0 -1\n")
    line = one_line_error(enroot(env, "start", str(image), "true", check=False))
    assert "Mount source does not exist" in line and str(missing) in line


def test_symlinked_targets_resolve_inside_the_root_filesystem(env, base_tree, tmp_path):
    """As in images built on systemd distributions: /etc/resolv.conf an absolute link into
    /run (dangling in the image), /etc/hosts a relative one. Enroot resolves both inside the
    rootfs: the container sees the host's files there, and nothing lands on the host."""
    install_config_fstab(env)
    tree = tmp_path / "linked-tree"
    shutil.copytree(base_tree, tree, symlinks=True)
    (tree / "etc/resolv.conf").symlink_to("/run/squall-t-resolve/stub-resolv.conf")
    (tree / "srv").mkdir()
    (tree / "etc/hosts").symlink_to("../srv/hosts")
    img = tmp_path / "linked.sqsh"
    srv_hosts_existed = Path("/srv/hosts").exists()
    subprocess.run(["mksquashfs", str(tree), str(img), "-noappend", "-quiet", "-no-progress",
                    "-comp", "lzo", "-noD"], check=True, stdout=subprocess.DEVNULL)
    r = enroot(env, "start", str(img), "sh", "-c",
               "cat /etc/resolv.conf; echo ==; cat /etc/hosts; echo ==;"
               " grep -o ' /run/squall-t-resolve/stub-resolv.conf \\| /srv/hosts ' "
               "/proc/self/mountinfo")
    resolv, hosts, mounted = r.stdout.split("==\n")
    assert resolv == Path("/etc/resolv.conf").read_text()
    assert hosts == Path("/etc/hosts").read_text()
    assert sorted(mounted.split()) == ["/run/squall-t-resolve/stub-resolv.conf", "/srv/hosts"]
    assert not Path("/run/squall-t-resolve").exists()
    assert Path("/srv/hosts").exists() == srv_hosts_existed


def test_a_link_out_of_the_root_filesystem_is_refused(env, base_tree, tmp_path):
    """A target whose link climbs above the container root: Enroot refuses to resolve it."""
    install_config_fstab(env)
    tree = tmp_path / "escape-tree"
    shutil.copytree(base_tree, tree, symlinks=True)
    (tree / "etc/hostname").symlink_to("../" * 30 + "squall-t-escape")
    img = tmp_path / "escape.sqsh"
    subprocess.run(["mksquashfs", str(tree), str(img), "-noappend", "-quiet", "-no-progress",
                    "-comp", "lzo", "-noD"], check=True, stdout=subprocess.DEVNULL)
    line = one_line_error(enroot(env, "start", str(img), "true", check=False))
    assert "/etc/hostname" in line and "outside the container" in line
    assert not Path("/squall-t-escape").exists()


def test_created_container_gets_the_host_files_too(env, image):
    install_config_fstab(env)
    enroot(env, "create", "-n", "names", str(image))
    r = enroot(env, "start", "names", "cat", "/etc/hostname", "/etc/resolv.conf")
    assert r.stdout == Path("/etc/hostname").read_text() + Path("/etc/resolv.conf").read_text()
    # x-create made the mount targets in the container's directory, as with Enroot.
    data = Path(env["SQUALL_T_BASE"]) / "data/names/etc"
    assert (data / "hostname").is_file() and (data / "hostname").read_text() == ""
    enroot(env, "remove", "-f", "names")
