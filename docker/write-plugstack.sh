#!/bin/bash
# Write the node's plugstack.conf: the squall plugin, pointed at real Enroot when the
# image has it (docker/enroot-debs), else at the Enroot-compatible test runtime.
set -euo pipefail
out=${1:-/etc/slurm/plugstack.conf}
enroot=/opt/enroot-test-runtime/bin/enroot
[ -e /etc/squall/real-enroot ] && enroot=/usr/bin/enroot
plugin=${SQUALL_PLUGIN:-/usr/local/lib/squall/spank_squall.so}
cat >"$out" <<CONF
# squall: Pyxis-compatible container steps (see spank/plugstack.conf.example)
required $plugin enroot=$enroot image_cache=/fsx/squall/images runtime_path=/run/squall sqshbuild=/usr/local/bin/sqshbuild
CONF
