# shellcheck shell=bash
# The container environment (test double), as KEY=VALUE lines in a file; the last value
# of a key wins and ENROOT_* keys are dropped when the file is read by switchroot.pl.

# environ_from_file FILE: pam_env style lines (KEY=VALUE, optional "export ", optional
# quotes); ${VAR} references are substituted from the host environment.
environ_from_file() {
    local line key value
    [[ -f $1 ]] || return 0
    while IFS= read -r line || [[ -n $line ]]; do
        line="${line#"${line%%[![:space:]]*}"}"
        line="${line#export }"
        [[ $line =~ ^([A-Za-z_][A-Za-z0-9_]*)=(.*)$ ]] || continue
        key="${BASH_REMATCH[1]}"
        expand_vars value "${BASH_REMATCH[2]}"
        if [[ $value =~ ^\"(.*)\"$ || $value =~ ^\'(.*)\'$ ]]; then value="${BASH_REMATCH[1]}"; fi
        printf '%s=%s\n' "$key" "$value"
    done <"$1"
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
