#!/usr/bin/env bash
# The scale cluster (docs/cluster.md, "Many nodes on one machine"): up N | down | exec CMD.
# One container beside the mini cluster, on its network (its registry on login:5000): N
# light Slurm nodes s1..sN (docker/scale/scale-init.sh) sharing /fsx over GlusterFS.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
name=${SQUALL_CLUSTER:-squall}
subnet=${SQUALL_SUBNET:-10.203.47}
release=${SQUALL_RELEASE:-trixie}
box="$name-scale"

up() {
  local nodes=$1 out="" deadline
  case "$nodes" in ''|*[!0-9]*) echo "scale: NODES='$nodes': give a number, e.g. make scale-up NODES=128" >&2; exit 2 ;; esac
  if [ "$nodes" -lt 1 ] || [ "$nodes" -gt 1000 ]; then
    echo "scale: NODES=$nodes: from 1 to 1000" >&2; exit 2
  fi
  docker network inspect "$name" >/dev/null 2>&1 || {
    echo "scale: the mini cluster's network '$name' is not up: run make cluster-up first" >&2; exit 1; }
  docker rm -f "$box" >/dev/null 2>&1 || true
  local root
  root=$(node_root "$name-node:$release")
  docker run -d --name "$box" --hostname scale --network "$name" --ip "$subnet.30" \
    --add-host "login:$subnet.10" --cap-add ALL --cap-drop SYS_RESOURCE --device /dev/fuse \
    --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --tmpfs /run --tmpfs /tmp -e "SQUALL_SCALE_NODES=$nodes" \
    -e "SQUALL_SCALE_SKEW=${SQUALL_SCALE_SKEW:-}" \
    -v "$top/docker/scale:/scale:ro" -v "$root:/sroot:ro" --entrypoint /bin/bash "$name-node:$release" \
    /scale/scale-init.sh >/dev/null
  deadline=$((SECONDS + 60 + nodes))
  while [ $SECONDS -lt $deadline ]; do
    out=$(docker exec "$box" sinfo -h -o '%D %t' 2>/dev/null || true)
    if grep -qx "$nodes idle" <<<"$out"; then
      echo "scale: up ($nodes nodes idle) in ${SECONDS}s"
      return 0
    fi
    if ! docker inspect -f '{{.State.Running}}' "$box" 2>/dev/null | grep -q true; then
      echo "scale: the container stopped; its log:" >&2; docker logs --tail 20 "$box" >&2; exit 1
    fi
    sleep 1
  done
  echo "scale: not all $nodes nodes idle after $((60 + nodes))s; sinfo said: ${out:-nothing}" >&2
  echo "scale: see /var/log/slurm in $box (slurmd-sN.log, node-sN.out)" >&2
  exit 1
}

# The nodes' root: the node image exported once to a host directory (bound read-only as
# /sroot), so that the nodes' files are not served by this engine's fuse-overlayfs (one
# daemon per container, with dockerd's 20000-descriptor limit: about 100 nodes' processes
# and libraries exhaust it and every open in the container fails with EMFILE).
node_root() {
  local image=$1 id dir
  id=$(docker image inspect -f '{{.Id}}' "$image" | cut -d: -f2 | cut -c1-16)
  dir="$top/.cluster/scale-root/$id"
  if [ ! -e "$dir/.complete" ]; then
    rm -rf "$top/.cluster/scale-root"
    mkdir -p "$dir"
    local cid
    cid=$(docker create "$image" /bin/true)
    docker export "$cid" | tar -x -C "$dir"
    docker rm "$cid" >/dev/null
    # mount points of what each node makes at start (node-init.sh makes them at run time)
    mkdir -p "$dir"/{var/lib/enroot,var/lib/squall,var/spool/slurmd,var/log/slurm,fsx,mnt}
    touch "$dir/etc/hosts" "$dir/etc/resolv.conf"
    touch "$dir/.complete"
  fi
  echo "$dir"
}

case "${1:-}" in
  up) up "${2:-}" ;;
  down) docker rm -f "$box" >/dev/null 2>&1 || true; echo "scale: down" ;;
  exec) shift; exec docker exec "$box" "$@" ;;
  *) echo "usage: docker/scale/scale.sh up N | down | exec CMD..." >&2; exit 2 ;;
esac
