#!/usr/bin/env python3
"""A cached image's start, before and after the builder's cache (issue 26), side by side.

What a container step of a cached registry image costs squall before the container
starts is one ``sqshbuild build --quiet REF`` that finds the image in the shared cache:
before issue 26 run as the job's user against a ``1777`` cache, now run as the builder
account against the builder's ``0755`` cache (and, by hand, as a user reading it). This
runs both in one session, alternating rounds, against Debian's docker-registry on
loopback: the old tree from a git worktree of ``--before`` (default: the commit before the
cache change), the new one from this checkout.

Cases (each a median of ``--rounds`` alternating runs, wall time of the whole process):

- ``before, user``: the old sqshbuild as uid 1000 on a 1777 cache root warmed;
- ``after, builder``: the new sqshbuild as the builder account (the plugin's way);
- ``after, user``: the new sqshbuild as uid 1000 reading the builder's cache.

Results go to ``bench/results/cache-hit.md``. Run as root: ``python3 bench/bench_cache_hit.py``.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import pwd
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "registry"))
BUILDER = "sqtest-builder"
USER = 1000


def _layer(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _registry(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    from conftest import free_port
    port = free_port()
    conf = tmp / "registry.yml"
    conf.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp}/s\n"
                    f"http:\n  addr: 127.0.0.1:{port}\n")
    proc = subprocess.Popen(["/usr/bin/docker-registry", "serve", str(conf)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import requests
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            requests.get(f"http://127.0.0.1:{port}/v2/", timeout=1)
            return proc, f"127.0.0.1:{port}"
        except requests.RequestException:
            time.sleep(0.1)
    raise SystemExit("docker-registry did not start")


def _builder_uid() -> int:
    try:
        return pwd.getpwnam(BUILDER).pw_uid
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", BUILDER], check=True)
        return pwd.getpwnam(BUILDER).pw_uid


def _run(tree: Path, uid: int, home: Path, args: list[str]) -> float:
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8",
           "PYTHONPATH": str(tree / "python"), "SQSHBUILD_BUILDER": BUILDER}
    cmd = [sys.executable, "-c", "from squall.sqshbuild.cli import main; main()", *args]
    if uid:
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *cmd]
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd="/")
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{args}: {proc.stderr.strip()}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="7628aed", help="the commit measured as 'before'")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "cache-hit.md")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the cases run as other users through setpriv")
    from imagekit import Image, Pusher
    tmp = Path(tempfile.mkdtemp(prefix="bench-cache-hit."))
    os.chmod(tmp, 0o755)
    old = tmp / "before"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-f", "-q", str(old),
                    args.before], check=True)
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=old,
                   check=True, capture_output=True)  # the old tree's own C core
    reg, host = _registry(tmp)
    try:
        files = {f"usr/lib/f{i}": os.urandom(2048) for i in range(200)}
        Pusher(f"http://{host}").push("bench/hit", "v1", Image([_layer(files)],
                                                              {"Cmd": ["/bin/true"]}))
        ref = f"{host}/bench/hit:v1"
        builder = _builder_uid()
        homes = {}
        for who, uid in (("user", USER), ("builder", builder)):
            homes[who] = tmp / f"home-{who}"
            homes[who].mkdir(mode=0o700)
            os.chown(homes[who], uid, uid)
        old_cache, new_cache = tmp / "old" / "images", tmp / "new" / "squall" / "images"
        old_cache.mkdir(parents=True)
        os.chmod(old_cache.parent, 0o755)
        os.chmod(old_cache, 0o1777)
        new_cache.parent.mkdir(parents=True)
        os.chown(new_cache.parent, builder, builder)
        cases = {
            "before, user (1777 cache)": (old, USER, homes["user"], old_cache),
            "after, builder (the plugin's way)": (ROOT, builder, homes["builder"], new_cache),
            "after, user reading the builder's cache": (ROOT, USER, homes["user"], new_cache),
        }
        # warm: the old cache by its user, the new one by the builder
        _run(old, USER, homes["user"], ["build", "--quiet", "--cache-dir", str(old_cache), ref])
        _run(ROOT, builder, homes["builder"], ["build", "--quiet", "--cache-dir",
                                               str(new_cache), ref])
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.rounds):
            for name, (tree, uid, home, cache) in cases.items():
                times[name].append(_run(tree, uid, home, ["build", "--quiet", "--cache-dir",
                                                          str(cache), ref]))
    finally:
        reg.kill()
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)],
                       check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    base = statistics.median(times["before, user (1777 cache)"])
    lines = ["# A cached image's start: sqshbuild's hit, before and after issue 26", "",
             f"{time.strftime('%Y-%m-%d')}, {platform.node()}, {os.cpu_count()} CPUs, load "
             f"{os.getloadavg()[0]:.1f}; `python3 bench/bench_cache_hit.py --rounds "
             f"{args.rounds}` (before = {args.before}); each figure the median of "
             f"{args.rounds} alternating runs of `sqshbuild build --quiet REF` that hit, "
             "whole process (Python start included), registry on loopback.", "",
             "| case | median (ms) | min | max | vs before |", "|---|---|---|---|---|"]
    for name, t in times.items():
        med = statistics.median(t)
        lines.append(f"| {name} | {med * 1000:.0f} | {min(t) * 1000:.0f} | "
                     f"{max(t) * 1000:.0f} | {med / base:.2f}x |")
    lines += ["", "A hit still resolves the tag at the registry (one manifest request); what "
              "changed is whose process it is and the descriptor walk over the cache's "
              "directories."]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
