#!/bin/bash
# squall's Enroot TEST DOUBLE: Enroot's standard apt hook (hooks.d/10-aptfix.sh).
# Remapped to root in a Debian-based image, apt's sandbox user is root: dropping to _apt
# cannot work in a user namespace that maps one id.
set -eu
[ -f "$ENROOT_ROOTFS/etc/debian_version" ] || exit 0
[ -n "${ENROOT_REMAP_ROOT-}" ] || exit 0
mkdir -p "$ENROOT_ROOTFS/etc/apt/apt.conf.d"
printf 'APT::Sandbox::User "root";\n' >"$ENROOT_ROOTFS/etc/apt/apt.conf.d/enroot"
