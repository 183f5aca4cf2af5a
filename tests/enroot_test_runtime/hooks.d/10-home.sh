#!/bin/bash
# squall's Enroot TEST DOUBLE: Enroot's standard home hook (hooks.d/10-home.sh).
# With ENROOT_MOUNT_HOME, the user's home is bound into the container: remapped to root,
# at /root with HOME=/root; otherwise at its own path, with HOME set to it.
set -eu
[ -n "${ENROOT_MOUNT_HOME-}" ] || exit 0
[ -n "${HOME-}" ] || HOME=$(getent passwd "$(id -u)" | cut -d: -f6)
src=${HOME// /\\040}
if [ -n "${ENROOT_REMAP_ROOT-}" ]; then
    printf '%s /root none x-create=dir,rbind,rw,nosuid\n' "$src" >>"$ENROOT_MOUNTS"
    printf 'HOME=/root\n' >>"$ENROOT_ENVIRON"
else
    printf '%s %s none x-create=dir,rbind,rw,nosuid\n' "$src" "$src" >>"$ENROOT_MOUNTS"
    printf 'HOME=%s\n' "$HOME" >>"$ENROOT_ENVIRON"
fi
