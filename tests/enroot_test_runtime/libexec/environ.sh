# shellcheck shell=bash
# The container environment (test double), as KEY=VALUE lines in a file; the last value
# of a key wins (switchroot.pl reads it).

# environ_from_file FILE: its lines with ${VAR} substituted from the host (image and
# environ.d files, as Enroot does); format_environ cleans them up afterwards.
environ_from_file() {
    local line
    [[ -f $1 ]] || return 0
    while IFS= read -r line || [[ -n $line ]]; do
        expand_vars line "$line" 1
        printf '%s\n' "$line"
    done <"$1"
}

# format_environ FILE: Enroot's clean-up of the environment file, done before the hooks
# read it: leading blanks, comments and lines that are not KEY=VALUE go, ENROOT_* keys go,
# and one pair of surrounding quotes (" or ') is removed from a value. switchroot.pl
# applies the same rules once more after the hooks.
format_environ() {
    local line kept=()
    local quoted='^([A-Za-z_][A-Za-z0-9_]*)=["'"'"'](.*)["'"'"'][[:space:]]*$'
    while IFS= read -r line || [[ -n $line ]]; do
        line="${line#"${line%%[![:space:]]*}"}"
        [[ $line =~ ^[A-Za-z_][A-Za-z0-9_]*= && $line != ENROOT_* ]] || continue
        if [[ $line =~ $quoted ]]; then line="${BASH_REMATCH[1]}=${BASH_REMATCH[2]}"; fi
        kept+=("$line")
    done <"$1"
    printf '%s' "${kept[@]/%/$'\n'}" >"$1"
}

# build_base_environ OUT: the image's /etc/environment, then environ.d (system, then user).
build_base_environ() {
    local f
    {
        environ_from_file "$R/etc/environment"
        for f in "$ENROOT_SYSCONF_PATH"/environ.d/*.env "$ENROOT_CONFIG_PATH"/environ.d/*.env; do
            environ_from_file "$f"
        done
    } >"$1"
}

# cli_environ_lines OUTVAR [KEY[=VAL]...]: the -e options as KEY=VALUE lines; KEY alone
# takes the host value, empty when the host has none (as Enroot does).
cli_environ_lines() {
    local -n _lines="$1"
    local e
    shift
    _lines=()
    for e in "$@"; do
        if [[ $e == *=* ]]; then _lines+=("$e"); else _lines+=("$e=${!e-}"); fi
    done
}
