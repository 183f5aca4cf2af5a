#!/bin/bash
# `enroot start`, second stage (test double), run by `unshare` inside the new user,
# mount and cgroup namespaces as the container's future main process. Everything it
# mounts lives in this private mount namespace (a tmpfs on $ENROOT_RUNTIME_PATH/.scratch holds
# the scratch dirs), so all of it goes away with the namespace: nothing to clean up on the host.
set -euo pipefail

ENROOT_TEST_LIBEXEC="${BASH_SOURCE[0]%/*}"
# shellcheck source=settings.sh
source "$ENROOT_TEST_LIBEXEC/settings.sh"
# shellcheck source=start-options.sh
source "$ENROOT_TEST_LIBEXEC/start-options.sh"
# shellcheck source=fstab.sh
source "$ENROOT_TEST_LIBEXEC/fstab.sh"
# shellcheck source=environ.sh
source "$ENROOT_TEST_LIBEXEC/environ.sh"
parse_start_options "$@"

S="$ENROOT_RUNTIME_PATH/.scratch"
R="$S/root"
cli_env=()   # the -e options as KEY=VALUE lines
exec {sleep_fd}<> <(:)   # read -t on this never-ready pipe sleeps without forking

# start_fuse_shim: mount the image (squashfuse) and the overlay on $R through the
# fuse-shim (fuse-shim.sh), started with job control on so that it has its own process
# group, as Enroot 4.1.2 does; return once it has stopped itself with everything mounted.
# It stays a stopped child of this process (the container's main process) and tears the
# mounts down when this process goes or when something sends it SIGCONT.
start_fuse_shim() {
    local pid rv=0 msg
    set -m
    (exec -a fuse-shim "$BASH" "$ENROOT_TEST_LIBEXEC/fuse-shim.sh" "$ENROOT_TEST_SOURCE" "$S" "$R" \
        </dev/null >/dev/null 2>"$S/fuse-shim.log" {sleep_fd}<&-) &
    pid=$!
    wait "$pid" >/dev/null 2>&1 || rv=$?
    set +m
    if ((rv != 128 + 19)); then   # not stopped by SIGSTOP: it failed and said why
        msg="$(<"$S/fuse-shim.log")"
        fail "Failed to mount $ENROOT_TEST_SOURCE: ${msg##*$'\n'}"
    fi
    disown "$pid" >/dev/null 2>&1 || true
}

# sys_mounts ARGS...: several mount(2) calls in one process (see mounts.pl).
sys_mounts() {
    perl "$ENROOT_TEST_LIBEXEC/mounts.pl" "$HOSTTYPE" "$@"
}

# The image under an overlay whose upper layer is in the tmpfs (writes vanish at exit),
# or the created container's directory, bound nosuid,nodev. Then /proc, /sys and /dev,
# queued with the binds of the fstab files that follow (fstab.sh).
mount_rootfs() {
    if [[ $ENROOT_TEST_KIND == name ]]; then
        sys_mounts tmpfs "$S" mkdir "$R" bind "$ENROOT_TEST_SOURCE" "$R" 0 nosuid,nodev
    else
        sys_mounts tmpfs "$S" mkdir "$R" mkdir "$S/lower" mkdir "$S/upper" mkdir "$S/work"
        start_fuse_shim
    fi
    queue_mount "$R/proc" rbind /proc "$R/proc"
    queue_mount "$R/sys" rbind /sys "$R/sys"
    is_true "$ENROOT_RESTRICT_DEV" || queue_mount "$R/dev" rbind /dev "$R/dev"
}

# ENROOT_RESTRICT_DEV: a minimal /dev (no GPUs, no InfiniBand/EFA devices).
mount_restricted_dev() {
    local n
    flush_mounts
    mount -t tmpfs -o nosuid,noexec,mode=0755 enroot-dev "$R/dev"
    for n in null zero full random urandom tty; do
        : >"$R/dev/$n"
        mount --bind "/dev/$n" "$R/dev/$n"
    done
    mkdir "$R/dev/pts" "$R/dev/shm"
    mount --rbind /dev/pts "$R/dev/pts"
    mount -t tmpfs -o nosuid,nodev,mode=1777 enroot-shm "$R/dev/shm"
}

# mount_fstab_file FILE ORIGIN EXPAND: every line of an fstab file; EXPAND=1 substitutes
# ${VAR} from the host (image and mounts.d files, as Enroot does).
mount_fstab_file() {
    local line
    [[ -f $1 ]] || return 0
    while IFS= read -r line || [[ -n $line ]]; do
        mount_fstab_line "$R" "$line" "$2" "$3"
    done <"$1"
}

