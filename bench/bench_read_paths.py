"""Benchmark: the ways to read a squashfs image's small files, side by side (issue 12).

Reads 20,000 files of 4-64 KB (680 MB, the tree of bench_job_steps.py) with one
`tar -cf - DIR | wc -c`, medians of --runs, first read of a fresh mount and second read in
the same mount, for:

- squashfuse, as Enroot runs it (`-f -o uid=,gid=`), on a compute node (Debian's 0.5);
- squashfuse_ll (multithreaded, same package), on a compute node;
- the kernel's squashfs (loop, root only), on the host (the nodes have no loop devices;
  same kernel);
- the tree extracted on the host's disk (ext4, through /fsx) and on tmpfs, on a node;
and, for squashfuse, the image's compressor, on the same files as source-like text (the
random ones are stored uncompressed whatever the compressor): lzo with data blocks left
uncompressed (Enroot's `-comp lzo -noD`), zstd (sqshbuild's default, level 3), lzo, lz4,
gzip; with the time `unsquashfs` takes to extract each to tmpfs (what a node-local cache of
extracted images costs in CPU).

Run on the mini cluster under `flock /work/locks/heavy`, after bench_job_steps.py built
the image. Writes bench/results/read-paths.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.cluster import Cluster  # noqa: E402
from tests.integration.images import IMAGE_DIR  # noqa: E402

NODE = "node1"
SRC = f"{IMAGE_DIR}/bench-smallfiles.sqsh"
TREE = "data/tree"
WORK = "/fsx/bench-read"
COMPRESSORS = {"lzo -noD (Enroot's)": "-comp lzo -noD", "zstd (sqshbuild's)": "-comp zstd",
               "lzo": "-comp lzo", "lz4": "-comp lz4", "gzip": "-comp gzip"}
TAR = ("s=$(date +%s%N); n=$(tar -cf - {d} | wc -c); e=$(date +%s%N);"
       " echo $(( (e - s) / 1000 )) $n")


def node_ms(cluster: Cluster, script: str, timeout: float = 900) -> list[float]:
    """Run script as root on NODE; every line "US BYTES" it prints becomes ms."""
    out = cluster.run(script, node=NODE, user="root", timeout=timeout).out
    vals = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            assert int(parts[1]) > 600_000_000, line
            vals.append(int(parts[0]) / 1000)
    return vals


def fuse_reads(cluster: Cluster, image: str, tool: str, runs: int) -> tuple[list[float], ...]:
    first, second = [], []
    for _ in range(runs):
        script = (f"set -e; m=$(mktemp -d); {tool} -o uid=1000,gid=1000 {image} $m;"
                  f" for i in 1 2; do {TAR.format(d='$m/' + TREE)}; done;"
                  " fusermount3 -u $m 2>/dev/null || umount $m; rmdir $m")
        a, b = node_ms(cluster, script)
        first.append(a)
        second.append(b)
    return first, second


def host_kernel_reads(image_host: Path, runs: int) -> tuple[list[float], list[float]]:
    first, second = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as m:
            subprocess.run(["mount", "-t", "squashfs", "-o", "loop,ro", str(image_host), m],
                           check=True)
            try:
                for bucket in (first, second):
                    t0 = time.perf_counter()
                    p = subprocess.run(f"tar -cf - {m}/{TREE} | wc -c", shell=True,
                                       capture_output=True, text=True, check=True)
                    bucket.append((time.perf_counter() - t0) * 1000)
                    assert int(p.stdout) > 600_000_000
            finally:
                subprocess.run(["umount", m], check=True)
    return first, second


def med(xs: list[float]) -> float:
    return statistics.median(xs)


# The same 20,000 files as text that compresses like source code (about 3x): what the
# compressor costs on read shows only with data it actually compresses.
MKTEXT = r"""
import os, random, sys
root = sys.argv[1]
rnd = random.Random(12)
words = [w.encode() for w in ("import def return self class for in if else elif while "
         "numpy torch tensor data model layer weight bias grad loss optimizer step batch "
         "config value key list dict None True False len range print assert raise").split()]
for d in range(200):
    os.makedirs(f"{root}/pkg{d:03d}", exist_ok=True)
    for f in range(100):
        size = rnd.randint(4, 64) * 1024
        out = bytearray()
        while len(out) < size:
            line = b" ".join(rnd.choice(words) for _ in range(rnd.randint(3, 12)))
            out += b"    " * rnd.randint(0, 3) + line + b"_%d\n" % rnd.randint(0, 999)
        with open(f"{root}/pkg{d:03d}/mod{f:03d}.py", "wb") as fh:
            fh.write(bytes(out[:size]))
