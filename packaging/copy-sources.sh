#!/usr/bin/env bash
# Copy squall's sources from the tree TOP into DEST for a package build, never its build
# outputs: in a git checkout, the tracked and new files (git ls-files); in a tree without
# .git (a release tarball, `git archive`), every file but those the .gitignore files name.
# Usage: packaging/copy-sources.sh TOP DEST
set -euo pipefail
top=$(cd "$1" && pwd -P)
dest=$2
mkdir -p "$dest"
if [ "$(git -C "$top" rev-parse --show-toplevel 2>/dev/null)" = "$top" ]; then
  git -C "$top" ls-files -z -co --exclude-standard \
    | tar -C "$top" --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$dest" -xf -
  exit 0
fi
# Each .gitignore's patterns as tar exclusions (unanchored: a name matches at any depth),
# under the directory of that .gitignore; comments and negations are dropped.
excludes=$(mktemp)
trap 'rm -f "$excludes"' EXIT
(cd "$top" && find . -name .git -prune -o -name .gitignore -type f -print) | while read -r f; do
  dir=${f#./}; dir=${dir%.gitignore}
  sed -e '/^#/d' -e '/^!/d' -e '/^[[:space:]]*$/d' -e 's|^/||' -e 's|/$||' -e "s|^|$dir|" "$top/$f"
done >"$excludes"
tar -C "$top" --exclude=.git --exclude-from="$excludes" -cf - . | tar -C "$dest" -xf -
