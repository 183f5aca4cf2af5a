#!/usr/bin/env bash
# Build and install NVIDIA Enroot from its released source tree (a tarball such as
# ../shared/deps/enroot-4.1.2.tar.gz) into a Debian node image, as NVIDIA's .deb lays it out
# (/usr/bin, /usr/lib/enroot, /etc/enroot, /usr/share/enroot), with the file capabilities
# its enroot+caps package sets (pkg/deb/PACKAGE+caps.postinst, the Makefile's setcap target)
# so that a plain user can `enroot import`: cap_sys_admin+pe on enroot-mksquashovlfs and
# cap_sys_admin,cap_mknod+pe on enroot-aufs2ovlfs.
# The release archive has no deps/ submodules: Debian's makeself and libbsd stand in for
# them, and the utilities are linked against glibc (FORCE_GLIBC) instead of a bundled musl.
# Usage: build-enroot.sh TARBALL
set -euo pipefail
tarball=${1:?usage: build-enroot.sh TARBALL}
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
tar -xzf "$tarball" -C "$src" --strip-components=1
cd "$src"
mkdir -p deps/dist/makeself/bin deps/dist/libbsd
cp /usr/bin/makeself deps/dist/makeself/bin/enroot-makeself
cp "/usr/lib/$(gcc -dumpmachine)/libbsd.a" deps/dist/libbsd/
# MAKE=true: skip the deps sub-make (its sources are not in the archive).
# (Its `git submodule update` fails outside a git checkout; the Makefile ignores that.)
make FORCE_GLIBC=1 MAKE=true CFLAGS="-D_GNU_SOURCE= -include bsd/string.h" \
  prefix=/usr sysconfdir=/etc install >build.log 2>&1 || {
  tail -n 30 build.log >&2; echo "build-enroot: building Enroot from $tarball failed (log above)" >&2; exit 1; }
# enroot+caps: as its postinst does, on the installed binaries (setcap: libcap2-bin, which
# iproute2 in docker/node-packages.txt depends on, as enroot+caps does).
setcap cap_sys_admin+pe "$(command -v enroot-mksquashovlfs)"
setcap cap_sys_admin,cap_mknod+pe "$(command -v enroot-aufs2ovlfs)"
enroot version
