#!/bin/bash
# Print "MAJOR.MINOR NEXT" of the Slurm whose headers the plugin is compiled against
# (e.g. "24.11 24.12"): a SPANK plugin loads only on the release it was built for, so the
# packages depend on ">= MAJOR.MINOR, << NEXT" of the site's Slurm package.
# Usage: slurm-version.sh [SLURM_INCLUDE]   (default /usr/include)
set -euo pipefail
header=${1:-/usr/include}/slurm/slurm_version.h
num=$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" { print $3 }' "$header" 2>/dev/null) || true
if [ -z "$num" ]; then
  echo "slurm-version: no SLURM_VERSION_NUMBER in $header: install the Slurm headers (libslurm-dev, slurm-devel)" >&2
  exit 2
fi
major=$(( (num >> 16) & 0xff ))
minor=$(( (num >> 8) & 0xff ))
printf '%d.%02d %d.%02d\n' "$major" "$minor" "$major" $((minor + 1))
