"""Benchmark: the node-local cache's extraction beside a job's steps (issue 22).

Three questions, each answered side by side in one run, medians:

(a) **Does the extraction yield to the step?** A step beside an extraction against the same
    step on an idle node, in pairs (alternating), for two steps: a small-file read (20,000
    files of 4-64 KB on the local disk, read once before so it is in the page cache, with
    `tar -cf - DIR | wc -c`) and a CPU loop (python). Extractions: the old one (`unsquashfs`
    at nice 19 and ioprio idle, what squall ran before) and the new, governed one
    (`sq_extracted_build`, spank/keeper/extracted.c, through spank/keeper/tests/
    cache_probe.c). Target: within 1.15x of the idle node.
(b) **How many short jobs until the node has the tree?** A "job" runs the extraction for
    T seconds, then SIGKILLs its session, as a job's end does; repeated until the tree
    exists. Old: every job starts over (what it leaves is removed). New: each job resumes.
    With the node otherwise idle during the jobs, and with a CPU loop running beside them.
(c) **What does the first job read from the image file?** /proc/PID/io `rchar` of
    squashfuse for a job's start (`python3 -c 'import json'` in the image, chrooted on the
    squashfuse mount) and reading one directory, against that of the full extraction.

The image is a container-like tree made from this host's /usr (python3.11, its standard
library, the shared libraries, /usr/bin), compressed with zstd (sqshbuild's default).
It runs on this host directly, as root, with the same programs a node runs (unsquashfs,
squashfuse, the plugin's extraction code), not on the mini cluster: the load of the host
is in the results. Writes bench/results/extract-yield.md and .json.

    python3 bench/bench_extract_yield.py [--rounds 6] [--job-s T] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
KEY = "b" * 32
UNSQUASHFS = shutil.which("unsquashfs") or "/usr/bin/unsquashfs"
CPU_LOOP = "s=0\nfor i in range(12_000_000): s += i\n"


def sh(*argv: str | Path, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], check=True, text=True,
                          capture_output=True, **kw)  # type: ignore[call-overload]


def med(xs: list[float]) -> float:
    return round(statistics.median(xs), 3) if xs else float("nan")


# --- the image, the step's tree, the probe --------------------------------------------------

def build_probe(work: Path) -> Path:
    out = work / "cache_probe"
    core = sorted(str(p) for p in (ROOT / "spank/core").glob("*.c"))
    keeper = [ROOT / f"spank/keeper/{f}" for f in ("extracted.c", "governor.c", "resume.c")]
    sh("gcc", "-std=gnu11", "-O2", f"-I{ROOT}/spank/core", f"-I{ROOT}/spank/plugin",
       f"-I{ROOT}/spank/keeper", "-o", out, ROOT / "spank/keeper/tests/cache_probe.c",
       *keeper, *core, timeout=300)
    return out


def make_image(work: Path) -> Path:
    image = work / "usr.sqsh"
    if image.exists():
        return image
    src = work / "image-src"
    shutil.rmtree(src, ignore_errors=True)
    (src / "usr/lib").mkdir(parents=True)
    for part in ["usr/bin", "usr/lib/python3.11", "usr/lib/python3", "usr/lib64",
                 "usr/lib/x86_64-linux-gnu"]:
        if Path("/" + part).exists():
            sh("cp", "-a", "/" + part, src / part, timeout=600)
    for link, target in [("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")]:
        (src / link).symlink_to(target)
    for d in ["tmp", "proc", "dev", "etc"]:
        (src / d).mkdir()
    sh("mksquashfs", src, image, "-comp", "zstd", "-quiet", "-no-progress", "-all-root",
       timeout=1800)
    shutil.rmtree(src)
    return image


def make_tree(work: Path) -> Path:
    """20,000 files of 4-64 KB on the local disk: what the step reads."""
    tree = work / "smallfiles"
    if (tree / "done").exists():
        return tree
    shutil.rmtree(tree, ignore_errors=True)
    rnd = random.Random(12)
    for d in range(100):
        (tree / f"d{d}").mkdir(parents=True)
        for i in range(200):
            (tree / f"d{d}" / f"f{i}").write_bytes(rnd.randbytes(rnd.randint(4096, 65536)))
    (tree / "done").write_text("")
    return tree


# --- extractions ----------------------------------------------------------------------------

class Extraction:
    """One running extraction, in a session of its own (as the keeper's)."""

    def __init__(self, kind: str, probe: Path, image: Path, work: Path) -> None:
        self.dest = work / "dest"
        self.cache = work / "cache"
        if kind == "old":
            # What squall ran before: unsquashfs at nice 19, ioprio idle, into KEY.tmp-PID.
            self.dest.mkdir(exist_ok=True)
            argv = ["nice", "-n", "19", "ionice", "-c", "3", UNSQUASHFS, "-no-progress",
                    "-no-xattrs", "-d", str(self.dest / "rootfs"), str(image)]
        else:
            self.cache.mkdir(mode=0o700, exist_ok=True)
            argv = [str(probe), "build", str(self.cache), KEY, str(image), UNSQUASHFS,
                    str(1 << 40)]
        self.kind = kind
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)

    def done(self) -> bool:
        return self.proc.poll() is not None

    def kill(self) -> None:
        """SIGKILL to every process of its session, as a job's end does."""
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == self.proc.pid:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.proc.wait(timeout=30)


