# shellcheck shell=bash
# `enroot exec [-e|--env KEY[=VAL]]... [--] PID COMMAND [ARG...]` (test double), as Enroot's:
# the command runs in the running container whose process is PID, in its user, mount and
# cgroup namespaces (so its root), in its working directory, with its environment
# (/proc/PID/environ) plus the -e values, as the caller; its exit status is returned.
# Enroot joins with enroot-nsenter; util-linux nsenter does the same setns() calls here.

EXEC_USAGE="usage: enroot exec [-e KEY[=VAL]]... PID COMMAND [ARG...]"

# same_ns PID NS: PID is in the caller's namespace NS already. setns() into one's own user
# namespace fails, and a container started with ENROOT_ALLOW_SUPERUSER has none of its own.
same_ns() {
    [[ $(readlink "/proc/$1/ns/$2" 2>/dev/null) == "$(readlink "/proc/self/ns/$2")" ]]
}

exec_main() {
    local cli=() e pid f n nsenter
    while (($#)); do
        case "$1" in
            -e | --env) (($# >= 2)) || fail "Option $1 needs a value ($EXEC_USAGE)"; cli+=("$2"); shift ;;
            --env=*) cli+=("${1#*=}") ;;
            --) shift; break ;;
            -?*) fail "Unknown option for enroot exec: '$1' ($EXEC_USAGE)" ;;
            *) break ;;
        esac
        shift
    done
    (($# >= 2)) || fail "enroot exec needs a PID and a COMMAND ($EXEC_USAGE)"
    pid="$1"
    shift
    for e in ${cli[@]+"${cli[@]}"}; do
        [[ $e =~ ^[A-Za-z_][A-Za-z0-9_]*(=|$) ]] ||
            fail "Invalid argument: $e (use KEY or KEY=VALUE with KEY made of letters, digits and _)"
    done
    # As Enroot: kill -0 tells whether the process is there (and ours to signal).
    if ! [[ $pid =~ ^[1-9][0-9]*$ ]] || ! kill -0 "$pid" 2>/dev/null; then
        fail "Process not found: $pid (give the PID of a running container; see 'enroot list -f')"
    fi
    # Enroot's lock file marks a container's root (runtime.sh's list -f test, too).
    [[ -e /proc/$pid/root/.lock ]] ||
        fail "Process is not a container: $pid (its root has no /.lock; see 'enroot list -f')"

    # The target's environment, then the -e values (KEY alone: the caller's value).
    local penv=() env=()
    mapfile -d '' -t penv <"/proc/$pid/environ" || fail "Cannot read the environment of process $pid"
    for e in ${penv[@]+"${penv[@]}"}; do
        [[ $e =~ ^[^-=][^=]*= ]] && env+=("$e")   # env(1) must not take one for an option
    done
    for e in ${cli[@]+"${cli[@]}"}; do
        if [[ $e == *=* ]]; then env+=("$e"); else env+=("$e=${!e-}"); fi
    done

    local ns=(--mount)
    same_ns "$pid" user || ns+=(--user --preserve-credentials)
    same_ns "$pid" cgroup || ns+=(--cgroup)
    nsenter="$(command -v nsenter)" || fail "nsenter is missing: install util-linux"
    # As enroot-nsenter: only stdin, stdout and stderr go to the command.
    for f in /proc/self/fd/*; do
        n="${f##*/}"
        ((n > 2)) && [[ -e $f ]] && eval "exec $n>&-"
    done
    exec env -i ${env[@]+"${env[@]}"} "$nsenter" --target "$pid" "${ns[@]}" --wd -- "$@"
}