# The --conf functions and the hooks run in a child bash (with set -e of its own).
run_conf_and_hooks() {
    local hooks=("$ENROOT_SYSCONF_PATH"/hooks.d/*.sh "$ENROOT_CONFIG_PATH"/hooks.d/*.sh) h any=0 rc=0
    for h in "${hooks[@]}"; do
        if [[ -x $h ]]; then any=1; fi
    done
    if [[ -z $opt_conf ]] && ((any == 0)); then
        if ((${#cli_env[@]})); then printf '%s\n' "${cli_env[@]}" >>"$S/environ"; fi
        return 0
    fi
    # Hook output goes to stderr only, as in Enroot (its stdout is discarded).
    ENROOT_ROOTFS="$R" ENROOT_PID="$$" ENROOT_ENVIRON="$S/environ" ENROOT_MOUNTS="$S/mounts" \
        "$BASH" "$ENROOT_TEST_LIBEXEC/run-conf.sh" "$opt_conf" "$S" ${cli_env[@]+"${cli_env[@]}"} \
        >/dev/null || rc=$?
    ((rc == 0)) && return 0
    ((rc == 3)) && exit 1   # a hook failed and said so
    fail "The --conf file $opt_conf failed (exit code $rc) outside its hooks (sourcing it, or in environ/mounts/rc): see the lines above"
}

mount_rootfs
# Enroot's rootfs lock: /.lock, held while the container is configured (so two starts of one
# created container do not configure it at once), then bound read-only. For an image it is
# in the overlay's upper layer; for a created container it stays in its directory. `enroot
# list -f` and `enroot exec` know a container by it.
exec {lock_fd}>"$R/.lock" || fail "Cannot create the rootfs lock $ENROOT_TEST_SOURCE/.lock"
flock -w 30 "$lock_fd" || fail "Could not acquire rootfs lock $ENROOT_TEST_SOURCE/.lock (another start holds it)"
if is_true "$ENROOT_RESTRICT_DEV"; then
    [[ -d $R/dev ]] || mkdir -- "$R/dev"
    mount_restricted_dev
fi
mount_fstab_file "$R/etc/fstab" "the image's /etc/fstab" 1
for f in "$ENROOT_SYSCONF_PATH"/mounts.d/*.fstab "$ENROOT_CONFIG_PATH"/mounts.d/*.fstab; do
    mount_fstab_file "$f" "$f" 1
done
flush_mounts
build_base_environ "$S/environ"
# ENROOT_MOUNT_HOME is the business of Enroot's hooks.d/10-home.sh, as in Enroot.
cli_environ_lines cli_env ${opt_env[@]+"${opt_env[@]}"}
run_conf_and_hooks
mount_fstab_file "$S/mounts" "a mount queued by a hook" 0
[[ ! -f $S/conf.fstab ]] || mount_fstab_file "$S/conf.fstab" "mounts() of $opt_conf" 0
for m in ${opt_mounts[@]+"${opt_mounts[@]}"}; do mount_spec "$R" "$m"; done
flush_mounts   # then switchroot.pl binds /.lock read-only
# --rc FILE, else the conf's rc(), replaces the image's /etc/rc; read before the root switch.
rc_file="$opt_rc"
[[ -n $rc_file || ! -f $S/rc ]] || rc_file="$S/rc"
rc_script=""
[[ -z $rc_file ]] || IFS= read -r -d '' rc_script <"$rc_file" || true

readonly=1
if ((opt_rw)) || is_true "$ENROOT_ROOTFS_WRITABLE"; then readonly=0; fi

if [[ -n $rc_file ]]; then
    argv=(sh -c "$rc_script" sh ${opt_cmd[@]+"${opt_cmd[@]}"})
elif [[ -f $R/etc/rc ]]; then
    argv=(sh /etc/rc ${opt_cmd[@]+"${opt_cmd[@]}"})
elif ((${#opt_cmd[@]})); then
    argv=(sh -c 'exec "$@"' sh "${opt_cmd[@]}")
else
    argv=(sh -l)
fi
keepcaps=0
((EUID != 0)) || keepcaps=1
exec {sleep_fd}<&- {lock_fd}>&-
exec perl "$ENROOT_TEST_LIBEXEC/switchroot.pl" "$HOSTTYPE" "$R" "$S/environ" "$readonly" "$keepcaps" "${argv[@]}"
