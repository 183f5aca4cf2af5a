# shellcheck shell=bash
# Named containers of the test double: create, remove, export, load (list: list.sh). A
# named container is a directory $ENROOT_DATA_PATH/NAME holding an extracted root filesystem.

# check_name NAME: names are plain directory names under the data path.
check_name() {
    [[ -n $1 && $1 != */* && $1 != . && $1 != .. && $1 != .* ]] ||
        fail "Bad container name '$1': use a plain name without '/' that does not start with '.'"
}

# running_pids DIR: PIDs of our processes whose root directory is DIR (a started container).
running_pids() {
    local p pids=()
    for p in /proc/[0-9]*; do
        [[ $p/root -ef $1 ]] 2>/dev/null && pids+=("${p#/proc/}")
    done
    printf '%s\n' ${pids[@]+"${pids[@]}"}
}

# Extract into a hidden directory next to the target, then rename: never a half container.
containers_create() {
    local name="" force=0 image tmp out
    while (($#)); do
        case "$1" in
            -n | --name) (($# >= 2)) || fail "Option $1 needs a value"; name="$2"; shift ;;
            --name=*) name="${1#*=}" ;;
            -f | --force) force=1 ;;
            -*) fail "Unknown option for enroot create: '$1' (usage: enroot create [-n NAME] [-f] IMAGE)" ;;
            *) break ;;
        esac
        shift
    done
    (($# == 1)) || fail "enroot create needs exactly one IMAGE (usage: enroot create [-n NAME] [-f] IMAGE)"
    image="$1"
    [[ -f $image ]] || fail "No such image file: $image (check the path)"
    out=$(unsquashfs -s "$image" 2>&1 >/dev/null) ||
        fail "Not a squashfs image: $image (unsquashfs -s rejects it: ${out##*$'\n'}); build images with sqshbuild or mksquashfs"
    if [[ -z $name ]]; then
        name="${image##*/}"
        name="${name%.sqsh}"
    fi
    check_name "$name"
    local dest="$ENROOT_DATA_PATH/$name"
    if [[ -e $dest ]]; then
        ((force)) || fail "Container already exists: $name (in $ENROOT_DATA_PATH; add -f to replace it)"
        [[ -z $(running_pids "$dest") ]] || fail "Container $name is running: stop it before replacing it"
    fi
    mkdir -p -- "$ENROOT_DATA_PATH" || fail "Cannot create ENROOT_DATA_PATH $ENROOT_DATA_PATH"
    tmp="$ENROOT_DATA_PATH/.create.$name.$$"
    trap 'rm_tree "$tmp"' EXIT
    trap 'exit 1' INT TERM HUP
    # As Enroot: user xattrs only, then its permission fix-up.
    if ! out=$(unsquashfs -no-progress -quiet -user-xattrs -d "$tmp" "$image" 2>&1); then
        fail "Cannot extract $image into $ENROOT_DATA_PATH: ${out##*$'\n'} (images for unprivileged users must not hold device nodes)"
    fi
    fix_perms "$tmp" || fail "Cannot make $tmp readable and writable by uid $EUID"
    [[ ! -e $dest ]] || rm_tree "$dest"
    mv -T -- "$tmp" "$dest" || fail "Cannot rename $tmp to $dest"
    trap - EXIT INT TERM HUP
    printf '%s\n' "$name"
}

# fix_perms DIR: Enroot's common::fixperms. Some distributions ship directories the owner
# cannot write and files it cannot read (they count on CAP_DAC_OVERRIDE): within five
# levels, such directories get u+w and other such entries u+r. One find run, chmod in
# batches: a chmod per file costs seconds on a large image.
fix_perms() {
    find "$1" -maxdepth 5 \( -type d ! -perm -0200 -exec chmod -f u+w -- {} + \) \
        -o \( ! -perm -0400 -exec chmod -f u+r -- {} + \)
}

# rm_tree DIR: delete an extracted tree, even where the image left directories read-only.
rm_tree() {
    [[ -e $1 ]] || return 0
    rm -rf --one-file-system -- "$1" 2>/dev/null && return 0
    chmod -R u+rwX -- "$1" 2>/dev/null || true
    rm -rf --one-file-system -- "$1"
}

containers_remove() {
    local force=0 name dest
    while (($#)); do
        case "$1" in
            -f | --force) force=1 ;;
            -*) fail "Unknown option for enroot remove: '$1' (usage: enroot remove -f NAME...)" ;;
            *) break ;;
        esac
        shift
    done
    (($#)) || fail "enroot remove needs at least one NAME (usage: enroot remove -f NAME...)"
    ((force)) || fail "enroot remove asks before deleting; this test double never prompts: add -f"
    for name in "$@"; do
        check_name "$name"
        dest="$ENROOT_DATA_PATH/$name"
        [[ -d $dest ]] || fail "No such container: $name (in $ENROOT_DATA_PATH; see 'enroot list')"
        [[ -z $(running_pids "$dest") ]] || fail "Container $name is running: stop it before removing it"
        rm_tree "$dest" || fail "Cannot remove $dest"
    done
}

# Squash into a temporary file next to the target, then rename: never a half-written file.
containers_export() {
    local out_file="" force=0 name src tmp out
    while (($#)); do
        case "$1" in
            -o | --output) (($# >= 2)) || fail "Option $1 needs a value"; out_file="$2"; shift ;;
            --output=*) out_file="${1#*=}" ;;
            -f | --force) force=1 ;;
            -*) fail "Unknown option for enroot export: '$1' (usage: enroot export [-o FILE] [-f] NAME)" ;;
            *) break ;;
        esac
        shift
    done
    (($# == 1)) || fail "enroot export needs exactly one NAME (usage: enroot export [-o FILE] [-f] NAME)"
    name="$1"
    check_name "$name"
    src="$ENROOT_DATA_PATH/$name"
    [[ -d $src ]] || fail "No such container: $name (in $ENROOT_DATA_PATH; see 'enroot list')"
    out_file="${out_file:-$name.sqsh}"
    [[ ! -e $out_file ]] || ((force)) || fail "File already exists: $out_file (add -f to overwrite it)"
    [[ ! -d $out_file ]] || fail "Export target is a directory: $out_file (give a file name with -o)"
    tmp="${out_file%/*}"
    [[ $tmp != "$out_file" ]] || tmp=.
    tmp="$tmp/.${out_file##*/}.tmp.$$"
    trap 'rm -f -- "$tmp"' EXIT
    trap 'exit 1' INT TERM HUP
    local squash_opts
    read -ra squash_opts <<<"$ENROOT_SQUASH_OPTIONS"
    # -all-root: files owned by root in the image, as Enroot exports them; without the
    # rootfs lock file that `enroot start` leaves, as Enroot excludes it.
    local exclude=()
    [[ ! -f $src/.lock ]] || exclude=(-e "$src/.lock")
    out=$(mksquashfs "$src" "$tmp" -noappend -no-progress -quiet -all-root ${squash_opts[@]+"${squash_opts[@]}"} \
        ${exclude[@]+"${exclude[@]}"} 2>&1) ||
        fail "Cannot export $name to $out_file: ${out##*$'\n'} (check ENROOT_SQUASH_OPTIONS and free space)"
    mv -f -T -- "$tmp" "$out_file" || fail "Cannot rename $tmp to $out_file"
    trap - EXIT INT TERM HUP
    printf '%s\n' "$out_file"
}

# `enroot load [-n NAME] URI`: import a registry image and create a container from it in one
# go (Enroot streams it; the test double imports into a temporary file, then creates).
containers_load() {
    local name="" uri tmp
    while (($#)); do
        case "$1" in
            -n | --name) (($# >= 2)) || fail "Option $1 needs a value"; name="$2"; shift ;;
            --name=*) name="${1#*=}" ;;
            -*) fail "Unknown option for enroot load: '$1' (usage: enroot load [-n NAME] URI)" ;;
            *) break ;;
        esac
        shift
    done
    (($# == 1)) || fail "enroot load needs exactly one URI (usage: enroot load [-n NAME] docker://IMAGE)"
    uri="$1"
    if [[ -z $name ]]; then
        name="${uri#*://}"
        name="${name#*@}"
        name="${name//[\/:#]/+}"
    fi
    check_name "$name"
    [[ ! -e $ENROOT_DATA_PATH/$name ]] || fail "Container already exists: $name (in $ENROOT_DATA_PATH)"
    mkdir -p -- "$ENROOT_TEMP_PATH" || fail "Cannot create ENROOT_TEMP_PATH $ENROOT_TEMP_PATH"
    tmp="$ENROOT_TEMP_PATH/.load.$name.$$.sqsh"
    # shellcheck source=import.sh
    source "$ENROOT_TEST_LIBEXEC/import.sh"
    (import_main -o "$tmp" "$uri") >/dev/null || exit 1
    (containers_create -n "$name" "$tmp") || { rm -f -- "$tmp"; exit 1; }
    rm -f -- "$tmp"
}
