#!/usr/bin/env bash
# Build squall-pytorch-ft:trixie-KEY (docker/pytorch-ft-image.Dockerfile): the PyTorch image
# (docker/build-pytorch.sh) with NVIDIA's ft_launcher, nvidia-resiliency-ext $version from
# PyPI. The wheels are downloaded here, on the host (whose pip has the site's proxy and CA
# settings; a build container may not), into a temporary build context. KEY: a hash of the
# Dockerfile, this script and the PyTorch image's tag; cached like that image.
# `build-pytorch-ft.sh --name` prints the tag for this checkout. Exit status 3: PyPI could not
# be reached (the test that uses the image is then skipped, saying so).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=0.7.0
torch=$(bash "$here/build-pytorch.sh" --name)
key=$(cat "$here/pytorch-ft-image.Dockerfile" "$here/build-pytorch-ft.sh" <(echo "$torch") |
  sha256sum | cut -c1-16)
image="squall-pytorch-ft:trixie-${key}"
if [ "${1:-}" = --name ]; then echo "$image"; exit 0; fi
bash "$here/build-pytorch.sh" >/dev/null

exec 9>"/var/lock/squall-pytorch-ft.lock"
flock 9
if docker image inspect "$image" >/dev/null 2>&1; then
  echo "build-pytorch-ft: $image exists (cached)"
  exit 0
fi
start=$SECONDS
ctx=$(mktemp -d /var/tmp/squall-pytorch-ft.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
cp "$here/pytorch-ft-image.Dockerfile" "$ctx/Dockerfile"
plat=(--only-binary=:all: --implementation cp --platform manylinux_2_39_x86_64
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64)
# No cp313 wheel exists: the cp312 one, renamed py3-none-any (its one .so is CUPTI's)
no_pypi() {
  echo "build-pytorch-ft: cannot download from PyPI (above): ft_launcher's image needs it" >&2
  exit 3
}
pip download -q --no-deps "${plat[@]}" --python-version 3.12 -d "$ctx/ft" \
  "nvidia-resiliency-ext==$version" || no_pypi
mkdir -p "$ctx/wheels"
mv "$ctx"/ft/nvidia_resiliency_ext-"$version"-*.whl \
  "$ctx/wheels/nvidia_resiliency_ext-$version-py3-none-any.whl"
# Its requirements (setup's Requires-Dist without the "attribution" extra), for Python 3.13,
# less what the PyTorch image has from Debian: torch, numpy, psutil, pyyaml, packaging.
pip download -q "${plat[@]}" --python-version 3.13 -d "$ctx/wheels" defusedxml \
  'fastapi>=0.100.0' 'grpcio>=1.76.0,<2' 'grpcio-tools>=1.76.0,<2' 'httpx>=0.24.0' \
  'nvidia-ml-py>=12.570.86' 'protobuf>=4.22.0' 'pydantic>=2' 'pydantic-settings>=2' \
  'slowapi>=0.1.9' 'uvicorn[standard]>=0.20.0' || no_pypi
echo "build-pytorch-ft: $image from $torch ($(find "$ctx/wheels" -name '*.whl' | wc -l) wheels)"
docker build -q --build-arg "BASE=$(bash "$here/build-base.sh" trixie --name)" \
  --build-arg "TORCH=$torch" -t "$image" "$ctx" >/dev/null
docker run --rm --network none "$image" sh -c 'ft_launcher --help >/dev/null' || {
  docker rmi "$image" >/dev/null; echo "build-pytorch-ft: $image has no working ft_launcher" >&2; exit 1; }
docker tag "$image" "squall-pytorch-ft:trixie"
size=$(docker image inspect -f '{{.Size}}' "$image")
echo "build-pytorch-ft: $image ready in $((SECONDS - start)) s, $((size >> 20)) MiB"
