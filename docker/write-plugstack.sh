#!/bin/bash
# Write the node's plugstack.conf: the packaged snippet's line (squall-slurm-plugin:
# the plugin in Slurm's PluginDir, sqshbuild=/usr/bin/sqshbuild), with the mini cluster's
# arguments added (Enroot as the node image installs it, docker/enroot/).
set -euo pipefail
out=${1:-/etc/slurm/plugstack.conf}
snippet=${SQUALL_SNIPPET:-/usr/share/squall/plugstack.conf.d/squall.conf}
enroot=/usr/bin/enroot
line=$(grep -m1 '^required ' "$snippet") || {
  echo "write-plugstack: no 'required' line in $snippet (is squall-slurm-plugin installed?)" >&2; exit 1; }
cat >"$out" <<CONF
# squall: Pyxis-compatible container steps ($snippet, with the mini cluster's arguments)
$line enroot=$enroot image_cache=/fsx/squall/images runtime_path=/run/squall
CONF
