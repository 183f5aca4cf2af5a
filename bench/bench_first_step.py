"""Benchmark: the first container step of a new job, squall against Pyxis 0.24.0 and bare
(issue 44).

On the mini cluster (3 nodes; run it after `make cluster-up`, under `flock /work/locks/heavy`
where other work shares the machine), both plugins on the same nodes, the same Enroot
4.1.2 and the same image, switched between them by bench/plugin_switch.py (Pyxis with
`use_squashfuse=1`: it starts every step from the .sqsh on /fsx). Each round measures every
case once, the plugins' order alternating round by round; the result is the median of the
rounds, with each round's squall/Pyxis ratio. Timed on the login node around `srun`:

- bare `srun -N3 true` (a new job), under each plugin's line (srun loads it either way);
- the first container step of a new job, `srun -N3 --container-image=IMG true`, the image
  cached as a .sqsh on /fsx (in the page cache: warm-up runs first):
  - squall, node-local copy absent: each node starts from the .sqsh through squashfuse,
    as on a cold node. squall's line gets `local_cache_max_nodes=2` for the whole bench, so
    a 3-node job is a job above it: it starts no extraction (which would load the 2 cores
    under the next case) and never finds a copy of image A;
  - squall, node-local copy present: image B, whose extracted copy each node holds (made
    by 1-node jobs before the rounds; a job above local_cache_max_nodes starts from copies
    already there);
  - Pyxis: image A through squashfuse (Pyxis has no node-local copy);
- a job's first step after the prolog: in a 3-node allocation, after WORK_S seconds of
  the script's own work (or none: "right after"), the timed `srun -N3
  --container-image=IMG`; squall's allocation says `--container-prestart=IMG` (its job
  prolog has started the container on every node: docs/plugin.md), Pyxis's and bare's
  allocations are plain (Pyxis has nothing of the kind);
- a failover relaunch: in one 3-node allocation, a step on all three (as the supervisor's
  warm-up of the spares), then the timed relaunch step on two of them (node2,node3): squall
  joins the job's kept containers, Pyxis starts a container again, bare is a bare step.

Each run is stored under its label in bench/results/first-step.json and
bench/results/first-step.md shows every label. `--phases N` also records squall's
`--container-log=verbose` phase timings of N first steps per case.

    python bench/bench_first_step.py --label baseline [--rounds 7] [--phases 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from plugin_switch import SwitchError, install_pyxis, switch  # noqa: E402
from tests.integration.cluster import NODES, UID, Cluster  # noqa: E402
from tests.integration.images import IMAGE_DIR, build_image  # noqa: E402

RESULTS = ROOT / "bench" / "results"
# From run 6 on, with the prolog's start of the containers of jobs srun allocates (plugstack
# prestart_srun_jobs, off by default); the same line without it beside (the first step
# starts them, what runs 1-5 measured).
SQUALL_ARGS = "local_cache_max_nodes=2 prestart_srun_jobs=1"
SQUALL_ARGS_NO_PRESTART = "local_cache_max_nodes=2 prestart_srun_jobs=0"
NO_PRESTART = "squall, the step's own start"
NODELIST = ",".join(NODES)
RELAUNCH = "node2,node3"
LOCAL_CACHE = "/var/lib/squall/cache"  # the plugin's local_cache default (docs/plugin.md)
TIMINGS = re.compile(r"squall: timings on (\S+) \((.*?)\): (.*)")


# The step's command: each task prints when it started (ns); the latest one is when the
# step's last node got to its program (a job starts when all its ranks have).
STAMP = "bash -c 'date +%s%N'"


# Until no node of the job is still ending one (slurmd's epilog: squall's kept containers
# end there, after srun returned; Slurm starts the node's next job only then).
IDLE = (f"until [ -z \"$(sinfo -h -N -n {NODELIST} -o %t | grep -vx idle)\" ]; do sleep 0.02;"
        " done")


def ms(cluster: Cluster, cmd: str) -> tuple[float, float, float | None]:
    """Wall ms of one `cmd STAMP` on the login node (the nodes idle before it), ms until its
    last task started, and ms until its nodes were idle again."""
    res = cluster.run(f"{IDLE}; s=$(date +%s%N); t=$({cmd} {STAMP} | sort -n | tail -1) ||"
                      f" exit 1; e=$(date +%s%N); {IDLE}; f=$(date +%s%N);"
                      " echo $(( (e - s) / 1000 )) $(( (t - s) / 1000 )) $(( (f - s) / 1000 ))",
                      timeout=300)
    total, start, idle = res.out.split()[-3:]
    return int(total) / 1000, int(start) / 1000, int(idle) / 1000


def relaunch_ms(cluster: Cluster, flags: str) -> tuple[float, float, float | None]:
    """ms of a relaunch step on RELAUNCH in an allocation whose first step ran everywhere,
    and ms until its last task started."""
    inner = (f"srun -N3 {flags} true >/dev/null || exit 1; s=$(date +%s%N); "
             f"t=$(srun -N2 -w {RELAUNCH} {flags} {STAMP} | sort -n | tail -1) || exit 1;"
             " e=$(date +%s%N); echo $(( (e - s) / 1000 )) $(( (t - s) / 1000 ))")
    res = cluster.run(f"{IDLE}; salloc -N3 -w {NODELIST} -Q bash -c {shlex.quote(inner)}",
                      timeout=300)
    total, start = res.out.split()[-2:]
    return int(total) / 1000, int(start) / 1000, None


# What a job script does before its first srun (modules, environment, data): the time the
# prolog's start has, in the "after the prolog" cases.
WORK_S = 2


def after_prolog_ms(cluster: Cluster, salloc_flags: str, step_flags: str,
                    work_s: float) -> tuple[float, float, float | None]:
    """ms of a job's first step on the 3 nodes, WORK_S into its allocation (made with
    SALLOC_FLAGS), ms until its last task started, and ms from salloc's start until the
    allocation's shell ran (Slurm waits for the prolog on every node: a prolog that held
    the job until its container was up would show here)."""
    inner = ("b=$(date +%s%N); "
             f"sleep {work_s}; s=$(date +%s%N); "
             f"t=$(srun -N3 {step_flags} {STAMP} | sort -n | tail -1) || exit 1;"
             " e=$(date +%s%N); echo $(( (e - s) / 1000 )) $(( (t - s) / 1000 ))"
             " $(( (b - A) / 1000 ))")
    res = cluster.run(f"{IDLE}; A=$(date +%s%N) salloc -N3 -w {NODELIST} {salloc_flags} -Q "
                      f"bash -c {shlex.quote(inner)}", timeout=300)
    total, start, alloc = res.out.split()[-3:]
    return int(total) / 1000, int(start) / 1000, int(alloc) / 1000


def served(cluster: Cluster, image: str) -> dict[str, str]:
    """How each node's squall started IMG's first step (the verbose log's HOW)."""
    res = cluster.run(f"srun -N3 -w {NODELIST} --container-image={image} "
                      "--container-log=verbose true", timeout=300)
    return {m.group(1): m.group(2) for m in TIMINGS.finditer(res.err)}


def phases(cluster: Cluster, image: str, runs: int) -> dict[str, float]:
    """Median ms of each verbose phase of IMG's first step over RUNS jobs and the nodes."""
    seen: dict[str, list[float]] = {}
    for _ in range(runs):
        res = cluster.run(f"srun -N3 -w {NODELIST} --container-image={image} "
                          "--container-log=verbose true", timeout=300)
        for m in TIMINGS.finditer(res.err):
            for part in m.group(3).split(", "):
                words = part.rsplit(" ", 2)
                if len(words) == 3 and words[2] == "ms":
                    seen.setdefault(words[0], []).append(float(words[1]))
    return {k: round(statistics.median(v), 1) for k, v in seen.items()}


def drop_copies(cluster: Cluster) -> None:
    """No node-local copy of any image of the test user's (no job runs: wait_idle)."""
    for n in NODES:
        cluster.run(f"rm -rf {LOCAL_CACHE}/{UID}/*", node=n, user="root")


def warm_copies(cluster: Cluster, image: str) -> None:
    """Each node's extracted copy of IMAGE, made by a 1-node job there (under
    local_cache_max_nodes), complete before the rounds."""
    jobs = [cluster.run(f"sbatch --parsable -N1 -w {n} -o /dev/null --wrap "
                        f"'srun --container-image={image} sleep 900'").out.strip()
            for n in NODES]
    deadline = time.monotonic() + 900
    try:
        for n in NODES:
            probe = f"srun -N1 -w {n} --container-image={image} --container-log=verbose true"
            while "extracted cache hit" not in cluster.run(probe, check=False).err:
                if time.monotonic() > deadline:
                    raise SystemExit(f"bench_first_step: {image} not extracted on {n} in 900 s")
                time.sleep(3)
    finally:
        cluster.run(f"scancel {' '.join(jobs)}")
        time.sleep(3)


Measure = Callable[[], tuple[float, float, float | None]]


def one_round(cluster: Cluster, order: tuple[str, ...], a: str, b: str,
              cases: dict[str, list[float]]) -> None:
    todo: list[tuple[str, Measure]]
    for plugin in order:
        if plugin == "squall-own-start":
            switch(cluster, "squall", squall_args=SQUALL_ARGS_NO_PRESTART)
            todo = [(f"{NO_PRESTART}, copy absent", lambda: ms(
                        cluster, f"srun -N3 -w {NODELIST} --container-image={a}")),
                    (f"{NO_PRESTART}, copy present", lambda: ms(
                        cluster, f"srun -N3 -w {NODELIST} --container-image={b}"))]
        elif plugin == "squall":
            switch(cluster, "squall", squall_args=SQUALL_ARGS)
            todo = [
                    ("bare (squall's line)", lambda: ms(cluster, f"srun -N3 -w {NODELIST}")),
                    ("squall, copy absent", lambda: ms(
                        cluster, f"srun -N3 -w {NODELIST} --container-image={a}")),
                    ("squall, copy present", lambda: ms(
                        cluster, f"srun -N3 -w {NODELIST} --container-image={b}")),
                    ("bare relaunch (squall's line)", lambda: relaunch_ms(cluster, "")),
                    ("squall relaunch", lambda: relaunch_ms(
                        cluster, f"--container-image={a}")),
                    ("bare, after the prolog (squall's line)", lambda: after_prolog_ms(
                        cluster, "", "", WORK_S)),
                    ("squall, after the prolog", lambda: after_prolog_ms(
                        cluster, f"--container-prestart={a}", f"--container-image={a}",
                        WORK_S)),
                    ("squall, right after the prolog", lambda: after_prolog_ms(
                        cluster, f"--container-prestart={a}", f"--container-image={a}", 0))]
        else:
            switch(cluster, "pyxis")
            todo = [("bare (Pyxis's line)", lambda: ms(cluster, f"srun -N3 -w {NODELIST}")),
                    ("Pyxis", lambda: ms(
                        cluster, f"srun -N3 -w {NODELIST} --container-image={a}")),
                    ("bare relaunch (Pyxis's line)", lambda: relaunch_ms(cluster, "")),
                    ("Pyxis relaunch", lambda: relaunch_ms(cluster, f"--container-image={a}")),
                    ("bare, after the prolog (Pyxis's line)", lambda: after_prolog_ms(
                        cluster, "", "", WORK_S)),
                    ("Pyxis, after the prolog", lambda: after_prolog_ms(
                        cluster, "", f"--container-image={a}", WORK_S)),
                    ("Pyxis, right after the prolog", lambda: after_prolog_ms(
                        cluster, "", f"--container-image={a}", 0))]
        for name, measure in todo:
            total, start, third = measure()
            cases.setdefault(name, []).append(total)
            cases.setdefault(f"{name}{TO_START}", []).append(start)
            if third is not None:  # the allocation's time for the steps timed in one
                late = "after the prolog" in name
                cases.setdefault(f"{name}{ALLOCATION if late else TO_IDLE}", []).append(third)


TO_START = ", to the last task's start"
ALLOCATION = ", the allocation itself (salloc until its shell ran)"
# Steps timed inside an allocation: the job's end is not theirs.
IN_ALLOCATION = ("relaunch", "after the prolog", "right after the prolog")
TO_IDLE = ", to the nodes idle again (the job's end)"
RATIOS = tuple((f"{what}{until}", f"{sq}{suffix}", f"{py}{suffix}")
               for until, suffix in (("", ""), (", to the tasks' start", TO_START),
                                     (", to the nodes idle again", TO_IDLE))
               for what, sq, py in (("copy absent", "squall, copy absent", "Pyxis"),
                                    ("copy present", "squall, copy present", "Pyxis"),
                                    ("copy absent, the step's own start",
                                     f"{NO_PRESTART}, copy absent", "Pyxis"),
                                    ("copy present, the step's own start",
                                     f"{NO_PRESTART}, copy present", "Pyxis"),
                                    ("relaunch", "squall relaunch", "Pyxis relaunch"),
                                    ("after the prolog", "squall, after the prolog",
                                     "Pyxis, after the prolog"),
                                    ("right after the prolog", "squall, right after the prolog",
                                     "Pyxis, right after the prolog"))
               if not (until and suffix == TO_IDLE and what in IN_ALLOCATION)) + tuple(
    (f"{what}, the allocation", f"squall, {what}{ALLOCATION}", f"Pyxis, {what}{ALLOCATION}")
    for what in ("after the prolog", "right after the prolog"))


def run(cluster: Cluster, opts: argparse.Namespace) -> dict[str, object]:
    a = build_image(cluster, f"{IMAGE_DIR}/first-step-a.sqsh", "firststepa", extra_mb=100)
    b = build_image(cluster, f"{IMAGE_DIR}/first-step-b.sqsh", "firststepb", extra_mb=100)
    install_pyxis(cluster)
    enroot = cluster.run("enroot version", node=NODES[0]).out.strip()
    cases: dict[str, list[float]] = {}
    try:
        # The copies are made and checked by steps that start their own containers (a
        # step that joins the prolog's says so, not how that one started).
        switch(cluster, "squall", squall_args=SQUALL_ARGS_NO_PRESTART)
        drop_copies(cluster)  # an earlier job's copy of image A would hide the absent case
        warm_copies(cluster, b)
        how_a, how_b = served(cluster, a), served(cluster, b)
        if any("extracted" in h for h in how_a.values()) or len(how_a) != 3:
            raise SystemExit(f"bench_first_step: {a} must start from the image: {how_a}")
        if any("extracted cache hit" not in h for h in how_b.values()) or len(how_b) != 3:
            raise SystemExit(f"bench_first_step: {b} must start from copies: {how_b}")
        plugins = ("squall", "pyxis", "squall-own-start")
        for _ in range(2):  # warm-up: page cache, Slurm's paths, each plugin's first load
            one_round(cluster, plugins, a, b, {})
        loads = [os.getloadavg()[0]]
        for r in range(opts.rounds):
            order = plugins if r % 2 == 0 else plugins[::-1]
            one_round(cluster, order, a, b, cases)
            loads.append(os.getloadavg()[0])
        detail: dict[str, dict[str, float]] = {}
        if opts.phases:
            switch(cluster, "squall", squall_args=SQUALL_ARGS)
            detail = {"copy absent": phases(cluster, a, opts.phases),
                      "copy present": phases(cluster, b, opts.phases)}
            switch(cluster, "squall", squall_args=SQUALL_ARGS_NO_PRESTART)
            detail |= {"copy absent, the step's own start": phases(cluster, a, opts.phases),
                       "copy present, the step's own start": phases(cluster, b, opts.phases)}
    finally:
        switch(cluster, "squall", wait=300)
    per_round = {label: [round(s / p, 3) for s, p in zip(cases[sq], cases[py], strict=True)]
                 for label, sq, py in RATIOS}
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    return {
        "when": time.strftime("%Y-%m-%d %H:%M"), "host": platform.node(), "commit": commit,
        "rounds": opts.rounds, "note": opts.note, "enroot": enroot,
        "load": [round(x, 2) for x in loads], "served": {"a": how_a, "b": how_b},
        "ms": {k: round(statistics.median(v), 1) for k, v in cases.items()},
        "ratios": {label: round(statistics.median(cases[sq]) / statistics.median(cases[py]), 3)
                   for label, sq, py in RATIOS},
        "ratios_per_round": per_round, "phases_ms": detail, "raw_ms": cases,
    }


def render(data: dict[str, dict]) -> str:
    labels = list(data)
    lines = [
        "# The first container step of a job: squall against Pyxis 0.24.0 and bare (issue 44)",
        "",
        "Mini cluster (Docker, one host, 2 cores shared), 3 nodes, NVIDIA Enroot 4.1.2 under "
        "both plugins, Pyxis 0.24.0 built from its release source with `use_squashfuse=1`, "
        "switched per round by `bench/plugin_switch.py` (`bench/bench_first_step.py`; raw "
        "values in first-step.json). Medians in milliseconds of interleaved rounds, timed on "
        "the login node around `srun -N3 ... bash -c 'date +%s%N'` (a new job each) or, for "
        "the relaunch, around a 2-node step after a 3-node one in one allocation: the whole "
        "step (srun's wall time), until the last task started (its own clock: the "
        "nodes share the host's) and, from the run labelled 'run 3' on, until the job's "
        "nodes were idle again (its epilog done: squall's kept containers end there); "
        "from then on each job also starts on idle nodes (before, a job could wait for "
        "the previous one's epilog, counted in its start). The image: 100 MB "
        "of incompressible data on a Debian-like base, a .sqsh on /fsx in the page cache. "
        "squall's line gets `local_cache_max_nodes=2` (a 3-node job is above it: "
        "copy absent = started through squashfuse, no extraction; copy present = the "
        "node's extracted copy, made by earlier 1-node jobs). \"after the prolog\": a job's "
        f"first step inside its allocation, {WORK_S} s into it (\"right after\": at once); "
        "squall's allocation made with `--container-prestart=IMG` (the job prolog starts "
        "the container), Pyxis's and bare's plain; the allocation itself (salloc until its "
        "shell ran, which waits for the prolog on every node) is timed apart from run 5 on "
        "(in run 4 the prolog still held the job until the container was up, about 1 s). "
        "From run 6 on, a job srun allocates itself with `--container-image` has its "
        "containers started by its prolog too (squall's line gets `prestart_srun_jobs=1`): "
        "\"squall, copy absent/present\" are then such jobs, and \"squall, the step's own "
        "start\" the same jobs under a line with `prestart_srun_jobs=0` (what runs 1-5 "
        "measured as \"squall\"), in the same rounds.", ""]
    for label in labels:
        r = data[label]
        load = r["load"]
        lines.append(f"- **{label}**: {r['when']}, commit {r['commit']}, {r['rounds']} rounds, "
                     f"load {min(load):.1f}-{max(load):.1f} (1-minute average, host), "
                     f"Enroot {r['enroot']}{', ' + r['note'] if r['note'] else ''}")
    lines += ["", "| case | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    names: list[str] = []
    for label in labels:
        names += [n for n in data[label]["ms"] if n not in names]
    for n in names:
        cells = [f"{data[lb]['ms'][n]:.0f}" if n in data[lb]["ms"] else "" for lb in labels]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += ["", "## squall / Pyxis (goal: <= 0.8x)", "",
              "| case | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for case, _, _ in RATIOS:
        cells = []
        for lb in labels:
            rr = data[lb]["ratios_per_round"].get(case)
            if not rr:
                cells.append("")
                continue
            cells.append(f"{data[lb]['ratios'][case]:.2f}x (rounds {min(rr):.2f}-{max(rr):.2f}, "
                         f"<= 0.8 in {sum(x <= 0.8 for x in rr)}/{len(rr)})")
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    lines += ["", "## Over bare (the container's own cost)", "",
              "| case | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    over = (("squall, copy absent", "bare (squall's line)"),
            ("squall, copy present", "bare (squall's line)"),
            (f"{NO_PRESTART}, copy absent", "bare (squall's line)"),
            (f"{NO_PRESTART}, copy present", "bare (squall's line)"),
            ("Pyxis", "bare (Pyxis's line)"),
            ("squall relaunch", "bare relaunch (squall's line)"),
            ("Pyxis relaunch", "bare relaunch (Pyxis's line)"),
            ("squall, after the prolog", "bare, after the prolog (squall's line)"),
            ("squall, right after the prolog", "bare, after the prolog (squall's line)"),
            ("Pyxis, after the prolog", "bare, after the prolog (Pyxis's line)"),
            ("Pyxis, right after the prolog", "bare, after the prolog (Pyxis's line)"))
    for (case, bare), suffix in ((o, sfx) for sfx in ("", TO_START, TO_IDLE) for o in over):
        sq, py = case + suffix, bare + suffix
        cells = [f"+{data[lb]['ms'][sq] - data[lb]['ms'][py]:.0f}"
                 if sq in data[lb]["ms"] and py in data[lb]["ms"] else "" for lb in labels]
        lines.append(f"| {sq} | " + " | ".join(cells) + " |")
    lines += ["", "Reading them: srun's wall time counts the step's end too. After Pyxis's last "
              "task the step waits about 1 s more (the post-task time is 1.0-1.1 s whatever the "
              "load, against 15-50 ms for squall and bare), consistent with slurmstepd's wait "
              "for the processes left in the step (Enroot's FUSE daemons of a container "
              "started for the step, which end only once its namespace is gone; squall's "
              "kept container lives under its keeper for the job). \"to the last task's start\" "
              "is what a job's ranks wait before they run: there squall and Pyxis both pay one "
              "Enroot start per node, unless the job said its image at submission "
              "(`--container-prestart`): then squall's job prolog has started the container "
              "while the job's script ran, and the first step joins it (\"after the "
              "prolog\"); with no work in the script at all (\"right after\") the step "
              "waits for the rest of that start. The allocation itself costs what a plain "
              "one does give or take 15 ms: the prolog returns once the start holds its "
              "lock."]
    withphases = [lb for lb in labels if data[lb].get("phases_ms")]
    if withphases:
        lines += ["", "## Where squall's first step goes (`--container-log=verbose`, medians "
                  "over the nodes and jobs, ms)", ""]
        for lb in withphases:
            for case, ph in data[lb]["phases_ms"].items():
                lines.append(f"- {lb}, {case}: " + ", ".join(f"{k} {v:.1f}"
                                                             for k, v in ph.items()))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True, help="name of this run's column")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--phases", type=int, default=3, help="verbose first steps per case")
    ap.add_argument("--note", default="")
    ap.add_argument("--render", action="store_true",
                    help="only write first-step.md again from first-step.json")
    opts = ap.parse_args()
    store = RESULTS / "first-step.json"
    if opts.render:
        (RESULTS / "first-step.md").write_text(render(json.loads(store.read_text())))
        return 0
    cluster = Cluster(Path(os.environ.get("SQUALL_FSX", ROOT / ".cluster" / "fsx")))
    if not cluster.healthy():
        print("bench_first_step: the mini cluster is not up: run `make cluster-up`",
              file=sys.stderr)
        return 2
    try:
        record = run(cluster, opts)
    except SwitchError as e:
        print(f"bench_first_step: {e}", file=sys.stderr)
        return 1
    data = json.loads(store.read_text()) if store.exists() else {}
    data[opts.label] = record
    store.write_text(json.dumps(data, indent=1) + "\n")
    (RESULTS / "first-step.md").write_text(render(data))
    print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
