"""What a build says while it pulls, and while it waits for another node's pull (issue 27).

`sqshbuild build --progress-every S` prints a `sqshbuild: progress: ...` line on stderr every
S seconds, even with -q: the plugin passes them on to srun from a step's first node, so a
step whose image is pulled never looks hung. The build that pulls says which host pulls what,
how much of it and how fast; a build waiting for it reads the same from the pull's lock file
(written at every heartbeat by any build, whatever its options) and says whom it waits for.
The registry is slowed to 1 MiB/s by the fault proxy, so the pull takes seconds.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import run_env, sqshbuild_cmd
from imagekit import Image, layer, sha

pytestmark = pytest.mark.registry

LINE = re.compile(r"^sqshbuild: progress: (.*)$", re.M)
BYTES = re.compile(r": ([\d.]+) MiB of ([\d.]+) MiB, ([\d.]+ [KMG]?i?B)/s$")


def slow_image(registry, faulty, name: str, mib: int = 5) -> tuple[str, str]:
    # Random bytes: the gzip layer is as large as the file, so the pull takes mib seconds.
    image = Image([layer(("file", "big", os.urandom(mib << 20)))], {"Cmd": ["x"]})
    registry.pusher.push(name, "v1", image)
    faulty.add(sha(image.layers[0]), "rate", 1 << 20, times=None)
    return f"{faulty.host}/{name}:v1", sha(image.layers[0])


def start(args: list[str], home: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([*sqshbuild_cmd(), *args], env=run_env(home), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for_lock(cache: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not any(p.name.endswith(".lock") for p in cache.rglob("*.lock")):
        assert time.monotonic() < deadline, "the first build never took its lock"
        time.sleep(0.05)


def test_the_pull_and_a_build_waiting_for_it_say_who_pulls_what(registry, faulty, cache_dir,
                                                                clean_env):
    ref, blob = slow_image(registry, faulty, "progress/slow")
    args = ["-q", "--progress-every", "1", "--cache-dir", str(cache_dir), ref]
    first = start(args, clean_env)
    wait_for_lock(cache_dir)
    second = start(args, clean_env)
    out1, err1 = first.communicate(timeout=120)
    out2, err2 = second.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, (err1, err2)
    assert out1 == out2 and out1.count("\n") == 1, (out1, out2)   # -q: the path alone
    assert len(faulty.hits(blob)) == 1                             # one pull for both
    host = socket.gethostname()

    pulling = [m for m in LINE.findall(err1) if " pulls " in m]
    assert len(pulling) >= 2, err1
    assert all(m.startswith(f"{host} pulls ") and "progress/slow" in m for m in pulling), err1
    done = [float(BYTES.search(m)[1]) for m in pulling if BYTES.search(m)]
    assert len(done) >= 2 and done == sorted(done) and done[-1] > done[0], err1
    assert all(BYTES.search(m)[2] == "5.0" for m in pulling if BYTES.search(m)), err1

    waiting = LINE.findall(err2)
    assert len(waiting) >= 2, err2
    assert all(m.startswith(f"waiting for {host} (pid {first.pid}), which ")
               for m in waiting), err2
    seen = [float(BYTES.search(m)[1]) for m in waiting if BYTES.search(m)]
    assert len(seen) >= 2 and seen == sorted(seen) and seen[-1] > seen[0], err2


def test_without_progress_every_q_says_nothing_but_the_path(registry, faulty, cache_dir,
                                                            clean_env):
    ref, _ = slow_image(registry, faulty, "progress/quiet", mib=2)
    proc = subprocess.run([*sqshbuild_cmd(), "-q", "--cache-dir", str(cache_dir), ref],
                          env=run_env(clean_env), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_a_node_waiting_for_its_job_s_pin_says_whose_pull_it_waits_for(
        registry, faulty, cache_dir, clean_env):
    """The job's node that holds the pin waits for another job's pull of the image; the
    job's other nodes wait for the pin, and still say who pulls what (the plugin's first
    node may be any of them)."""
    ref, blob = slow_image(registry, faulty, "progress/pinned")
    puller = start(["-q", "--cache-dir", str(cache_dir), ref], clean_env)
    wait_for_lock(cache_dir)
    job = ["-q", "--job", "cluster-1000-42", "--cache-dir", str(cache_dir)]
    pinner = start([*job, ref], clean_env)
    time.sleep(1.5)   # it holds the job's pin and waits for the pull
    waiter = start([*job, "--progress-every", "1", ref], clean_env)
    outs = [p.communicate(timeout=120) for p in (puller, pinner, waiter)]
    assert [p.returncode for p in (puller, pinner, waiter)] == [0, 0, 0], outs
    assert len(faulty.hits(blob)) == 1
    said = LINE.findall(outs[2][1])
    host = socket.gethostname()
    told = [m for m in said if m.startswith(f"waiting for {host} (pid {puller.pid}), which pulls ")]
    assert len(told) >= 2, outs[2][1]
