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
# A node whose clock is off (SQUALL_SCALE_SKEW="s15=-12m s16=+12m", libfaketime's offsets):
# its GlusterFS client stamps the times of what the node writes (features.ctime, as a Lustre
# client stamps mtimes) from that clock. The node's daemons keep the host's clock (one
# kernel; munge's credentials would expire): a test runs its builds there under the same
# offset (faketime.sh).
# mount(8) drops LD_PRELOAD: its helper is run directly.
mount=(mount -t glusterfs)
for s in ${SQUALL_SCALE_SKEW:-}; do
  [ "${s%%=*}" = "$name" ] && mount=(/scale/faketime.sh "${s#*=}" /sbin/mount.glusterfs)
done
for try in 1 2 3 4 5 6; do
  "${mount[@]}" "$server:/fsx" "$r/fsx" \
    -o attribute-timeout=0,entry-timeout=0,negative-timeout=0 && break
  [ "$try" -lt 6 ] || { echo "scale-node $name: /fsx not mounted after $try tries" >&2; exit 1; }
  # a client that failed may leave its mount point dead ("Transport endpoint is not
  # connected"), which the next try takes for a missing directory
  umount -l "$r/fsx" 2>/dev/null || true
  sleep $((RANDOM % 3 + try))
done
cd "$r"
pivot_root . mnt
umount -l /mnt
cd /
chown slurm:slurm /var/spool/slurmd
install -d -m 0755 /var/lib/enroot/cache
for u in squall alice bob carol; do
  id "$u" >/dev/null 2>&1 || continue
  install -d -o "$u" -g "$u" -m 0700 "/var/lib/enroot/$(id -u "$u")" \
    "/run/enroot/user-$(id -u "$u")" "/var/lib/enroot/cache/$(id -u "$u")"
done
exec /usr/sbin/slurmd -D -N "$name"
