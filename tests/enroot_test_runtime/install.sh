#!/bin/bash
# Install squall's Enroot TEST DOUBLE (not NVIDIA Enroot) on a test node.
# Usage: install.sh [PREFIX [SYSCONF]]   (defaults: /opt/enroot-test-runtime, /etc/enroot)
# Needs at run time: bash, perl-base, util-linux (unshare, setpriv, mount, flock, nsenter,
# lsns), procps (ps), squashfs-tools, squashfuse, fuse-overlayfs, fuse3; /dev/fuse usable by
# the job users.
set -euo pipefail

prefix="${1:-/opt/enroot-test-runtime}"
sysconf="${2:-/etc/enroot}"
here="$(cd -- "${BASH_SOURCE[0]%/*}" && pwd)"

for tool in unshare setpriv mount flock nsenter lsns ps unsquashfs mksquashfs squashfuse fuse-overlayfs perl; do
    command -v "$tool" >/dev/null || {
        printf '[ERROR] %s is missing: install util-linux, procps, squashfs-tools, squashfuse, fuse-overlayfs and perl-base\n' "$tool" >&2
        exit 1
    }
done

install -d -m 0755 "$prefix/bin" "$prefix/libexec"
install -m 0755 "$here/bin/enroot" "$prefix/bin/enroot"
for f in "$here"/libexec/*; do
    mode=0644
    [[ ! -x $f ]] || mode=0755
    install -m "$mode" "$f" "$prefix/libexec/"
done

install -d -m 0755 "$sysconf" "$sysconf/environ.d" "$sysconf/mounts.d" "$sysconf/hooks.d"
# Enroot's standard hooks (and the Slurm PMI one, which sites enable), as Enroot installs them.
for f in "$here"/hooks.d/*.sh; do
    [[ -e $sysconf/hooks.d/${f##*/} ]] || install -m 0755 "$f" "$sysconf/hooks.d/"
done
# Enroot's default mounts.d/20-config.fstab: the host's /etc/hosts, hostname, resolv.conf
# (and machine-id when present) bound read-only, so node names resolve in every container.
for f in "$here"/mounts.d/*.fstab; do
    [[ -e $sysconf/mounts.d/${f##*/} ]] || install -m 0644 "$f" "$sysconf/mounts.d/"
done
if [[ ! -e $sysconf/enroot.conf ]]; then
    install -m 0644 "$here/enroot.conf" "$sysconf/enroot.conf"
fi
printf 'installed the squall Enroot test double: %s/bin/enroot (settings in %s)\n' "$prefix" "$sysconf"
