# shellcheck shell=bash
# shellcheck disable=SC2034  # the opt_* globals are read by start.sh and start-ns.sh
# Command line of `enroot start` (test double). Options come before NAME|IMAGE;
# everything after it belongs to the container. Sets the opt_* globals below.

opt_conf="" opt_rc="" opt_root=0 opt_rw=0 opt_target=""
opt_env=() opt_mounts=() opt_cmd=()

parse_start_options() {
    local arg
    while (($#)); do
        arg="$1"
        case "$arg" in
            -c | --conf | -e | --env | -m | --mount | --rc)
                (($# >= 2)) || fail "Option $arg needs a value (see 'enroot help')"
                set -- "$arg=$2" "${@:3}"
                continue ;;
            -c=* | --conf=*) opt_conf="${arg#*=}" ;;
            -e=* | --env=*) opt_env+=("${arg#*=}") ;;
            -m=* | --mount=*) opt_mounts+=("${arg#*=}") ;;
            --rc=*) opt_rc="${arg#*=}" ;;
            -r | --root) opt_root=1 ;;
            -w | --rw) opt_rw=1 ;;
            --) shift; break ;;
            -*) fail "Unknown option for enroot start: '$arg' (options go before NAME|IMAGE; see 'enroot help')" ;;
            *) break ;;
        esac
        shift
    done
    (($#)) || fail "enroot start needs a container NAME or an IMAGE file (usage: enroot start [OPTIONS] NAME|IMAGE [CMD ARG...])"
    opt_target="$1"
    opt_cmd=("${@:2}")
}
