# shellcheck shell=bash
# `enroot list [-f]` (test double), computed as Enroot 4.1's runtime.sh computes it.
# Plain: the entries of the data path, one a line. -f: a table NAME PID COMM STATE STARTED
# TIME MNTNS USERNS COMMAND. Its processes are those `lsns -n -r -t mnt -o pid` gives (one
# per mount namespace: the lowest PID in it) whose root holds Enroot's lock file /.lock;
# each goes under the name that field 4 (the mount's root) of its mountinfo line for "/"
# has, relative to the data path's place in its filesystem, else under <unknown>.
# A name without processes is a row of its own; further processes of a name leave NAME
# empty. Enroot aligns the table with column(1), which the test nodes lack: same layout
# here (two spaces between columns, the last one not padded).

LIST_HEADER=(NAME PID COMM STATE STARTED TIME MNTNS USERNS COMMAND)
US=$'\x1f'   # the cell separator: not blank, so that an empty cell stays a cell

# root_of PID: field 4 of the mountinfo line of PID's "/" (fails when PID is gone).
root_of() {
    local _a _b _c root mnt _rest
    while read -r _a _b _c root mnt _rest; do
        [[ $mnt == / ]] && { printf '%s' "$root"; return 0; }
    done <"/proc/$1/mountinfo"
    printf ''
}

# list_rows: one row per line, cells separated by $US.
list_rows() {
    local -A pids=()
    local n name pid cwd mnt out
    for n in *; do [[ -e $n || -L $n ]] && pids[$n]=""; done
    mnt="$(stat -c %m -- .)" || fail "Cannot find the mount point of $ENROOT_DATA_PATH"
    cwd="${PWD#"$mnt"}/"
    [[ $cwd == /* ]] || cwd="/$cwd"
    while read -r pid; do
        [[ -e /proc/$pid/root/.lock ]] || continue
        name="$(root_of "$pid" 2>/dev/null)" || continue   # gone meanwhile, as Enroot skips it
        name="${name#"$cwd"}"
        if [[ -n $name && -v "pids[$name]" ]]; then pids[$name]+=" $pid"; else pids["<unknown>"]+=" $pid"; fi
    done < <(lsns -n -r -t mnt -o pid)

    local stat started etime mntns userns cmd first comm
    while IFS= read -r name; do
        first=1
        if [[ -n ${pids[$name]} ]]; then
            # A process gone since lsns saw it drops out; none left: a name-only row.
            out="$(ps -p "${pids[$name]# }" --no-headers \
                -o pid:1,stat:1,start_time:1,etime:1,mntns:1,userns:1,command:1 2>/dev/null)" || out=""
            while read -r pid stat started etime mntns userns cmd; do
                [[ -n $pid ]] || continue
                comm="$(<"/proc/$pid/comm")" 2>/dev/null || comm="?"
                ((first)) || name=""
                printf '%s\n' "$name$US$pid$US$comm$US$stat$US$started$US$etime$US$mntns$US$userns$US$cmd"
                first=0
            done <<<"$out"
        fi
        ((first == 0)) || printf '%s\n' "$name"
    done < <(printf '%s\n' "${!pids[@]}" | sort)
}

# print_table ROWS...: rows (the header first) aligned as column -t aligns them.
print_table() {
    local -a width=() cells
    local row i line
    for row in "$@"; do
        IFS="$US" read -r -a cells <<<"$row"
        for i in "${!cells[@]}"; do
            ((${#cells[i]} <= ${width[i]:-0})) || width[i]=${#cells[i]}
        done
    done
    for row in "$@"; do
        IFS="$US" read -r -a cells <<<"$row"
        line=""
        for ((i = 0; i < ${#LIST_HEADER[@]} - 1; i++)); do
            printf -v line '%s%-*s  ' "$line" "${width[i]:-0}" "${cells[i]-}"
        done
        printf '%s%s\n' "$line" "${cells[i]-}"
    done
}

list_main() {
    local fancy=0 rows=()
    case "${1-}" in
        "") ;;
        -f | --fancy) fancy=1 ;;
        *) fail "Unknown option for enroot list: '$1' (usage: enroot list [-f])" ;;
    esac
    (($# <= 1)) || fail "enroot list takes no names (usage: enroot list [-f])"
    shopt -s nullglob
    if ! cd -- "$ENROOT_DATA_PATH" 2>/dev/null; then
        ((fancy)) && (IFS="$US"; print_table "${LIST_HEADER[*]}")
        return 0
    fi
    if ! ((fancy)); then
        for n in *; do printf '%s\n' "$n"; done
        return 0
    fi
    mapfile -t rows < <(list_rows)
    (IFS="$US"; print_table "${LIST_HEADER[*]}" ${rows[@]+"${rows[@]}"})
}
