"""Benchmark: container steps of one job, and small-file reads in the container (issue 12).

On the mini cluster (run it after `make cluster-up`, under `flock /work/locks/heavy`),
medians of --runs, cases interleaved round by round so that the machine's noise hits all
of them alike, timed on the login node:

- bare `srun -N1 true` (a new job each time), and bare steps inside one allocation;
- the first container step of a job (`srun --container-image=IMG true`, a new job each
  time) for a ~100 MB and a ~2 GB image (start must be flat in image size, within 20 %);
- later container steps of the same job (`salloc` then steps; target: within 25 ms of a
  bare step in a job on the test runtime);
- 8 tasks on one node (`-n8 -O`), first step and later steps, against bare steps of 8
  tasks (Slurm's own cost of 8 tasks on a 2-core node is most of it): the container's cost
  over a bare step with 8 tasks must be within 50 ms of its cost with one (issue 22);
- a job whose steps run `-n 1`, `-n 4 -O`, `-n 8 -O` in turn: how many runtime starts it
  takes on the node (issue 22: one; before, one per distinct task count);
- reading 20,000 files of 4-64 KB with one `tar -cf - DIR | wc -c` in the container,
  first step and later steps, against the same tree extracted on the node (tmpfs, and the
  host's disk through /fsx) read without a container (target: within 2x).

Each run is stored under its label in bench/results/job-steps.json (--label, e.g. before /
after) and bench/results/job-steps.md shows every label side by side.

    python bench/bench_job_steps.py --label before [--runs 9] [--steps 9] [--extra-srun ARGS]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.cluster import Cluster  # noqa: E402
from tests.integration.images import IMAGE_DIR, IMAGE_ENV, build_image  # noqa: E402

NODE = "node1"
TREE = "/data/tree"          # inside the small-file image
RESULTS = ROOT / "bench" / "results"
# 20,000 files of 4-64 KB in 200 directories, incompressible, deterministic.
MKTREE = r"""
import os, random, sys
root = sys.argv[1]
rnd = random.Random(12)
for d in range(200):
    os.makedirs(f"{root}/pkg{d:03d}", exist_ok=True)
    for f in range(100):
        size = rnd.randint(4, 64) * 1024
        with open(f"{root}/pkg{d:03d}/mod{f:03d}.py", "wb") as out:
            out.write(rnd.randbytes(size))
"""


def small_files_image(cluster: Cluster) -> str:
    """The base test image plus TREE (built once on the login node, reused)."""
    path = f"{IMAGE_DIR}/bench-smallfiles.sqsh"
    if cluster.run(f"unsquashfs -s {path} >/dev/null 2>&1", user="root", check=False).rc == 0:
        return path
    base = build_image(cluster, f"{IMAGE_DIR}/base.sqsh", "squalltest", env=IMAGE_ENV)
    cluster.put("/fsx/images/squall-test/mktree.py", MKTREE)
    script = (f"set -e; t=$(mktemp -d /tmp/sf.XXXXXX); unsquashfs -q -d $t/root {base} >/dev/null;"
              " cp -L /usr/bin/tar $t/root/usr/bin/tar;"
              " for l in $(ldd /usr/bin/tar | awk '/=>/ {print $3}'); do"
              " mkdir -p $t/root$(dirname $l); cp -L $l $t/root$l; done;"
              f" python3 /fsx/images/squall-test/mktree.py $t/root{TREE};"
              f" mksquashfs $t/root {path}.tmp -noappend -quiet -no-progress -comp lzo -noD"
              f" -all-root >/dev/null; chmod 0644 {path}.tmp; mv -f {path}.tmp {path};"
              " rm -rf $t")
    cluster.run(script, user="root", timeout=1800)
    return path


def local_trees(cluster: Cluster, image: str) -> dict[str, str]:
    """The same tree extracted on the node: tmpfs (/tmp) and the host's disk (/fsx)."""
    trees = {"tmpfs": "/tmp/bench-tree", "disk": "/fsx/bench-local/node1-tree"}
    for path in trees.values():
        cluster.run(f"[ -d {path}/pkg199 ] || {{ rm -rf {path}.tmp; mkdir -p {path}.tmp &&"
                    f" unsquashfs -q -f -d {path}.tmp {image} {TREE} >/dev/null &&"
                    f" mv {path}.tmp{TREE} {path} && rm -rf {path}.tmp; }};"
                    f" chown -R squall: {path}", node=NODE, user="root", timeout=900)
    return trees


