"""Benchmark: step start overhead of a container, by image size and tasks per node (issue 3).

Runs on the mini cluster (brings nothing up: run it after `make cluster-up`). For each case
it times `srun -N1 [-n4] [--container-image=IMG] true` on the login node, RUNS times, and
reports the median wall time and the overhead over bare srun. Images: ~100 MB and ~2 GB of
incompressible data on /fsx, started straight from the squashfs file.

Target (issue 3): overhead over bare srun under 300 ms, and independent of image size
(the two sizes within 20 % of each other).

    python bench/bench_container_start.py [--runs 9] [--out bench/results/container-start.md]
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

SIZES = {"100 MB": 100, "2 GB": 2000}


def time_srun(cluster: Cluster, args: str, runs: int) -> list[float]:
    """Wall seconds of each `srun ARGS true`, measured on the login node itself."""
    loop = (f"for i in $(seq {runs}); do s=$(date +%s%N); srun {args} true >/dev/null || exit 1;"
            " e=$(date +%s%N); echo $(( (e - s) / 1000 )); done")
    res = cluster.run(loop, timeout=60 + runs * 30)
    return [int(x) / 1e6 for x in res.out.split()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--node", default="node1")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "container-start.md"))
    opts = ap.parse_args()

    cluster = Cluster(Path(os.environ.get("SQUALL_FSX", ROOT / ".cluster" / "fsx")))
    if not cluster.healthy():
        print("bench_container_start: the mini cluster is not up: run `make cluster-up`",
              file=sys.stderr)
        return 2
    images = {label: build_image(cluster, f"{IMAGE_DIR}/bench-{mb}mb.sqsh", f"bench-{mb}mb",
                                 extra_mb=mb)
              for label, mb in SIZES.items()}
    sizes = {label: int(cluster.run(f"stat -c %s {path}").out) for label, path in images.items()}

    rows = []
    for ntasks in (1, 4):
        base = f"-N1 -n{ntasks} -w {opts.node}"
        time_srun(cluster, base, 2)  # warm up
        bare = statistics.median(time_srun(cluster, base, opts.runs))
        for label, path in images.items():
            args = f"{base} --container-image={path}"
            time_srun(cluster, args, 2)  # warm page cache
            med = statistics.median(time_srun(cluster, args, opts.runs))
            rows.append((ntasks, label, sizes[label], bare, med, med - bare))

    lines = [
        "# Container step start: `srun -N1 -nT [--container-image=X.sqsh] true`",
        "",
        f"Mini cluster (Docker, one host, 2 cores shared), node {opts.node}, medians of "
        f"{opts.runs} runs after 2 warm-up runs, warm page cache, timed on the login node. "
        "Images start straight from the squashfs file (squashfuse + overlay in the runtime).",
        "",
        "| tasks/node | image | image bytes | bare srun (s) | with container (s) | overhead (s) |",
        "|---|---|---|---|---|---|",
    ]
    for ntasks, label, size, bare, med, over in rows:
        lines.append(f"| {ntasks} | {label} | {size} | {bare:.3f} | {med:.3f} | {over:.3f} |")
    verdicts = []
    for ntasks in (1, 4):
        over = {label: o for n, label, _, _, _, o in rows if n == ntasks}
        small, big = over["100 MB"], over["2 GB"]
        spread = abs(big - small) / max(small, 1e-9)
        verdicts.append(
            f"- {ntasks} task(s)/node: overhead {small * 1000:.0f} ms (100 MB) vs "
            f"{big * 1000:.0f} ms (2 GB): difference {spread * 100:.0f} % "
            f"({'within' if spread <= 0.20 else 'OUTSIDE'} the 20 % target); under 300 ms: "
            f"{'yes' if max(small, big) < 0.300 else 'NO'}")
    lines += ["", "Target: overhead under 300 ms and independent of image size (within 20 %).",
              "", *verdicts, ""]
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
