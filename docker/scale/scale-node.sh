#!/bin/bash
# One light node of the scale cluster, run by scale-init.sh in its own mount and UTS
# namespaces (unshare). Its root is the node image exported to a host directory (/sroot,
# read-only; not the container's fuse-overlayfs /, whose one daemon per container runs out
# of descriptors at about 100 nodes), with node-local tmpfs where a node keeps its own state
# (Slurm's spool, squall's and Enroot's runtime and data, /tmp), its own GlusterFS client
# for /fsx (its own page cache, locks and O_EXCL, as a Lustre client per node), then its
# slurmd (multiple-slurmd: `-N NAME`, its port from slurm.conf).
set -euo pipefail
name=$1 server=$2
r=/sroot
hostname "$name"
mount -t proc proc "$r/proc"
mount --rbind /sys "$r/sys"
mount --rbind /dev "$r/dev"
for d in /run /tmp /var/tmp /var/lib/enroot /var/lib/squall /var/spool/slurmd; do
  mount -t tmpfs -o mode=0755,nosuid,nodev,size=1g "scale-$name" "$r$d"
done
chmod 1777 "$r/tmp" "$r/var/tmp"
# What the node shares with the container: munge's socket, the generated Slurm
# configuration, names, and the log directory (one log per node, slurmd-%n.log).
install -d "$r/run/munge" "$r/run/squall" "$r/run/enroot"
mount --bind /run/munge "$r/run/munge"
for f in /etc/slurm /etc/hosts /etc/resolv.conf /var/log/slurm; do mount --bind "$f" "$r$f"; done
# attribute-timeout=0: metadata is asked of the server, as a Lustre client would (no
# per-client cache that hides another node's lock file).
# Hundreds of clients starting at once on two CPUs: a client now and then fails to set up
# ("No suitable I/O engine found", "failed to construct the graph"); it is tried again.
for try in 1 2 3 4 5 6; do
  mount -t glusterfs -o attribute-timeout=0,entry-timeout=0,negative-timeout=0 \
    "$server:/fsx" "$r/fsx" && break
  [ "$try" -lt 6 ] || { echo "scale-node $name: /fsx not mounted after $try tries" >&2; exit 1; }
  sleep $((RANDOM % 3 + try))
done
cd "$r"
pivot_root . mnt
umount -l /mnt
cd /
chown slurm:slurm /var/spool/slurmd
for u in squall alice bob carol; do
  id "$u" >/dev/null 2>&1 || continue
  install -d -o "$u" -g "$u" -m 0700 "/var/lib/enroot/$(id -u "$u")" \
    "/run/enroot/user-$(id -u "$u")"
done
exec /usr/sbin/slurmd -D -N "$name"
