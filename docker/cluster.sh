#!/usr/bin/env bash
# Bring the mini cluster up (and wait until all nodes are idle) or down (and leave no
# container, network or volume behind).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
export SQUALL_FSX=${SQUALL_FSX:-$top/.cluster/fsx}
# SQUALL_CLUSTER names the compose project, containers and network (see docker-compose.yml).
name=${SQUALL_CLUSTER:-squall}
compose=(docker-compose -p "$name" -f "$top/docker-compose.yml")
timeout=${SQUALL_UP_TIMEOUT:-90}

up() {
  mkdir -p "$SQUALL_FSX"
  "${compose[@]}" up -d --no-build >/dev/null 2>&1 || { "${compose[@]}" up -d --no-build; exit 1; }
  local deadline=$((SECONDS + timeout)) out=""
  while [ $SECONDS -lt $deadline ]; do
    out=$(docker exec "$name-login" sinfo -h -N -o '%N %t' 2>/dev/null || true)
    if [ "$(grep -c -E ' (idle|mix|alloc)$' <<<"$out")" -eq 3 ]; then
      echo "cluster: up (login, node1-node3 idle) in ${SECONDS}s"
      return 0
    fi
    sleep 0.5
  done
  echo "cluster: nodes not idle after ${timeout}s; sinfo said: ${out:-nothing}" >&2
  echo "cluster: see 'docker logs $name-login' and /var/log/slurm in the node containers" >&2
  exit 1
}

down() {
  # The scale cluster sits on this cluster's network (docker/scale/scale.sh).
  docker rm -f "$name-scale" >/dev/null 2>&1 || true
  "${compose[@]}" down -v --remove-orphans -t 2 >/dev/null 2>&1 || true
  # /fsx holds files made as root and as the test user inside the nodes.
  [ -d "$SQUALL_FSX" ] && rm -rf "$SQUALL_FSX"
  echo "cluster: down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: docker/cluster.sh up|down" >&2; exit 2 ;;
esac
