#!/usr/bin/env bash
# CI: the source distribution is complete and installs where squall is not checked out.
# `python -m build` makes the sdist and the wheel in dist/; a clean venv (no system
# site-packages, not in the checkout) installs the sdist, which compiles the C core from
# the sdist alone; then the three commands, the core, and what must not be installed
# (test doubles, build scripts) are checked.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
top=$PWD
mkdir -p dist
rm -f dist/squall-*.tar.gz dist/squall-*.whl
"$py" -m build --outdir dist . >dist/build.log 2>&1 || {
  tail -n 30 dist/build.log >&2; echo "check-dist: python -m build failed (log above)" >&2; exit 1; }
sdist=$(ls dist/squall-*.tar.gz)
wheel=$(ls dist/squall-*.whl)
echo "check-dist: built $sdist $wheel"

venv=$(mktemp -d /tmp/squall-dist-check.XXXXXX)
trap 'rm -rf "$venv"' EXIT
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q "$top/$sdist" >"$venv/pip.log" 2>&1 || {
  tail -n 30 "$venv/pip.log" >&2; echo "check-dist: pip install of the sdist failed" >&2; exit 1; }
cd "$venv"
for cmd in squall sqshbuild mksbatch; do
  "$venv/bin/$cmd" --version
  "$venv/bin/$cmd" --help >/dev/null
done
"$venv/bin/python" - "$top/$wheel" <<'PY'
import pathlib, sys, zipfile
import squall
from squall import core
root = pathlib.Path(squall.__file__).parent
assert not str(root).startswith(sys.argv[1].rsplit("/dist/", 1)[0]), f"imported {root}"
assert core.parse_image_ref("ubuntu:24.04").repository == "library/ubuntu", "C core"
installed = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py"))
in_wheel = [n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.endswith(".py")]
for names, where in ((installed, "the sdist install"), (in_wheel, "the wheel")):
    bad = [n for n in names if "fake" in n or "_build" in n or n.startswith("tests/")]
    assert not bad, f"{where} holds test doubles or build scripts: {bad}"
print(f"check-dist: sdist installed in a clean venv: {len(installed)} modules, C core OK, "
      "no test doubles or build scripts")
PY
