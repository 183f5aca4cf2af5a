#!/usr/bin/env bash
# `make demo`: the field report's story on the mini cluster, with real training. PyTorch
# (Debian's python3-torch) from the cluster's registry by its tag, squashed by sqshbuild;
# the job written by mksbatch: torchrun and DDP over gloo on two nodes in containers with
# one hot spare; kill a node, watch the job notice by itself and start torchrun again on the
# spare from its last complete torch.save checkpoint, and check the final model against an
# uninterrupted run of the same training; print the seconds from the kill to every rank
# training again and the steps lost.
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
# The runtime the containers start with: NVIDIA's Enroot, built from its release source.
for n in node1 node2 node3; do echo "$n: Enroot $(docker exec "$name-$n" enroot version)"; done

tag=login:5000/squall/pytorch:2.6
say "2/6 the image: PyTorch in the cluster's registry ($tag), a squashfs by sqshbuild"
# Debian trixie's python3-torch (CPU, gloo, torchrun), built once on this machine (minutes)
# and cached by content; pushed to the login node's registry when it lacks it
# (docs/cluster.md).
bash docker/build-pytorch.sh
registry=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$name-login")
python3 docker/push-image.py "$(bash docker/build-pytorch.sh --name)" "$registry:5000" "${tag#login:5000/}"
# What the plugin does for the job's first step, done ahead: the image builder resolves the
# tag, pulls it once for the cluster and squashes it into the shared cache by digest
# (docs/plugin.md, "Registry images"); the job pins that digest for all its steps.
sqsh=$(docker exec -u squall-builder -w / "$name-login" env -i \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  sqshbuild build --cache-dir /fsx/squall/images "docker://$tag" | tail -n1)
sqshbuild inspect "$fsx/${sqsh#/fsx/}"
# The failover and mksbatch tests' small image, from a local Docker image (a file image:
# --container-image=/fsx/images/demo.sqsh): sbatch/demo/allreduce.py and count.py run in it.
docker build -q -f docker/demo-image.Dockerfile --build-arg "RELEASE=$release" -t "$name-demo:$release" . >/dev/null
# The image is root's, in a directory of root's that everyone reads: a second `make demo`
# replaces it (root's sqshbuild replaces only a file of its own, in a directory no one
# else can write: docs/security.md). A checkout demoed before this kept both as uid 1000's.
install -d -o 1000 -g 1000 "$fsx/demo"
install -d -o 0 -g 0 -m 0755 "$fsx/images"
rm -f "$fsx/images/demo.sqsh" "$fsx/images/demo.json"
# Built here, on the host, as root: not in the cluster's /fsx/squall/images, which is the
# image builder's (a uid that names no builder here, so root's sqshbuild refuses it:
# docs/security.md), but in a cache of root's on /fsx.
install -d -m 0755 "$fsx/.demo-cache"
sqshbuild build --quiet --cache-dir "$fsx/.demo-cache" -o "$fsx/images/demo.sqsh" \
  "dockerd://$name-demo:$release" >/dev/null
echo "and /fsx/images/demo.sqsh (sqshbuild dockerd://$name-demo:$release), the tests' small image"

say "3/6 mksbatch: the recipe -> an sbatch script (gang allocation with a hot spare, failover, resume)"
rm -rf "$fsx/demo/ckpt" "$fsx/demo/logs" "$fsx/demo/final.json" "$fsx/demo/final.pt" \
  "$fsx/demo/steps.log" "$fsx/demo/reference"
cp sbatch/demo/demo.yaml sbatch/demo/train_ddp.py "$fsx/demo/"
chown -R 1000:1000 "$fsx/demo"
login "mksbatch /fsx/demo/demo.yaml -o /fsx/demo/job.sbatch && grep '^#SBATCH' /fsx/demo/job.sbatch"

