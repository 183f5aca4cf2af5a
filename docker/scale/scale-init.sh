#!/bin/bash
# PID 1 of the scale container (docker/scale/scale.sh): a many-node Slurm cluster in one
# container, beside the mini cluster and on its network (its nodes pull from login:5000).
#   - GlusterFS: glusterd and a one-brick volume `fsx`, mounted on this container's /fsx
#     (where jobs are submitted) and, by its own client, in every node (scale-node.sh);
#   - munge, and slurmctld for cluster `scale` with nodes s1..sN (multiple-slurmd: one
#     slurmd per node, each in its own mount and UTS namespace, port 20000+i);
#   - the same packages, plugin, Enroot and plugstack.conf as the mini cluster's nodes.
set -euo pipefail
nodes=${SQUALL_SCALE_NODES:?}
ip=$(hostname -i | awk '{print $1}')
[ -c /dev/fuse ] && chmod 0666 /dev/fuse

mkdir -p /var/log/glusterfs /bricks/fsx /fsx
glusterd
for _ in $(seq 50); do gluster --mode=script pool list >/dev/null 2>&1 && break; sleep 0.2; done
gluster --mode=script volume create fsx "$ip:/bricks/fsx" force >/dev/null
# Each node mounts with its own client; no client-side caches that would hide one node's
# writes from another beyond what Lustre would.
gluster --mode=script volume set fsx performance.stat-prefetch off >/dev/null
gluster --mode=script volume set fsx performance.quick-read off >/dev/null
gluster --mode=script volume set fsx performance.io-cache off >/dev/null
gluster --mode=script volume start fsx >/dev/null
mount -t glusterfs "$ip:/fsx" /fsx

# The mini cluster's /fsx layout (node-init.sh): homes under root's /fsx/home, the shared
# image cache written by the builder alone.
install -d -o root -g root -m 0755 /fsx/home /fsx/squall
install -d -o squall -g squall /fsx/home/squall
for u in alice bob carol; do install -d -o "$u" -g "$u" "/fsx/home/$u"; done
install -d -o squall-builder -g squall-builder -m 0755 /fsx/squall/images
install -d -o munge -g munge -m 0755 /run/munge
install -d -o slurm -g slurm /var/log/slurm /var/spool/slurmctld

conf=/etc/slurm/slurm.conf
sed -i -e 's|^ClusterName=.*|ClusterName=scale|' -e "s|^SlurmctldHost=.*|SlurmctldHost=scale($ip)|" \
  -e 's|^ProctrackType=.*|ProctrackType=proctrack/linuxproc|' \
  -e 's|^TaskPlugin=.*|TaskPlugin=task/none|' \
  -e 's|^AccountingStorageType=.*|AccountingStorageType=accounting_storage/none|' \
  -e '/^AccountingStorageHost=/d' \
  -e 's|^SlurmdPidFile=.*|SlurmdPidFile=/run/slurmd-%n.pid|' \
  -e 's|^SlurmdLogFile=.*|SlurmdLogFile=/var/log/slurm/slurmd-%n.log|' \
  -e '/^NodeName=/d' -e '/^PartitionName=/d' "$conf"
cat >>"$conf" <<CONF
NodeName=s[1-$nodes] NodeHostname=scale NodeAddr=$ip Port=[20001-$((20000 + nodes))] CPUs=2 RealMemory=100 State=UNKNOWN
PartitionName=scale Nodes=s[1-$nodes] Default=YES MaxTime=INFINITE State=UP
CONF
[ -f /etc/slurm/cgroup.conf ] && rm -f /etc/slurm/cgroup.conf

runuser -u munge -- /usr/sbin/munged
pids=()
/usr/sbin/slurmctld -D -i &
pids+=($!)
for i in $(seq "$nodes"); do
  unshare --mount --uts --propagation private bash /scale/scale-node.sh "s$i" "$ip" \
    >"/var/log/slurm/node-s$i.out" 2>&1 &
  pids+=($!)
  # 32 clients at a time fetch their volume file from glusterd: at 256 at once some got
  # it garbled ("type" not specified for volume fsx-dht, "No suitable I/O engine found")
  [ $((i % 32)) -ne 0 ] || sleep 2
done
trap 'kill -TERM "${pids[@]}" 2>/dev/null; wait' TERM INT
# A node may die (bench/bench_failover_scale.py kills one): the cluster lives as long as
# its controller does.
wait "${pids[0]}"
echo "scale-init: slurmctld exited; stopping the scale cluster" >&2
kill -TERM "${pids[@]}" 2>/dev/null || true
exit 1
