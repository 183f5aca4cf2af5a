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
    # Enroot lets TYPE be left out: "/proc /proc rbind", "tmpfs /tmp".
    if [[ -z ${opts-} && ${type-} =~ ^(r?bind|ro|rw|x-.*|.*[,=].*)$ ]]; then
        opts="$type" type=""
    fi
    [[ -n ${type-} ]] || { [[ $src == tmpfs ]] && type=tmpfs || type=none; }
    src="${src//\\040/ }" dst="${dst//\\040/ }"
    mount_entry "$rootfs" "$src" "$dst" "$type" "${opts:-defaults}" "$origin"
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
    local tgt="$rootfs/$rel"
    if ((detach)); then
        out=$(umount --lazy -- "$tgt" 2>&1) || fail "Cannot detach $dst ($origin): ${out##*$'\n'}"
        return 0
    fi
    if ((bind || move)) && [[ ! -e $src ]]; then
        ((nofail)) && return 0
        fail "Mount source does not exist: $src (mount on $dst, $origin): create it or fix the path"
    fi
    if [[ $create == auto ]]; then
        if [[ -d $src || $type != none ]]; then create="dir"; else create="file"; fi
    fi
    if [[ $create == dir && ! -d $tgt ]]; then
        out=$(mkdir -p -- "$tgt" 2>&1) || fail "Cannot create mount target $dst ($origin): ${out##*$'\n'}"
    elif [[ $create == file && ! -e $tgt ]]; then
        [[ -d ${tgt%/*} ]] || out=$(mkdir -p -- "${tgt%/*}" 2>&1) ||
            fail "Cannot create mount target $dst ($origin): ${out##*$'\n'}"
        : >>"$tgt" || fail "Cannot create mount target file $dst ($origin)"
    fi
    [[ -e $tgt ]] || fail "Mount target $dst does not exist in the container ($origin): add x-create=dir or x-create=file"
    if ((move)); then
        out=$(mount --move -- "$src" "$tgt" 2>&1) || fail "Cannot move mount $src to $dst ($origin): ${out##*$'\n'}"
    elif ((bind)); then
        # mount.pl, not mount(8): util-linux 2.38 cannot remount a bind whose host flags are
        # locked in the user namespace (a ro bind from a noexec /tmp, say).
        out=$(perl "$ENROOT_TEST_LIBEXEC/mounts.pl" "$HOSTTYPE" bind "$src" "$tgt" "$rec" "${opts:--}" 2>&1) ||
            fail "Cannot mount $src on $dst ($origin): ${out#\[ERROR\] }"
    elif [[ -n $opts ]]; then
        out=$(mount -t "$type" -o "$opts" -- "$src" "$tgt" 2>&1) ||
            fail "Cannot mount $src on $dst (type $type, options $opts; $origin): ${out##*$'\n'}"
    else
        out=$(mount -t "$type" -- "$src" "$tgt" 2>&1) ||
            fail "Cannot mount $src on $dst (type $type; $origin): ${out##*$'\n'}"
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
