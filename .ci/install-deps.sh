#!/usr/bin/env bash
# Install what `make demo` and `make test` need on a Debian machine with Docker Engine and
# docker-compose: Debian packages (.ci/apt-packages.txt) and squall itself, editable, with
# its test extras. Run as root. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
mapfile -t packages < <(grep -v '^#' .ci/apt-packages.txt | grep -v '^ *$')
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${missing[*]}"
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
# squall must be importable from this checkout (an editable install of another clone
# would test that clone's code); make test measures coverage with coverage.py >= 7.10
# (patch = subprocess in pyproject.toml).
if ! python3 -c 'import os, sys, squall._core, pytest, docker, ruff, mypy, build, hypothesis, lizard
import coverage, xdist
sys.exit(not squall._core.__file__.startswith(os.getcwd() + "/")
         or coverage.version_info < (7, 10))' 2>/dev/null; then
  echo "install-deps: pip install -e .[test]"
  python3 -m pip install -q -U "setuptools>=70" wheel
  python3 -m pip install -q --no-build-isolation -e ".[test]"
fi
# NVIDIA Enroot on the host, built from its release source as the node images build it
# (docker/enroot/build-enroot.sh): the unit tier starts containers with the real runtime.
# The source is the release pinned in deps/pins.txt, fetched and checked by
# docker/fetch-dep.py (SQUALL_DEPS_MIRROR=DIR on a machine without internet).
version=$(awk '$1 == "enroot" { print $2 }' deps/pins.txt)
if [ "$(enroot version 2>/dev/null)" != "$version" ]; then
  tarball=$(python3 docker/fetch-dep.py enroot)
  echo "install-deps: build and install Enroot from $tarball"
  bash docker/enroot/build-enroot.sh "$tarball"
fi
