"""Benchmark: a job's first container step at N nodes, squall against Pyxis 0.24.0 and bare,
on the scale cluster (issue 44, "At N").

For each N (default 16, 64) the scale cluster (docker/scale/scale.sh: N slurmd in one
container, sharing the host's two CPUs, /fsx on GlusterFS with a client per node) is
brought up beside the mini cluster, and both plugins run on its nodes in interleaved
rounds: the scale container's /etc/slurm/plugstack.conf, which every node binds, holds
squall's line or Pyxis's (`use_squashfuse=1`, the plugin bench/plugin_switch.py builds on
the mini cluster, copied to the scale cluster's /fsx; its runtime directory made in each
node's mount namespace). Benchmarks only: Pyxis never ships with squall. Timed from the
scale container, as medians of the rounds, the whole step and until its last task started:

- bare: `srun -N N` as a new job;
- first: `srun -N N --container-image=IMG` as a new job (IMG a .sqsh on /fsx, made by
  sqshbuild from a registry tag; squall's local copy is off for N above
  local_cache_max_nodes, 16: it starts through squashfuse as Pyxis does);
- after the prolog: the same step WORK_S into a `salloc -N N` (squall's made with
  `--container-prestart=IMG`: its job prolog starts the container on every node);
- relaunch: in one allocation, a step on all N, then the timed step on N-1 of them.

Results: bench/results/first-step-scale.md (and .json).

    python bench/bench_first_step_scale.py [--nodes 16,64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_scale import push, with_push_tools  # noqa: E402
from plugin_switch import PYXIS_LINE, PYXIS_SO, SwitchError, install_pyxis  # noqa: E402
from tests.integration.cluster import Cluster  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SCALE = "scale"  # the container squall-scale, as Cluster.run's node
BOX = f"{os.environ.get('SQUALL_CLUSTER', 'squall')}-scale"
PLUGSTACK = "/etc/slurm/plugstack.conf"
SAVED = "/etc/slurm/plugstack.conf.squall"
SCALE_PYXIS = "/fsx/bench-pyxis/spank_pyxis.so"  # on the scale cluster's own /fsx
# The registry image has sh and cat, not bash or date: every clock here is /proc/uptime
# (one kernel for all the nodes; 10 ms steps).
STAMP = "cat /proc/uptime"
NOW = "$(cut -d' ' -f1 /proc/uptime)"
# s, t, e (uptime seconds) -> "whole ms, ms to the last task".
REPORT = ("awk -v s=$s -v t=$t -v e=$e "
          "'BEGIN { printf \"%d %d\\n\", (e - s) * 1000, (t - s) * 1000 }'")
WORK_S = 2
IDLE = ("until [ -z \"$(sinfo -h -o %t | grep -vx idle)\" ]; do sleep 0.1; done")


def sh(argv: list[str], timeout: float = 900) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True,
                          timeout=timeout).stdout


def scale_switch(cluster: Cluster, plugin: str) -> None:
    """Every scale node (and srun in the scale container) loads PLUGIN's line."""
    cluster.run(f"{IDLE}; [ -e {SAVED} ] || cp -p {PLUGSTACK} {SAVED}", node=SCALE,
                user="root", timeout=300)
    if plugin == "squall":
        cmd = f"cp -p {SAVED} {PLUGSTACK}.new"
    else:
        line = PYXIS_LINE.replace(PYXIS_SO, SCALE_PYXIS)
        cmd = (f"printf '%s\\n' '# benchmarks only: Pyxis 0.24.0' '{line}' "
               f">{PLUGSTACK}.new && chmod 0644 {PLUGSTACK}.new")
    cluster.run(f"{cmd} && mv -f {PLUGSTACK}.new {PLUGSTACK}", node=SCALE, user="root")


