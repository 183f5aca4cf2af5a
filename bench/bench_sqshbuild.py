#!/usr/bin/env python3
"""Benchmark sqshbuild against the floor: mksquashfs alone on the already-unpacked root.

An image of about ``--size-gb`` GB (default 1.0) in four layers, shaped like an ML install
(many small files of 4-64 KiB, some large incompressible files, whiteouts), is generated,
pushed to Debian's docker-registry on loopback, and then, in the same run, side by side:

- floor: ``mksquashfs`` on the unpacked tree, same compressor options as sqshbuild;
- sqshbuild cold (empty layer cache and image cache) and warm (layer cache kept), for both
  pipelines (``stream``: tar2sqfs fed the merged tar; ``unpack``: unpack + mksquashfs);
- image size per compressor.

Each case also reports its CPU seconds, and the cold stream build where its time goes.

Results go to ``bench/results/sqshbuild.md`` (``--out``). Run: ``python3 bench/bench_sqshbuild.py``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import platform
import random
import resource
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

from squall.sqshbuild import inflate  # noqa: E402
from squall.sqshbuild.squash import SquashOptions, mksquashfs_argv  # noqa: E402
from squall.sqshbuild.unpack import DirSink, Layer, merge_layers  # noqa: E402

REGISTRY_BIN = "/usr/bin/docker-registry"
COLD = "sqshbuild stream, cold layer cache"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_registry(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cfg = {"version": 0.1, "log": {"level": "error", "accesslog": {"disabled": True}},
           "storage": {"filesystem": {"rootdirectory": str(tmp / "storage")}},
           "http": {"addr": f"127.0.0.1:{port}"}}
    (tmp / "config.yml").write_text(json.dumps(cfg))
    proc = subprocess.Popen([REGISTRY_BIN, "serve", str(tmp / "config.yml")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            requests.get(f"http://127.0.0.1:{port}/v2/", timeout=1)
            return proc, f"127.0.0.1:{port}"
        except requests.ConnectionError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("docker-registry did not start")


def _text_blob(rng: random.Random, size: int) -> bytes:
    # Half random hex (compresses about 2:1), like code and metadata files.
    raw = rng.randbytes(size // 4).hex().encode()
    return (raw + b"\n" * size)[:size]


def make_layer(path: Path, rng: random.Random, small: int, large: list[int],
               prefix: str, whiteouts: list[str] = ()) -> tuple[str, int, str]:
    """Write a gzip tar layer; return (digest, size, diff_id)."""
    raw_hash = hashlib.sha256()

    class Tee(io.RawIOBase):
        def __init__(self, f):
            self.f = f

        def write(self, b):
            raw_hash.update(b)
            return self.f.write(b)

        def writable(self):
            return True

    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", compresslevel=1,
                                              mtime=0) as gz:
        with tarfile.open(fileobj=Tee(gz), mode="w|", format=tarfile.PAX_FORMAT) as tar:
            dirs = set()
            for i in range(small):
                d = f"{prefix}/pkg{i // 200:03d}"
                if d not in dirs:
                    for part in (prefix, d):
                        if part not in dirs:
                            ti = tarfile.TarInfo(part)
                            ti.type = tarfile.DIRTYPE
                            ti.mode = 0o755
                            tar.addfile(ti)
                            dirs.add(part)
                data = _text_blob(rng, rng.randint(4096, 65536))
                ti = tarfile.TarInfo(f"{d}/mod{i:05d}.py")
                ti.size = len(data)
                ti.mode = 0o644
                tar.addfile(ti, io.BytesIO(data))
            for j, size in enumerate(large):
                ti = tarfile.TarInfo(f"{prefix}/lib{j:02d}.so")
                ti.size = size
                ti.mode = 0o755
                tar.addfile(ti, io.BytesIO(rng.randbytes(size)))
            for w in whiteouts:
                ti = tarfile.TarInfo(w)
                tar.addfile(ti, io.BytesIO(b""))
    data_hash = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            data_hash.update(chunk)
    return "sha256:" + data_hash.hexdigest(), path.stat().st_size, "sha256:" + raw_hash.hexdigest()


def push(host: str, repo: str, tag: str, layers: list[tuple[Path, str, int, str]]) -> str:
    base = f"http://{host}/v2/{repo}"
    s = requests.Session()

    def blob(data, digest: str) -> None:
        r = s.post(f"{base}/blobs/uploads/")
        loc = r.headers["Location"]
        loc = loc if loc.startswith("http") else f"http://{host}{loc}"
        r = s.put(f"{loc}{'&' if '?' in loc else '?'}digest={digest}", data=data,
                  headers={"Content-Type": "application/octet-stream"})
        r.raise_for_status()

    for path, digest, _size, _diff in layers:
        with open(path, "rb") as f:
            blob(f, digest)
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh"]},
                         "rootfs": {"type": "layers",
                                    "diff_ids": [x[3] for x in layers]}}).encode()
    cdig = "sha256:" + hashlib.sha256(config).hexdigest()
    blob(config, cdig)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": cdig, "size": len(config)},
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "digest": d, "size": n} for _p, d, n, _x in layers]}).encode()
    r = s.put(f"{base}/manifests/{tag}", data=manifest,
              headers={"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"})
    r.raise_for_status()
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a running process (the registry)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(argv: list[str], env: dict[str, str] | None = None,
          registry_pid: int = 0) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (the command and everything it waited for, plus the
    registry's while it ran) and stdout."""
    cpu = children_cpu() + (proc_cpu(registry_pid) if registry_pid else 0.0)
    t = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed: {proc.stderr[-2000:]}")
    cpu = children_cpu() + (proc_cpu(registry_pid) if registry_pid else 0.0) - cpu
    return wall, cpu, proc.stdout


