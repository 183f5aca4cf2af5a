#!/usr/bin/env bash
# Build the PyTorch image squall-pytorch:trixie-KEY (docker/pytorch-image.Dockerfile) from
# Debian's python3-torch, once: KEY is a hash of the Dockerfile, the script that cuts the
# root filesystem and the base image it starts from, so a checkout whose inputs are the
# same reuses the image (as build-base.sh does with its package list) and one whose inputs
# differ builds its own. squall-pytorch:trixie names the newest one built. Always trixie's
# torch (2.6), whatever release the nodes run: the image is the user's, not the node's.
# `build-pytorch.sh --name` prints the tag for this checkout.
set -euo pipefail
release=trixie
here=$(cd "$(dirname "$0")" && pwd)
base=$(bash "$here/build-base.sh" "$release" --name)
if [ "${1:-}" != --name ]; then bash "$here/build-base.sh" "$release" >/dev/null; fi
base_id=$(docker image inspect -f '{{.Id}}' "$base" 2>/dev/null || echo "missing")
key=$(cat "$here/pytorch-image.Dockerfile" "$here/pytorch-rootfs.sh" "$here/pytorch-nolibuv.py" <(echo "$base_id") |
  sha256sum | cut -c1-16)
image="squall-pytorch:${release}-${key}"
if [ "${1:-}" = --name ]; then echo "$image"; exit 0; fi

exec 9>"/var/lock/squall-pytorch-$release.lock"
flock 9
if docker image inspect "$image" >/dev/null 2>&1; then
  echo "build-pytorch: $image exists (cached)"
  exit 0
fi
echo "build-pytorch: $image from $base (Debian's python3-torch; a few minutes, once)"
start=$SECONDS
docker build -q -f "$here/pytorch-image.Dockerfile" --build-arg "RELEASE=$release" \
  --build-arg "BASE=$base" -t "$image" "$here/.." >/dev/null
# What the cut may have missed shows here, not in a job: torch and gloo load, torchrun runs.
docker run --rm --network none "$image" sh -c 'python3 -c "import torch, torch.distributed as d
assert d.is_gloo_available(), \"no gloo\"" && torchrun --help >/dev/null' || {
  docker rmi "$image" >/dev/null; echo "build-pytorch: $image does not run torch (above)" >&2; exit 1; }
docker tag "$image" "squall-pytorch:$release"
size=$(docker image inspect -f '{{.Size}}' "$image")
echo "build-pytorch: $image ready in $((SECONDS - start)) s, $((size >> 20)) MiB"