def install_scale_pyxis(cluster: Cluster) -> None:
    """Pyxis (built on the mini cluster) on the scale cluster's /fsx; its runtime
    directory in every node's mount namespace (slurmd started under squall's line, so
    Pyxis's slurmd_init never made it)."""
    install_pyxis(cluster)
    so = cluster.fsx_host / "bench-pyxis" / "spank_pyxis.so"
    # /fsx is a mount made inside the container: `docker cp` cannot write there.
    subprocess.run(["docker", "exec", "-i", BOX, "sh", "-c",
                    f"install -d -m 0755 /fsx/bench-pyxis && cat >{SCALE_PYXIS}"],
                   input=so.read_bytes(), check=True, capture_output=True, timeout=120)
    cluster.run(f"chmod 0644 {SCALE_PYXIS}; for p in $(pgrep -f 'slurmd -D -N'); do "
                "nsenter -t $p -m -- install -d -m 0755 /run/pyxis; done", node=SCALE,
                user="root", timeout=300)


def step_ms(cluster: Cluster, n: int, cmd: str) -> tuple[float, float]:
    """Whole ms of `cmd STAMP` as a new job on idle nodes, and ms to its last task."""
    res = cluster.run(f"set -o pipefail; {IDLE}; s={NOW}; t=$({cmd} {STAMP} | "
                      f"cut -d' ' -f1 | sort -n | tail -1) || exit 1; e={NOW}; {REPORT}",
                      node=SCALE, timeout=1800)
    total, start = res.out.split()[-2:]
    return float(total), float(start)


def in_alloc_ms(cluster: Cluster, n: int, salloc_flags: str, before: str,
                cmd: str) -> tuple[float, float]:
    """ms of `cmd STAMP` inside `salloc -N n SALLOC_FLAGS`, after BEFORE, and to its last
    task."""
    inner = (f"set -o pipefail; {before} || exit 1; s={NOW}; t=$({cmd} {STAMP} | "
             f"cut -d' ' -f1 | sort -n | tail -1) || exit 1; e={NOW}; {REPORT}")
    res = cluster.run(f"{IDLE}; salloc -N{n} {salloc_flags} -Q bash -c "
                      f"{shlex.quote(inner)}", node=SCALE, timeout=1800)
    total, start = res.out.split()[-2:]
    return float(total), float(start)


def cases(cluster: Cluster, n: int, img: str,
          plugin: str) -> list[tuple[str, Callable[[], tuple[float, float]]]]:
    flag = f"--container-image={img}"
    pre = f"--container-prestart={img}" if plugin == "squall" else ""
    who = "squall" if plugin == "squall" else "Pyxis"
    return [
        (f"bare ({who}'s line)", lambda: step_ms(cluster, n, f"srun -N{n}")),
        (f"{who}, first step", lambda: step_ms(cluster, n, f"srun -N{n} {flag}")),
        (f"{who}, after the prolog", lambda: in_alloc_ms(
            cluster, n, pre, f"sleep {WORK_S}", f"srun -N{n} {flag}")),
        (f"{who} relaunch", lambda: in_alloc_ms(
            cluster, n, "", f"srun -N{n} {flag} sh -c exit", f"srun -N{n - 1} {flag}")),
    ]


def one_n(cluster: Cluster, n: int, rounds: int) -> dict[str, object]:
    sh(["bash", str(ROOT / "docker/scale/scale.sh"), "up", str(n)], timeout=900)
    try:
        repo = f"scale/first-{n}-{uuid.uuid4().hex[:6]}"
        push(cluster, repo, f"f{n}", 64)
        img = f"/fsx/home/squall/first-step-{n}.sqsh"
        cluster.run(f"sqshbuild build -q -o {img} login:5000/{repo}:v1", node=SCALE,
                    timeout=900)
        install_scale_pyxis(cluster)
        got: dict[str, list[float]] = {}
        for r in range(rounds + 1):  # round 0 warms both up and is not kept
            order = ("squall", "pyxis") if r % 2 == 0 else ("pyxis", "squall")
            for plugin in order:
                scale_switch(cluster, plugin)
                for name, measure in cases(cluster, n, img, plugin):
                    total, start = measure()
                    if r:
                        got.setdefault(name, []).append(total)
                        got.setdefault(f"{name}, to the last task's start", []).append(start)
            print(f"N={n} round {r} done", file=sys.stderr, flush=True)
    finally:
        try:
            scale_switch(cluster, "squall")
        finally:
            sh(["bash", str(ROOT / "docker/scale/scale.sh"), "down"])
    return {"nodes": n, "rounds": rounds, "raw_ms": got,
            "ms": {k: round(statistics.median(v)) for k, v in got.items()}}