def layer_plan(args: argparse.Namespace) -> list[tuple[str, int, list[int], list[str]]]:
    """(prefix, small files, large file sizes, whiteouts) of each layer."""
    scale = args.size_gb
    # ~1 GB at scale 1: ~16k small files (~540 MB) and large random files (~460 MB).
    mb = 1 << 20
    if args.shape == "ml":
        return [
            ("base", 8000, [50 * mb] * 5, []),
            ("torch", 6000, [50 * mb] * 5, []),
            ("site", 5000, [50 * mb] * 5, []),
            ("app", 1000, [50 * mb] * 5, []),
        ]
    return [
        ("base", int(8000 * scale), [int(50 * mb * scale)] * 2, []),
        ("large", 0, [int(70 * mb * scale)] * 4, []),
        ("site", int(8000 * scale), [int(40 * mb * scale)], ["base/.wh.pkg000"]),
        ("fix", int(200 * scale), [int(20 * mb * scale)] * 2, ["large/.wh.lib03.so"]),
    ]


@dataclass
class Measured:
    """Each case's wall and CPU seconds, the cold build's phases, the compressors' sizes."""
    runs: dict[str, list[float]]
    cpus: dict[str, list[float]]
    phases: dict[str, list[float]]
    sizes: dict[str, tuple[int, float]]