def ms_loop(cluster: Cluster, cmd: str, runs: int, timeout: float = 600) -> list[float]:
    """Wall ms of each of `runs` executions of cmd on the login node."""
    loop = (f"for i in $(seq {runs}); do s=$(date +%s%N); {cmd} >/dev/null || exit 1;"
            " e=$(date +%s%N); echo $(( (e - s) / 1000 )); done")
    return [int(x) / 1000 for x in cluster.run(loop, timeout=timeout).out.split()]


def steps_in_job(cluster: Cluster, step: str, steps: int, extra: str = "") -> list[float]:
    """ms of each step of one allocation on NODE (the first one included, as [0])."""
    inner = (f"for i in $(seq {steps}); do s=$(date +%s%N); srun {step} >/dev/null || exit 1;"
             " e=$(date +%s%N); echo $(( (e - s) / 1000 )); done")
    res = cluster.run(f"salloc -N1 -w {NODE} {extra} -Q bash -c {shlex.quote(inner)}",
                      timeout=60 + steps * 60)
    return [int(x) / 1000 for x in res.out.split()]


def runtime_starts(cluster: Cluster, step: str) -> dict[str, int]:
    """One job, steps of -n 1, -n 4 -O, -n 8 -O three times over: runtime starts on NODE
    (the verbose log names a "start container" phase only when the runtime started)."""
    shapes = ["-n1", "-n4 -O", "-n8 -O"] * 3
    inner = "\n".join(f"srun {n} {step} --container-log=verbose true 2>&1 | grep timings"
                      for n in shapes)
    res = cluster.run(f"salloc -N1 -w {NODE} -Q bash -c {shlex.quote(inner)}", timeout=900)
    return {"steps": len(shapes), "starts": res.out.count("start container")}


def tar_ms(cluster: Cluster, prefix: str, tree: str, runs: int) -> list[float]:
    """ms of `tar -cf - TREE | wc -c` measured where it runs (inside the step)."""
    probe = ("s=$(date +%s%N); n=$(tar -cf - " + tree + " | wc -c); e=$(date +%s%N);"
             " echo $(( (e - s) / 1000 )) $n")
    out = []
    for _ in range(runs):
        res = cluster.run(f"{prefix} bash -c {shlex.quote(probe)}", timeout=600)
        us, nbytes = res.out.split()[-2:]
        assert int(nbytes) > 600_000_000, res
        out.append(int(us) / 1000)
    return out


def tar_ms_in_job(cluster: Cluster, step: str, tree: str, steps: int,
                  extra: str = "") -> list[float]:
    probe = ("s=$(date +%s%N); n=$(tar -cf - " + tree + " | wc -c); e=$(date +%s%N);"
             " echo $(( (e - s) / 1000 ))")
    inner = f"for i in $(seq {steps}); do srun {step} bash -c {shlex.quote(probe)} || exit 1; done"
    res = cluster.run(f"salloc -N1 -w {NODE} {extra} -Q bash -c {shlex.quote(inner)}",
                      timeout=60 + steps * 120)
    return [int(x) / 1000 for x in res.out.split()]


