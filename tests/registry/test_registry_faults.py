"""Rate limits and hostile servers, through a fault-injecting proxy in front of the real
docker-registry: 429/503 with Retry-After, a server that never answers, endless bodies."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from conftest import run_env, sqshbuild_cmd
from faults import silent_server
from imagekit import Image, layer, sha
from sqfs import cat

pytestmark = pytest.mark.registry

MANIFEST = r"/manifests/"


def sqshbuild(args: list[str], home: Path, **env: str) -> tuple[subprocess.CompletedProcess[str],
                                                                  float]:
    start = time.monotonic()
    proc = subprocess.run([*sqshbuild_cmd(), *args], env={**run_env(home), **env},
                          capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - start


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("sqshbuild: error: "), proc.stderr
    return lines[-1]


def push(registry, name: str, *files: tuple[str, str]) -> Image:
    image = Image([layer(("file", n, c)) for n, c in files], {"Cmd": ["x"]})
    registry.pusher.push(name, "v1", image)
    return image


def test_429_and_503_with_retry_after_are_waited_out(registry, faulty, cache_dir, clean_env):
    image = push(registry, "faults/limited", ("a", "a"), ("b", "b"))
    faulty.add(MANIFEST, "status", 429, 1, times=2)
    faulty.add(sha(image.layers[1]), "status", 503, 1, times=1)
    proc, took = sqshbuild(["-q", "--cache-dir", str(cache_dir),
                            f"{faulty.host}/faults/limited:v1"], clean_env)
    assert proc.returncode == 0, proc.stderr
    assert cat(Path(proc.stdout.strip()), "b") == "b"
    tries = faulty.hits(MANIFEST)
    assert [t[2] for t in tries[:3]] == ["status", "status", "forward"]
    # Retry-After: 1 honoured between the tries (not retried at once)
    assert tries[1][0] - tries[0][0] >= 0.9 and tries[2][0] - tries[1][0] >= 0.9
    blob = faulty.hits(sha(image.layers[1]))
    assert [t[2] for t in blob] == ["status", "forward"] and blob[1][0] - blob[0][0] >= 0.9


def test_a_retry_after_beyond_the_deadline_fails_at_once(registry, faulty, cache_dir,
                                                         clean_env):
    push(registry, "faults/hour", ("a", "a"))
    faulty.add(MANIFEST, "status", 429, 3600, times=None)
    proc, took = sqshbuild(["--cache-dir", str(cache_dir), f"{faulty.host}/faults/hour:v1"],
                           clean_env)
    err = one_error_line(proc)
    assert "rate limited by" in err and "3600 s" in err, err
    assert took < 10 and len(faulty.hits(MANIFEST)) == 1


def test_persistent_503_gives_up_after_the_retries(registry, faulty, cache_dir, clean_env):
    push(registry, "faults/down", ("a", "a"))
    faulty.add(MANIFEST, "status", 503, None, times=None)
    proc, took = sqshbuild(["--cache-dir", str(cache_dir), f"{faulty.host}/faults/down:v1"],
                           clean_env, SQSHBUILD_RETRIES="3")
    err = one_error_line(proc)
    assert "HTTP 503" in err
    assert len(faulty.hits(MANIFEST)) == 4  # the first try and 3 retries
    assert took < 20


def test_an_endless_error_body_is_not_drained(registry, faulty, cache_dir, clean_env):
    push(registry, "faults/babble", ("a", "a"))
    faulty.add(MANIFEST, "status-endless", 503, times=1)
    proc, took = sqshbuild(["-q", "--cache-dir", str(cache_dir),
                            f"{faulty.host}/faults/babble:v1"], clean_env, SQSHBUILD_TIMEOUT="5")
    assert proc.returncode == 0, proc.stderr
    assert took < 15


def test_a_server_that_never_answers_fails_within_the_deadline(cache_dir, clean_env):
    sock, host = silent_server()
    try:
        proc, took = sqshbuild(["--cache-dir", str(cache_dir), f"{host}/faults/silent:v1"],
                               clean_env, SQSHBUILD_TIMEOUT="2")
    finally:
        sock.close()
    err = one_error_line(proc)
    assert "registry unreachable" in err and "no answer within 2 s" in err, err
    assert took < 10


def test_a_stalled_manifest_fails_within_the_deadline(registry, faulty, cache_dir, clean_env):
    push(registry, "faults/stall", ("a", "a"))
    faulty.add(MANIFEST, "stall", times=None)
    proc, took = sqshbuild(["--cache-dir", str(cache_dir), f"{faulty.host}/faults/stall:v1"],
                           clean_env, SQSHBUILD_TIMEOUT="2")
    assert "no answer within 2 s" in one_error_line(proc)
    assert took < 10


def test_an_endless_manifest_is_capped(registry, faulty, cache_dir, clean_env):
    push(registry, "faults/endless", ("a", "a"))
    faulty.add(MANIFEST, "endless", times=None)
    proc, took = sqshbuild(["--cache-dir", str(cache_dir),
                            f"{faulty.host}/faults/endless:v1"], clean_env)
    err = one_error_line(proc)
    assert "larger than the 4194304 bytes allowed" in err, err
    assert took < 20


def test_an_endless_blob_stops_at_its_descriptor_size(registry, faulty, cache_dir, clean_env):
    image = push(registry, "faults/bigblob", ("a", "a"), ("b", "b"))
    top = sha(image.layers[1])
    faulty.add(top, "endless", times=None)
    proc, took = sqshbuild(["--cache-dir", str(cache_dir), f"{faulty.host}/faults/bigblob:v1"],
                           clean_env)
    err = one_error_line(proc)
    assert top in err and "longer than the" in err and "nothing was published" in err, err
    assert took < 20
    assert not list(cache_dir.glob("*.sqsh"))
    layers = cache_dir / "layers" / "sha256"
    assert not list(layers.glob("*.partial")) and not list(layers.glob("*.tmp"))


def test_a_trickling_blob_is_cut_and_resumed(registry, faulty, cache_dir, clean_env):
    """A byte every 0.2 s: never silent for a read timeout, and far below the low speed
    (1024 bytes/s over each 2 s): cut, then resumed from another answer."""
    image = push(registry, "faults/trickle", ("a", "a" * 4096), ("b", "b"))
    top = sha(image.layers[1])
    faulty.add(top, "trickle", 0.2, times=1)
    proc, took = sqshbuild(["--cache-dir", str(cache_dir), f"{faulty.host}/faults/trickle:v1"],
                           clean_env, SQSHBUILD_TIMEOUT="2")
    assert proc.returncode == 0, proc.stderr
    assert cat(Path(proc.stdout.strip().splitlines()[-1]), "b") == "b"
    assert [kind for _, _, kind in faulty.hits(top)] == ["trickle", "forward"]
    assert took < 20


def test_a_blob_that_always_trickles_fails_in_one_line(registry, faulty, cache_dir, clean_env):
    image = push(registry, "faults/trickles", ("a", "a"))
    top = sha(image.layers[0])
    faulty.add(top, "trickle", 0.2, times=None)
    proc, took = sqshbuild(["--cache-dir", str(cache_dir), f"{faulty.host}/faults/trickles:v1"],
                           clean_env, SQSHBUILD_TIMEOUT="2", SQSHBUILD_RETRIES="2")
    err = one_error_line(proc)
    assert top in err and "kept failing" in err and "SQSHBUILD_LOW_SPEED" in err, err
    assert len(faulty.hits(top)) == 2
    assert took < 20
    layers = cache_dir / "layers" / "sha256"
    assert not list(layers.glob("*.tmp")) and not list(cache_dir.glob("*.sqsh"))


def test_a_trickling_manifest_fails_within_the_deadline(registry, faulty, cache_dir, clean_env):
    push(registry, "faults/slowman", ("a", "a"))
    faulty.add(MANIFEST, "trickle", 0.2, times=None)
    proc, took = sqshbuild(["--cache-dir", str(cache_dir), f"{faulty.host}/faults/slowman:v1"],
                           clean_env, SQSHBUILD_TIMEOUT="2")
    err = one_error_line(proc)
    assert "did not arrive within 2 s" in err, err
    assert took < 15


def test_an_oversized_config_is_refused(registry, faulty, cache_dir, clean_env):
    image = push(registry, "faults/bigconfig", ("a", "a"))
    faulty.add(sha(image.config_blob()), "endless", times=None)
    proc, _ = sqshbuild(["--cache-dir", str(cache_dir), f"{faulty.host}/faults/bigconfig:v1"],
                        clean_env)
    err = one_error_line(proc)
    assert "larger than the" in err and sha(image.config_blob()) in err, err


def test_json_output_of_a_retried_build(registry, faulty, cache_dir, clean_env):
    push(registry, "faults/json", ("a", "a"))
    faulty.add(MANIFEST, "status", 502, None, times=1)
    proc, _ = sqshbuild(["build", "--json", "--cache-dir", str(cache_dir),
                         f"{faulty.host}/faults/json:v1"], clean_env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cached"] is False


def test_builds_waiting_for_a_stalled_pull_fail_with_it_not_in_turn(registry, faulty, cache_dir,
                                                                    clean_env):
    """Four nodes of a job want an image whose layer stalls: the one that pulls fails after
    the deadline, and the three that waited for it fail with its cause at once, instead of
    each taking the lock and stalling in turn (at N nodes, N deadlines)."""
    image = push(registry, "faults/stalls-many", ("a", "b"))
    top = sha(image.layers[0])
    faulty.add(top, "trickle", 0.2, times=None)
    env = {**run_env(clean_env), "SQSHBUILD_TIMEOUT": "2", "SQSHBUILD_RETRIES": "2"}
    start = time.monotonic()
    procs = [subprocess.Popen([*sqshbuild_cmd(), "build", "--job", "mini-1000-60",
                               "--cache-dir", str(cache_dir),
                               f"{faulty.host}/faults/stalls-many:v1"], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    took = time.monotonic() - start
    assert [p.returncode != 0 for p in procs] == [True] * 4, outs
    lines = [err.strip().splitlines()[-1] for _out, err in outs]
    assert all(ln.startswith("sqshbuild: error: ") and "kept failing" in ln for ln in lines), lines
    assert sum("that this one waited for failed" in ln for ln in lines) == 3, lines
    assert len(faulty.hits(top)) == 2  # one build's two tries (before: each build's two)
    assert took < 20, took
