#!/bin/bash
# squall EFA hook for Enroot's hooks.d, for sites that run Enroot without the squall
# SPANK plugin (the plugin runs its own squall-efa-hook instead; see README.md).
#
# On a node with EFA devices: keeps /sys/class/infiniband visible to the Mellanox
# hook, bind-mounts the host's libfabric and aws-ofi-nccl read-only when the image
# has no copy of its own, and sets the NCCL variables. A name already in the
# container's environment (image, environ.d, `enroot start -e`) is left alone,
# except LD_LIBRARY_PATH, which is only prepended to.
#
# SQUALL_EFA=auto|require|off (container environment or caller's; default auto).
# SQUALL_EFA_SYSFS_ROOT / SQUALL_EFA_OPT_ROOT: other roots (tests, unusual nodes).
set -euo pipefail
shopt -s nullglob

sysfs=${SQUALL_EFA_SYSFS_ROOT:-/sys}
opt=${SQUALL_EFA_OPT_ROOT:-/opt/amazon}
rootfs=${ENROOT_ROOTFS:?ENROOT_ROOTFS is not set: run this from Enroot hooks.d}
environ=${ENROOT_ENVIRON:?ENROOT_ENVIRON is not set: run this from Enroot hooks.d}
mounts=${ENROOT_MOUNTS:?ENROOT_MOUNTS is not set: run this from Enroot hooks.d}

die() { echo "squall-efa: $*" >&2; exit 1; }
warn() { echo "squall-efa: warning: $*" >&2; }

# Last value of NAME in the environment built so far; fails when absent.
env_value() {
    local line found=1
    while IFS= read -r line; do
        if [[ $line == "$1="* ]]; then value=${line#*=}; found=0; fi
    done <"$environ"
    return "$found"
}

set_var() {
    if ! env_value "$1"; then printf '%s=%s\n' "$1" "$2" >>"$environ"; fi
}

mode=${SQUALL_EFA:-auto}
if env_value SQUALL_EFA; then mode=$value; fi
case $mode in
    off) exit 0 ;;
    auto | require) ;;
    *) die "SQUALL_EFA=$mode: use auto, require or off" ;;
esac

devices=0
for dev in "$sysfs"/class/infiniband/*; do
    driver=$(readlink "$dev/device/driver" || true)
    if [ "${driver##*/}" = efa ]; then devices=$((devices + 1)); fi
done
if [ "$devices" -eq 0 ]; then
    if [ "$mode" = require ]; then
        die "SQUALL_EFA=require: this node has no EFA device: run on an EFA-enabled instance or set SQUALL_EFA=auto"
    fi
    exit 0
fi

# First directory (of the arguments) holding a file that matches the pattern.
first_dir() {
    local pattern=$1 dir
    shift
    for dir in "$@"; do
        if compgen -G "$dir/$pattern" >/dev/null; then printf '%s\n' "$dir"; return 0; fi
    done
    return 1
}

usual=(usr/local/lib usr/lib/x86_64-linux-gnu usr/lib/aarch64-linux-gnu usr/lib64 usr/lib)
img_fabric=$(first_dir 'libfabric.so*' "${usual[@]/#/$rootfs/}" \
    "$rootfs"/opt/amazon/efa/lib "$rootfs"/opt/amazon/efa/lib64 || true)
img_ofi=$(first_dir 'libnccl-net*.so' "$rootfs"/opt/amazon/ofi-nccl/lib{,64} \
    "$rootfs"/opt/amazon/aws-ofi-nccl/lib{,64} "$rootfs"/opt/aws-ofi-nccl/lib{,64} \
    "${usual[@]/#/$rootfs/}" || true)
host_fabric=$(first_dir 'libfabric.so*' "$opt"/efa/lib "$opt"/efa/lib64 || true)
host_ofi=$(first_dir 'libnccl-net*.so' "$opt"/ofi-nccl/lib{,64} "$opt"/aws-ofi-nccl/lib{,64} || true)

ofi=${img_ofi:-$host_ofi}
if [ -z "$ofi" ] || [ -z "${img_fabric:-$host_fabric}" ]; then
    what=aws-ofi-nccl
    if [ -n "$ofi" ]; then what=libfabric; fi
    if [ "$mode" = require ]; then
        die "SQUALL_EFA=require: no $what in the image nor under $opt: install it in the image (EFA installer --skip-kmod) or on the node"
    fi
    warn "EFA devices but no $what in the image nor under $opt: NCCL will use TCP sockets"
    exit 0
fi

# Mount a host tree at the same /opt/amazon/<name> the EFA installer uses.
ld=
inject() {
    local libdir=$1 prefix name
    prefix=${libdir%/*}
    name=${prefix##*/}
    if [[ $prefix =~ [[:space:]] ]]; then die "$prefix holds a blank, which fstab lines cannot carry"; fi
    printf '%s /opt/amazon/%s none x-create=dir,bind,ro,nosuid,nodev\n' "$prefix" "$name" >>"$mounts"
    ld=${ld:+$ld:}/opt/amazon/$name/${libdir##*/}
}
if [ -z "$img_fabric" ]; then inject "$host_fabric"; fi
if [ -z "$img_ofi" ]; then inject "$host_ofi"; fi
if [ -n "$ld" ]; then
    if env_value LD_LIBRARY_PATH && [ -n "$value" ]; then ld=$ld:$value; fi
    printf 'LD_LIBRARY_PATH=%s\n' "$ld" >>"$environ"
fi

set_var MELLANOX_VISIBLE_DEVICES void
if [ -e "$ofi/libnccl-net-ofi.so" ]; then set_var NCCL_NET_PLUGIN ofi; fi
set_var NCCL_SOCKET_IFNAME '^docker,lo,veth'
set_var FI_EFA_USE_HUGE_PAGE 0
if [ "$mode" = require ]; then
    # plugins 1.12 and newer call the network "Libfabric", older ones "AWS Libfabric"
    lib=$ofi/libnccl-net-ofi.so
    if [ ! -e "$lib" ]; then lib=$ofi/libnccl-net.so; fi
    if grep -qxF 'Libfabric' <(tr '\0' '\n' <"$lib"); then
        set_var NCCL_NET Libfabric
    elif grep -qxF 'AWS Libfabric' <(tr '\0' '\n' <"$lib"); then
        set_var NCCL_NET 'AWS Libfabric'
    else
        warn "could not read the network name from $lib: NCCL_NET not set"
    fi
fi
exit 0