def warm_cache(cluster: Cluster, image: str, extra: str) -> None:
    """Keep a job with image on NODE until the node's extracted copy of it is complete
    (a new job's step then says "extracted cache hit")."""
    job = cluster.run(f"sbatch --parsable -N1 -w {NODE} -o /dev/null --wrap "
                      f"'srun --container-image={image} {extra} sleep 900'").out.strip()
    probe = f"srun -N1 -w {NODE} --container-image={image} {extra} --container-log=verbose true"
    deadline = time.monotonic() + 900
    try:
        while time.monotonic() < deadline:
            time.sleep(3)
            if "extracted cache hit" in cluster.run(probe, check=False).err:
                return
        raise SystemExit(f"bench_job_steps: {image} was not extracted on {NODE} in 900 s")
    finally:
        cluster.run(f"scancel {job}")
        time.sleep(3)


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True, help="name of this run's column (before, after)")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--steps", type=int, default=9, help="steps per allocation")
    ap.add_argument("--reads", type=int, default=5)
    ap.add_argument("--extra-srun", default="", help="flags added to every container step")
    ap.add_argument("--note", default="")
    ap.add_argument("--warm-cache", action="store_true",
                    help="first let each image's node-local extracted copy complete (issue 12)")
    ap.add_argument("--per-step-flags", default="",
                    help="also measure steps with these flags (e.g. --no-container-reuse)")
    opts = ap.parse_args()

    cluster = Cluster(Path(os.environ.get("SQUALL_FSX", ROOT / ".cluster" / "fsx")))
    if not cluster.healthy():
        print("bench_job_steps: the mini cluster is not up: run `make cluster-up`", file=sys.stderr)
        return 2
    img100 = build_image(cluster, f"{IMAGE_DIR}/bench-100mb.sqsh", "bench-100mb", extra_mb=100)
    img2g = build_image(cluster, f"{IMAGE_DIR}/bench-2000mb.sqsh", "bench-2000mb", extra_mb=2000)
    sf = small_files_image(cluster)
    trees = local_trees(cluster, sf)
    x = opts.extra_srun
    c100 = f"-N1 -w {NODE} --container-image={img100} {x}"
    c2g = f"-N1 -w {NODE} --container-image={img2g} {x}"

    # Warm up: page cache of the images, the nodes' Slurm paths.
    for args in (f"-N1 -w {NODE}", c100, c2g, f"-N1 -w {NODE} --container-image={sf} {x}"):
        ms_loop(cluster, f"srun {args} true", 2)
    if opts.warm_cache:
        for img in (img100, img2g, sf):
            warm_cache(cluster, img, x)
    per = opts.per_step_flags

    cases: dict[str, list[float]] = {}
    rounds = opts.runs
    for _ in range(rounds):
        # One value per case and round, interleaved.
        for name, cmd in (("bare srun (new job)", f"srun -N1 -w {NODE} true"),
                          ("first container step, 100 MB", f"srun {c100} true"),
                          ("first container step, 2 GB", f"srun {c2g} true"),
                          ("bare srun (new job), 8 tasks", f"srun -n8 -O -N1 -w {NODE} true"),
                          ("first container step, 8 tasks, 100 MB", f"srun -n8 -O {c100} true"),
                          *([("container step, " + per + ", 100 MB", f"srun {c100} {per} true"),
                             ("container step, " + per + ", 2 GB", f"srun {c2g} {per} true")]
                            if per else [])):
            cases.setdefault(name, []).extend(ms_loop(cluster, cmd, 1))
    for _ in range(max(1, rounds // 3)):
        cases.setdefault("bare step in a job", []).extend(
            steps_in_job(cluster, "true", opts.steps)[1:])
        cases.setdefault("later container steps of a job, 100 MB", []).extend(
            steps_in_job(cluster, f"--container-image={img100} {x} true", opts.steps)[1:])
        cases.setdefault("bare step in a job, 8 tasks", []).extend(
            steps_in_job(cluster, "-n8 -O true", opts.steps)[1:])
        cases.setdefault("later container steps of a job, 8 tasks", []).extend(
            steps_in_job(cluster, f"-n8 -O --container-image={img100} {x} true", opts.steps)[1:])
    starts = runtime_starts(cluster, f"--container-image={img100} {x}")

    reads: dict[str, list[float]] = {}
    for _ in range(opts.reads):
        for where, path in trees.items():
            reads.setdefault(f"extracted on the node ({where}), no container", []).extend(
                tar_ms(cluster, f"srun -N1 -w {NODE}", path, 1))
        reads.setdefault("in the container, first step", []).extend(
            tar_ms(cluster, f"srun -N1 -w {NODE} --container-image={sf} {x}", TREE, 1))
        if per:
            reads.setdefault(f"in the container, {per} (squashfuse)", []).extend(
                tar_ms(cluster, f"srun -N1 -w {NODE} --container-image={sf} {x} {per}",
                       TREE, 1))
    for _ in range(max(1, opts.reads // 3)):
        reads.setdefault("in the container, later steps of a job", []).extend(
            tar_ms_in_job(cluster, f"--container-image={sf} {x}", TREE, 4)[1:])

    sizes = {p: int(cluster.run(f"stat -c %s {p}").out) for p in (img100, img2g, sf)}
    record = {
        "when": time.strftime("%Y-%m-%d %H:%M"), "host": platform.node(), "runs": rounds,
        "steps": opts.steps, "note": opts.note, "extra_srun": x,
        "load": os.getloadavg()[0], "sizes": sizes,
        "steps_ms": {k: round(med(v), 1) for k, v in cases.items()},
        "runtime_starts": starts,
        "reads_ms": {k: round(med(v), 1) for k, v in reads.items()},
        "raw": {"steps": cases, "reads": reads},
    }
    store = RESULTS / "job-steps.json"
    data = json.loads(store.read_text()) if store.exists() else {}
    data[opts.label] = record
    RESULTS.mkdir(parents=True, exist_ok=True)
    store.write_text(json.dumps(data, indent=1) + "\n")
    (RESULTS / "job-steps.md").write_text(render(data))
    print(render(data))
    return 0


def render(data: dict) -> str:
    labels = list(data)
    lines = ["# Container steps of one job, and small-file reads (issue 12)", "",
             "Mini cluster (Docker, one host, 2 cores shared), node "
             f"{NODE}; the nodes ran squall's Enroot test double up to the issue 22 columns "
             "and NVIDIA's Enroot 4.1.2 from the 'real Enroot' one on; medians in "
             "milliseconds (`bench/bench_job_steps.py`; raw values in "
             "job-steps.json). Timed on the login node around `srun` (steps) or inside the "
             "step around `tar -cf - DIR | wc -c` (reads: 20,000 files of 4-64 KB, 680 MB).", ""]
    for label in labels:
        r = data[label]
        lines.append(f"- **{label}**: {r['when']}, {r['runs']} rounds, {r['steps']} steps per "
                     f"job, load {r['load']:.1f}{', ' + r['note'] if r['note'] else ''}"
                     f"{', container flags: ' + r['extra_srun'] if r['extra_srun'] else ''}")
    for section, key in (("Steps", "steps_ms"), ("Reads", "reads_ms")):
        lines += ["", f"## {section}", "", "| case | " + " | ".join(labels) + " |",
                  "|---|" + "---|" * len(labels)]
        names: list[str] = []
        for label in labels:
            names += [n for n in data[label][key] if n not in names]
        for n in names:
            cells = [f"{data[lb][key][n]:.0f}" if n in data[lb][key] else "" for lb in labels]
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
    starts = [(lb, data[lb]["runtime_starts"]) for lb in labels if "runtime_starts" in data[lb]]
    if starts:
        lines += ["", "## Runtime starts in a job whose steps run -n 1, -n 4 -O, -n 8 -O", "",
                  "| label | steps | runtime starts on the node |", "|---|---|---|"]
        lines += [f"| {lb} | {st['steps']} | {st['starts']} |" for lb, st in starts]
    lines += ["", "## Against the targets", ""]
    for label in labels:
        s, r = data[label]["steps_ms"], data[label]["reads_ms"]
        later = s.get("later container steps of a job, 100 MB", 0) - s.get("bare step in a job", 0)
        first = (s.get("first container step, 100 MB", 0), s.get("first container step, 2 GB", 0))
        spread = abs(first[1] - first[0]) / max(first[0], 1e-9) * 100
        disk = r.get("extracted on the node (disk), no container", 0)
        tmpfs = r.get("extracted on the node (tmpfs), no container", 0)
        inside = r.get("in the container, later steps of a job", 0)
        lines.append(f"- {label}: later steps {later:+.0f} ms over a bare step (target <= 25); "
                     f"first step 100 MB vs 2 GB differ by {spread:.0f} % (target <= 20); "
                     f"reads in later steps {inside / max(disk, 1e-9):.1f}x the host disk, "
                     f"{inside / max(tmpfs, 1e-9):.1f}x tmpfs (target <= 2x)")
        if "bare step in a job, 8 tasks" in s:
            one = s["later container steps of a job, 100 MB"] - s["bare step in a job"]
            eight = (s["later container steps of a job, 8 tasks"]
                     - s["bare step in a job, 8 tasks"])
            first1 = s["first container step, 100 MB"] - s["bare srun (new job)"]
            first8 = (s["first container step, 8 tasks, 100 MB"]
                      - s["bare srun (new job), 8 tasks"])
            lines.append(f"- {label}: the container over a bare step, later steps: {one:+.0f} ms "
                         f"with 1 task, {eight:+.0f} ms with 8; first steps: {first1:+.0f} ms "
                         f"with 1, {first8:+.0f} ms with 8 (target: 8 tasks within 50 ms of "
                         "1)")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
