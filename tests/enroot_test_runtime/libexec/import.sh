# shellcheck shell=bash
# `enroot import` in the test double: docker:// references go through squall's own
# `sqshbuild build` (which writes images the way Enroot's importer does); the result is
# copied to the output file through a temporary name, never left half-written.

import_main() {
    local out_file="" uri ref name tmp out path
    while (($#)); do
        case "$1" in
            -o | --output) (($# >= 2)) || fail "Option $1 needs a value"; out_file="$2"; shift ;;
            --output=*) out_file="${1#*=}" ;;
            -*) fail "Unknown option for enroot import: '$1' (usage: enroot import [-o FILE] URI)" ;;
            *) break ;;
        esac
        shift
    done
    (($# == 1)) || fail "enroot import needs exactly one URI (usage: enroot import [-o FILE] docker://IMAGE)"
    uri="$1"
    case "$uri" in
        docker://?*) ref="${uri#docker://}" ;;
        dockerd://* | podman://*)
            fail "Unsupported URI scheme in '$uri': the squall test double imports docker:// references only" ;;
        *) fail "Bad URI '$uri': use docker://[USER@][REGISTRY#]IMAGE[:TAG]" ;;
    esac
    command -v sqshbuild >/dev/null ||
        fail "Cannot import $uri: sqshbuild is not installed (pip install squall), and this test double has no importer of its own"
    if [[ -z $out_file ]]; then
        name="${ref#*@}"
        name="${name//[\/:#]/+}"
        out_file="$name.sqsh"
    fi
    [[ ! -e $out_file ]] || fail "File already exists: $out_file (remove it or choose another with -o)"
    out=$(sqshbuild build --quiet --cache-dir "$ENROOT_CACHE_PATH/sqshbuild" "$uri" 2>&1 >"$ENROOT_TEMP_PATH/.import.$$") || {
        rm -f -- "$ENROOT_TEMP_PATH/.import.$$"
        fail "sqshbuild could not import $uri: ${out##*$'\n'}"
    }
    path=$(tail -n1 -- "$ENROOT_TEMP_PATH/.import.$$")
    rm -f -- "$ENROOT_TEMP_PATH/.import.$$"
    [[ -f $path ]] || fail "sqshbuild reported '$path' for $uri, which is not a file"
    tmp="${out_file%/*}"
    [[ $tmp != "$out_file" ]] || tmp=.
    tmp="$tmp/.${out_file##*/}.tmp.$$"
    trap 'rm -f -- "$tmp"' EXIT
    trap 'exit 1' INT TERM HUP
    cp -- "$path" "$tmp" || fail "Cannot write $out_file"
    mv -T -- "$tmp" "$out_file" || fail "Cannot rename $tmp to $out_file"
    trap - EXIT INT TERM HUP
    printf '%s\n' "$out_file"
}
