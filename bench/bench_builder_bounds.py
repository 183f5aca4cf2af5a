#!/usr/bin/env python3
"""What the builder's bounds cost (issue 39), side by side in one run:

1. **A normal pull with and without the site file** (host): an image of about ``--mb`` MB
   in four gzip layers on Debian's docker-registry on loopback, built cold (fresh image
   and layer caches) by ``sqshbuild`` as root, in interleaved rounds: no site file, then a
   site file that sets every bound (blob, inflated, image, cache size with its eviction
   scan, a user's share). Also the deputy's own per-build work in-process: the
   node-local check of a reference, the share check and its charge.
2. **scancel to an idle node with a build in flight** (``--cluster``, the mini cluster
   up): alice's registry sends a layer that never ends; her job is cancelled while the
   builder pulls it; the time until node2 has no build and is not COMPLETING.

Results: ``bench/results/builder-bounds.md`` (``--out``).
Run: ``python3 bench/bench_builder_bounds.py [--rounds 5] [--cluster]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "tests" / "registry"), str(ROOT / "tests")]

from imagekit import Image, layer  # noqa: E402

from squall.sqshbuild import site  # noqa: E402
from squall.sqshbuild.cache import open_shared  # noqa: E402
from squall.sqshbuild.deputy import Deputy, node_local  # noqa: E402
from squall.sqshbuild.refs import parse_source  # noqa: E402

SITE = """[limits]
max_blob_size = "16G"
max_inflated_size = "64G"
max_image_size = "64G"
cache_size = "500G"
user_share = "200G"
"""


def build(ref: str, cache: Path, env: dict[str, str]) -> float:
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-c",
                           "from squall.sqshbuild.cli import main; main()",
                           "-q", "--cache-dir", str(cache), ref], env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"sqshbuild failed: {proc.stderr.strip().splitlines()[-1:]}")
    return time.monotonic() - t


def host_rounds(mb: int, rounds: int) -> list[str]:
    from conftest import start_registry  # tests/registry's: a docker-registry on loopback

    tmp = Path(tempfile.mkdtemp(prefix="bench-bounds-"))
    reg = start_registry(tmp / "reg")
    try:
        each = max(1, mb // 4) << 20
        img = Image([layer(("file", f"l{i}/blob", os.urandom(each))) for i in range(4)],
                    {"Cmd": ["x"]})
        reg.pusher.push("bench/bounds", "v1", img)
        ref = f"{reg.host}/bench/bounds:v1"
        conf = tmp / "sqshbuild.toml"
        conf.write_text(SITE)
        conf.chmod(0o644)
        base = {**os.environ, "PYTHONPATH": str(ROOT / "python"), "HOME": str(tmp / "home"),
                "SQSHBUILD_BUILDER": "none"}
        cases = {"no site file": base, "every bound set": {**base, site.SITE_ENV: str(conf)}}
        times: dict[str, list[float]] = {k: [] for k in cases}
        for r in range(rounds):
            for name, env in (cases.items() if r % 2 == 0 else reversed(cases.items())):
                cache = tmp / f"cache-{uuid.uuid4().hex[:6]}"
                times[name].append(build(ref, cache, env))
                shutil.rmtree(cache, ignore_errors=True)
        lookup_ms, share_ms = deputy_cost(tmp)
    finally:
        reg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    a, b = (statistics.median(times[k]) for k in cases)
    lines = [f"Image: {mb} MB in 4 gzip layers of random bytes, cold builds by root, "
             f"{rounds} interleaved rounds.", "",
             "| case | median s | min s | max s |", "|---|---|---|---|"]
    lines += [f"| {k} | {statistics.median(v):.2f} | {min(v):.2f} | {max(v):.2f} |"
              for k, v in times.items()]
    lines += ["", f"Ratio, every bound set / none: **{b / a:.3f}**.", "",
              "The deputy's own work for one build, in-process: the node-local check of "
              f"`nvcr.io` (a name lookup, which the pull then makes anyway) **{lookup_ms:.2f} "
              f"ms**, the share's check and charge **{share_ms:.2f} ms**."]
    return lines


def deputy_cost(tmp: Path, n: int = 200) -> tuple[float, float]:
    """Milliseconds per build: the node-local check of a reference (a name lookup, which
    the pull makes anyway), and the share's check and charge (one small file each)."""
    cache = open_shared(tmp / "deputy-cache")
    deputy = Deputy("alice", site.Site())
    src = parse_source("nvcr.io/nvidia/pytorch:24.08-py3")
    t = time.monotonic()
    for _ in range(n):
        node_local(src.registry)
    lookup = (time.monotonic() - t) * 1000 / n
    t = time.monotonic()
    for i in range(n):
        deputy.check_share(cache, 1 << 20, src)
        deputy.charge(cache, 1 << 20, f"sha256:{i:064x}")
    return lookup, (time.monotonic() - t) * 1000 / n


def cluster_rounds(rounds: int) -> list[str]:
    from integration import test_builder_bounds_cluster as scenario
    from integration.cluster import Cluster

    cluster = Cluster(Path(os.environ.get("SQUALL_FSX", ROOT / ".cluster" / "fsx")))
    took: list[float] = []
    work = scenario.start_stalling_registry(cluster)
    try:
        for _ in range(rounds):
            seconds, builds, state = scenario.cancel_a_build_in_flight(cluster, work)
            if builds:
                raise SystemExit(f"the build outlived scancel: {builds} ({state})")
            took.append(seconds)
    finally:
        scenario.stop_stalling_registry(cluster, work)
    return ["", f"scancel to node2 idle (no build, not COMPLETING), {rounds} rounds: median "
            f"**{statistics.median(took):.1f} s** (min {min(took):.1f}, max {max(took):.1f})."]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cluster", action="store_true", help="also the scancel rounds")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" /
                    "builder-bounds.md")
    args = ap.parse_args()
    lines = ["# What the builder's bounds cost (issue 39)", "",
             f"`python3 bench/bench_builder_bounds.py --mb {args.mb} --rounds {args.rounds}"
             f"{' --cluster' if args.cluster else ''}`, {time.strftime('%Y-%m-%d')}, "
             f"{os.cpu_count()} CPUs.", ""]
    lines += host_rounds(args.mb, args.rounds)
    if args.cluster:
        lines += cluster_rounds(args.rounds)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