def write_report(args: argparse.Namespace, plan: list[tuple[str, int, list[int], list[str]]],
                 inflater: str, gen: float, compressed: int, unpacked: int, nfiles: int,
                 m: Measured) -> None:
    """bench/results/sqshbuild.md (its hand-written reading kept), and the same on stdout."""
    mb = 1 << 20
    runs, cpus, phases, sizes = m.runs, m.cpus, m.phases, m.sizes
    results = {k: statistics.median(v) for k, v in runs.items()}
    floor = results["floor: mksquashfs zstd-3 on the unpacked tree"]
    lines = [
        "# sqshbuild benchmark",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.node()}, "
        f"{os.cpu_count()} CPUs (shared with other work), `python3 bench/bench_sqshbuild.py "
        f"{' '.join(shlex.quote(a) for a in sys.argv[1:])}`. "
        "Registry: Debian docker-registry on loopback. "
        f"Medians of {args.repeat} interleaved runs for the floor and the stream pipeline, one "
        "run for the others. Gzip layers inflated with "
        + {"igzip": "igzip (Debian isal)", "python-isal": "python-isal (igzip absent)",
           "zlib": "the standard zlib (igzip and python-isal absent)"}[inflater]
        + ". CPU: user + system seconds of the command and the tools it ran, plus the "
        "registry's while sqshbuild ran (medians). Each case starts after a `sync` (not "
        "timed), so that none pays for writing back the one before it.",
        "",
        f"Image: {len(plan)} layers, {compressed / mb:.0f} MiB compressed, "
        f"{unpacked / mb:.0f} MiB unpacked, {nfiles} files (small files 4-64 KiB, large "
        "random files, whiteouts). Generated and pushed in " + f"{gen:.0f} s.",
        "",
        "| case | seconds (each run) | x floor | CPU s |",
        "|---|---|---|---|",
    ]
    for k, v in results.items():
        every = ", ".join(f"{x:.1f}" for x in runs[k])
        lines.append(f"| {k} | {v:.1f} ({every}) | {v / floor:.2f} | "
                     f"{statistics.median(cpus[k]):.1f} |")
    ncpu = os.cpu_count() or 1
    cold_cpu = statistics.median(cpus[COLD])
    lines += ["", f"On {ncpu} CPUs the cold stream build cannot take less than its CPU "
              f"seconds / {ncpu} = {cold_cpu / ncpu:.1f} s ({cold_cpu / ncpu / floor:.2f}x "
              "the floor) even with every step overlapped: it downloads, verifies and "
              "inflates the layers on the same cores that squash them, and the floor does "
              "none of that."]
    lines += ["", f"Where the cold stream build's time goes (`--json` timings, medians of "
              f"{args.repeat}; seconds since the build started, after Python's start):", "",
              "| phase | seconds |", "|---|---|"]
    for k, v in phases.items():
        lines.append(f"| {k} | {statistics.median(v):.2f} |")
    lines += ["", "Image size per compressor (mksquashfs on the unpacked tree):", "",
              "| compressor | size MiB | seconds |", "|---|---|---|"]
    for k, (size, secs) in sizes.items():
        lines.append(f"| {k} | {size / mb:.0f} | {secs:.1f} |")
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + kept_reading(args.out))
    print(text)



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--shape", choices=("mixed", "ml"), default="mixed",
                    help="ml: issue 11's ML-shaped image, 20,000 files of 4-64 KiB and "
                    "twenty 50 MB files in 4 layers (--size-gb ignored)")
    ap.add_argument("--work", type=Path, default=None, help="scratch dir [default: TMPDIR]")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sqshbuild.md")
    ap.add_argument("--compressors", default="zstd,gzip,lzo-noD,xz",
                    help="also: zstd15 (zstd's default level 15; slow)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--against", type=Path, default=None,
                    help="another checkout (its C core built): its cold stream build is "
                         "measured too, interleaved, for a before/after in one run")
    ap.add_argument("--only-cold", action="store_true",
                    help="only the floor and the cold stream builds (and --against's): no "
                         "warm, unpack, zlib, compat or size cases")
    args = ap.parse_args()
    if not os.path.exists(REGISTRY_BIN):
        raise SystemExit("docker-registry is not installed: apt install docker-registry")
    work = Path(tempfile.mkdtemp(prefix="bench-sqshbuild-", dir=args.work))
    rng = random.Random(42)
    plan = layer_plan(args)
    inflater = inflate.describe()
    reg_proc, host = start_registry(work)
    runs: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    phases: dict[str, list[float]] = {}
    try:
        t = time.monotonic()
        layers = []
        for i, (prefix, small, large, wh) in enumerate(plan):
            p = work / f"layer{i}.tar.gz"
            digest, size, diff = make_layer(p, rng, small, large, prefix, wh)
            layers.append((p, digest, size, diff))
        push(host, "bench/ml", "v1", layers)
        gen = time.monotonic() - t
        compressed = sum(x[2] for x in layers)

        # The unpacked tree for the floor (not timed), from the same layers.
        rootfs = work / "rootfs"
        merge_layers([Layer(d, (lambda p=p: gzip.open(p, "rb"))) for p, d, _n, _x in layers],
                     DirSink(rootfs))
        unpacked = int(subprocess.run(["du", "-sb", str(rootfs)], capture_output=True,
                                      text=True).stdout.split()[0])
        nfiles = sum(len(f) for _r, _d, f in os.walk(rootfs))

        env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
        sqsh = [sys.executable, "-c", "from squall.sqshbuild.cli import main; main()"]
        ref = f"{host}/bench/ml:v1"
        zstd = SquashOptions()

        def measure(name: str, argv: list[str], e: dict[str, str] | None = None) -> None:
            # Each case starts with nothing left to write back from the one before it
            # (several GB a run): otherwise whichever case comes next pays for it.
            os.sync()
            wall, cpu, out = timed(argv, e, reg_proc.pid if argv[0] == sys.executable else 0)
            runs.setdefault(name, []).append(wall)
            cpus.setdefault(name, []).append(cpu)
            if name == COLD:
                result = json.loads(out)
                for k, v in result["timings"].items():
                    phases.setdefault(k, []).append(v)
                phases.setdefault("total (in the process)", []).append(result["seconds"])

        def build(pipeline: str, cache: Path, e: dict[str, str] | None = None) -> list[str]:
            return [*sqsh, "build", "--json", "--pipeline", pipeline, "--cache-dir", str(cache),
                    "--work-dir", str(work), ref]

        def against() -> None:
            other = work / "cache-against"
            if args.against is not None:
                shutil.rmtree(other, ignore_errors=True)
                measure(f"{COLD}, code of {args.against.name}", build("stream", other),
                        dict(env, PYTHONPATH=str(args.against.resolve() / "python")))
                shutil.rmtree(other)

        # Interleaved repeats of the cases the target is about, so that load from other
        # work on the machine hits them alike; medians reported.
        for i in range(args.repeat):
            measure("floor: mksquashfs zstd-3 on the unpacked tree",
                    mksquashfs_argv(str(rootfs), str(work / "floor.sqsh"), zstd))
            if i % 2:
                against()  # each goes first in every other repeat: no order effect
            cache = work / "cache-stream"
            shutil.rmtree(cache, ignore_errors=True)
            measure(COLD, build("stream", cache), env)
            for p in cache.glob("*.sqsh"):
                p.unlink()
            if not i % 2:
                against()
            if not args.only_cold:
                measure("sqshbuild stream, warm layer cache", build("stream", cache), env)
                # The image is now in the cache: a hit (Python's start included).
                measure("sqshbuild, cache hit (whole command)", build("stream", cache), env)
            shutil.rmtree(cache)
        for pipeline in () if args.only_cold else ("unpack",):
            cache = work / f"cache-{pipeline}"
            measure(f"sqshbuild {pipeline}, cold layer cache", build(pipeline, cache), env)
            for p in cache.glob("*.sqsh"):
                p.unlink()
            measure(f"sqshbuild {pipeline}, warm layer cache", build(pipeline, cache), env)
            shutil.rmtree(cache)
        if inflater != "zlib" and not args.only_cold:
            cache = work / "cache-zlib"
            measure("sqshbuild stream, cold, in-process zlib (SQSHBUILD_NO_ISAL=1)",
                    build("stream", cache), dict(env, SQSHBUILD_NO_ISAL="1"))
            shutil.rmtree(cache)

        sizes: dict[str, tuple[int, float]] = {}
        comp_opts = {
            "zstd": SquashOptions(),
            "zstd15": SquashOptions(level=15),
            "gzip": SquashOptions(compressor="gzip", level=None),
            "lzo-noD": SquashOptions(compressor="lzo", level=None, no_data_compression=True),
            "xz": SquashOptions(compressor="xz", level=None),
        }
        for name in [] if args.only_cold else args.compressors.split(","):
            opts = comp_opts[name]
            out = work / f"size-{name}.sqsh"
            secs = timed(mksquashfs_argv(str(rootfs), str(out), opts))[0]
            sizes[name] = (out.stat().st_size, secs)
            out.unlink()
        cache = work / "cache-compat"
        if not args.only_cold:
            measure("sqshbuild --enroot-compat (lzo -noD, unpack), cold", [
                *sqsh, "build", "-q", "--enroot-compat", "--cache-dir", str(cache),
                "--work-dir", str(work), ref], env)
    finally:
        reg_proc.terminate()
        reg_proc.wait()
        shutil.rmtree(work, ignore_errors=True)

    write_report(args, plan, inflater, gen, compressed, unpacked, nfiles,
                 Measured(runs, cpus, phases, sizes))

def kept_reading(out: Path) -> str:
    """The hand-written part of the results file (from its "## Reading" heading on), which a
    re-run keeps."""
    try:
        old = out.read_text()
    except OSError:
        return ""
    at = old.find("\n## Reading")
    return "\n" + old[at:].lstrip("\n") if at >= 0 else ""


if __name__ == "__main__":
    main()