def tree_exists(kind: str, work: Path) -> bool:
    if kind == "old":
        return False     # an old extraction's tree only exists when it ran to its end
    return (work / "cache" / KEY / "rootfs").is_dir()


def clean(work: Path) -> None:
    for d in [work / "dest", work / "cache"]:
        if d.exists():
            subprocess.run(["chmod", "-R", "u+w", str(d)], check=False)
            shutil.rmtree(d)
    os.sync()


def full_extraction_s(kind: str, probe: Path, image: Path, work: Path) -> float:
    clean(work)
    x = Extraction(kind, probe, image, work)
    x.proc.wait(timeout=3600)
    took = time.monotonic() - x.started
    assert x.proc.returncode == 0, (kind, x.proc.returncode)
    clean(work)
    return round(took, 2)


def background_cpus(seconds: float = 5.0) -> float:
    """CPUs kept busy by everything else on the host, before the bench starts."""
    def busy() -> tuple[int, int]:
        v = [int(x) for x in Path("/proc/stat").read_text().split()[1:9]]
        return v[0] + v[1] + v[2] + v[5] + v[6] + v[7], sum(v)
    a = busy()
    time.sleep(seconds)
    b = busy()
    return round((os.cpu_count() or 1) * (b[0] - a[0]) / max(1, b[1] - a[1]), 2)


# --- (a) a step beside an extraction --------------------------------------------------------

def step_read(tree: Path) -> float:
    t = time.monotonic()
    out = subprocess.run(f"tar -cf - -C {tree} . | wc -c", shell=True, check=True,
                         capture_output=True, text=True).stdout
    assert int(out) > 600_000_000
    return time.monotonic() - t


def step_cpu() -> float:
    t = time.monotonic()
    subprocess.run([sys.executable, "-c", CPU_LOOP], check=True)
    return time.monotonic() - t


def beside(rounds: int, probe: Path, image: Path, work: Path, tree: Path
           ) -> dict[str, dict[str, list[float]]]:
    steps: dict[str, Callable[[], float]] = {"small-file read": lambda: step_read(tree),
                                             "CPU loop": step_cpu}
    out: dict[str, dict[str, list[float]]] = {s: {"idle": [], "old": [], "new": []}
                                               for s in steps}
    step_read(tree)                               # in the page cache, as a step's data
    for r in range(rounds):
        for name, step in steps.items():
            order = ["idle", "old", "new"] if r % 2 == 0 else ["new", "old", "idle"]
            for cond in order:
                clean(work)
                x = None
                if cond != "idle":
                    x = Extraction(cond, probe, image, work)
                    time.sleep(1.5)               # under way, at its own pace
                    assert not x.done(), f"the {cond} extraction ended before the step"
                took = step()
                if x is not None:
                    assert not x.done(), f"the {cond} extraction ended during the step"
                    x.kill()
                out[name][cond].append(round(took, 3))
                print(f"(a) round {r} {name} {cond}: {took:.3f} s", flush=True)
    clean(work)
    return out


# --- (b) short jobs until the tree exists ---------------------------------------------------

def jobs_until_tree(kind: str, job_s: float, cap: int, probe: Path, image: Path, work: Path,
                    busy: bool) -> int | None:
    clean(work)
    for job in range(1, cap + 1):
        if kind == "old":
            clean(work)                  # the next one removes what a killed one left
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
        try:
            x = Extraction(kind, probe, image, work)
            deadline = time.monotonic() + job_s
            while time.monotonic() < deadline and not x.done():
                time.sleep(0.05)
            finished = x.done() and x.proc.returncode == 0
            x.kill() if not x.done() else x.proc.wait()
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
        print(f"(b) {kind} busy={busy} job {job}: {'tree' if finished else 'cut short'}",
              flush=True)
        if finished and (kind == "old" or tree_exists(kind, work)):
            clean(work)
            return job
    clean(work)
    return None