RATIOS = (("first step", "squall, first step", "Pyxis, first step"),
          ("after the prolog", "squall, after the prolog", "Pyxis, after the prolog"),
          ("relaunch", "squall relaunch", "Pyxis relaunch"))


def render(data: dict[str, object]) -> str:
    results: list[dict] = data["results"]  # type: ignore[assignment]
    ns = [r["nodes"] for r in results]
    runs = "; ".join(f"N={r['nodes']}: {r.get('when', '?')}, commit {r.get('commit', '?')}, "
                     f"load {r.get('load', '?')} at its end" for r in results)
    lines = ["# A job's first container step at N nodes: squall against Pyxis 0.24.0 "
             "(issue 44)", "",
             f"{runs}. `bench/bench_first_step_scale.py` on the scale cluster (N slurmd on "
             "the host's two CPUs, /fsx on GlusterFS), both plugins switched per round on "
             "the same nodes, Pyxis 0.24.0 with `use_squashfuse=1`; a 64 MB image as a .sqsh "
             "on /fsx; medians of the interleaved rounds (N=16: 3, N=64 and 128: 2) in ms. \"after "
             f"the prolog\": the step {WORK_S} s into its allocation, squall's made with "
             "`--container-prestart`; \"relaunch\": a step on N-1 nodes after one on all N "
             "in one allocation.", "",
             "| case | " + " | ".join(f"N={n}" for n in ns) + " |",
             "|---|" + "---|" * len(ns)]
    names: list[str] = []
    for r in results:
        names += [k for k in r["ms"] if k not in names]
    for k in names:
        lines.append(f"| {k} | " + " | ".join(str(r["ms"].get(k, "")) for r in results) + " |")
    lines += ["", "## squall / Pyxis (goal: <= 0.8x)", "",
              "| case | " + " | ".join(f"N={n}" for n in ns) + " |", "|---|" + "---|" * len(ns)]
    for label, sq, py in RATIOS:
        for suffix in ("", ", to the last task's start"):
            cells = []
            for r in results:
                a, b = r["raw_ms"].get(sq + suffix), r["raw_ms"].get(py + suffix)
                if not a or not b:
                    cells.append("")
                    continue
                per = [x / y for x, y in zip(a, b, strict=True)]
                cells.append(f"{statistics.median(a) / statistics.median(b):.2f}x "
                             f"(rounds {min(per):.2f}-{max(per):.2f})")
            lines.append(f"| {label}{suffix} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="16,64")
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    cluster = with_push_tools()
    if not cluster.healthy():
        print("bench_first_step_scale: the mini cluster is not up: run `make cluster-up`",
              file=sys.stderr)
        return 2
    results = []
    try:
        for n in [int(x) for x in opts.nodes.split(",")]:
            results.append(one_n(cluster, n, opts.rounds))
            print(json.dumps(results[-1]["ms"]), flush=True)
    except SwitchError as e:
        print(f"bench_first_step_scale: {e}", file=sys.stderr)
        return 1
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    for r in results:
        r.update(when=time.strftime("%Y-%m-%d %H:%M"), commit=commit,
                 load=round(os.getloadavg()[0], 2))
    store = RESULTS / "first-step-scale.json"
    # Each N's latest run stays beside the others' (one N at a time fits a session).
    kept = json.loads(store.read_text())["results"] if store.exists() else []
    done = {r["nodes"] for r in results}
    results = sorted([r for r in kept if r["nodes"] not in done] + results,
                     key=lambda r: r["nodes"])
    data = {"results": results}
    store.write_text(json.dumps(data, indent=1) + "\n")
    (RESULTS / "first-step-scale.md").write_text(render(data))
    print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
