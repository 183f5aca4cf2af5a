#!/usr/bin/env bash
# Build the node image squall-node:$RELEASE (base image cached; see build-base.sh).
set -euo pipefail
release=${1:-${SQUALL_RELEASE:-trixie}}
top=$(cd "$(dirname "$0")/.." && pwd)
bash "$top/docker/build-base.sh" "$release"
echo "build-images: squall-node:$release"
docker build -q -f "$top/docker/node.Dockerfile" --build-arg "RELEASE=$release" \
  -t "squall-node:$release" "$top" >/dev/null
echo "build-images: squall-node:$release ready"
