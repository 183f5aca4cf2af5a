#!/usr/bin/env bash
# Build squall's Debian packages (debhelper, dpkg-buildpackage) against this machine's
# Slurm headers, from a clean copy of the sources; the .deb files go to OUTDIR.
# Usage: packaging/build-debs.sh [OUTDIR]   (default: dist/ of the checkout)
# Needs the Build-Depends of debian/control (`apt-get build-dep ./` or .ci/apt-packages.txt).
# Debian's own python3 builds them (PATH is reset), never a venv's or pyenv's.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$top/dist}")
work=$(mktemp -d /tmp/squall-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$out"
# the sources, never build outputs (a checkout or a tree without .git)
bash "$top/packaging/copy-sources.sh" "$top" "$work/src"
cd "$work/src"
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$work" LANG=C.UTF-8 \
  DEB_BUILD_OPTIONS="parallel=$(nproc)" \
  dpkg-buildpackage -b -us -uc >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log" >&2; echo "build-debs: dpkg-buildpackage failed (log above)" >&2; exit 1; }
mv "$work"/*.deb "$out/"
for deb in "$out"/*.deb; do echo "build-debs: $deb"; done
