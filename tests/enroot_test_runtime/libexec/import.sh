# shellcheck shell=bash
# `enroot import` in the test double: docker:// and dockerd:// references go through
# squall's own `sqshbuild build --enroot-compat` (Enroot's -comp lzo -noD format), written
# to a temporary name next to the output and renamed: never a half-written image.

import_main() {
    local out_file="" uri ref name tmp out
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
        dockerd://?*) ref="${uri#dockerd://}" ;;
        podman://*) fail "Unsupported URI scheme in '$uri': the squall test double imports docker:// and dockerd:// only" ;;
        *) fail "Bad URI '$uri': use docker://[USER@][REGISTRY#]IMAGE[:TAG] or dockerd://IMAGE[:TAG]" ;;
    esac
    command -v sqshbuild >/dev/null ||
        fail "Cannot import $uri: sqshbuild is not installed (pip install squall), and this test double has no importer of its own"
    if [[ -z $out_file ]]; then
        name="${ref#*@}"
        name="${name//[\/:#]/+}"
        out_file="$name.sqsh"
    fi
    [[ ! -e $out_file ]] || fail "File already exists: $out_file (remove it or choose another with -o)"
    tmp="${out_file%/*}"
    [[ $tmp != "$out_file" ]] || tmp=.
    tmp="$tmp/.${out_file##*/}.tmp.$$"
    # sqshbuild also writes a JSON sidecar beside -o; Enroot's import leaves only the image.
    trap 'rm -f -- "$tmp" "$tmp.json" "${tmp%.*}.json"' EXIT
    trap 'exit 1' INT TERM HUP
    out=$(sqshbuild build --quiet --enroot-compat --cache-dir "$ENROOT_CACHE_PATH/sqshbuild" \
        --work-dir "$ENROOT_TEMP_PATH" -o "$tmp" "$uri" 2>&1 >/dev/null) || fail "sqshbuild could not import $uri: ${out##*$'\n'}"
    [[ -f $tmp ]] || fail "sqshbuild reported success for $uri but wrote no image"
    mv -T -- "$tmp" "$out_file" || fail "Cannot rename $tmp to $out_file"
    rm -f -- "$tmp.json" "${tmp%.*}.json"
    trap - EXIT INT TERM HUP
    printf '%s\n' "$out_file"
}
