#!/usr/bin/env bash
# Build the node image $SQUALL_CLUSTER-node:$RELEASE (default squall-node:$RELEASE; # base image cached and shared by every checkout; see build-base.sh).
set -euo pipefail
release=${1:-${SQUALL_RELEASE:-trixie}}
top=$(cd "$(dirname "$0")/.." && pwd)
image="${SQUALL_CLUSTER:-squall}-node:$release"
bash "$top/docker/build-base.sh" "$release"
base=$(bash "$top/docker/build-base.sh" "$release" --name)
# NVIDIA Enroot's release source (../shared/deps/, docs/cluster.md), copied into the build
# context; the image builds and installs it.
tarball=${SQUALL_ENROOT_TARBALL:-$top/../shared/deps/enroot-4.1.2.tar.gz}
[ -f "$tarball" ] || {
  echo "build-images: no Enroot source at $tarball: put NVIDIA's enroot-4.1.2.tar.gz there or set SQUALL_ENROOT_TARBALL" >&2
  exit 2; }
cmp -s "$tarball" "$top/docker/enroot/enroot.tar.gz" || install -m 0644 "$tarball" "$top/docker/enroot/enroot.tar.gz"
echo "build-images: $image (from $base)"
docker build -q -f "$top/docker/node.Dockerfile" --build-arg "RELEASE=$release" --build-arg "BASE=$base" \
  -t "$image" "$top" >/dev/null
echo "build-images: $image ready"
