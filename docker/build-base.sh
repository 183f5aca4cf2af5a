#!/usr/bin/env bash
# Build the node base image squall-base:$RELEASE from Debian packages alone:
# debootstrap a minbase root filesystem, install every package in the chroot
# (apt resolves what debootstrap's resolver cannot), then `docker import`.
# Cached: does nothing when the image exists and was built from the same package list
# (its label squall.packages); FORCE=1 rebuilds anyway. The image is tagged with a hash of
# docker/node-packages.txt (squall-base:RELEASE-KEY), so checkouts whose lists differ each
# keep their own instead of rebuilding each other's; squall-base:RELEASE names the first one
# built. `build-base.sh RELEASE --name` prints the tag for this checkout's list.
set -euo pipefail
release=${1:-trixie}
plain="squall-base:${release}"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
here=$(cd "$(dirname "$0")" && pwd)

case "$release" in
  bookworm|trixie|sid) ;;
  *) echo "build-base: unknown release '$release': use bookworm (Slurm 22.05), trixie (24.11) or sid (26.05)" >&2; exit 2 ;;
esac

mapfile -t packages < <(grep -v '^#' "$here/node-packages.txt" | grep -v '^ *$')
key=$(printf '%s\n' "${packages[@]}" | sort | sha256sum | cut -c1-16)
image="squall-base:${release}-${key}"
if [ "${2:-}" = --name ]; then echo "$image"; exit 0; fi

# Several checkouts share the base image: one builds it, the others wait and reuse it.
exec 9>"/var/lock/squall-base-$release.lock"
flock 9

if [ "${FORCE:-0}" != 1 ] && docker image inspect "$image" >/dev/null 2>&1; then
  echo "build-base: $image exists (cached)"
  exit 0
fi
have=$(docker image inspect -f '{{ index .Config.Labels "squall.packages" }}' "$plain" 2>/dev/null || true)
if [ "${FORCE:-0}" != 1 ] && [ "$have" = "$key" ]; then
  docker tag "$plain" "$image"
  echo "build-base: $image is $plain (cached)"
  exit 0
fi

work=$(mktemp -d /var/tmp/squall-rootfs.XXXXXX)
cleanup() {
  for m in proc sys dev/pts dev; do umount -l "$work/rootfs/$m" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

echo "build-base: debootstrap $release into $work/rootfs"
debootstrap --variant=minbase "$release" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  tail -n 20 "$work/debootstrap.log" >&2; echo "build-base: debootstrap failed (log above)" >&2; exit 1; }

mount -t proc proc "$work/rootfs/proc"
mount --rbind /sys "$work/rootfs/sys"
mount --bind /dev "$work/rootfs/dev"
mount --bind /dev/pts "$work/rootfs/dev/pts"
cp /etc/resolv.conf "$work/rootfs/etc/resolv.conf"
# No daemon may start in the chroot while packages install.
printf '#!/bin/sh\nexit 101\n' >"$work/rootfs/usr/sbin/policy-rc.d"
chmod +x "$work/rootfs/usr/sbin/policy-rc.d"

echo "build-base: apt-get install ${#packages[@]} packages"
chroot "$work/rootfs" /usr/bin/env DEBIAN_FRONTEND=noninteractive \
  sh -c 'apt-get -o Acquire::Check-Valid-Until=false update -q && apt-get install -y -q --no-install-recommends "$@" && apt-get clean' \
  sh "${packages[@]}" >"$work/apt.log" 2>&1 || {
  tail -n 30 "$work/apt.log" >&2; echo "build-base: apt-get install in the chroot failed (log above)" >&2; exit 1; }
rm -f "$work/rootfs/usr/sbin/policy-rc.d"
rm -rf "$work/rootfs/var/lib/apt/lists/"*

for m in dev/pts dev sys proc; do umount -l "$work/rootfs/$m"; done
echo "build-base: docker import as $image"
tar -C "$work/rootfs" -c . | docker import \
  -c 'ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  -c "LABEL squall.packages=$key" \
  - "$image" >/dev/null
docker image inspect "$plain" >/dev/null 2>&1 || docker tag "$image" "$plain"
echo "build-base: $image ready"