say "4/6 submit: two nodes, every task in a container started from the registry tag"
login "srun -N2 --container-image=$tag --container-log=verbose bash -c '. /etc/os-release; echo \$(hostname): \$PRETTY_NAME'"
# The comparison for the end: the same training uninterrupted, in one process with the two
# ranks simulated (each rank's batch; gradients times 1/2 summed in rank order, the
# arithmetic of DDP's two-rank gloo all-reduce), in the same image on one node.
login "srun -N1 -n1 --container-image=$tag --container-mounts=/fsx:/fsx python3 /fsx/demo/train_ddp.py --reference --world=2 --steps=120 --final=/fsx/demo/reference/final.json"
jobid=$(login "sbatch --parsable /fsx/demo/job.sbatch")
echo "job $jobid submitted"
deadline=$((SECONDS + 120))
until [ -s "$fsx/demo/steps.log" ] && [ "$(wc -l <"$fsx/demo/steps.log")" -ge 25 ]; do
  [ $SECONDS -lt $deadline ] || fail "job $jobid made no progress in 120 s (state $(job_field JobState)); see $fsx/demo/logs"
  sleep 1
done
plan=$(grep -h -o 'failover: running on [^;]*; spares: [^;]*' "$fsx"/demo/logs/*.out | head -n1)
[ -n "$plan" ] || fail "the job log shows no failover plan; see $fsx/demo/logs"
active=$(sed -E 's/.*running on ([^;]*);.*/\1/' <<<"$plan")
echo "$plan; steps done so far: $(wc -l <"$fsx/demo/steps.log")"
echo "complete checkpoints: $(cd "$fsx/demo/ckpt" && echo ckpt-*)"

victim=${active#*,}
say "5/6 kill node $victim, rank 1's (the whole node container: slurmd, slurmstepd and the tasks)"
executed=$(wc -l <"$fsx/demo/steps.log")
killed_at=$(date +%s.%N)
docker kill "$name-$victim" >/dev/null
echo "killed $victim at step $(tail -n1 "$fsx/demo/steps.log" | awk '{print $2}'); rank 0's gradient all-reduce loses its peer"
deadline=$((SECONDS + 120))
until grep -q 'failover: attempt 1 on' "$fsx"/demo/logs/*.out; do
  [ $SECONDS -lt $deadline ] || fail "no relaunch within 120 s after the kill; see $fsx/demo/logs"
  sleep 0.2
done
resume=$(grep -h -o 'attempt 1 on [^ ]* from [^ ]*' "$fsx"/demo/logs/*.out | sed -E 's/.*ckpt-0*([0-9]+)$/\1/')
until tail -n +"$((executed + 1))" "$fsx/demo/steps.log" | awk '{print $2}' | grep -qx "$resume"; do
  [ $SECONDS -lt $deadline ] || fail "no step past the resume point within 120 s after the kill"
  sleep 0.2
done
back=$(python3 -c 'import sys, time; print(time.time() - float(sys.argv[1]))' "$killed_at")
printf 'every rank past its resume point (step %s) %.1f s after the kill\n' "$resume" "$back"
deadline=$((SECONDS + 300))
last_state=""
while :; do
  state="$(job_field JobState) restarts=$(job_field Restarts)"
  [ "$state" = "$last_state" ] || { echo "$(date +%T) job $jobid: $state"; last_state=$state; }
  case "$state" in COMPLETED*) break ;; FAILED*|CANCELLED*|TIMEOUT*) fail "job ended $state" ;; esac
  [ $SECONDS -lt $deadline ] || fail "job $jobid did not complete within 300 s after the kill"
  sleep 1
done

say "6/6 went on on the spare from the last complete checkpoint, same final state as an uninterrupted run"
grep -h -E 'squall: (job|resuming|no complete|failover)|train_ddp.py' "$fsx"/demo/logs/*.out || true
python3 - "$fsx/demo/final.json" "$fsx/demo/reference/final.json" "$fsx/demo/steps.log" \
  "$back" "$(job_field Restarts)" <<'PY'
import json, sys
final, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ok = final["steps"] == ref["steps"] == 120 and final["sha256"] == ref["sha256"]
executed = [int(line.split()[1]) for line in open(sys.argv[3])]
lost = len(executed) - final["steps"]
print(f"final model: {final['steps']} steps, {final['parameters']:,} parameters, sha256 "
      f"{final['sha256'][:16]}... -> "
      f"{'bitwise identical to' if ok else 'DIFFERENT from'} the uninterrupted run's "
      f"({ref['sha256'][:16]}...: the same program in one process, two ranks simulated)")
print(f"seconds from the kill to every rank training again: {float(sys.argv[4]):.1f}; "
      f"steps lost (done again after the kill): {lost}; Slurm requeues: {sys.argv[5]}")
sys.exit(0 if ok and sys.argv[5] == "0" else 1)
PY
# What an admin asks afterwards: which image did this job run? Slurm's accounting keeps it
# (docs/admin.md); slurmdbd is written asynchronously, so wait for it a little.
recorded=""
for _ in $(seq 30); do
  # the last record: a failover that drops the dead node resizes the job (RESIZING first)
  recorded=$(docker exec "$name-login" sacct -j "$jobid" -X -n -P -o AdminComment 2>/dev/null |
    tail -n 1 || true)
  case "$recorded" in *squall-image=*) break ;; esac
  sleep 1
done
case "$recorded" in
  *squall-image=*) echo "the image job $jobid ran, in Slurm's accounting (sacct -o AdminComment): $recorded" ;;
  *) fail "sacct shows no image for job $jobid (AdminComment: '${recorded}')" ;;
esac
# Boot it again as an admin does after a dead node: mark it DOWN, then start it; it
# rejoins by itself (ReturnToService=2). The job ended before Slurm noticed the death,
# and Slurm did not always set the node DOWN after that: CI saw it completing the dead
# part of the job (mixed*) for over 90 s, then not idle 240 s after its boot.
state=$(docker exec "$name-login" sinfo -h -n "$victim" -o %T 2>/dev/null || true)
if [ "${state%\*}" != down ]; then
  docker exec "$name-login" scontrol update nodename="$victim" state=down \
    reason="squall demo: node killed" >/dev/null
  echo "marked $victim DOWN (Slurm had it ${state:-unknown}), as an admin does for a dead node"
fi
docker start "$name-$victim" >/dev/null
echo "restarted $victim; it rejoins the cluster by itself (ReturnToService=2)"
# Slurm can go on counting the ended job's CPUs on a node it took out of that job shortly
# before the job ended: MIXED with no job on it, for minutes (CI: over 360 s). After 20 s
# of that, `scontrol reconfigure` (what an admin does) makes it count again from the jobs.
# Up to 10 minutes; past 4, what Slurm and the node say is shown.
back_at=$SECONDS shown="" recounted=""
until docker exec "$name-login" sinfo -h -n "$victim" -o %t 2>/dev/null | grep -qx idle; do
  waited=$((SECONDS - back_at))
  if [ -z "$recounted" ] && [ $waited -ge 20 ] &&
     docker exec "$name-login" sinfo -h -n "$victim" -o %t 2>/dev/null | grep -qx mix &&
     [ -z "$(docker exec "$name-login" squeue -h -w "$victim" 2>/dev/null)" ]; then
    recounted=1
    echo "$victim is MIXED with no job on it (Slurm still counts the ended job's CPUs there):" \
      "scontrol reconfigure, as an admin does, to make Slurm count again"
    docker exec "$name-login" scontrol reconfigure || true
  fi
  if [ -z "$shown" ] && [ $waited -ge 240 ]; then
    shown=1
    echo "$victim not idle 240 s after its boot; what Slurm and its slurmd say:"
    docker exec "$name-login" scontrol show node "$victim" | grep -E 'State|CPUAlloc|Reason' || true
    docker exec "$name-login" squeue -t all -w "$victim" || true
    docker exec "$name-$victim" tail -n 20 /var/log/slurm/slurmd.log || true
  fi
  [ $waited -lt 600 ] ||
    fail "$victim did not come back idle within 600 s: $(docker exec "$name-login" sinfo -h -n "$victim" -o '%T %E' 2>&1)"
  sleep 1
done
echo "$victim is idle again $((SECONDS - back_at)) s after its boot: the cluster is whole for the next user (make test)"
