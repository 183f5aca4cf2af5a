#!/usr/bin/env bash
# Build the node image $SQUALL_CLUSTER-node:$RELEASE (default squall-node:$RELEASE; # base image cached and shared by every checkout; see build-base.sh).
set -euo pipefail
release=${1:-${SQUALL_RELEASE:-trixie}}
top=$(cd "$(dirname "$0")/.." && pwd)
image="${SQUALL_CLUSTER:-squall}-node:$release"
# NVIDIA Enroot's release source, pinned in deps/pins.txt, fetched and checked by
# docker/fetch-dep.py (upstream, or the mirror SQUALL_DEPS_MIRROR names; docs/cluster.md)
# into the build context, first (a missing source fails before the base image's minutes);
# the image builds and installs it.
python3 "$top/docker/fetch-dep.py" enroot "$top/docker/enroot/enroot.tar.gz" >/dev/null
bash "$top/docker/build-base.sh" "$release"
base=$(bash "$top/docker/build-base.sh" "$release" --name)
echo "build-images: $image (from $base)"
docker build -q -f "$top/docker/node.Dockerfile" --build-arg "RELEASE=$release" --build-arg "BASE=$base" \
  -t "$image" "$top" >/dev/null
echo "build-images: $image ready"
