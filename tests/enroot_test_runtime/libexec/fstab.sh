# shellcheck shell=bash
# One mount entry of the container, Enroot style: fstab fields (SRC DST [TYPE [OPTS]]),
# target relative to the container root, extras x-create=dir|file|auto, x-detach, x-move.

# mount_fstab_line ROOTFS LINE ORIGIN [EXPAND]: parse one fstab line and mount it.
# EXPAND=1 substitutes ${VAR} from the host (image and sysconf fstab files, as Enroot does).
mount_fstab_line() {
    local rootfs="$1" line="$2" origin="$3" src dst type opts
    [[ ${4-0} == 1 ]] && expand_vars line "$line" 1
    read -r src dst type opts _ <<<"$line"
    [[ -z $src || $src == \#* ]] && return 0
    [[ -n ${dst-} ]] || fail "Bad mount entry '$line' in $origin: it needs at least 'SRC DST'"
    local optlike='^(r?bind|ro|rw|x-.*|.*[,=].*)$'
    # Enroot lets TYPE be left out: "/proc /proc rbind", "tmpfs /tmp"; and DST too when it
    # is SRC: "/src x-create=dir,bind,..." (the lines its 50-slurm-pmi.sh writes).
    if [[ -z ${type-} && $dst != /* && $dst =~ $optlike ]]; then
        opts="$dst" dst="$src"
    elif [[ -z ${opts-} && ${type-} =~ $optlike ]]; then
        opts="$type" type=""
    fi
    [[ -n ${type-} ]] || { [[ $src == tmpfs ]] && type=tmpfs || type=none; }
    src="${src//\\040/ }" dst="${dst//\\040/ }"
    mount_entry "$rootfs" "$src" "$dst" "$type" "${opts:-defaults}" "$origin"
}

# resolve_in_rootfs ROOTFS PATH: set REPLY to PATH (relative to the container root) with every
# symbolic link resolved inside ROOTFS, as Enroot's enroot-mount resolves targets: an absolute
# link points into the root filesystem, never at the host, and components that do not exist
# yet are kept as written (x-create makes them). Returns 1 when a link climbs above the root.
# Sets resolved_links to the number of links followed.
resolve_in_rootfs() {
    local root="$1" rest="$2" res="" comp link links=0 missing=0
    resolved_links=0
    while [[ -n $rest ]]; do
        comp="${rest%%/*}"
        if [[ $rest == */* ]]; then rest="${rest#*/}"; else rest=""; fi
        [[ -z $comp || $comp == . ]] && continue
        if [[ $comp == .. ]]; then
            [[ -n $res ]] || return 1
            res="${res%/*}"
            ((missing == 0)) || missing=$((missing - 1))
            continue
        fi
        if ((missing == 0)) && [[ -L $root$res/$comp ]]; then
            ((++links <= 40)) || return 1
            resolved_links=$links
            link="$(readlink -- "$root$res/$comp")" || return 1
            [[ $link != /* ]] || res=""
            rest="$link${rest:+/$rest}"
            continue
        fi
        if ((missing)) || [[ ! -e $root$res/$comp ]]; then missing=$((missing + 1)); fi
        res+="/$comp"
    done
    REPLY="$res"
}

# Bind mounts are queued and made together, in order, by one mounts.pl process when
# something needs them (a perl start costs 5-20 ms on a loaded node; the fixed binds of
# /proc, /sys, /dev and mounts.d's four host files go in one). Anything that looks at or
# changes the tree under a queued target, or mounts otherwise, makes the queued ones first.
mount_queue=()          # mounts.pl operations
mount_queue_targets=()  # host-side paths they mount on

# queue_mount TARGET OP ARG...: queue one mounts.pl operation that mounts on TARGET.
queue_mount() {
    mount_queue_targets+=("$1")
    shift
    mount_queue+=("$@")
}

# flush_mounts: make every queued mount now.
flush_mounts() {
    local out
    ((${#mount_queue[@]})) || return 0
    out=$(perl "$ENROOT_TEST_LIBEXEC/mounts.pl" "$HOSTTYPE" "${mount_queue[@]}" 2>&1) ||
        fail "${out#\[ERROR\] }"
    mount_queue=() mount_queue_targets=()
}

# under_queued PATH...: true if a PATH is a queued target or lies under one.
under_queued() {
    local p t
    for p in "$@"; do
        for t in ${mount_queue_targets[@]+"${mount_queue_targets[@]}"}; do
            [[ $p/ != "$t"/* ]] || return 0
        done
    done
    return 1
}

# mount_entry ROOTFS SRC DST TYPE OPTS ORIGIN
mount_entry() {
    local rootfs="$1" src="$2" dst="$3" type="$4" opts="$5" origin="$6"
    local create="" detach=0 move=0 bind=0 rec=0 nofail=0 kept=() given=() opt out
    IFS=, read -ra given <<<"$opts"
    for opt in ${given[@]+"${given[@]}"}; do
        case "$opt" in
            x-create=dir | x-create=file | x-create=auto) create="${opt#x-create=}" ;;
            x-create=*) fail "Bad option '$opt' in mount entry '$src $dst' ($origin): use x-create=dir, file or auto" ;;
            x-detach) detach=1 ;;
            nofail) nofail=1 ;;   # as Enroot: a missing source skips the entry
            silent | loud) ;;
            x-move) move=1 ;;
            x-*) ;;
            bind) bind=1 ;;
            rbind) bind=1 rec=1 ;;
            defaults | "") ;;
            *) kept+=("$opt") ;;
        esac
    done
    opts=""
    for opt in ${kept[@]+"${kept[@]}"}; do opts+="${opts:+,}$opt"; done
    local rel="${dst#"${dst%%[!/]*}"}"
    [[ -n $rel ]] || fail "Bad mount target '$dst' ($origin): mounting over the container root is not allowed"
    [[ /$rel/ != */../* ]] || fail "Bad mount target '$dst' ($origin): '..' may not appear in a target"
    # As Enroot: the target resolved inside the root filesystem, then created (x-create), then
    # mounted; with nofail any failure of the entry skips it (silently: Enroot warns unless
    # the entry also says silent).
    resolve_in_rootfs "$rootfs" "$rel" ||
        fail "Bad mount target '$dst' ($origin): a symbolic link in it points outside the container's root filesystem"
    # A link followed may have led through a queued target: resolve again once they are made.
    if ((${#mount_queue[@]})) && { ((resolved_links)) || ((bind == 0)) || under_queued "$rootfs$REPLY" "$src"; }; then
        flush_mounts
        resolve_in_rootfs "$rootfs" "$rel" || fail "Bad mount target '$dst' ($origin): a symbolic link in it points outside the container's root filesystem"
    fi
    [[ -n $REPLY ]] || fail "Bad mount target '$dst' ($origin): it resolves to the container root, which cannot be mounted over"
    local tgt="$rootfs$REPLY"
    if ((detach)); then
        out=$(umount --lazy -- "$tgt" 2>&1) || { ((nofail)) && return 0; fail "Cannot detach $dst ($origin): ${out##*$'\n'}"; }
        return 0
    fi
    if [[ $create == auto ]]; then
        # Enroot makes what the source is; a bind of a missing source gets nothing.
        if [[ -d $src || $type != none ]]; then create="dir"; elif [[ -e $src ]]; then create="file"; else create=""; fi
    fi
    if [[ $create == dir && ! -d $tgt ]]; then
        out=$(mkdir -p -- "$tgt" 2>&1) ||
            { ((nofail)) && return 0; fail "Cannot create mount target $dst ($origin): ${out##*$'\n'}"; }
    elif [[ $create == file && ! -e $tgt ]]; then
        [[ -d ${tgt%/*} ]] || out=$(mkdir -p -- "${tgt%/*}" 2>&1) ||
            { ((nofail)) && return 0; fail "Cannot create mount target $dst ($origin): ${out##*$'\n'}"; }
        if ! { : >>"$tgt"; } 2>/dev/null; then   # no fork on the way that works
            ((nofail)) && return 0
            out=$({ : >>"$tgt"; } 2>&1)
            fail "Cannot create mount target file $dst ($origin): ${out##*: }"
        fi
    fi
    if ((bind || move)) && [[ ! -e $src ]]; then
        ((nofail)) && return 0
        fail "Mount source does not exist: $src (mount on $dst, $origin): create it or fix the path"
    fi
    if [[ ! -e $tgt ]]; then
        ((nofail)) && return 0
        fail "Mount target $dst does not exist in the container ($origin): add x-create=dir or x-create=file"
    fi
    if ((move)); then
        out=$(mount --move -- "$src" "$tgt" 2>&1) ||
            { ((nofail)) && return 0; fail "Cannot move mount $src to $dst ($origin): ${out##*$'\n'}"; }
    elif ((bind)); then
        # mount.pl, not mount(8): util-linux 2.38 cannot remount a bind whose host flags are
        # locked in the user namespace (a ro bind from a noexec /tmp, say).
        queue_mount "$tgt" entry "Cannot mount $src on $dst ($origin)" "$nofail" "$src" "$tgt" "$rec" "${opts:--}"
    elif [[ -n $opts ]]; then
        out=$(mount -t "$type" -o "$opts" -- "$src" "$tgt" 2>&1) ||
            { ((nofail)) && return 0; fail "Cannot mount $src on $dst (type $type, options $opts; $origin): ${out##*$'\n'}"; }
    else
        out=$(mount -t "$type" -- "$src" "$tgt" 2>&1) ||
            { ((nofail)) && return 0; fail "Cannot mount $src on $dst (type $type; $origin): ${out##*$'\n'}"; }
    fi
}

# mount_spec ROOTFS SPEC: one `-m SRC:DST[:TYPE[:OPTS]]` (a bind unless TYPE says otherwise).
mount_spec() {
    local rootfs="$1" spec="$2" src dst type opts
    IFS=: read -r src dst type opts <<<"$spec"
    [[ -n $src && -n ${dst-} ]] || fail "Bad --mount '$spec': use SRC:DST[:TYPE[:OPTS]], e.g. /data:/data:none:ro"
    type="${type:-none}"
    if [[ $type == none && ,$opts, != *,bind,* && ,$opts, != *,rbind,* ]]; then
        opts="rbind${opts:+,$opts}"
    fi
    [[ ,$opts, == *,x-create=* ]] || opts="x-create=auto${opts:+,$opts}"
    mount_entry "$rootfs" "$src" "$dst" "$type" "$opts" "--mount $spec"
}
