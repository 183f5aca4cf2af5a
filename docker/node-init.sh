#!/bin/bash
# PID 1 of a node container: munge, then slurmctld (+ a registry) on the login node or
# slurmd on a compute node. Bash stays PID 1 so orphans are reaped; when a daemon dies,
# the container stops, like a node that lost its daemon.
set -euo pipefail
role=${SQUALL_ROLE:-compute}

# Unprivileged container starts mount squashfs images through FUSE.
[ -c /dev/fuse ] && chmod 0666 /dev/fuse

# Process tracking (docs/cluster.md): cgroup (default) or linuxproc, chosen at cluster-up.
case "${SQUALL_PROCTRACK:-cgroup}" in
  cgroup)
    # Docker mounts this container's own cgroup of each v1 controller, read-only: a
    # subtree per node, so the nodes' Slurm cgroups never collide. Make it writable.
    for d in /sys/fs/cgroup/*/; do
      if mountpoint -q "$d"; then mount -o remount,rw,bind "$d"; fi
    done
    ;;
  linuxproc)
    sed -i -e 's|^ProctrackType=.*|ProctrackType=proctrack/linuxproc|' \
      -e 's|^TaskPlugin=.*|TaskPlugin=task/none|' /etc/slurm/slurm.conf
    ;;
  *) echo "node-init: SQUALL_PROCTRACK='$SQUALL_PROCTRACK': use cgroup or linuxproc" >&2; exit 2 ;;
esac

# Home directories below a root-owned /fsx/home, as on a real cluster: a directory another
# user owns above a per-user cache would let that user swap it (docs/security.md).
install -d -o root -g root -m 0755 /fsx/home
install -d -o squall -g squall /fsx/home/squall /fsx/images
for u in alice bob carol; do install -d -o "$u" -g "$u" "/fsx/home/$u"; done
# The shared image cache as the packages' model has it (docs/security.md): written by the
# image builder alone (the account python3-squall made, the same uid on every node since
# every node runs this image), read by everyone, below directories only root may change.
# No 1777: users never write it (their own builds go to ~/.cache/squall/images).
install -d -o root -g root -m 0755 /fsx/squall
install -d -o squall-builder -g squall-builder -m 0755 /fsx/squall/images
install -d -o munge -g munge -m 0755 /run/munge
install -d -o slurm -g slurm /var/log/slurm /var/spool/slurmctld /var/spool/slurmd
install -d -m 0755 /run/squall
# The node's local disk for squall's cache of extracted images (plugstack local_cache): a
# directory of the host's disk, as a real node's NVMe or instance store would be (the
# node's own / is Docker's fuse-overlayfs). Removed with /fsx by `cluster.sh down`.
install -d -m 0755 "/fsx/.node-local/$(hostname)" /var/lib/squall
mountpoint -q /var/lib/squall || mount --bind "/fsx/.node-local/$(hostname)" /var/lib/squall
# Named containers (enroot create) on the node, as Pyxis advises for the data path: in the
# home on /fsx two nodes race for one name, and Enroot's `list -f` names a container only
# when its filesystem is mounted at its own root (the home here is a bind of the host's).
install -d -m 0755 /var/lib/enroot
mountpoint -q /var/lib/enroot ||
  mount -t tmpfs -o mode=0755,nosuid,nodev,size=4g squall-enroot-data /var/lib/enroot
# Enroot's runtime path (/etc/enroot/enroot.conf) the same way: root's, one 0700 directory
# per user made here, none a user could plant for another.
install -d -m 0755 /run/enroot /var/lib/enroot/cache
for u in squall alice bob carol; do
  id "$u" >/dev/null 2>&1 || continue
  install -d -o "$u" -g "$u" -m 0700 "/var/lib/enroot/$(id -u "$u")" "/run/enroot/user-$(id -u "$u")" \
    "/var/lib/enroot/cache/$(id -u "$u")"
done

# Per-node plugstack arguments (e.g. node3 points its EFA roots at a stand-in tree).
# Rebuilt from the image's copy at every start, so a restarted node does not repeat them.
if [ -f /etc/slurm/plugstack.conf ]; then
  [ -f /etc/squall/plugstack.conf.image ] || cp /etc/slurm/plugstack.conf /etc/squall/plugstack.conf.image
  cp /etc/squall/plugstack.conf.image /etc/slurm/plugstack.conf
  if [ -n "${SQUALL_PLUGSTACK_EXTRA:-}" ]; then
    sed -i "/^required /s|\$| ${SQUALL_PLUGSTACK_EXTRA}|" /etc/slurm/plugstack.conf
  fi
fi

# bob's Enroot credentials for the private registry (and nobody else's), written by bob
# himself (root writes nothing inside a user's home), 0600 as Enroot wants them.
if [ "$role" = login ]; then
  { printf 'machine login:5001 login bob password '; cat /etc/squall/registry-private.password; } |
    runuser -u bob -- sh -c 'umask 077 && d=/fsx/home/bob/.config/enroot && mkdir -p "$d" &&
      cat >"$d/.credentials.new" && mv -f "$d/.credentials.new" "$d/.credentials"'
fi

runuser -u munge -- /usr/sbin/munged
pids=()
# node_exporter on every node, with squall's metrics from its textfile directory (the
# plugstack default metrics_dir; docs/metrics.md). Not among the daemons whose end stops the
# node: monitoring never takes a node down.
install -d -m 0755 /var/lib/prometheus/node-exporter
runuser -u prometheus -- /usr/bin/prometheus-node-exporter --log.level=warn \
  --collector.textfile.directory=/var/lib/prometheus/node-exporter \
  --web.listen-address=:9100 >/var/log/node-exporter.log 2>&1 &
# Accounting (login node): MariaDB, then slurmdbd over it, both up before slurmctld so that
# its first job is recorded (docs/admin.md). The database is the node's own, made on its
# first start; slurmdbd reaches it through its socket as the slurm account.
start_accounting() {
  install -d -o mysql -g mysql -m 0755 /run/mysqld
  [ -d /var/lib/mysql/mysql ] ||
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db \
      >/var/log/mariadb-install.log 2>&1
  /usr/sbin/mariadbd --user=mysql --skip-networking --innodb-buffer-pool-size=32M \
    --log-error=/var/log/mariadb.log &
  pids+=($!)
  wait_for "MariaDB" mariadb-admin --silent ping
  mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS slurm@localhost IDENTIFIED VIA unix_socket;
    GRANT ALL ON slurm_acct_db.* TO slurm@localhost;"
  chown slurm:slurm /etc/slurm/slurmdbd.conf
  chmod 0600 /etc/slurm/slurmdbd.conf
  /usr/sbin/slurmdbd -D &
  pids+=($!)
  wait_for "slurmdbd" sacctmgr -n -P list cluster
  sacctmgr -i -Q add cluster squall >/dev/null 2>&1 || true
  sacctmgr -i -Q add account squall Description=tests Organization=squall >/dev/null 2>&1 || true
  sacctmgr -i -Q add user root,squall,alice,bob,carol Account=squall >/dev/null 2>&1 || true
}
# Run "$@" until it succeeds (30 s at most): a daemon just started answers.
wait_for() {
  local what=$1; shift
  for _ in $(seq 150); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "node-init: $what did not answer within 30 s" >&2
  return 1
}
case "$role" in
  login)
    start_accounting
    /usr/sbin/slurmctld -D -i &
    pids+=($!)
    # A registry on the login node, standing in for the site's registry (tests seed it).
    /usr/bin/docker-registry serve /etc/squall/registry.yml >/var/log/registry.log 2>&1 &
    pids+=($!)
    # A second one that requires credentials (htpasswd, user bob), for private images.
    /usr/bin/docker-registry serve /etc/squall/registry-private.yml \
      >/var/log/registry-private.log 2>&1 &
    pids+=($!)
    # The Docker Hub mirror: read-only for everyone (5002), root seeds it (5003).
    /usr/bin/docker-registry serve /etc/squall/registry-mirror.yml \
      >/var/log/registry-mirror.log 2>&1 &
    pids+=($!)
    /usr/bin/docker-registry serve /etc/squall/registry-mirror-push.yml \
      >/var/log/registry-mirror-push.log 2>&1 &
    pids+=($!)
    ;;
  compute)
    /usr/sbin/slurmd -D &
    pids+=($!)
    ;;
  *) echo "node-init: unknown SQUALL_ROLE '$role' (login or compute)" >&2; exit 2 ;;
esac
trap 'kill -TERM "${pids[@]}" 2>/dev/null; wait' TERM INT
wait -n
echo "node-init: a daemon exited; stopping the node" >&2
kill -TERM "${pids[@]}" 2>/dev/null || true
exit 1
