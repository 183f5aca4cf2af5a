#!/usr/bin/env bash
# Build the node image $SQUALL_CLUSTER-node:$RELEASE (default squall-node:$RELEASE; # base image cached and shared by every checkout; see build-base.sh).
set -euo pipefail
release=${1:-${SQUALL_RELEASE:-trixie}}
top=$(cd "$(dirname "$0")/.." && pwd)
image="${SQUALL_CLUSTER:-squall}-node:$release"
bash "$top/docker/build-base.sh" "$release"
base=$(bash "$top/docker/build-base.sh" "$release" --name)
echo "build-images: $image (from $base)"
docker build -q -f "$top/docker/node.Dockerfile" --build-arg "RELEASE=$release" --build-arg "BASE=$base" \
  -t "$image" "$top" >/dev/null
echo "build-images: $image ready"
