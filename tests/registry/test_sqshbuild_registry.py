"""sqshbuild against a real docker-registry on loopback, with images the tests build and push."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import (
    BASIC_PASSWORD,
    BASIC_USER,
    TOKEN_PASSWORD,
    TOKEN_USER,
    Proxy,
    free_port,
    run_env,
    sqshbuild_cmd,
)
from imagekit import Image, layer, sha
from sqfs import cat, listing

pytestmark = pytest.mark.registry

CONFIG = {
    "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=hello world"],
    "Entrypoint": ["/usr/bin/tool", "--flag"],
    "Cmd": ["it's", "x y"],
    "WorkingDir": "/work/dir",
    "Volumes": {"/data/vol": {}},
    "Labels": {"maintainer": "squall tests"},
}


def layered_image(oci: bool = False) -> Image:
    base = layer(
        ("dir", "etc"), ("file", "etc/hostname", "base\n"), ("file", "etc/rc.local", "exit 3\n"),
        ("dir", "usr"), ("dir", "usr/bin"),
        ("file", "usr/bin/tool", "#!/bin/sh\necho v1\n", 0o755),
        ("file", "usr/bin/suid", "s", 0o4755),
        ("file", "usr/bin/private", "p", 0o000),
        ("symlink", "usr/bin/link", "tool"),
        ("hardlink", "usr/bin/hard", "usr/bin/tool"),
        ("dir", "opt"), ("dir", "opt/gone"), ("file", "opt/gone/a", "a"),
        ("file", "opt/gone/b", "b"), ("dir", "opt/keep"), ("file", "opt/keep/old", "old"),
        ("dir", "data"), ("dir", "data/lower"), ("file", "data/lower/x", "x"),
        ("file", "data/lower/y", "y"), ("dir", "ro", 0o555), ("file", "ro/f", "f", 0o444),
        ("dir", "dev"), ("chr", "dev/null"), ("file", "dev/shm-file", "no"),
        ("chr", "etc/odd-device"), ("fifo", "run-pipe"),
        ("dir", "usr/lib"), ("file", "usr/lib/libnccl.so.2.21.5", "n"),
        ("dir", "usr/lib/python3.11"), ("file", "usr/lib/python3.11/os.py", "#"),
    )
    middle = layer(
        ("file", "opt/.wh.gone", ""), ("file", "etc/.wh.hostname", ""),
        ("dir", "data/lower"), ("file", "data/lower/.wh..wh..opq", ""),
        ("file", "data/lower/new", "new"), ("file", "opt/keep/new", "new"),
        ("file", "usr/bin/tool", "#!/bin/sh\necho v2 \"$@\"\n", 0o755),
    )
    top = layer(
        ("dir", "opt/gone"), ("file", "opt/gone/again", "again"),
        ("dir", "usr/local/cuda-12.4"),
        ("file", "usr/local/cuda-12.4/version.json", json.dumps({"cuda": {"version": "12.4.1"}})),
    )
    return Image([base, middle, top], dict(CONFIG), oci=oci)


def run(args: list[str], home: Path, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([*sqshbuild_cmd(), *args], env=run_env(home), capture_output=True,
                          text=True, timeout=300, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"sqshbuild {args} failed: {proc.stderr}")
    return proc


def error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("sqshbuild: error: "), proc.stderr
    return lines[-1]


def sqsh_files(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.sqsh"))


def test_layers_whiteouts_opaque_and_enroot_files(registry, cache_dir, clean_env):
    digest = registry.pusher.push("test/layered", "v1", layered_image())
    proc = run(["build", "--json", "--cache-dir", str(cache_dir),
                f"{registry.host}/test/layered:v1"], clean_env)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    image = Path(out["path"])
    assert out["digest"] == digest and out["cached"] is False
    assert image == cache_dir.resolve() / f"sha256-{digest.split(':')[1]}.sqsh"
    files = listing(image)
    expected = {
        "", "etc", "etc/rc", "etc/rc.local", "etc/environment", "etc/fstab",
        "usr", "usr/bin", "usr/bin/tool", "usr/bin/suid", "usr/bin/private", "usr/bin/link",
        "usr/bin/hard", "opt", "opt/gone", "opt/gone/again", "opt/keep", "opt/keep/old",
        "opt/keep/new", "data", "data/lower", "data/lower/new", "ro", "ro/f", "dev",
        "run-pipe", "usr/lib", "usr/lib/libnccl.so.2.21.5", "usr/lib/python3.11",
        "usr/lib/python3.11/os.py", "usr/local", "usr/local/cuda-12.4",
        "usr/local/cuda-12.4/version.json", "work", "work/dir",
    }
    assert set(files) == expected
    assert {owner for _, owner, _ in files.values()} == {"0/0"}
    assert files["usr/bin/suid"][0] == "-rwsr-xr-x"
    assert files["usr/bin/private"][0] == "-r--------"  # u+r, as Enroot's chmod u+rX
    assert files["ro"][0] == "drwxr-xr-x"  # u+w on directories
    assert files["usr/bin/link"][2] == "tool"
    assert files["run-pipe"][0].startswith("p")
    # tool was replaced by the middle layer; the base layer's hard link keeps its inode
    assert cat(image, "usr/bin/tool") == '#!/bin/sh\necho v2 "$@"\n'
    assert cat(image, "usr/bin/hard") == "#!/bin/sh\necho v1\n"
    assert cat(image, "etc/environment") == "PATH=/usr/local/bin:/usr/bin:/bin\n" \
        "GREETING=hello world\n"
    assert cat(image, "etc/fstab") == \
        "${ENROOT_ROOTFS}/data/vol /data/vol none x-create=dir,bind,rw,nosuid,nodev\n"
    rc = cat(image, "etc/rc")
    assert rc.startswith("# maintainer squall tests\n")
    assert "cd /work/dir && unset OLDPWD || exit 1" in rc
    assert "exec /usr/bin/tool --flag \"$@\"" in rc
    assert "exec /usr/bin/tool --flag 'it'\"'\"'s' 'x y'" in rc
    assert "exit 3" not in cat(image, "etc/rc.local")

    side = json.loads(image.with_suffix(".json").read_text())
    assert side["manifest_digest"] == digest
    assert side["reference"] == f"{registry.host}/test/layered:v1"
    assert len(side["layers"]) == 3 and side["size"] == image.stat().st_size
    assert side["versions"] == {"cuda": "12.4.1", "nccl": "2.21.5", "python": "3.11"}
    insp = run(["inspect", str(image)], clean_env)
    assert "cuda:" in insp.stdout and "12.4.1" in insp.stdout and digest in insp.stdout

    again = run(["--quiet", "--cache-dir", str(cache_dir), f"{registry.host}/test/layered:v1"],
                clean_env)
    assert again.stdout.strip().splitlines()[-1] == str(image)
    by_digest = run(["build", "--json", "--cache-dir", str(cache_dir),
                     f"{registry.host}/test/layered@{digest}"], clean_env)
    hit = json.loads(by_digest.stdout)
    assert hit["cached"] is True and hit["path"] == str(image)
    assert len(sqsh_files(cache_dir)) == 1


def test_pipelines_produce_the_same_tree(registry, cache_dir, clean_env, tmp_path):
    registry.pusher.push("test/layered-oci", "v1", layered_image(oci=True))
    ref = f"{registry.host}/test/layered-oci:v1"
    trees = {}
    for name, extra in {"stream": ["--pipeline", "stream"], "unpack": ["--pipeline", "unpack"],
                        "compat": ["--enroot-compat"]}.items():
        out = tmp_path / f"{name}.sqsh"
        run(["build", "-q", "--cache-dir", str(cache_dir), "-o", str(out), *extra, ref],
            clean_env)
        trees[name] = {p: (m, o, t) for p, (m, o, t) in listing(out).items()}
        assert cat(out, "usr/bin/hard") == "#!/bin/sh\necho v1\n"
    assert trees["stream"] == trees["unpack"] == trees["compat"]
    compat = subprocess.run(["unsquashfs", "-s", str(tmp_path / "compat.sqsh")],
                            capture_output=True, text=True, check=True).stdout
    assert "Compression lzo" in compat and "Data is uncompressed" in compat


def test_index_with_two_architectures(registry, cache_dir, clean_env):
    amd = Image([layer(("file", "arch", "amd64\n"))], {"Cmd": ["/bin/true"]}, "amd64", oci=True)
    arm = Image([layer(("file", "arch", "arm64\n"))], {"Cmd": ["/bin/true"]}, "arm64", oci=True)
    registry.pusher.push_index("test/multi", "v1", [amd, arm])
    ref = f"{registry.host}/test/multi:v1"
    for arch in ("amd64", "arm64"):
        out = json.loads(run(["build", "--json", "--arch", arch, "--cache-dir", str(cache_dir),
                              ref], clean_env).stdout)
        assert cat(Path(out["path"]), "arch") == f"{arch}\n"
        assert out["digest"] == sha((amd if arch == "amd64" else arm).manifest())
    err = error_line(run(["build", "--arch", "s390x", "--cache-dir", str(cache_dir), ref],
                         clean_env, check=False))
    assert "no image for the platform linux/s390x" in err and "linux/arm64" in err


def test_token_auth(token_registry, cache_dir, clean_env):
    token_registry.pusher.push("private/app", "v1",
                               Image([layer(("file", "secret", "s"))], {"Cmd": ["x"]}))
    ref = f"{token_registry.host}/private/app:v1"
    err = error_line(run(["build", "--cache-dir", str(cache_dir), ref], clean_env, check=False))
    assert "auth refused" in err
    docker_dir = clean_env / ".docker"
    docker_dir.mkdir()
    auth = base64.b64encode(f"{TOKEN_USER}:{TOKEN_PASSWORD}".encode()).decode()
    (docker_dir / "config.json").write_text(json.dumps({"auths": {token_registry.host:
                                                                  {"auth": auth}}}))
    out = run(["build", "-q", "--cache-dir", str(cache_dir), ref], clean_env)
    assert cat(Path(out.stdout.strip()), "secret") == "s"
    server = token_registry.extra["token_server"]
    assert any(r["user"] == TOKEN_USER and r["scope"] == "repository:private/app:pull"
               and r["service"] == "squall-test" for r in server.requests)
    (docker_dir / "config.json").write_text(json.dumps({"auths": {token_registry.host: {
        "auth": base64.b64encode(f"{TOKEN_USER}:wrong".encode()).decode()}}}))
    err = error_line(run(["build", "--cache-dir", str(cache_dir / "other"), ref], clean_env,
                         check=False))
    assert "auth refused" in err and "config.json" in err


def test_basic_auth_with_enroot_credentials(basic_registry, cache_dir, clean_env):
    basic_registry.pusher.push("team/tool", "1.0", Image([layer(("file", "t", "t"))],
                                                         {"Cmd": ["x"]}))
    ref = f"{basic_registry.host}/team/tool:1.0"
    err = error_line(run(["build", "--cache-dir", str(cache_dir), ref], clean_env, check=False))
    assert "auth refused" in err
    creds = clean_env / ".config" / "enroot" / ".credentials"
    creds.parent.mkdir(parents=True)
    creds.write_text(f"machine {basic_registry.host} login {BASIC_USER} password $TOOL_PW\n")
    env_home = clean_env
    proc = subprocess.run([*sqshbuild_cmd(), "-q", "--cache-dir", str(cache_dir), ref],
                          env={**run_env(env_home), "TOOL_PW": BASIC_PASSWORD},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert cat(Path(proc.stdout.strip()), "t") == "t"
    # Enroot's USER@REGISTRY#IMAGE form picks the user's entry
    proc = subprocess.run([*sqshbuild_cmd(), "-q", "--cache-dir", str(cache_dir / "b"),
                           f"docker://{BASIC_USER}@{basic_registry.host}#team/tool:1.0"],
                          env={**run_env(env_home), "TOOL_PW": BASIC_PASSWORD},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def _blob_data_path(reg, digest: str) -> Path:
    hexd = digest.split(":")[1]
    return reg.storage / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"


def test_tampered_blob_is_refused(registry, cache_dir, clean_env):
    good = layer(("file", "payload", "the real content"))
    registry.pusher.push("test/tampered", "v1", Image([good], {"Cmd": ["x"]}))
    data = _blob_data_path(registry, sha(good))
    data.write_bytes(layer(("file", "payload", "evil content!!!!")))
    err = error_line(run(["build", "--cache-dir", str(cache_dir),
                          f"{registry.host}/test/tampered:v1"], clean_env, check=False))
    assert "digest mismatch" in err and sha(good) in err
    assert sqsh_files(cache_dir) == []
    layer_dir = cache_dir / "layers" / "sha256"
    assert not list(layer_dir.glob("*.tar")) and not list(layer_dir.glob("*.partial"))
    assert not list(layer_dir.glob("*.tmp"))


@pytest.mark.parametrize("entries,named", [
    ((("file", "../escape", "x"),), "../escape"),
    ((("file", "/abs/file", "x"),), "/abs/file"),
    ((("symlink", "out", "/etc"), ("file", "out/passwd", "pwned")), "out/passwd"),
    ((("symlink", "up", "../../.."), ("dir", "up/x")), "up/x"),
])
def test_path_traversal_is_refused(registry, cache_dir, clean_env, entries, named):
    bad = layer(*entries)
    tag = f"t{abs(hash(named)) % 10000}"
    registry.pusher.push("test/traversal", tag, Image([layer(("file", "ok", "ok")), bad],
                                                      {"Cmd": ["x"]}))
    for pipeline in ("stream", "unpack"):
        err = error_line(run(["build", "--pipeline", pipeline, "--cache-dir", str(cache_dir),
                              f"{registry.host}/test/traversal:{tag}"], clean_env, check=False))
        assert sha(bad) in err and named in err, err
    assert sqsh_files(cache_dir) == []
    assert not list(cache_dir.glob(".building-*"))


def test_not_found_and_unreachable(registry, cache_dir, clean_env):
    err = error_line(run(["build", "--cache-dir", str(cache_dir),
                          f"{registry.host}/test/nothing:here"], clean_env, check=False))
    assert "image or tag not found" in err
    err = error_line(run(["build", "--cache-dir", str(cache_dir),
                          f"127.0.0.1:{free_port()}/test/x:1"], clean_env, check=False))
    assert "registry unreachable" in err


def test_plain_http_needs_loopback_or_flag(clean_env, cache_dir):
    # A non-loopback name without --insecure-registry is spoken to over HTTPS only.
    from squall.sqshbuild.registry import RegistryClient
    assert RegistryClient("login:5000", "x").base.startswith("https://")
    assert RegistryClient("login:5000", "x", insecure={"login:5000"}).base.startswith("http://")
    assert RegistryClient("127.0.0.1:5000", "x").base.startswith("http://")


def test_two_builds_at_once_download_once(registry, proxy, cache_dir, clean_env):
    big = layer(("file", "big", os.urandom(4 << 20)))
    image = Image([layer(("file", "a", "a")), big], {"Cmd": ["x"]})
    registry.pusher.push("test/concurrent", "v1", image)
    proxy.rate = 8 << 20  # slow enough that the two builds overlap
    ref = f"{proxy.host}/test/concurrent:v1"
    procs = [subprocess.Popen([*sqshbuild_cmd(), "build", "--quiet", "--cache-dir",
                               str(cache_dir), ref], env=run_env(clean_env),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    paths = {o[0].strip().splitlines()[-1] for o in outs}
    assert len(paths) == 1
    assert len(sqsh_files(cache_dir)) == 1
    for digest in image.blobs():
        assert proxy.gets[digest] == 1, (digest, proxy.gets)


def test_sigkill_mid_build_then_resume(registry, cache_dir, clean_env):
    big = layer(("file", "big", os.urandom(12 << 20)), compress=False)
    small = layer(("file", "small", "s"))
    image = Image([small, big], {"Cmd": ["x"]})
    registry.pusher.push("test/killed", "v1", image)
    slow = Proxy(registry.base, rate=3 << 20)
    try:
        ref = f"{slow.host}/test/killed:v1"
        proc = subprocess.Popen([*sqshbuild_cmd(), "build", "--quiet", "--cache-dir",
                                 str(cache_dir), ref], env=run_env(clean_env),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        partial = cache_dir / "layers" / "sha256" / (sha(big).split(":")[1] + ".partial")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if partial.exists() and partial.stat().st_size > (2 << 20):
                break
            time.sleep(0.05)
        else:
            proc.kill()
            pytest.fail("the build never reached the middle of the big layer")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert sqsh_files(cache_dir) == []
        assert list((cache_dir / "locks").glob("*.lock"))  # the dead build's lock is left
        got_before = partial.stat().st_size
        slow.rate = 0
        out = run(["build", "--json", "--cache-dir", str(cache_dir), ref], clean_env)
        result = json.loads(out.stdout)
        assert result["cached"] is False
        assert cat(Path(result["path"]), "small") == "s"
        assert slow.gets[sha(small)] == 1  # reused from the layer cache
        assert slow.gets[sha(image.config_blob())] == 1
        assert (sha(big), f"bytes={got_before}-") in slow.ranges  # resumed, not restarted
        assert len(sqsh_files(cache_dir)) == 1
        assert not list(cache_dir.glob(".building-*"))
    finally:
        slow.close()


def test_layer_without_durable_marker_is_fetched_again(registry, proxy, cache_dir, clean_env):
    top = layer(("file", "top", "top content"))
    image = Image([layer(("file", "base", "base content")), top], {"Cmd": ["x"]})
    registry.pusher.push("test/unsynced", "v1", image)
    ref = f"{proxy.host}/test/unsynced:v1"
    first = Path(run(["build", "-q", "--cache-dir", str(cache_dir), ref], clean_env)
                 .stdout.strip())
    layer_dir = cache_dir / "layers" / "sha256"
    hexd = sha(top).split(":")[1]
    assert (layer_dir / f"{hexd}.ok").exists()
    # What a crash between rename and fsync could leave: a torn tar without its marker.
    (layer_dir / f"{hexd}.ok").unlink()
    (layer_dir / f"{hexd}.tar").write_bytes(b"\0" * 1024)
    first.unlink()
    second = Path(run(["build", "-q", "--cache-dir", str(cache_dir), ref], clean_env)
                  .stdout.strip())
    assert cat(second, "top") == "top content"
    assert proxy.gets[sha(top)] == 2 and proxy.gets[image.layers[0] and sha(image.layers[0])] == 1


def test_broken_download_is_retried_and_resumed(registry, proxy, cache_dir, clean_env):
    big = layer(("file", "big", os.urandom(3 << 20)), compress=False)
    image = Image([big], {"Cmd": ["x"]})
    registry.pusher.push("test/flaky", "v1", image)
    proxy.cut[sha(big)] = 1 << 20  # the first GET dies after 1 MiB
    out = run(["build", "-q", "--cache-dir", str(cache_dir), f"{proxy.host}/test/flaky:v1"],
              clean_env)
    assert Path(out.stdout.strip()).is_file()
    assert proxy.gets[sha(big)] == 2
    assert proxy.ranges and proxy.ranges[-1][0] == sha(big)
    assert proxy.ranges[-1][1].startswith("bytes=") and proxy.ranges[-1][1] != "bytes=0-"


@pytest.mark.parametrize("compress", [False, True], ids=["tar", "gzip"])
def test_a_cut_download_goes_on_into_the_same_layer_tar(registry, proxy, cache_dir,
                                                        clean_env, compress):
    """A connection cut mid-layer and resumed with Range goes on writing the same layer tar
    (and feeding the same inflater) instead of starting the layer again."""
    files = [("file", f"f{i}", os.urandom(384 << 10).hex()) for i in range(12)]
    big = layer(*files, compress=compress)
    image = Image([big], {"Cmd": ["x"]})
    registry.pusher.push("test/cut", "v1", image)
    cut = len(big) // 2  # past the first MiB the download reads at once
    proxy.cut[sha(big)] = cut
    proxy.cut_pause = 1.0  # the inflater has written the first members before the cut
    proc = run(["build", "--cache-dir", str(cache_dir), f"{proxy.host}/test/cut:v1"], clean_env)
    out = Path(proc.stdout.strip())
    assert cat(out, "f0") == files[0][2] and cat(out, "f11") == files[11][2]
    assert proxy.gets[sha(big)] == 2
    [(digest, since)] = proxy.ranges  # resumed from what had arrived, not from the start
    assert digest == sha(big) and 0 < int(since.removeprefix("bytes=").rstrip("-")) <= cut
    assert not list((cache_dir / "layers" / "sha256").glob("*.tmp"))
    assert not list((cache_dir / "layers" / "sha256").glob("*.partial"))


def test_a_cut_download_the_registry_cannot_resume_starts_again(registry, proxy, cache_dir,
                                                                clean_env):
    """A registry that answers a Range request with the whole blob (200): the layer is
    downloaded from its first byte again, and the image holds the whole layer."""
    files = [("file", f"f{i}", os.urandom(384 << 10).hex()) for i in range(12)]
    big = layer(*files)
    registry.pusher.push("test/norange", "v1", Image([big], {"Cmd": ["x"]}))
    proxy.cut[sha(big)] = len(big) // 2
    proxy.cut_pause = 1.0
    proxy.no_range = True
    proc = run(["build", "--cache-dir", str(cache_dir), f"{proxy.host}/test/norange:v1"],
               clean_env)
    out = Path(proc.stdout.strip())
    assert cat(out, "f0") == files[0][2] and cat(out, "f11") == files[11][2]
    assert proxy.gets[sha(big)] == 3  # cut, refused to resume, whole
    assert not list((cache_dir / "layers" / "sha256").glob("*.tmp"))
    assert not list((cache_dir / "layers" / "sha256").glob("*.partial"))
