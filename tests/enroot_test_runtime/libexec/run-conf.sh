#!/bin/bash
# Child of start-ns.sh (test double), inside the container's namespaces before the root
# switch: collects the --conf file's environ(), mounts() and rc(), appends the -e lines
# (ENVLINE...), then runs the hooks (executable hooks.d/*.sh, system then user, then the
# conf's hooks()), which therefore see the whole environment, -e included, as in Enroot.
# Usage: run-conf.sh CONF SCRATCH [ENVLINE...]; stdout is discarded by the caller.
# ENROOT_ROOTFS, ENROOT_PID, ENROOT_ENVIRON and ENROOT_MOUNTS are set by the caller.
# Exit 3: a hook failed (already reported); any other failure: the conf file broke.
set -euo pipefail
# shellcheck source=settings.sh
source "${BASH_SOURCE[0]%/*}/settings.sh"
# shellcheck source=environ.sh
source "${BASH_SOURCE[0]%/*}/environ.sh"
conf="$1" scratch="$2"
shift 2
export ENROOT_ROOTFS ENROOT_PID ENROOT_ENVIRON ENROOT_MOUNTS
: >>"$ENROOT_MOUNTS"

hook_failed() {
    printf '[ERROR] Hook %s exited with return code %s: fix the hook (its output is above)\n' "$1" "$2" >&2
    exit 3
}

if [[ -n $conf ]]; then
    # shellcheck source=/dev/null
    source "$conf"
    if declare -F environ >/dev/null; then environ >>"$ENROOT_ENVIRON"; fi
    if declare -F mounts >/dev/null; then mounts >"$scratch/conf.fstab"; fi
    if declare -F rc >/dev/null; then
        # As Enroot does: the body of rc() is the script (not what it prints).
        body="$(declare -f rc)"
        body="${body#*$'\n'}"
        body="${body#*$'\n'}"
        printf '%s\n' "${body%$'\n'*}" >"$scratch/rc"
    fi
fi
if (($#)); then printf '%s\n' "$@" >>"$ENROOT_ENVIRON"; fi
format_environ "$ENROOT_ENVIRON"   # as Enroot does, in case hooks rely on it

# As Enroot hands them to hooks: a boolean setting is "y" when on and empty when off.
for key in ENROOT_MOUNT_HOME ENROOT_REMAP_ROOT ENROOT_ROOTFS_WRITABLE ENROOT_RESTRICT_DEV \
           ENROOT_ALLOW_SUPERUSER ENROOT_NATIVE_OVERLAYFS; do
    if [[ -n ${!key-} ]] && is_true "${!key}"; then export "$key=y"; else export "$key="; fi
done

for hook in "$ENROOT_SYSCONF_PATH"/hooks.d/*.sh "$ENROOT_CONFIG_PATH"/hooks.d/*.sh; do
    [[ -f $hook && -x $hook ]] || continue
    rc=0
    "$hook" || rc=$?
    ((rc == 0)) || hook_failed "$hook" "$rc"
done

if declare -F hooks >/dev/null; then
    # Not in a condition, so that set -e stays in force inside hooks().
    set +e
    (set -e; hooks)
    rc=$?
    set -e
    ((rc == 0)) || hook_failed "hooks() of $conf" "$rc"
fi
