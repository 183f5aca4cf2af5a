"""Mirrors from containers-registries.conf(5) against real docker-registry processes: a
pull-through cache (``proxy: remoteurl:``) in front of an origin, a lying mirror that can
never change a pinned image, tampered blobs, blocked registries and short names."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import Proxy, one_error_line, run_env, sqshbuild_cmd, start_registry
from faults import FaultProxy
from imagekit import DOCKER_MANIFEST, Image, layer, sha
from sqfs import cat, listing

pytestmark = pytest.mark.registry


def sqshbuild(args: list[str], home: Path, conf: Path) -> subprocess.CompletedProcess[str]:
    env = {**run_env(home), "CONTAINERS_REGISTRIES_CONF": str(conf)}
    return subprocess.run([*sqshbuild_cmd(), *args], env=env, capture_output=True, text=True,
                          timeout=120)


def built(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def mirror_conf(path: Path, prefix: str, *mirrors: str, extra: str = "") -> Path:
    text = extra + f'[[registry]]\nprefix = "{prefix}"\nlocation = "{prefix}"\n'
    for m in mirrors:
        text += f'[[registry.mirror]]\nlocation = "{m}"\n'
    path.write_text(text)
    return path


def image(*files: tuple[str, str]) -> Image:
    return Image([layer(("file", n, c)) for n, c in files], {"Cmd": ["x"]})


def test_pull_through_cache_in_front_of_an_origin(tmp_path, cache_dir, clean_env):
    origin = start_registry(tmp_path / "origin")
    cache_reg = None
    try:
        img = image(("etc/os", "origin-os"), ("app", "v1"))
        digest = origin.pusher.push("team/app", "v1", img)
        cache_reg = start_registry(tmp_path / "cache", proxy=origin.base)
        conf = mirror_conf(tmp_path / "registries.conf", origin.host, cache_reg.host)
        ref = f"{origin.host}/team/app:v1"
        out = built(sqshbuild(["build", "--json", "--cache-dir", str(cache_dir), ref],
                              clean_env, conf))
        assert out["digest"] == digest and cat(Path(out["path"]), "app") == "v1"
        # everything came through the cache
        assert set(cache_reg.blob_gets()) >= set(img.blobs())
        assert "team/app/manifests/v1" in cache_reg.log.read_text()
        # air-gapped: the origin is gone, the cache still serves the image
        origin.stop()
        out = built(sqshbuild(["build", "--json", "--cache-dir", str(cache_dir / "again"),
                               ref], clean_env, conf))
        assert out["digest"] == digest and cat(Path(out["path"]), "etc/os") == "origin-os"
    finally:
        origin.stop()
        if cache_reg is not None:
            cache_reg.stop()


def test_a_mirror_cannot_change_a_pinned_image(registry, tmp_path, cache_dir, clean_env):
    good = image(("who", "origin"))
    evil = image(("who", "mirror"))
    digest = registry.pusher.push("pin/app", "v1", good)
    registry.pusher.push("pin/evil", "v1", evil)
    lying = FaultProxy(registry.base)
    try:
        lying.add(r"/pin/app/manifests/", "replace", evil.manifest(), DOCKER_MANIFEST,
                  times=None)
        conf = mirror_conf(tmp_path / "registries.conf", f"{registry.host}/pin",
                           f"{lying.host}/pin")
        out = built(sqshbuild(["build", "--json", "--cache-dir", str(cache_dir),
                               f"{registry.host}/pin/app@{digest}"], clean_env, conf))
        assert out["digest"] == digest and cat(Path(out["path"]), "who") == "origin"
        assert [h[2] for h in lying.hits("/pin/app/manifests/")] == ["replace"]
    finally:
        lying.close()


def test_tampered_blobs_from_a_mirror_are_fetched_from_the_origin(registry, tmp_path,
                                                                  cache_dir, clean_env):
    img = image(("a", "real a"), ("b", "real b"))
    registry.pusher.push("tamper/app", "v1", img)
    top, config = sha(img.layers[1]), sha(img.config_blob())
    origin = Proxy(registry.base)
    mirror = FaultProxy(registry.base)
    try:
        mirror.add(top, "replace", layer(("file", "b", "evil")), "application/octet-stream",
                   times=None)
        mirror.add(config, "replace", b'{"config":{"Cmd":["evil"]}}',
                   "application/octet-stream", times=None)
        conf = mirror_conf(tmp_path / "registries.conf", origin.host, mirror.host)
        out = built(sqshbuild(["build", "--json", "--cache-dir", str(cache_dir),
                               f"{origin.host}/tamper/app:v1"], clean_env, conf))
        assert cat(Path(out["path"]), "b") == "real b"
        assert "evil" not in cat(Path(out["path"]), "etc/rc")
        assert origin.gets[top] == 1 and origin.gets[config] == 1
        assert origin.gets[sha(img.layers[0])] == 0  # the good blob came from the mirror
    finally:
        origin.close()
        mirror.close()


def test_a_tampered_layer_that_comes_slowly_is_not_kept(registry, tmp_path, cache_dir,
                                                         clean_env):
    """The mirror's valid but wrong tar (its second half comes late) fails its digest and
    comes from the origin: the image holds verified layers only."""
    img = image(("a", "real a"), ("b", "real b" * 50_000))
    registry.pusher.push("tamper2/app", "v1", img)
    top = sha(img.layers[1])
    origin = Proxy(registry.base)
    mirror = FaultProxy(registry.base)
    try:
        evil = layer(("file", "b", "evil" * 75_000), ("file", "c", "evil"), compress=False)
        mirror.add(top, "replace", evil, "application/octet-stream", 1.0, times=None)
        conf = mirror_conf(tmp_path / "registries.conf", origin.host, mirror.host)
        proc = sqshbuild(["build", "--json", "--cache-dir", str(cache_dir),
                          f"{origin.host}/tamper2/app:v1"], clean_env, conf)
        out = built(proc)
        assert cat(Path(out["path"]), "b") == "real b" * 50_000
        assert "c" not in listing(Path(out["path"]))  # nothing of the mirror's layer is left
        assert origin.gets[top] == 1
    finally:
        origin.close()
        mirror.close()


def test_blocked_registry_is_one_line(registry, tmp_path, cache_dir, clean_env):
    conf = tmp_path / "registries.conf"
    conf.write_text(f'[[registry]]\nprefix = "{registry.host}/secret"\n'
                    f'location = "{registry.host}/secret"\nblocked = true\n')
    err = one_error_line(sqshbuild(["--cache-dir", str(cache_dir),
                                    f"{registry.host}/secret/app:v1"], clean_env, conf))
    assert "is blocked" in err and str(conf) in err


def test_short_names_use_the_search_registries_and_their_mirrors(registry, tmp_path,
                                                                 cache_dir, clean_env):
    other = start_registry(tmp_path / "first")
    try:
        hub_image = image(("etc/os-release", "ID=ubuntu\n"))
        digest = registry.pusher.push("library/ubuntu", "24.04", hub_image)
        registry.pusher.push("team/tool", "1", image(("tool", "from the second")))
        # the first search registry lacks team/tool: the second has it
        conf = mirror_conf(tmp_path / "registries.conf", "docker.io", registry.host,
                           extra=f'unqualified-search-registries = ["{other.host}", '
                                 f'"{registry.host}"]\n')
        out = built(sqshbuild(["build", "--json", "--cache-dir", str(cache_dir),
                               "team/tool:1"], clean_env, conf))
        assert cat(Path(out["path"]), "tool") == "from the second"
        # docker.io's mirror serves ubuntu:24.04 (docker.io/library/ubuntu), no Internet
        conf = mirror_conf(tmp_path / "registries.conf", "docker.io", registry.host,
                           extra='unqualified-search-registries = ["docker.io"]\n')
        out = built(sqshbuild(["build", "--json", "--cache-dir", str(cache_dir),
                               "ubuntu:24.04"], clean_env, conf))
        assert out["digest"] == digest
        assert cat(Path(out["path"]), "etc/os-release") == "ID=ubuntu\n"
    finally:
        other.stop()
