#!/bin/bash
# squall's Enroot TEST DOUBLE: Enroot's standard shadow hook (hooks.d/10-shadow.sh).
# The container's passwd and group databases get entries for root, nobody and the user
# (from the host's), so that `id`, `whoami` and tools asking for the user's name work; on
# Debian-based images the _apt user and group go (apt then does not try to drop to them).
set -eu
etc=$ENROOT_ROOTFS/etc
[ -d "$etc" ] || exit 0
user_ent=$(getent passwd "${USER:-${SLURM_JOB_USER:-}}" 2>/dev/null || getent passwd "$(id -u)" || true)
IFS=: read -r user _ uid gid gecos home shell <<<"$user_ent"
group_ent=$(getent group "${gid:-}" 2>/dev/null || true)
group=${group_ent%%:*}
[ -x "$ENROOT_ROOTFS${shell:-/bin/sh}" ] || shell=/bin/sh
nobody=$(</proc/sys/kernel/overflowuid) nogroup=$(</proc/sys/kernel/overflowgid)

# add_entry FILE NAME LINE: append LINE unless FILE has an entry NAME already.
add_entry() {
    [ -e "$1" ] || : >"$1"
    grep -q "^$2:" "$1" || printf '%s\n' "$3" >>"$1"
}
# Rewrite in place (never through a symlink), so that a named container keeps the result.
for db in passwd group; do
    if [ -L "$etc/$db" ]; then cp --remove-destination "$(readlink -f "$etc/$db")" "$etc/$db"; fi
    if [ -f "$etc/debian_version" ] && [ -f "$etc/$db" ]; then
        sed -i '/^_apt:/d' "$etc/$db"
    fi
done
add_entry "$etc/passwd" root "root:x:0:0:root:/root:$shell"
add_entry "$etc/passwd" nobody "nobody:x:$nobody:$nogroup:nobody:/:/sbin/nologin"
add_entry "$etc/group" root "root:x:0:"
add_entry "$etc/group" nogroup "nogroup:x:$nogroup:"
if [ -n "${user:-}" ] && [ "$user" != root ]; then
    add_entry "$etc/passwd" "$user" "$user:x:$uid:$gid:$gecos:$home:$shell"
    [ -z "$group" ] || add_entry "$etc/group" "$group" "$group:x:$gid:"
fi
