#!/bin/bash
# squall's Enroot TEST DOUBLE (not NVIDIA Enroot): the "fuse-shim" of `enroot start IMAGE`,
# shaped as Enroot 4.1.2's: a bash in its own process group (start-ns.sh starts it with job
# control on) that runs the FUSE daemons in the foreground as its own children, then stops
# itself. Its lifetime then ties the mounts to the container's main process, its parent,
# through the kernel's rules for orphaned process groups: when the main process goes, the
# group (stopped) gets SIGHUP and SIGCONT, this shell runs on to its exit, and the EXIT trap
# kills the group. The same happens when anything else sends it SIGCONT (e.g. Slurm
# signalling every process of a step), and the daemons die of the signals they do not handle
# (SIGUSR1, SIGUSR2, SIGALRM) or unmount on SIGTERM and SIGHUP, as in Enroot: the test
# runtime must fail where the real one fails.
#
# Usage: fuse-shim.sh IMAGE SCRATCH ROOT   (inside the container's namespaces)
#   SCRATCH/lower: squashfuse -f -o uid=EUID,gid=EGID IMAGE (files owned by the user)
#   ROOT: kernel overlayfs (ENROOT_NATIVE_OVERLAYFS, when the kernel allows it) or
#         fuse-overlayfs -f, upper and work dirs in SCRATCH
# Exit 1 with one line on stderr when a daemon fails; stops itself (SIGSTOP) when mounted.
set -uo pipefail
ENROOT_TEST_LIBEXEC="${BASH_SOURCE[0]%/*}"
# shellcheck source=settings.sh
source "$ENROOT_TEST_LIBEXEC/settings.sh"
image="$1" S="$2" R="$3"
trap 'kill -KILL 0 2>/dev/null' EXIT
exec {sleep_fd}<> <(:)   # read -t on this never-ready pipe sleeps without forking

shim_fail() {
    printf '%s\n' "$*" >&2
    exit 1
}

# wait_mounted DIR PID NAME: until DIR is a mount point (its inode changes), or the daemon died.
wait_mounted() {
    local mnt="$1" pid="$2" name="$3" dirfd="$4" tries=0 msg
    while [[ /proc/self/fd/$dirfd -ef $mnt ]]; do
        if ! kill -0 "$pid" 2>/dev/null; then
            msg="$(<"$S/$name.log")"
            shim_fail "$name could not mount $image: ${msg##*$'\n'}"
        fi
        ((++tries < 10000)) || shim_fail "$name did not mount $image within 10 s"
        read -rt 0.001 -u "$sleep_fd" || true
    done
}

while read -r key _ egid _; do [[ $key != Gid: ]] || break; done </proc/self/status
exec {lowerfd}<"$S/lower"
squashfuse -f -o "uid=$EUID,gid=$egid" "$image" "$S/lower" </dev/null >"$S/squashfuse.log" 2>&1 \
    {lowerfd}<&- {sleep_fd}<&- &
wait_mounted "$S/lower" $! squashfuse "$lowerfd"
exec {lowerfd}<&-

if is_true "$ENROOT_NATIVE_OVERLAYFS"; then
    rc=0
    perl "$ENROOT_TEST_LIBEXEC/mounts.pl" "$HOSTTYPE" overlay "$S/lower" "$S/upper" "$S/work" "$R" || rc=$?
    ((rc == 0 || rc == 2)) || exit 1   # 2: the kernel refused overlayfs here
    native=$((rc == 0))
else
    native=0
fi
if ((!native)); then
    exec {rootfd}<"$R"
    FUSE_OVERLAYFS_DISABLE_OVL_WHITEOUT=y fuse-overlayfs -f \
        -o "lowerdir=$S/lower,upperdir=$S/upper,workdir=$S/work" "$R" \
        </dev/null >"$S/fuse-overlayfs.log" 2>&1 {rootfd}<&- {sleep_fd}<&- &
    wait_mounted "$R" $! fuse-overlayfs "$rootfd"
    exec {rootfd}<&-
fi
exec {sleep_fd}<&-
kill -STOP $$
exit 0
