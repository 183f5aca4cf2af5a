"""Benchmark: what squall_steps costs a training step, and what it writes (issue 43).

A loop of --steps short steps (each one ``with section("data")``, ``section("forward")``,
``section("allreduce")`` and ``step()``, around no work at all, so the figure is the
timing's whole cost) is timed three ways, each in a fresh interpreter as a program runs:
outside a squall job (the module's no-op), with the timing on (the rank's file on the
local disk under --dir), and with the timing on while the writer is stalled (the rank's
file is a FIFO nobody reads: a hung /fsx; the queue fills and lines are dropped). The
bytes a rank writes per hour follow from the file's size per step and a step rate
(--rate steps a second; 10 by default, a short step of a large model is ~0.1 s); the ring
bounds what stays on disk at 2 x 1 MiB per rank whatever the rate.

Results: bench/results/steps.md.

    python bench/bench_steps.py [--steps 10000] [--repeat 5] [--dir /var/tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOOP = """
import json, os, sys, time
import squall_steps
n = int(sys.argv[1])
began = time.perf_counter()
for _ in range(n):
    with squall_steps.section("data"):
        pass
    with squall_steps.section("forward"):
        pass
    with squall_steps.section("allreduce"):
        pass
    squall_steps.step()
took = time.perf_counter() - began
rec = squall_steps.recorder()
dropped = rec.writer.dropped if rec.writer else 0
squall_steps.flush(5.0)
print(json.dumps({"us": took / n * 1e6, "dropped": dropped}), flush=True)
os._exit(0)  # a stalled writer must not hold the exit
"""


def loop(n: int, env: dict[str, str]) -> dict[str, float]:
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT / "python"), "RANK": "0"}
    out = subprocess.run([sys.executable, "-c", LOOP, str(n)], env={**base, **env},
                         capture_output=True, text=True, check=True, timeout=600).stdout
    return dict(json.loads(out))


def best_of(repeat: int, n: int, env: dict[str, str]) -> tuple[float, float]:
    runs = [loop(n, env) for _ in range(repeat)]
    us = [r["us"] for r in runs]
    return statistics.median(us), max(r["dropped"] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rate", type=float, default=10.0, help="steps a second, for bytes/h")
    ap.add_argument("--dir", default=None, help="where the rank's file goes (local disk)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        off, _ = best_of(a.repeat, a.steps, {})
        on_dir = Path(tmp) / "on"
        on_dir.mkdir()
        on, dropped_on = best_of(a.repeat, a.steps, {"SQUALL_STEPS_DIR": str(on_dir)})
        size = sum(p.stat().st_size for p in on_dir.iterdir())
        per_step = size / a.steps  # the last run's file (the ring never turned at this size)
        stalled_dir = Path(tmp) / "stalled"
        stalled_dir.mkdir()
        os.mkfifo(stalled_dir / "steps.0")
        stalled, dropped = best_of(a.repeat, a.steps, {"SQUALL_STEPS_DIR": str(stalled_dir)})
        fd = os.open(stalled_dir / "steps.0", os.O_RDONLY | os.O_NONBLOCK)
        os.close(fd)
    result = {
        "steps": a.steps, "repeat": a.repeat, "python": sys.version.split()[0],
        "us_per_step_off": round(off, 3), "us_per_step_on": round(on, 3),
        "us_per_step_on_stalled": round(stalled, 3),
        "dropped_on": dropped_on, "dropped_stalled": dropped,
        "bytes_per_step": round(per_step, 1),
        "bytes_per_rank_per_hour": round(per_step * a.rate * 3600),
        "rate_steps_per_s": a.rate}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
