"""A tag resolved once per job (``sqshbuild build --job KEY``), against a real
docker-registry on loopback behind the counting proxy: the job's builds ask the registry
for the tag once, run the digest pinned then even after the tag moves, and wait for the
one that resolves it instead of asking too (docs/images.md, "One image per job")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from conftest import one_error_line, run_env, sqshbuild_cmd
from imagekit import Image, layer

pytestmark = pytest.mark.registry


def image(mark: str, big_mb: int = 0) -> Image:
    layers = [layer(("dir", "etc"), ("file", "etc/mark", mark))]
    if big_mb:
        layers.append(layer(("file", "big", os.urandom(big_mb << 20))))
    return Image(layers, {"Cmd": ["true"]})


def build(cache: Path, home: Path, ref: str, job: str = "",
          check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = [*sqshbuild_cmd(), "build", "--json", *(["--job", job] if job else []),
            "--cache-dir", str(cache), ref]
    proc = subprocess.run(argv, env=run_env(home), capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def digest_of(proc: subprocess.CompletedProcess[str]) -> str:
    return json.loads(proc.stdout.strip().splitlines()[-1])["digest"]


def pin_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if " pinned " in ln]


def test_a_job_asks_the_registry_for_its_tag_once(registry, proxy, cache_dir, clean_env):
    repo = f"test/pin-once-{uuid.uuid4().hex[:6]}"
    registry.pusher.push(repo, "v1", image("one"))
    ref = f"{proxy.host}/{repo}:v1"
    first = build(cache_dir, clean_env, ref, job="mini-1000-41")
    assert proxy.manifests["v1"] == 1
    assert pin_lines(first) == [f"sqshbuild: job mini-1000-41 pinned {ref} to "
                                f"{digest_of(first)}: its later steps, failover attempts and "
                                "requeues run this digest"], first.stderr
    for _ in range(3):  # later steps, other nodes
        again = build(cache_dir, clean_env, ref, job="mini-1000-41")
        assert digest_of(again) == digest_of(first) and pin_lines(again) == []
    assert proxy.manifests["v1"] == 1, proxy.manifests
    build(cache_dir, clean_env, ref)  # no job: a tag is resolved each time, as before
    assert proxy.manifests["v1"] == 2, proxy.manifests


def test_a_tag_moved_during_a_job_changes_nothing_until_the_next_job(registry, proxy,
                                                                     cache_dir, clean_env):
    repo = f"test/pin-moved-{uuid.uuid4().hex[:6]}"
    old = registry.pusher.push(repo, "v1", image("old"))
    ref = f"{proxy.host}/{repo}:v1"
    assert digest_of(build(cache_dir, clean_env, ref, job="mini-1000-42")) == old
    new = registry.pusher.push(repo, "v1", image("new"))
    assert new != old
    assert digest_of(build(cache_dir, clean_env, ref, job="mini-1000-42")) == old
    assert digest_of(build(cache_dir, clean_env, ref, job="mini-1000-43")) == new
    assert digest_of(build(cache_dir, clean_env, ref, job="mini-1000-42")) == old
    assert proxy.manifests["v1"] == 2, proxy.manifests


def test_builds_of_one_job_at_once_resolve_once_and_pull_once(registry, proxy, cache_dir,
                                                              clean_env):
    repo = f"test/pin-many-{uuid.uuid4().hex[:6]}"
    img = image("many", big_mb=2)
    registry.pusher.push(repo, "v1", img)
    proxy.manifest_delay = 0.5  # every node is inside the resolution at once
    proxy.rate = 4 << 20
    ref = f"{proxy.host}/{repo}:v1"
    procs = [subprocess.Popen([*sqshbuild_cmd(), "build", "--quiet", "--job", "mini-1000-44",
                               "--cache-dir", str(cache_dir), ref], env=run_env(clean_env),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    assert len({o[0].strip().splitlines()[-1] for o in outs}) == 1, outs
    assert proxy.manifests["v1"] == 1, proxy.manifests
    assert sum(" pinned " in o[1] for o in outs) == 1, outs
    for blob in img.blobs():
        assert proxy.gets[blob] <= 1, (blob, proxy.gets)


def test_a_pinned_build_whose_node_died_is_finished_by_digest(registry, proxy, cache_dir,
                                                              clean_env):
    repo = f"test/pin-died-{uuid.uuid4().hex[:6]}"
    pinned = registry.pusher.push(repo, "v1", image("pinned", big_mb=4))
    proxy.rate = 1 << 20  # the first build is still downloading when it is killed
    ref = f"{proxy.host}/{repo}:v1"
    first = subprocess.Popen([*sqshbuild_cmd(), "build", "--quiet", "--job", "mini-1000-45",
                              "--cache-dir", str(cache_dir), ref], env=run_env(clean_env),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list((cache_dir / "pins").glob("mini-1000-45-*.json")):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    registry.pusher.push(repo, "v1", image("moved"))  # the tag moves before the next try
    proxy.rate = 0
    again = build(cache_dir, clean_env, ref, job="mini-1000-45")
    assert digest_of(again) == pinned
    assert proxy.manifests["v1"] == 1 and proxy.manifests[pinned] == 1, proxy.manifests


def test_a_cached_digest_reference_makes_no_request(registry, proxy, cache_dir, clean_env):
    repo = f"test/pin-digest-{uuid.uuid4().hex[:6]}"
    digest = registry.pusher.push(repo, "v1", image("digest"))
    build(cache_dir, clean_env, f"{proxy.host}/{repo}:v1")
    before = sum(proxy.manifests.values())
    out = build(cache_dir, clean_env, f"{proxy.host}/{repo}@{digest}")
    assert digest_of(out) == digest
    assert sum(proxy.manifests.values()) == before, proxy.manifests


@pytest.mark.needs_root("the shared cache, and another user's file in it")
def test_a_planted_pin_is_not_used(registry, proxy, cache_dir, clean_env):
    repo = f"test/pin-planted-{uuid.uuid4().hex[:6]}"
    real = registry.pusher.push(repo, "v1", image("real"))
    other = registry.pusher.push(repo, "other", image("other"))
    ref = f"{proxy.host}/{repo}:v1"
    build(cache_dir, clean_env, f"{proxy.host}/{repo}:other")
    build(cache_dir, clean_env, ref, job="mini-1000-46")
    pin = next((cache_dir / "pins").glob("mini-1000-46-*.json"))
    record = json.loads(pin.read_text())
    planted = cache_dir / "pins" / pin.name.replace("-46-", "-47-")
    planted.write_text(json.dumps(dict(record, job="mini-1000-47", digest=other)))
    os.chown(planted, 65534, 65534)  # not root's nor the builder's
    out = build(cache_dir, clean_env, ref, job="mini-1000-47")
    assert digest_of(out) == real
    assert "ignoring" in out.stderr and str(planted) in out.stderr, out.stderr


def test_gc_removes_old_pins_only(registry, proxy, cache_dir, clean_env):
    repo = f"test/pin-gc-{uuid.uuid4().hex[:6]}"
    registry.pusher.push(repo, "v1", image("gc"))
    ref = f"{proxy.host}/{repo}:v1"
    build(cache_dir, clean_env, ref, job="mini-1000-48")
    build(cache_dir, clean_env, ref, job="mini-1000-49")
    old = next((cache_dir / "pins").glob("mini-1000-48-*.json"))
    fresh = next((cache_dir / "pins").glob("mini-1000-49-*.json"))
    past = time.time() - 61 * 86400
    os.utime(old, (past, past))
    proc = subprocess.run([*sqshbuild_cmd(), "gc", "--max-size", "100G", "--cache-dir",
                           str(cache_dir)], env=run_env(clean_env), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not old.exists() and fresh.exists()


@pytest.mark.parametrize("job", ["a/b", "-x", "x" * 129, "job 1", "../etc"])
def test_a_bad_job_key_is_refused_in_one_line(cache_dir, clean_env, job):
    proc = subprocess.run([*sqshbuild_cmd(), "build", "--job", job, "--cache-dir",
                           str(cache_dir), "127.0.0.1:1/x:v1"], env=run_env(clean_env),
                          capture_output=True, text=True, timeout=60)
    assert "--job" in one_error_line(proc)
