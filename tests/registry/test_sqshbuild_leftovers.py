"""Killed builds leave no large temporary files behind after the next run or ``gc`` (the
-o temporary file, the unpack tree, partial downloads), and a full disk is "disk full",
naming the directory (small tmpfs mounts: these tests run as root)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import Proxy, run_env, sqshbuild_cmd
from imagekit import Image, layer

from gate import need_root

pytestmark = pytest.mark.registry


def big_image(registry, mb: int) -> str:
    repo = f"test/leftover-{uuid.uuid4().hex[:8]}"
    image = Image([layer(("file", "small", "s")),
                   layer(("file", "big", os.urandom(mb << 20)), compress=False)],
                  {"Cmd": ["/bin/true"]})
    registry.pusher.push(repo, "v1", image)
    return f"{repo}:v1"


def start(args: list[str], home: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([*sqshbuild_cmd(), *args], env=run_env(home), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def kill_when(proc: subprocess.Popen[str], ready, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the build never reached the point to kill it"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*sqshbuild_cmd(), *args], env=run_env(home), text=True,
                          capture_output=True, timeout=300)


@pytest.fixture
def slow(registry):
    p = Proxy(registry.base, rate=6 << 20)
    yield p
    p.close()


@pytest.mark.parametrize("pipeline", ["stream", "unpack"])
def test_killed_output_build_leaves_nothing_after_the_next_run(registry, cache_dir, clean_env,
                                                               tmp_path, pipeline):
    ref = f"{registry.host}/{big_image(registry, 24)}"
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "out" / "image.sqsh"
    out.parent.mkdir()
    args = ["build", "-q", "--cache-dir", str(cache_dir), "--work-dir", str(work),
            "--pipeline", pipeline, "-o", str(out), ref]
    proc = start(args, clean_env)
    if pipeline == "stream":  # killed while tar2sqfs writes in the -o work directory
        kill_when(proc, lambda: any(p.stat().st_size > 1 << 20
                                    for p in out.parent.glob("sqshbuild-out-*/image.sqsh")))
        assert list(out.parent.glob("sqshbuild-out-*"))
    else:  # killed while the layers are unpacked
        kill_when(proc, lambda: any(p.is_file() and p.stat().st_size > 1 << 20
                                    for p in work.glob("sqshbuild-*/rootfs/big")))
        assert list(work.glob("sqshbuild-*"))
    again = run(args, clean_env)
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["image.json", "image.sqsh"]
    assert list(work.iterdir()) == []
    assert not list(cache_dir.glob(".building-*"))


def test_gc_removes_partial_downloads_and_dead_temporaries(registry, slow, cache_dir,
                                                           clean_env, tmp_path):
    ref = f"{slow.host}/{big_image(registry, 24)}"
    proc = start(["build", "-q", "--cache-dir", str(cache_dir), ref], clean_env)
    layers = cache_dir / "layers" / "sha256"
    kill_when(proc, lambda: any(p.stat().st_size > 1 << 20 for p in layers.glob("*.partial")))
    assert list(layers.glob("*.partial"))
    # and what a build killed mid-squash leaves in the cache
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = os.uname().nodename
    stale = cache_dir / f".building-sha256-{'e' * 64}.{host}.{dead.pid}"
    stale.write_bytes(b"x" * (2 << 20))
    live = cache_dir / f".building-sha256-{'f' * 64}.{host}.{os.getpid()}"
    live.write_bytes(b"x")
    res = run(["gc", "--max-size", "1T", "--cache-dir", str(cache_dir)], clean_env)
    assert res.returncode == 0, res.stderr
    assert not list(layers.glob("*.partial")) and not list(layers.glob("*.tmp"))
    assert not stale.exists() and live.exists()
    assert "removed leftover" in res.stdout and str(stale) in res.stdout


@pytest.fixture
def tiny(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m,mode=0755", "tmpfs", str(mnt)],
                       check=True, capture_output=True)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        need_root("mounting a small tmpfs")
        raise AssertionError(f"cannot mount a tmpfs: {exc}") from None
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("where", ["cache", "output", "work-dir"])
def test_disk_full_names_the_directory(registry, cache_dir, clean_env, tmp_path, tiny,
                                       where):
    ref = f"{registry.host}/{big_image(registry, 6)}"
    args = ["build", "--cache-dir", str(tiny if where == "cache" else cache_dir)]
    full = tiny
    if where == "output":
        args += ["-o", str(tiny / "image.sqsh")]
    elif where == "work-dir":
        args += ["--pipeline", "unpack", "--work-dir", str(tiny), "-o",
                 str(tmp_path / "image.sqsh")]
    res = run([*args, ref], clean_env)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("sqshbuild: error: disk full ") and str(full) in last, last
    left = [p for p in tiny.rglob("*") if p.is_file() and p.stat().st_size > 256 << 10
            and p.suffix != ".partial"]
    assert left == [], left


def test_gc_cli_reports_nothing_to_do(cache_dir, clean_env):
    res = run(["gc", "--max-size", "1T", "--cache-dir", str(cache_dir)], clean_env)
    assert res.returncode == 0 and "already under" in res.stdout, res.stderr
    assert sys.executable


def test_a_build_under_the_lock_removes_another_nodes_dead_temporary(registry, cache_dir,
                                                                     clean_env):
    """A node killed mid-squash leaves its .building-* file on /fsx under its own host
    name; the next build of that image, holding the image's lock, removes it (before: kept
    for a day, since no other host can tell whether that build is dead)."""
    repo = f"test/leftover-{uuid.uuid4().hex[:8]}"
    digest = registry.pusher.push(repo, "v1", Image([layer(("file", "a", "a"))],
                                                    {"Cmd": ["/bin/true"]}))
    hexd = digest.split(":")[1]
    other = cache_dir / f".building-sha256-{hexd}.another-node.4242~{'a' * 32}"
    other.write_bytes(b"x" * (1 << 20))
    unrelated = cache_dir / f".building-sha256-{'d' * 64}.another-node.4242~{'b' * 32}"
    unrelated.write_bytes(b"x")
    res = run(["build", "-q", "--cache-dir", str(cache_dir), f"{registry.host}/{repo}:v1"],
              clean_env)
    assert res.returncode == 0, res.stderr
    assert not other.exists()
    assert unrelated.exists()  # another image's: its own lock's holder decides
