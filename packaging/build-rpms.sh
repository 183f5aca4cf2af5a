#!/usr/bin/env bash
# Build squall's RPMs with rpmbuild and packaging/squall.spec, against this machine's Slurm
# headers; the .rpm files go to OUTDIR. On a machine that is not RPM-based (Debian's `rpm`
# package: CI) the BuildRequires cannot be checked and are skipped (--nodeps): the build
# itself must still succeed there.
# Usage: packaging/build-rpms.sh [OUTDIR] [rpmbuild options...]   (default OUTDIR: dist/)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$top/dist}")
shift || true
command -v rpmbuild >/dev/null || { echo "build-rpms: rpmbuild not found (apt install rpm, dnf install rpm-build)" >&2; exit 2; }
version=$(awk '$1 == "Version:" { print $2 }' "$top/packaging/squall.spec")
work=$(mktemp -d /tmp/squall-rpm.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{SOURCES,BUILD,RPMS,SRPMS,SPECS,src/squall-"$version"} "$out"
# the source tarball: the sources, never build outputs (a checkout or a tree without .git)
bash "$top/packaging/copy-sources.sh" "$top" "$work/src/squall-$version"
tar -C "$work/src" -czf "$work/SOURCES/squall-$version.tar.gz" "squall-$version"
opts=(--define "_topdir $work")
if ! rpm -q rpm >/dev/null 2>&1; then
  opts+=(--nodeps)                                   # no RPM database: not an RPM system
  command -v find-debuginfo >/dev/null || [ -x /usr/lib/rpm/find-debuginfo.sh ] \
    || opts+=(--define "debug_package %{nil}")
fi
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$work" LANG=C.UTF-8 \
  rpmbuild -bb "${opts[@]}" "$@" "$top/packaging/squall.spec" >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log" >&2; echo "build-rpms: rpmbuild failed (log above)" >&2; exit 1; }
find "$work/RPMS" -name '*.rpm' -exec mv {} "$out/" \;
for rpm in "$out"/*.rpm; do echo "build-rpms: $rpm"; done
