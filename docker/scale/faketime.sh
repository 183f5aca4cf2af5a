#!/bin/bash
# faketime.sh OFFSET CMD...: CMD with its wall clock OFFSET off (libfaketime: -12m, +90s),
# its monotonic clock untouched: a node whose clock is minutes off (scale-node.sh).
set -euo pipefail
offset=$1; shift
lib=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -1)
[ -n "$lib" ] || { echo "faketime.sh: libfaketime is not installed (apt install faketime)" >&2; exit 1; }
# NO_FAKE_STAT: stat returns the times as stored (libfaketime shifts them by default)
export LD_PRELOAD="$lib" FAKETIME="$offset" FAKETIME_DONT_FAKE_MONOTONIC=1 NO_FAKE_STAT=1
exec "$@"
