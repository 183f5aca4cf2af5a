#!/usr/bin/env bash
# `make demo`: the field report's story on the mini cluster. Build an image with sqshbuild,
# write the job with mksbatch, run it on two nodes in containers, kill a node, watch the job
# requeue and resume from its last complete checkpoint, and check the final state.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
release=${SQUALL_RELEASE:-trixie}
export SQUALL_FSX=${SQUALL_FSX:-$top/.cluster/fsx}
fsx=$SQUALL_FSX
name=${SQUALL_CLUSTER:-squall}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
login() { docker exec -u squall -w /fsx/home/squall "$name-login" bash -c "$1"; }
job_field() { docker exec "$name-login" scontrol show job -o "$jobid" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n1; }
fail() { echo "demo: $*" >&2; exit 1; }

say "1/6 the mini cluster: a login node and three compute nodes sharing /fsx"
bash docker/cluster.sh up
docker exec "$name-login" sinfo

say "2/6 sqshbuild: a local Docker image -> /fsx/images/demo.sqsh (cached by digest on /fsx)"
docker build -q -f docker/demo-image.Dockerfile --build-arg "RELEASE=$release" -t "$name-demo:$release" . >/dev/null
install -d -o 1000 -g 1000 "$fsx/images" "$fsx/demo"
sqshbuild build --cache-dir "$fsx/squall/images" -o "$fsx/images/demo.sqsh" "dockerd://$name-demo:$release"
sqshbuild inspect "$fsx/images/demo.sqsh"

say "3/6 mksbatch: the recipe -> an sbatch script (gang allocation, requeue, resume)"
rm -rf "$fsx/demo/ckpt" "$fsx/demo/logs" "$fsx/demo/final.json" "$fsx/demo/steps.log"
cp sbatch/demo/demo.yaml sbatch/demo/count.py "$fsx/demo/"
chown -R 1000:1000 "$fsx/demo" "$fsx/images"
login "mksbatch /fsx/demo/demo.yaml -o /fsx/demo/job.sbatch && grep '^#SBATCH' /fsx/demo/job.sbatch"

say "4/6 submit: two nodes, every task in a container started from the .sqsh"
login "srun -N2 --container-image=/fsx/images/demo.sqsh --container-log=verbose bash -c '. /etc/os-release; echo \$(hostname): \$PRETTY_NAME'"
jobid=$(login "sbatch --parsable /fsx/demo/job.sbatch")
echo "job $jobid submitted"
deadline=$((SECONDS + 120))
until [ -s "$fsx/demo/steps.log" ] && [ "$(wc -l <"$fsx/demo/steps.log")" -ge 25 ]; do
  [ $SECONDS -lt $deadline ] || fail "job $jobid made no progress in 120 s (state $(job_field JobState)); see $fsx/demo/logs"
  sleep 1
done
nodes=$(docker exec "$name-login" scontrol show hostnames "$(job_field NodeList)" | tr '\n' ' ')
echo "running on: $nodes; steps done so far: $(wc -l <"$fsx/demo/steps.log")"
echo "complete checkpoints: $(cd "$fsx/demo/ckpt" && echo ckpt-*)"

victim=$(awk '{print $2}' <<<"$nodes")
say "5/6 kill node $victim (the whole node container: slurmd, slurmstepd and the tasks)"
docker kill "$name-$victim" >/dev/null
echo "killed $victim at step $(tail -n1 "$fsx/demo/steps.log" | awk '{print $2}')"
last_state=""
deadline=$((SECONDS + 300))
while :; do
  state="$(job_field JobState) restarts=$(job_field Restarts) nodes=$(job_field NodeList)"
  [ "$state" = "$last_state" ] || { echo "$(date +%T) job $jobid: $state"; last_state=$state; }
  case "$state" in COMPLETED*) break ;; FAILED*|CANCELLED*|TIMEOUT*) fail "job ended $state" ;; esac
  [ $SECONDS -lt $deadline ] || fail "job $jobid did not complete within 300 s after the kill"
  sleep 1
done

say "6/6 resumed from the last complete checkpoint, same final state as an uninterrupted run"
grep -h -E 'squall: (job|resuming|no complete)|count.py' "$fsx"/demo/logs/*.out || true
python3 - "$fsx/demo/final.json" "$fsx/demo/steps.log" <<'PY'
import json, sys
final = json.load(open(sys.argv[1]))
expected = list(range(120))
ok = final["steps"] == expected and final["sum"] == sum(expected)
runs = {}
for line in open(sys.argv[2]):
    restart, step = line.split()
    runs.setdefault(restart, []).append(int(step))
for restart, steps in sorted(runs.items()):
    print(f"run {restart}: steps {steps[0]}..{steps[-1]}")
redone = len(runs.get("0", [])) + len(runs.get("1", [])) - 120
print(f"final state: {final['count']} steps, sum {final['sum']} -> "
      f"{'identical to an uninterrupted run' if ok else 'WRONG'}; steps redone after the kill: {redone}")
sys.exit(0 if ok else 1)
PY
docker start "$name-$victim" >/dev/null
echo "restarted $victim; it rejoins the cluster by itself (ReturnToService=2)"
deadline=$((SECONDS + 90))
until docker exec "$name-login" sinfo -h -n "$victim" -o %t 2>/dev/null | grep -qx idle; do
  [ $SECONDS -lt $deadline ] || fail "$victim did not come back idle within 90 s"
  sleep 1
done
echo "$victim is idle again: the cluster is whole for the next user (make test)"