"""


def squash(cluster: Cluster, tree: str, img: str, comp: str) -> str:
    cluster.run(f"[ -f {img} ] || mksquashfs {tree} {img} -noappend -quiet -no-progress {comp} "
                "-all-root >/dev/null", node=NODE, user="root", timeout=1800)
    return img


def extract_ms(cluster: Cluster, img: str) -> float:
    """unsquashfs to tmpfs (the decompression's CPU cost, no disk write-back)."""
    times = node_ms(cluster, "for i in 1 2 3; do rm -rf /tmp/rp-x; s=$(date +%s%N);"
                    f" unsquashfs -q -d /tmp/rp-x {img} >/dev/null; e=$(date +%s%N);"
                    " echo $(( (e - s) / 1000 )) 700000000; done; rm -rf /tmp/rp-x")
    return med(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    opts = ap.parse_args()
    cluster = Cluster(Path(os.environ.get("SQUALL_FSX", ROOT / ".cluster" / "fsx")))
    if not cluster.healthy():
        print("bench_read_paths: the mini cluster is not up", file=sys.stderr)
        return 2
    if cluster.run(f"test -f {SRC}", user="root", check=False).rc != 0:
        print("bench_read_paths: run bench/bench_job_steps.py first (it builds the image)",
              file=sys.stderr)
        return 2
    # The random tree (incompressible, as bench_job_steps.py reads it) for the ways to mount,
    # a source-like tree for the compressors.
    cluster.run(f"mkdir -p {WORK}; [ -d {WORK}/root/{TREE} ] || unsquashfs -q -d {WORK}/root "
                f"{SRC} {TREE} >/dev/null", node=NODE, user="root", timeout=900)
    cluster.put(f"{WORK}/mktext.py", MKTEXT)
    cluster.run(f"[ -d {WORK}/text/{TREE}/pkg199 ] || python3 {WORK}/mktext.py "
                f"{WORK}/text/{TREE}", node=NODE, user="root", timeout=1800)
    lzo = squash(cluster, f"{WORK}/root", f"{WORK}/tree-lzo-noD.sqsh", "-comp lzo -noD")
    text_images = {label: squash(cluster, f"{WORK}/text",
                                 f"{WORK}/text-{comp.split()[1]}"
                                 f"{'-noD' if '-noD' in comp else ''}.sqsh", comp)
                   for label, comp in COMPRESSORS.items()}

    rows: list[tuple[str, float, float]] = []
    a, b = fuse_reads(cluster, lzo, "squashfuse", opts.runs)
    rows.append(("squashfuse (as Enroot runs it)", med(a), med(b)))
    a, b = fuse_reads(cluster, lzo, "squashfuse_ll", opts.runs)
    rows.append(("squashfuse_ll (multithreaded)", med(a), med(b)))
    host_img = cluster.fsx_host / lzo[len("/fsx/"):]
    if os.geteuid() == 0:
        a, b = host_kernel_reads(host_img, opts.runs)
        rows.append(("kernel squashfs (loop, root; on the host)", med(a), med(b)))
    disk = node_ms(cluster, "; ".join([TAR.format(d=f"{WORK}/root/{TREE}")] * (2 * opts.runs)))
    rows.append(("extracted, host disk (ext4 through /fsx)", med(disk[::2]), med(disk[1::2])))
    tmpfs = node_ms(cluster, f"rm -rf /tmp/rp; cp -a {WORK}/root /tmp/rp; " +
                    "; ".join([TAR.format(d=f"/tmp/rp/{TREE}")] * (2 * opts.runs)) +
                    "; rm -rf /tmp/rp")
    rows.append(("extracted, tmpfs", med(tmpfs[::2]), med(tmpfs[1::2])))
    base = rows[-2][2]

    comp_rows = []
    for label, img in text_images.items():
        a, b = fuse_reads(cluster, img, "squashfuse", opts.runs)
        size = int(cluster.run(f"stat -c %s {img}").out)
        comp_rows.append((label, size, med(a), med(b), extract_ms(cluster, img)))
    raw = int(cluster.run(f"du -sb {WORK}/text/{TREE} | cut -f1", node=NODE, user="root").out)

    lines = ["# Reading 20,000 small files from a squashfs image: the options (issue 12)", "",
             f"`tar -cf - DIR | wc -c` over 20,000 files of 4-64 KB (680 MB), medians of "
             f"{opts.runs} fresh mounts (first read, then a second read in the same mount), "
             f"warm page cache for the image file, on {NODE} of the mini cluster (kernel "
             f"squashfs on the host: the nodes have no loop devices; same kernel). "
             f"`bench/bench_read_paths.py`, {time.strftime('%Y-%m-%d %H:%M')}, load "
             f"{os.getloadavg()[0]:.1f}.", "",
             "## Ways to read the image (incompressible files, Enroot's `-comp lzo -noD`)", "",
             "| how | first read (ms) | second read, same mount (ms) | second vs disk |",
             "|---|---|---|---|"]
    for label, a, b in rows:
        lines.append(f"| {label} | {a:.0f} | {b:.0f} | {b / base:.1f}x |")
    lines += ["", f"## Compressors (the same files as source-like text, {raw} bytes)", "",
              "| compressor | image bytes | squashfuse first read (ms) | second read (ms) | "
              "unsquashfs to tmpfs (ms) |", "|---|---|---|---|---|"]
    for label, size, a, b, x in comp_rows:
        lines.append(f"| {label} | {size} | {a:.0f} | {b:.0f} | {x:.0f} |")
    text = "\n".join(lines) + "\n"
    out = ROOT / "bench" / "results" / "read-paths.md"
    keep = out.read_text().split("\n## Reading", 1) if out.exists() else [""]
    out.write_text(text + ("\n## Reading" + keep[1] if len(keep) > 1 else ""))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
