"""Where a job's first container step goes, squall against Pyxis 0.24.0 (issue 44).

On one node of the mini cluster (node1, 1-node jobs: the other nodes' starts do not load
its cores), rounds alternating the plugins (bench/plugin_switch.py), each step's Enroot
start traced: a wrapper at /usr/local/bin/enroot on node1 (Pyxis runs `enroot` from
slurmstepd's PATH, /usr/local/bin first; squall's line gets `enroot=` that wrapper) execs
`bash -x /usr/bin/enroot` with a timestamp in PS4, so the trace shows when Enroot began,
each of its commands and hooks, and when it exec'd the container's first process
(`enroot-switchroot`). Each step is split into: before Enroot (srun, slurmctld, slurmd,
slurmstepd, the plugin's work up to the runtime's start), Enroot's start, and after it
until the task started (the plugin's hold on the container, squall's fresh layer, the
tasks' join). squall's line gets `local_cache_gb=0`: every step starts from the .sqsh
through squashfuse, as Pyxis does. The wrapper and squall's own line are restored at the
end however it ends.

Each run is stored under its label in bench/results/first-step-trace.json, and
first-step-trace.md shows every label side by side.

    python bench/bench_first_step_trace.py --label run1 [--rounds 4] [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_first_step import STAMP  # noqa: E402
from plugin_switch import SwitchError, install_pyxis, switch  # noqa: E402
from tests.integration.cluster import Cluster  # noqa: E402
from tests.integration.images import IMAGE_DIR, build_image  # noqa: E402

NODE = "node1"
WRAPPER = "/usr/local/bin/enroot"
TRACES = "/tmp/squall-enroot-trace"
OUT = ROOT / "bench" / "results" / "first-step-trace.md"
STORE = OUT.with_suffix(".json")
PLUGINS = ("squall", "Pyxis")
WRAP = f"""#!/bin/bash
f={TRACES}/$(date +%s%N).$$
echo "+$EPOCHREALTIME BEGIN" >"$f"
export PS4='+$EPOCHREALTIME '
exec /usr/bin/bash -x /usr/bin/enroot "$@" 2>>"$f"
"""
LINE = re.compile(r"\+(\d+\.\d+) (.*)")
HOOK = re.compile(r"^(/\S+/hooks\.d/\S+\.sh)$")


def step(cluster: Cluster, flags: str) -> tuple[float, float]:
    """The login node's clock (s) when `srun` began and when the task started."""
    res = cluster.run(f"s=$(date +%s%N); t=$(srun -N1 -w {NODE} {flags} {STAMP} | tail -1)"
                      " && echo $s $t", timeout=300)
    s, t = res.out.split()[-2:]
    return int(s) / 1e9, int(t) / 1e9


def trace(cluster: Cluster) -> list[tuple[float, str]]:
    """The one trace on the node (removed): (time, command) of each traced line."""
    text = cluster.run(f"f=$(ls {TRACES}/* | head -1) && cat \"$f\" && rm -f {TRACES}/*",
                       node=NODE, user="root").out
    return [(float(m.group(1)), m.group(2)) for m in map(LINE.match, text.splitlines()) if m]