# --- (c) bytes read from the image ----------------------------------------------------------

def rchar(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def squashfuse_job_bytes(image: Path, work: Path) -> dict[str, int]:
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    sh("sync")
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    fuse = subprocess.Popen(["squashfuse", "-f", str(image), str(mnt)])
    try:
        deadline = time.monotonic() + 20
        while not (mnt / "usr").exists():
            assert time.monotonic() < deadline and fuse.poll() is None
            time.sleep(0.05)
        mounted = rchar(fuse.pid)
        sh("chroot", mnt, "/usr/bin/python3.11", "-c", "import json", timeout=120)
        start = rchar(fuse.pid)
        sh("sh", "-c", f"tar -cf - -C {mnt}/usr/lib/python3.11 email | wc -c", timeout=120)
        after_dir = rchar(fuse.pid)
    finally:
        subprocess.run(["fusermount", "-u", str(mnt)], check=False)
        if fuse.poll() is None:
            fuse.terminate()
        fuse.wait(timeout=30)
    return {"mount": mounted, "job start (python3 -c 'import json')": start,
            "job start + reading one directory (usr/lib/python3.11/email)": after_dir}


def extraction_bytes(probe: Path, image: Path, work: Path) -> int:
    """rchar of the governed extraction: a shell's /proc/PID/io once it has waited for the
    probe holds the probe's and its children's (unsquashfs's) reads, and its own (little)."""
    clean(work)
    cache = work / "cache"
    cache.mkdir(mode=0o700)
    out = sh("sh", "-c", '"$@" >/dev/null; cat /proc/$$/io', "sh", probe, "build", cache,
             KEY, image, UNSQUASHFS, str(1 << 40), timeout=3600).stdout
    assert (cache / KEY / "rootfs").is_dir()
    clean(work)
    return next(int(line.split()[1]) for line in out.splitlines()
                if line.startswith("rchar:"))


# --- report ---------------------------------------------------------------------------------

def ratio(xs: list[float], base: list[float]) -> float:
    return round(med(xs) / med(base), 2)


def paired(xs: list[float], base: list[float]) -> float:
    """Median of the per-round ratios (each against the idle run of its own round)."""
    return round(statistics.median(x / b for x, b in zip(xs, base, strict=True)), 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--job-s", type=float, default=0.0,
                    help="length of a short job (default: 40%% of the old full extraction)")
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/squall-bench-extract"))
    ap.add_argument("--skip", default="", help="comma list of parts to skip: a,b,c")
    ap.add_argument("--label", default="", help="the run's name in extract-yield.json "
                    "(default: its time); every stored run is in the report")
    args = ap.parse_args()
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    probe = build_probe(work)
    image = make_image(work)
    tree = make_tree(work)
    skip = set(args.skip.split(","))
    load_before = os.getloadavg()[0]
    res: dict[str, object] = {
        "when": time.strftime("%Y-%m-%d %H:%M"), "host": platform.node(),
        "cpus": os.cpu_count(), "load_before": load_before, "rounds": args.rounds,
        "image_bytes": image.stat().st_size,
    }
    res["background_cpus"] = background_cpus()
    full = {k: med([full_extraction_s(k, probe, image, work) for _ in range(3)])
            for k in ["old", "new"]}
    res["full_extraction_s"] = full
    print("full extraction alone:", full, flush=True)
    if "a" not in skip:
        res["beside"] = beside(args.rounds, probe, image, work, tree)
    if "b" not in skip:
        job_s = args.job_s or round(0.4 * full["old"], 1)
        res["job_s"] = job_s
        res["jobs_cap"] = {"old, no step beside": 10, "new, no step beside": 60,
                           "new, CPU loop beside": 60}
        res["jobs_until_tree"] = {
            "old, no step beside": jobs_until_tree("old", job_s, 10, probe, image, work, False),
            "new, no step beside": jobs_until_tree("new", job_s, 60, probe, image, work, False),
            "new, CPU loop beside": jobs_until_tree("new", job_s, 60, probe, image, work,
                                                    True),
        }
    if "c" not in skip:
        res["bytes"] = {"squashfuse": squashfuse_job_bytes(image, work),
                        "full extraction": extraction_bytes(probe, image, work)}
    res["load_after"] = os.getloadavg()[0]
    RESULTS.mkdir(exist_ok=True)
    store = RESULTS / "extract-yield.json"
    runs = json.loads(store.read_text()) if store.exists() else {}
    runs[args.label or str(res["when"])] = res
    store.write_text(json.dumps(runs, indent=1) + "\n")
    text = "\n".join(report(name, r) for name, r in runs.items())
    (RESULTS / "extract-yield.md").write_text(HEADER + text)
    print(text)
    return 0


HEADER = """# The node-local cache's extraction beside a job's steps (issue 22)

Written by `bench/bench_extract_yield.py` (what each part measures: its docstring), one
section per stored run (bench/results/extract-yield.json). Run on the development host
directly, not on the mini cluster: 2 CPUs, as root, the programs a node runs (unsquashfs
4.5.1, squashfuse, spank/keeper/extracted.c through spank/keeper/tests/cache_probe.c).
Another engineer's mini cluster ran on the same host meanwhile, keeping about one CPU busy:
for the governor that is work beside the extraction, so the new extraction ran at its floor
much of the time, and the timings are noisy (hence the alternating rounds and the paired
ratios).

"""


def report(name: str, res: dict[str, object]) -> str:
    lines = [
        f"## Run {name}",
        "",
        f"{res['cpus']} CPUs; load average {res['load_before']:.2f} before, "
        f"{res['load_after']:.2f} after; {res.get('background_cpus', '?')} CPUs busy with "
        "other work just before it started. Image: this host's /usr (python3.11, its "
        f"libraries, /usr/bin), zstd, {int(str(res['image_bytes'])) / 1e6:.0f} MB.",
        "",
    ]
    full = res.get("full_extraction_s")
    if isinstance(full, dict):
        lines += ["Full extraction with no step beside it (medians of 3): old (nice 19, "
                  f"ioprio idle) {full['old']} s, new (governed, `-p 1`, synced) "
                  f"{full['new']} s.", ""]
    beside_res = res.get("beside")
    if isinstance(beside_res, dict):
        lines += ["### (a) A step beside an extraction (medians of "
                  f"{res['rounds']} alternating rounds; s)", "",
                  "| step | no extraction | beside the old extraction | beside the new one | "
                  "old / none | new / none | old / none, paired | new / none, paired |",
                  "|---|---|---|---|---|---|---|---|"]
        for step, c in beside_res.items():
            lines.append(f"| {step} | {med(c['idle'])} | {med(c['old'])} | {med(c['new'])} | "
                         f"{ratio(c['old'], c['idle'])}x | {ratio(c['new'], c['idle'])}x | "
                         f"{paired(c['old'], c['idle'])}x | {paired(c['new'], c['idle'])}x |")
        lines += ["", "(paired: the median of each round's ratio to the run with no "
                  "extraction of the same round.)"]
        lines.append("")
    jobs = res.get("jobs_until_tree")
    if isinstance(jobs, dict):
        lines += [f"### (b) Short jobs of {res['job_s']} s (SIGKILLed at their end) until the "
                  "node has the tree", "", "| extraction | jobs |", "|---|---|"]
        caps = res.get("jobs_cap", {})
        for k, v in jobs.items():
            cap = caps.get(k, "?") if isinstance(caps, dict) else "?"
            lines.append(f"| {k} | {v if v is not None else f'no tree after {cap} (gave up)'} |")
        lines.append("")
    b = res.get("bytes")
    if isinstance(b, dict):
        fuse = b["squashfuse"]
        lines += ["### (c) Bytes read from the image file by the first job on a node", "",
                  "| reader | bytes | MB |", "|---|---|---|"]
        for k, v in fuse.items():
            lines.append(f"| squashfuse: {k} | {v} | {v / 1e6:.1f} |")
        lines.append(f"| full extraction (unsquashfs, all its processes) | "
                     f"{b['full extraction']} | {b['full extraction'] / 1e6:.1f} |")
        job = list(fuse.values())[-1]
        lines += ["", f"The extraction reads {b['full extraction'] / job:.0f}x what the job "
                  "itself reads through squashfuse. A 1,000-node job start, every node "
                  f"extracting: {1000 * b['full extraction'] / 1e9:.0f} GB from the shared "
                  f"file system against {1000 * job / 1e9:.1f} GB through squashfuse alone "
                  "(with this image; scale by the image's size). With "
                  "`local_cache_max_nodes=16` (the default) such a job extracts nothing: "
                  "it reads what squashfuse reads, and uses trees already on its nodes."]
        lines.append("")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
