"""Faults during a pull, each with nothing lost (issue 15): the builder holding the shared
lock killed while another waits for it, and the registry gone in the middle of a pull.

Real docker-registry on loopback behind the counting, rate-limited ``Proxy`` of conftest.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import Proxy, run_env, sqshbuild_cmd, start_registry
from imagekit import Image, layer, sha
from sqfs import cat

pytestmark = pytest.mark.registry


def _start(ref: str, cache: Path, home: Path, env: dict[str, str] | None = None
           ) -> subprocess.Popen[str]:
    return subprocess.Popen([*sqshbuild_cmd(), "build", "--json", "--cache-dir", str(cache),
                             ref], env={**run_env(home), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_partial(partial: Path, at_least: int, proc: subprocess.Popen[str]) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if partial.exists() and partial.stat().st_size > at_least:
            return partial.stat().st_size
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the build never reached the middle of the big layer")


def _image() -> tuple[Image, bytes, bytes]:
    big = layer(("file", "big", os.urandom(12 << 20)), compress=False)
    small = layer(("file", "small", "s"))
    return Image([small, big], {"Cmd": ["x"]}), big, small


def test_lock_holder_killed_while_another_waits_the_waiter_takes_over(registry, cache_dir,
                                                                      clean_env):
    image, big, small = _image()
    registry.pusher.push("test/holder-killed", "v1", image)
    slow = Proxy(registry.base, rate=3 << 20)
    try:
        ref = f"{slow.host}/test/holder-killed:v1"
        holder = _start(ref, cache_dir, clean_env)
        partial = cache_dir / "layers" / "sha256" / (sha(big).split(":")[1] + ".partial")
        _wait_partial(partial, 2 << 20, holder)
        waiter = _start(ref, cache_dir, clean_env)
        time.sleep(1.0)   # the waiter is now waiting for the holder's lock
        assert waiter.poll() is None, waiter.communicate()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        slow.rate = 0
        out, err = waiter.communicate(timeout=120)
        assert waiter.returncode == 0, err
        result = json.loads(out)
        assert cat(Path(result["path"]), "small") == "s"
        assert len(list(cache_dir.glob("*.sqsh"))) == 1
        # One pull in total: the small layer and the config once; the big layer's download
        # resumed where the killed holder left it, not restarted.
        assert slow.gets[sha(small)] == 1 and slow.gets[sha(image.config_blob())] == 1
        assert slow.gets[sha(big)] == 2, slow.gets
        resumed = [r for d, r in slow.ranges if d == sha(big)]
        assert resumed and resumed[-1] != "bytes=0-", slow.ranges
    finally:
        slow.close()


def test_registry_gone_mid_pull_fails_in_one_line_and_the_next_run_resumes(tmp_path, cache_dir,
                                                                           clean_env):
    reg = start_registry(tmp_path / "reg")
    image, big, small = _image()
    reg.pusher.push("test/gone", "v1", image)
    slow = Proxy(reg.base, rate=3 << 20)
    try:
        ref = f"{slow.host}/test/gone:v1"
        build = _start(ref, cache_dir, clean_env,
                       {"SQSHBUILD_RETRIES": "1", "SQSHBUILD_TIMEOUT": "5"})
        partial = cache_dir / "layers" / "sha256" / (sha(big).split(":")[1] + ".partial")
        _wait_partial(partial, 2 << 20, build)
        reg.proc.kill()           # the registry goes away in the middle of the big layer
        reg.proc.wait()
        _, err = build.communicate(timeout=120)
        assert build.returncode == 1, err
        assert "Traceback" not in err, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("sqshbuild: error: "), err
        assert not list(cache_dir.glob("*.sqsh"))
        kept = partial.stat().st_size
        assert kept > 2 << 20           # what was downloaded is kept for the next run

        # The registry is back (same storage, same address): the next run finishes the pull.
        reg.proc = subprocess.Popen(reg.proc.args, stdout=open(reg.log, "ab"),
                                    stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while subprocess.run(["curl", "-fsS", "-o", "/dev/null", f"{reg.base}/v2/"],
                             capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, "docker-registry did not come back"
            time.sleep(0.1)
        slow.rate = 0
        done = _start(ref, cache_dir, clean_env)
        out, err = done.communicate(timeout=120)
        assert done.returncode == 0, err
        assert cat(Path(json.loads(out)["path"]), "small") == "s"
        assert slow.gets[sha(small)] == 1     # from the layer cache the second time
        assert any(d == sha(big) and r.startswith("bytes=") and r != "bytes=0-"
                   for d, r in slow.ranges), slow.ranges
    finally:
        slow.close()
        reg.stop()
