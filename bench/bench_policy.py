"""Benchmark: what the site policy's scope for local files costs a container step (issue 41).

On the mini cluster (run it after `make cluster-up`; it writes /etc/containers/policy.json
on --node as root and removes it at the end, so run it on a cluster of your own). Cases
interleaved round by round (the order rotates), medians, timed on the login node, each
case one `salloc` on --node with --steps steps `srun --container-image=FILE true`:

- no policy file (the plugin stats it and stops);
- a policy file without a squall-sqsh transport (the compiled file is read, nothing judged);
- a squall-sqsh scope accepting the image's directory (read, real path, decided).

The policy is written again before each case, so the job's first step also compiles it
(`sqshbuild policy compile` as root, once per change of the file); the later steps read the
compiled file. Target: a later step within the noise of one with no policy (~10 ms).

On the host, in-process: sqshbuild's check of a registry image against a docker-transport
policy (read, parse, look up: what each cache hit adds) against no file.

Results: bench/results/policy.md.

    python bench/bench_policy.py [--rounds 7] [--steps 6] [--node node1]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "python"))

from tests.integration.cluster import Cluster  # noqa: E402
from tests.integration.images import IMAGE_DIR, IMAGE_ENV, build_image  # noqa: E402

from squall.sqshbuild import policy, policy_names  # noqa: E402

POLICY = "/etc/containers/policy.json"
ACCEPT = [{"type": "insecureAcceptAnything"}]
REJECT = [{"type": "reject"}]
DOCKER = {"docker.io/library": ACCEPT, "nvcr.io": ACCEPT, "login:5000/team": REJECT,
          "": ACCEPT}


def documents(image_dir: str) -> dict[str, dict[str, object] | None]:
    return {
        "no policy file": None,
        "policy without squall-sqsh": {"default": ACCEPT, "transports": {"docker": DOCKER}},
        "squall-sqsh scope": {"default": ACCEPT, "transports": {
            "docker": DOCKER,
            "squall-sqsh": {image_dir: ACCEPT, "/fsx/home": REJECT, "": REJECT}}},
    }


def install(cluster: Cluster, node: str, doc: dict[str, object] | None) -> None:
    if doc is None:
        cluster.run(f"rm -f {POLICY}", node=node, user="root")
        return
    text = shlex.quote(json.dumps(doc))
    cluster.run(f"mkdir -p /etc/containers && printf '%s' {text} > {POLICY}.new && "
                f"chmod 644 {POLICY}.new && mv -f {POLICY}.new {POLICY}", node=node,
                user="root")


def steps_in_job(cluster: Cluster, node: str, image: str, steps: int) -> list[float]:
    """ms of each step of one allocation on node (the first one as [0])."""
    inner = (f"for i in $(seq {steps}); do s=$(date +%s%N); srun --container-image={image} "
             "true >/dev/null || exit 1; e=$(date +%s%N); echo $(( (e - s) / 1000 )); done")
    res = cluster.run(f"salloc -N1 -w {node} -Q bash -c {shlex.quote(inner)}",
                      timeout=120 + steps * 60)
    return [int(x) / 1000 for x in res.out.split()]


def host_checks(n: int) -> dict[str, float]:
    """µs per sqshbuild policy check of a registry image (load + look up), in-process."""
    img = policy_names.image_name("login:5000", "team/app", "v3", "")
    out = {}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "policy.json"
        path.write_text(json.dumps({"default": ACCEPT, "transports": {"docker": DOCKER}}))
        path.chmod(0o644)
        for label, env in (("no policy file", str(Path(d) / "none.json")),
                           ("docker-transport policy", str(path))):
            os.environ[policy.POLICY_ENV] = env
            rounds = []
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(n):
                    pol = policy.load()
                    if pol is not None:
                        pol.lookup(img)
                rounds.append((time.perf_counter() - t0) / n * 1e6)
            out[label] = statistics.median(rounds)
    os.environ.pop(policy.POLICY_ENV, None)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--node", default="node1")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "policy.md"))
    a = ap.parse_args()
    cluster = Cluster(Path(os.environ.get("SQUALL_FSX", ROOT / ".cluster" / "fsx")))
    if not cluster.healthy():
        print("bench_policy: the mini cluster is not up: run `make cluster-up`",
              file=sys.stderr)
        return 2
    image = build_image(cluster, f"{IMAGE_DIR}/base.sqsh", "squalltest", env=IMAGE_ENV)
    docs = documents(os.path.dirname(image))
    names = list(docs)
    first: dict[str, list[float]] = {k: [] for k in names}
    later: dict[str, list[float]] = {k: [] for k in names}
    try:
        steps_in_job(cluster, a.node, image, 2)  # warm up
        for r in range(a.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                install(cluster, a.node, docs[name])
                ms = steps_in_job(cluster, a.node, image, a.steps)
                first[name].append(ms[0])
                later[name] += ms[1:]
    finally:
        install(cluster, a.node, None)
    host = host_checks(2000)
    Path(a.out).write_text(render(a, first, later, host))
    print(Path(a.out).read_text())
    return 0


def render(a: argparse.Namespace, first: dict[str, list[float]],
           later: dict[str, list[float]], host: dict[str, float]) -> str:
    base_first = statistics.median(first["no policy file"])
    base_later = statistics.median(later["no policy file"])
    lines = [
        "# The site policy's scope for local files: a container step's cost",
        "",
        f"Mini cluster (Docker, one host, shared cores), node {a.node}; {a.rounds} rounds, "
        "cases interleaved (order rotated), one `salloc` per case per round with "
        f"{a.steps} steps `srun --container-image=/fsx/.../base.sqsh true`; the policy is "
        "rewritten before each case, so the first step also runs `sqshbuild policy compile` "
        "as root. Medians in ms, timed on the login node (`python bench/bench_policy.py`).",
        "",
        "| case | first step of the job (ms) | vs none | later steps (ms) | vs none | "
        "later p25-p75 (ms) | n later |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in first:
        f, lt = statistics.median(first[name]), statistics.median(later[name])
        q = statistics.quantiles(later[name], n=4)
        lines.append(f"| {name} | {f:.1f} | {f - base_first:+.1f} | {lt:.1f} | "
                     f"{lt - base_later:+.1f} | {q[0]:.1f}-{q[2]:.1f} | "
                     f"{len(later[name])} |")
    lines += [
        "",
        "sqshbuild's check of a registry image at each build and cache hit (read, parse, "
        "look up; no signatures), in-process on the host, median of 5 × 2000:",
        "",
        "| case | µs per check |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v:.1f} |" for k, v in host.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