def split(s: float, t: float, lines: list[tuple[float, str]]) -> dict[str, float]:
    """ms before Enroot, in Enroot's start, after it; and each hook's ms."""
    out = {"before Enroot": (lines[0][0] - s) * 1000,
           "Enroot's start": (lines[-1][0] - lines[0][0]) * 1000,
           "after Enroot, to the task": (t - lines[-1][0]) * 1000}
    for (when, cmd), (then, _) in zip(lines, lines[1:], strict=False):
        m = HOOK.match(cmd.strip())
        if m:
            name = "hook " + m.group(1).rsplit("/", 1)[1]
            out[name] = out.get(name, 0.0) + (then - when) * 1000
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True, help="name of this run's columns")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3, help="steps per plugin and round")
    opts = ap.parse_args()
    cluster = Cluster(Path(os.environ.get("SQUALL_FSX", ROOT / ".cluster" / "fsx")))
    if not cluster.healthy():
        print("bench_first_step_trace: the mini cluster is not up: run `make cluster-up`",
              file=sys.stderr)
        return 2
    image = build_image(cluster, f"{IMAGE_DIR}/first-step-a.sqsh", "firststepa", extra_mb=100)
    flags = f"--container-image={image}"
    parts: dict[str, dict[str, list[float]]] = {p: {} for p in PLUGINS}
    loads = [os.getloadavg()[0]]
    try:
        install_pyxis(cluster)
        cluster.put("/fsx/bench-pyxis/enroot-trace", WRAP, mode=0o755, owner=0)
        cluster.run(f"install -m 0755 /fsx/bench-pyxis/enroot-trace {WRAPPER} && "
                    f"rm -rf {TRACES} && mkdir -m 1777 {TRACES}", node=NODE, user="root")
        for r in range(opts.rounds + 1):  # round 0: warm-up, not counted
            order = ("squall", "Pyxis") if r % 2 else ("Pyxis", "squall")
            for plugin in order:
                if plugin == "squall":
                    switch(cluster, "squall", squall_args=f"local_cache_gb=0 enroot={WRAPPER}")
                else:
                    switch(cluster, "pyxis")
                for _ in range(opts.steps):
                    s, t = step(cluster, flags)
                    got = split(s, t, trace(cluster))
                    if r:
                        got["whole, to the task"] = (t - s) * 1000
                        for k, v in got.items():
                            parts[plugin].setdefault(k, []).append(v)
            loads.append(os.getloadavg()[0])
    except SwitchError as e:
        print(f"bench_first_step_trace: {e}", file=sys.stderr)
        return 1
    finally:
        cluster.run(f"rm -f {WRAPPER}; rm -rf {TRACES}", node=NODE, user="root", check=False)
        switch(cluster, "squall", wait=300)
    n = len(parts["squall"]["whole, to the task"])
    data = json.loads(STORE.read_text()) if STORE.exists() else {}
    data[opts.label] = {
        "when": time.strftime("%Y-%m-%d %H:%M"), "rounds": opts.rounds, "steps": n,
        "load": [round(x, 2) for x in loads],
        "ms": {p: {k: round(statistics.median(v), 1) for k, v in parts[p].items()}
               for p in PLUGINS},
        "raw_ms": parts}
    STORE.write_text(json.dumps(data, indent=1) + "\n")
    OUT.write_text(render(data))
    print(OUT.read_text())
    return 0


def render(data: dict[str, dict]) -> str:
    labels = list(data)
    names = ["whole, to the task", "before Enroot", "Enroot's start", "after Enroot, to the task"]
    hooks = sorted({k for r in data.values() for p in PLUGINS for k in r["ms"][p]
                    if k.startswith("hook ")},
                   key=lambda k: -max(r["ms"]["squall"].get(k, 0.0) for r in data.values()))
    lines = ["# Where a job's first container step goes: squall against Pyxis 0.24.0 "
             "(issue 44)", "",
             f"`bench/bench_first_step_trace.py`: 1-node jobs on {NODE} of the mini cluster "
             "(2 cores shared), rounds alternating the plugins; each step's `enroot start` "
             "traced (`bash -x`, a timestamp per command), both from the same 100 MB .sqsh "
             "through squashfuse (squall with `local_cache_gb=0`), NVIDIA Enroot 4.1.2 and its "
             "hooks as the nodes install them. Medians in ms (raw values in "
             "first-step-trace.json); the hooks' times are part of Enroot's start.", ""]
    for lb in labels:
        r = data[lb]
        lines.append(f"- **{lb}**: {r['when']}, {r['rounds']} rounds, {r['steps']} steps per "
                     f"plugin, load {min(r['load']):.1f}-{max(r['load']):.1f}")
    head = " | ".join(f"{p} ({lb})" for lb in labels for p in PLUGINS)
    lines += ["", f"| part | {head} |", "|---|" + "---|" * (2 * len(labels))]
    for k in names + hooks:
        cells = [f"{data[lb]['ms'][p][k]:.0f}" if k in data[lb]["ms"][p] else ""
                 for lb in labels for p in PLUGINS]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
