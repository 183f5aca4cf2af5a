# shellcheck shell=bash
# `enroot start`, first stage (test double): check everything that can be checked
# outside the namespaces, then exec `unshare` in place, so that the container's main
# process keeps the PID of this `enroot start`.

# shellcheck source=start-options.sh
source "$ENROOT_TEST_LIBEXEC/start-options.sh"

# Sets EGID to the effective gid, without forking `id -g`.
effective_gid() {
    local key
    while read -r key _ EGID _; do
        [[ $key == Gid: ]] && return 0
    done </proc/self/status
    fail "Cannot read the effective gid from /proc/self/status"
}

# Refuse early, with a clear message, where the kernel forbids user namespaces.
check_userns_allowed() {
    local v
    if [[ -r /proc/sys/user/max_user_namespaces ]]; then
        read -r v </proc/sys/user/max_user_namespaces
        [[ $v != 0 ]] || fail "User namespaces are disabled (user.max_user_namespaces=0): set it above 0 with sysctl"
    fi
    if ((EUID != 0)) && [[ -r /proc/sys/kernel/unprivileged_userns_clone ]]; then
        read -r v </proc/sys/kernel/unprivileged_userns_clone
        [[ $v != 0 ]] || fail "Unprivileged user namespaces are disabled: set kernel.unprivileged_userns_clone=1 with sysctl"
    fi
}

# conf_directives FILE: "#ENROOT_KEY VALUE" comment lines of a --conf file set (and
# override) Enroot settings, as in Enroot, e.g. "#ENROOT_ROOTFS_WRITABLE=y".
conf_directives() {
    local line directives=()
    while IFS= read -r line || [[ -n $line ]]; do
        [[ $line =~ ^#[[:space:]]*(ENROOT_.*)$ ]] && directives+=("${BASH_REMATCH[1]}")
    done <"$1"
    ((${#directives[@]})) || return 0
    read_settings <(printf '%s\n' "${directives[@]}") 1
}

# Sets ENROOT_TEST_KIND (image|name) and ENROOT_TEST_SOURCE (absolute image file or container dir).
resolve_target() {
    local t="$1" out
    if [[ -f $t ]]; then
        [[ -r $t ]] || fail "Cannot read image $t: make it readable by uid $EUID"
        [[ $t == /* ]] || t="$PWD/$t"
        out=$(unsquashfs -s "$t" 2>&1 >/dev/null) ||
            fail "Not a squashfs image: $t (unsquashfs -s rejects it: ${out##*$'\n'}); build images with sqshbuild or mksquashfs"
        export ENROOT_TEST_KIND=image ENROOT_TEST_SOURCE="$t"
    elif [[ $t != */* && $t != .* && -d $ENROOT_DATA_PATH/$t ]]; then
        export ENROOT_TEST_KIND=name ENROOT_TEST_SOURCE="$ENROOT_DATA_PATH/$t"
    elif [[ -e $t ]]; then
        fail "Not a regular file: $t (enroot start takes a .sqsh image file or a container name)"
    elif [[ $t == */* || $t == *.sqsh ]]; then
        fail "No such image file: $t (check the path; images are .sqsh files built with sqshbuild)"
    else
        fail "No such container: $t (not in $ENROOT_DATA_PATH; create it with 'enroot create', or give the path of a .sqsh image)"
    fi
}

start_main() {
    parse_start_options "$@"
    local m e
    if [[ -n $opt_conf ]]; then
        [[ -f $opt_conf && -r $opt_conf ]] || fail "Cannot read the --conf file $opt_conf: check the path and its permissions"
        conf_directives "$opt_conf"
    fi
    if [[ -n $opt_rc ]]; then
        [[ -f $opt_rc && -r $opt_rc ]] || fail "Cannot read the --rc file $opt_rc: check the path and its permissions"
    fi
    for e in ${opt_env[@]+"${opt_env[@]}"}; do
        [[ $e =~ ^[A-Za-z_][A-Za-z0-9_]*(=|$) ]] || fail "Bad --env '$e': use KEY or KEY=VALUE with KEY made of letters, digits and _"
        [[ $e != *$'\n'* ]] || fail "Bad --env '${e%%=*}': the value holds a newline, which the container environment cannot carry"
    done
    for m in ${opt_mounts[@]+"${opt_mounts[@]}"}; do
        [[ $m == ?*:?* && $m != *[[:space:]]* ]] ||
            fail "Bad --mount '$m': use SRC:DST[:TYPE[:OPTS]] without spaces, e.g. /data:/data:none:ro"
    done
    # As Enroot, the command line's choices are settings the hooks see.
    if ((opt_root)); then export ENROOT_REMAP_ROOT=y; fi
    if ((opt_rw)); then export ENROOT_ROOTFS_WRITABLE=y; fi
    resolve_target "$opt_target"
    if [[ $ENROOT_TEST_KIND == image ]] && ! [[ -r /dev/fuse && -w /dev/fuse ]]; then
        fail "/dev/fuse is not usable by uid $EUID (starting from a squashfs needs FUSE): make /dev/fuse mode 0666, or extract with 'enroot create' and start the name"
    fi
    local rt="$ENROOT_RUNTIME_PATH"
    [[ $rt == /* && $rt != *[,:[:space:]]* ]] ||
        fail "Bad ENROOT_RUNTIME_PATH '$rt': it must be an absolute path without commas, colons or spaces"
    # The scratch tmpfs is mounted on an empty subdirectory, so that files the caller keeps
    # in the runtime directory (a --conf file, an image) stay visible.
    if [[ ! -d $rt/.scratch ]]; then
        # A concurrent start may create it first: that is fine too.
        { mkdir -p -- "$rt" && mkdir -m 0700 -- "$rt/.scratch"; } 2>/dev/null ||
            [[ -d $rt/.scratch ]] ||
            fail "Cannot create ENROOT_RUNTIME_PATH $rt as uid $EUID: set ENROOT_RUNTIME_PATH (or XDG_RUNTIME_DIR) to a directory you can write"
    fi
    check_userns_allowed

    local ns=(--mount --cgroup --propagation private)
    if ! ((EUID == 0)) || ! is_true "$ENROOT_ALLOW_SUPERUSER"; then
        local uid="$EUID" gid EGID
        effective_gid
        gid="$EGID"
        if ((opt_root)) || is_true "$ENROOT_REMAP_ROOT"; then uid=0 gid=0; fi
        ns+=(--user "--map-user=$uid" "--map-group=$gid" --keep-caps)
    fi
    exec unshare "${ns[@]}" -- "$BASH" "$ENROOT_TEST_LIBEXEC/start-ns.sh" "$@"
}
