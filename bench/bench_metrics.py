"""Benchmark: the cost of the node's metrics writes at a container step's end (issue 41).

Each container step, in slurmstepd's exit, adds itself to the node's record under an flock
and renders squall.prom into node_exporter's textfile directory (spank/plugin/promfile.c).
This times that update through spank/plugin/tests/promfile_probe.c (the plugin's own code,
outside Slurm): one writer, and 8 writers at once (steps that end together on a node), in
microseconds per update, on the local disk under --dir. A later container step of a job
takes about 100 ms (bench/results/job-steps.md), so the update is within its noise when it
is a small fraction of a millisecond.

Results: bench/results/metrics.md.

    python bench/bench_metrics.py [--updates 2000] [--dir /var/tmp]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from plugin_probe import build_probe  # noqa: E402


def run(probe: Path, state: Path, text: Path, n: int) -> float:
    out = subprocess.run([str(probe), "update", str(state), str(text), str(n)], check=True,
                         capture_output=True, text=True, timeout=600).stdout
    fields = dict(line.split("=", 1) for line in out.splitlines())
    assert fields["rc"] == "0", fields
    return float(fields["us"])


def together(probe: Path, state: Path, text: Path, n: int, writers: int) -> float:
    procs = [subprocess.Popen([str(probe), "update", str(state), str(text), str(n)],
                              stdout=subprocess.PIPE, text=True) for _ in range(writers)]
    us = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        us.append(float(dict(x.split("=", 1) for x in out.splitlines())["us"]))
    return statistics.median(us)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--updates", type=int, default=2000)
    ap.add_argument("--dir", default="/var/tmp")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        base = Path(d)
        probe = build_probe(base / "promfile_probe", "promfile_probe.c", "promfile.c")
        text = base / "textfile"
        text.mkdir()
        rounds = [run(probe, base / "s1" / "metrics", text, a.updates) for _ in range(5)]
        record = [run(probe, base / "s2" / "metrics", Path("-"), a.updates) for _ in range(5)]
        eight = together(probe, base / "s3" / "metrics", text, a.updates // 8, 8)
    print(f"record + squall.prom, 1 writer: median {statistics.median(rounds):.1f} us "
          f"per update (5 rounds of {a.updates}: "
          f"{', '.join(f'{x:.1f}' for x in rounds)})")
    print(f"record only (no textfile directory), 1 writer: median "
          f"{statistics.median(record):.1f} us")
    print(f"record + squall.prom, 8 writers at once: median {eight:.1f} us per update "
          "(each waits for the others' lock)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
