# shellcheck shell=bash
# Settings of the Enroot test double: the environment wins, then
# $ENROOT_SYSCONF_PATH/enroot.conf ("KEY VALUE" lines), then Enroot's defaults.
# Everything is exported so that the stage run inside the namespaces sees it unchanged.

# shellcheck disable=SC2034  # printed by bin/enroot
ENROOT_TEST_VERSION="4.1.0 (squall test double: an Enroot-4.1-compatible subset, not NVIDIA Enroot)"

fail() {
    printf '[ERROR] %s\n' "$*" >&2
    exit 1
}

# Enroot booleans: off only for these spellings (so "0" means on). Empty counts as unset.
is_true() {
    case "${1-}" in
        n | no | N | No | NO | f | F | false | False | FALSE) return 1 ;;
        *) return 0 ;;
    esac
}

# expand_vars OUT STRING [SIMPLE]: substitute ${NAME} and ${NAME:-DEFAULT} from the caller's
# environment (no command substitution, no eval: the text may come from an image). With
# SIMPLE=1 only ${NAME} is substituted, as Enroot does in image and environ.d/fstab files.
expand_vars() {
    # Locals are prefixed so that a ${NAME} from an image cannot resolve to one of them.
    local -n _ev_out="$1"
    local _ev_rest="$2" _ev_done="" _ev_pre _ev_name _ev_open="\${"
    local _ev_re='^([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}(.*)$'
    [[ ${3-0} != 1 ]] || _ev_re='^([A-Za-z_][A-Za-z0-9_]*)()()\}(.*)$'
    while [[ $_ev_rest == *"$_ev_open"* ]]; do
        _ev_pre="${_ev_rest%%"$_ev_open"*}"
        _ev_rest="${_ev_rest#*"$_ev_open"}"
        if [[ $_ev_rest =~ $_ev_re ]]; then
            _ev_name="${BASH_REMATCH[1]}"
            if [[ -n ${BASH_REMATCH[2]} ]]; then
                _ev_done+="$_ev_pre${!_ev_name:-${BASH_REMATCH[3]}}"
            else
                _ev_done+="$_ev_pre${!_ev_name-}"
            fi
            _ev_rest="${BASH_REMATCH[4]}"
        else
            _ev_done+="$_ev_pre$_ev_open"   # not a reference: kept as written
        fi
    done
    _ev_out="$_ev_done$_ev_rest"
}

# read_settings FILE OVERWRITE: "KEY VALUE" or "KEY=VALUE" lines; as in Enroot only ENROOT_*,
# SSL_CERT_DIR/FILE and proxy settings are taken. OVERWRITE=0: the environment wins.
read_settings() {
    local file="$1" overwrite="$2" key value
    [[ -r $file ]] || fail "Cannot read $file: make it readable or point ENROOT_SYSCONF_PATH elsewhere"
    while IFS=$' \t=' read -r key value || [[ -n $key ]]; do
        [[ $key =~ ^ENROOT_[A-Z_]+$|^SSL_CERT_(DIR|FILE)$|^(all|no|http|https)_proxy$ ]] || continue
        ((overwrite)) || [[ -z ${!key-} ]] || continue
        expand_vars value "$value"
        export "$key=$value"
    done <"$file"
}

load_settings() {
    export ENROOT_SYSCONF_PATH="${ENROOT_SYSCONF_PATH:-/etc/enroot}"
    : "${HOME:=$(getent passwd "$EUID" | cut -d: -f6)}"
    export HOME
    [[ ! -e $ENROOT_SYSCONF_PATH/enroot.conf ]] || read_settings "$ENROOT_SYSCONF_PATH/enroot.conf" 0
    local def key
    for def in \
        "ENROOT_RUNTIME_PATH=${XDG_RUNTIME_DIR:-/run}/enroot" \
        "ENROOT_CONFIG_PATH=${XDG_CONFIG_HOME:-$HOME/.config}/enroot" \
        "ENROOT_CACHE_PATH=${XDG_CACHE_HOME:-$HOME/.cache}/enroot" \
        "ENROOT_DATA_PATH=${XDG_DATA_HOME:-$HOME/.local/share}/enroot" \
        "ENROOT_TEMP_PATH=${TMPDIR:-/tmp}" \
        "ENROOT_SQUASH_OPTIONS=-comp lzo -noD" \
        ENROOT_MOUNT_HOME=no ENROOT_REMAP_ROOT=no ENROOT_ROOTFS_WRITABLE=no \
        ENROOT_RESTRICT_DEV=no ENROOT_ALLOW_SUPERUSER=no ENROOT_NATIVE_OVERLAYFS=yes; do
        key="${def%%=*}"
        # shellcheck disable=SC2163  # exports the KEY=VALUE held in def
        [[ -n ${!key-} ]] || export "$def"
    done
}
