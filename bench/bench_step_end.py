"""Benchmark: how long after its tasks a container step ends, against a bare step (issue 40).

Pyxis's own test suite runs steps back to back and reads srun's output: a step that ends
late makes the next one wait (srun then prints "Step created for StepId=..." into it). In
one allocation on the mini cluster's three nodes, bare steps, container steps (a .sqsh
file, the job's kept container) and named container steps (`--container-name`, as Pyxis's
tests run them) alternate, round by round, so that the machine's noise hits
both alike. Per step:

- the end lag: from the last task's exit (each task prints its clock just before it exits)
  to the step's record leaving the controller (``squeue -s``, polled in a loop on the login
  node: the resolution is one squeue call, about 10 ms);
- the whole step as srun sees it;
- whether srun had to wait for the previous step ("Step created" on its stderr).

Target: the container step's median end lag within the bare step's + 25 ms.

    python bench/bench_step_end.py [--rounds 20]

Results: bench/results/step-end.md (the last run, with the load average).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.cluster import Cluster  # noqa: E402
from tests.integration.images import IMAGE_DIR, build_image  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "step-end.md"
IMAGE = f"{IMAGE_DIR}/step-end.sqsh"
# Run inside `salloc -N3`: one line per step, "CASE LAG_MS WALL_MS WAITED".
SCRIPT = r"""#!/bin/bash
set -u
n=0
for i in $(seq 1 "$1"); do
  for case in bare container named; do
    opt=""
    [ "$case" = container ] && opt="--container-image=$2"
    [ "$case" = named ] && opt="--container-image=$2 --container-name=step-end"
    s=$(date +%s%N)
    t=$(srun -N3 $opt bash -c 'date +%s%N' 2>/tmp/step-end.err | sort -n | tail -1)
    w=$(date +%s%N)
    [ -n "$t" ] || { echo "failed $case step $n: $(head -c 300 /tmp/step-end.err)"; exit 1; }
    while squeue -h -s -j "$SLURM_JOB_ID" -o %i | grep -qx "$SLURM_JOB_ID\.$n"; do :; done
    e=$(date +%s%N)
    waited=0; grep -q "Step created" /tmp/step-end.err && waited=1
    echo "$case $(( (e - t) / 1000000 )) $(( (w - s) / 1000000 )) $waited"
    n=$((n + 1))
  done
done
"""


def run(cluster: Cluster, rounds: int) -> dict[str, list[tuple[int, int, int]]]:
    cluster.put("/fsx/step-end.sh", SCRIPT, mode=0o755)
    out = cluster.run(f"salloc -N3 /fsx/step-end.sh {rounds} {IMAGE} 2>/dev/null",
                      timeout=60 + rounds * 20).out
    got: dict[str, list[tuple[int, int, int]]] = {"bare": [], "container": [], "named": []}
    if "failed " in out:
        raise SystemExit("bench_step_end: " + out[out.index("failed "):].splitlines()[0])
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] in got:
            got[parts[0]].append((int(parts[1]), int(parts[2]), int(parts[3])))
    # the first step of each container case starts its container: left out
    got["container"] = got["container"][1:]
    got["named"] = got["named"][1:]
    return got


def p90(xs: list[int]) -> float:
    return sorted(xs)[max(0, int(round(0.9 * len(xs))) - 1)]


def render(got: dict[str, list[tuple[int, int, int]]], rounds: int, load: str) -> str:
    lines = ["# A step's end after its tasks: bare vs container (bench/bench_step_end.py)", "",
             f"Three nodes of the mini cluster, one allocation, {rounds} rounds of a bare step, "
             "a container step (a .sqsh file; the job's kept container) and a named container "
             "step (`--container-name`); each container's first start left out). "
             f"Load average at the end: {load}.", "",
             "| case | steps | end lag median (ms) | end lag p90 (ms) | step median (ms) | "
             "waited for the previous step |", "|---|---|---|---|---|---|"]
    for case, rows in got.items():
        lag = [r[0] for r in rows]
        wall = [r[1] for r in rows]
        lines.append(f"| {case} | {len(rows)} | {statistics.median(lag):.0f} | {p90(lag):.0f} | "
                     f"{statistics.median(wall):.0f} | {sum(r[2] for r in rows)} |")
    bare = statistics.median([r[0] for r in got["bare"]])
    diffs = ", ".join(f"{case} {statistics.median([r[0] for r in got[case]]) - bare:+.0f} ms"
                      for case in ("container", "named"))
    lines += ["", f"Minus bare, median end lag: {diffs} (target: at most "
              "+25 ms). \"Waited\" counts steps whose srun printed \"Step created\" (the step "
              "before it had not ended yet)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    cluster = Cluster(Path(os.environ.get("SQUALL_FSX", ROOT / ".cluster" / "fsx")))
    build_image(cluster, IMAGE, "stepend")
    got = run(cluster, args.rounds)
    if not all(got.values()):
        print("bench_step_end: no step timings came back (is the cluster up?)", file=sys.stderr)
        return 1
    load = Path("/proc/loadavg").read_text().split()[0]
    text = render(got, args.rounds, load)
    RESULTS.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
