"""One shared cache, several users (docs/security.md): an admin warms it as root, then
users with umask 077 hit in it and build what it lacks in their own caches; a killed
warm-up, a user's directory where the cache should be and a read-only filesystem. Other
users are real (setpriv)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import ROOT, Proxy, builder_account
from imagekit import Image, layer, sha
from sqfs import cat
from users import USERS, as_root, as_user, result

pytestmark = [pytest.mark.registry, pytest.mark.needs_root("acting as other users")]
@pytest.fixture
def images(registry):
    """Three small images (warm, user1, user2) with a shared base layer."""
    base = layer(("dir", "etc"), ("file", "etc/os-release", "ID=shared\n"))
    refs = {}
    for name in ("warm", "one", "two"):
        repo = f"test/users-{name}-{uuid.uuid4().hex[:8]}"
        image = Image([base, layer(("file", name, name * 1000))], {"Cmd": ["/bin/true"]})
        refs[name] = (f"{registry.host}/{repo}:v1", registry.pusher.push(repo, "v1", image))
    return refs




def modes(root: Path) -> dict[str, str]:
    out = {}
    for p in [root, *root.rglob("*")]:
        st = p.lstat()
        out[str(p.relative_to(root))] = f"{stat.S_IMODE(st.st_mode):04o}"
    return out


def own_cache(place: Path, uid: int) -> Path:
    return place / f"home{uid}" / ".cache" / "squall" / "images"


def test_admin_warms_then_two_users_with_umask_077(place, images, clean_env, monkeypatch,
                                                   capsys):
    cache = place / "images"  # made by sqshbuild itself, as root
    rc, out, err = as_root(monkeypatch, capsys, "build", "--json", "--cache-dir", str(cache),
                           images["warm"][0])
    assert rc == 0, err
    warm = json.loads(out.strip().splitlines()[-1])
    for uid, own in zip(USERS, ("one", "two"), strict=True):
        hit = result(as_user(uid, place, "build", "--json", "--cache-dir", str(cache),
                             images["warm"][0]))
        assert hit["cached"] is True and hit["path"] == warm["path"]
        built = result(as_user(uid, place, "build", "--json", "--cache-dir", str(cache),
                               images[own][0]))
        assert built["cached"] is False and Path(built["path"]).parent == own_cache(place, uid)
        out_file = place / f"home{uid}" / "copy.sqsh"
        proc = as_user(uid, place, "build", "--json", "--cache-dir", str(cache), "-o",
                       str(out_file), images["warm"][0])
        copied = result(proc)
        assert out_file.stat().st_uid == uid and copied["cached"] is True, proc.stderr
        assert cat(out_file, "warm") == "warm" * 1000 and "note:" not in proc.stderr
        assert modes(own_cache(place, uid))["."] == "0700"
    got = modes(cache)
    assert set(v for k, v in got.items() if (cache / k).is_dir()) == {"0755"}, got
    assert set(v for k, v in got.items() if (cache / k).is_file()) == {"0644"}, got
    assert {p.stat().st_uid for p in cache.rglob("*")} <= {0, builder_account()}
    assert not list(cache.glob(".building-*")) and not list(cache.glob("locks/*"))
    assert len(list(cache.glob("*.sqsh"))) == 1


def test_a_killed_warm_up_is_roots_to_clean_and_no_users_problem(place, registry, clean_env):
    """The admin's warm-up (umask 077) is killed in the middle of a layer: its partial blob
    stays root's in the shared cache; a user then builds the same image in the user's own
    cache, whole; root's next gc takes root's leftovers."""
    text = os.urandom(4 << 20).hex()
    big = layer(("file", "big", text))
    repo = f"test/users-killed-{uuid.uuid4().hex[:8]}"
    registry.pusher.push(repo, "v1", Image([layer(("file", "small", "s")), big],
                                           {"Cmd": ["/bin/true"]}))
    cache = place / "images"
    slow = Proxy(registry.base, rate=2 << 20)
    try:
        ref = f"{slow.host}/{repo}:v1"
        root = subprocess.Popen(
            [sys.executable, "-c", "import os; os.umask(0o077); "
             "from squall.sqshbuild.cli import main; main()",
             "build", "--quiet", "--cache-dir", str(cache), ref],
            env=dict(os.environ, PYTHONPATH=str(ROOT / "python")),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        partial = cache / "layers" / "sha256" / (sha(big).split(":")[1] + ".partial")
        deadline = time.monotonic() + 60
        while not (partial.exists() and partial.stat().st_size > (1 << 20)):
            assert time.monotonic() < deadline and root.poll() is None, "root never got there"
            time.sleep(0.05)
        root.kill()
        root.wait()
        assert partial.stat().st_uid == 0 and not partial.stat().st_mode & 0o022
        slow.rate = 0
        res = result(as_user(1000, place, "build", "--json", "--cache-dir", str(cache), ref))
        assert Path(res["path"]).parent == own_cache(place, 1000) and res["cached"] is False
        assert cat(Path(res["path"]), "big") == text
        assert slow.gets[sha(big)] == 2  # root's cut download, then the user's whole one
        assert not [p for p in cache.rglob("*") if p.lstat().st_uid == 1000]
        subprocess.run([sys.executable, "-c", "from squall.sqshbuild.cli import main; main()",
                        "gc", "--max-size", "1T", "--cache-dir", str(cache)], check=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "python")),
                       capture_output=True)
        layers = cache / "layers" / "sha256"
        assert not list(cache.glob(".building-*")) and not list(layers.glob("*.partial"))
        assert not list(layers.glob("*.tmp"))
    finally:
        slow.close()


def test_a_users_directory_where_the_cache_should_be(place, images, clean_env):
    """A user's own directory at the cache path (an older squall let the first user make
    it): root refuses it in one line and never writes there; the user gets that cache as
    the user's own; another user ignores it with one note and builds in their own."""
    cache = place / "images"
    cache.mkdir(mode=0o755)
    os.chown(cache, 1000, 1000)
    proc = subprocess.run([sys.executable, "-c", "from squall.sqshbuild.cli import main; "
                           "main()", "build", "--cache-dir", str(cache), images["one"][0]],
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "python")),
                          capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{cache} is not safe to use" in proc.stderr and "belongs to" in proc.stderr
    assert os.listdir(cache) == []
    res = result(as_user(1000, place, "build", "--json", "--cache-dir", str(cache),
                         images["one"][0]))
    assert Path(res["path"]).parent == cache
    proc = as_user(1001, place, "build", "--json", "--cache-dir", str(cache), images["one"][0])
    assert Path(result(proc)["path"]).parent == own_cache(place, 1001)
    assert proc.stderr.count(f"note: ignoring the image cache {cache}") == 1, proc.stderr


def test_a_users_gc_cleans_the_users_own_cache(place, images, clean_env, monkeypatch, capsys):
    cache = place / "images"
    rc, _out, err = as_root(monkeypatch, capsys, "build", "--json", "--cache-dir", str(cache),
                            images["warm"][0])
    assert rc == 0, err
    before = modes(cache)
    res = result(as_user(1001, place, "build", "--json", "--cache-dir", str(cache),
                         images["two"][0]))
    assert Path(res["path"]).parent == own_cache(place, 1001)
    proc = as_user(1001, place, "gc", "--max-size", "1K", "--cache-dir", str(cache))
    assert proc.returncode == 0, proc.stderr
    assert "removed image" in proc.stdout and not Path(res["path"]).exists()
    assert modes(cache) == before and len(list(cache.glob("*.sqsh"))) == 1


def test_read_only_filesystem_serves_hits(place, images, clean_env, monkeypatch, capsys):
    mnt = place / "ro"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", str(mnt)],
                   check=True)
    try:
        cache = mnt / "images"
        rc, out, err = as_root(monkeypatch, capsys, "build", "--json", "--cache-dir",
                               str(cache), images["warm"][0])
        assert rc == 0, err
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        monkeypatch.setenv("HOME", str(place / "roothome"))
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
        rc, out, err = as_root(monkeypatch, capsys, "build", "--json", "--cache-dir",
                               str(cache), images["warm"][0])
        assert rc == 0 and json.loads(out)["cached"] is True, err
        rc, out, err = as_root(monkeypatch, capsys, "build", "--json", "--cache-dir",
                               str(cache), images["one"][0])
        assert rc == 0, err
        assert json.loads(out)["path"].startswith(str(place / "roothome" / ".cache"))
        assert "read-only filesystem" in err and err.count("note:") == 1, err
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_a_users_build_reads_the_shared_caches_layers(place, registry, clean_env,
                                                      monkeypatch, capsys):
    """What the admin warmed is not pulled again: a user's build of another image with the
    same base layer (and config) takes them from the shared cache, reads only, and pulls
    its own top layer once into the user's cache."""
    base = layer(("dir", "etc"), ("file", "etc/os-release", "ID=shared\n"))
    top = layer(("file", "mine", "m" * 5000))
    tag = uuid.uuid4().hex[:8]
    registry.pusher.push(f"test/base-{tag}", "v1", Image([base], {"Cmd": ["/bin/true"]}))
    registry.pusher.push(f"test/top-{tag}", "v1", Image([base, top], {"Cmd": ["/bin/true"]}))
    cache = place / "images"
    rc, _out, err = as_root(monkeypatch, capsys, "build", "--json", "--cache-dir", str(cache),
                            f"{registry.host}/test/base-{tag}:v1")
    assert rc == 0, err
    before = modes(cache)
    proxy = Proxy(registry.base)
    try:
        res = result(as_user(1000, place, "build", "--json", "--cache-dir", str(cache),
                             f"{proxy.host}/test/top-{tag}:v1"))
        assert Path(res["path"]).parent == own_cache(place, 1000)
        assert cat(Path(res["path"]), "mine") == "m" * 5000
        assert cat(Path(res["path"]), "etc/os-release") == "ID=shared\n"
        assert proxy.gets[sha(base)] == 0 and proxy.gets[sha(top)] == 1, proxy.gets
        assert modes(cache) == before  # only read
        layers = own_cache(place, 1000) / "layers" / "sha256"
        assert not list(layers.glob(sha(base).split(":")[1] + "*"))
    finally:
        proxy.close()


def test_an_explicit_cache_dir_in_a_users_own_directory_is_made_as_theirs(place, images,
                                                                          clean_env):
    """A --cache-dir that does not exist yet, in a directory of the user's alone, becomes
    the user's own cache (0700); in a directory others may write (a 1777 one) it is never
    made: the user's build goes to the user's own cache, and the path stays free."""
    mine = place / "home1000" / "work" / "cache"
    mine.parent.mkdir(mode=0o755)
    os.chown(mine.parent, 1000, 1000)
    res = result(as_user(1000, place, "build", "--json", "--cache-dir", str(mine),
                         images["one"][0]))
    assert Path(res["path"]).parent == mine
    st = mine.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (1000, 0o700)
    shared = place / "open"
    shared.mkdir()
    shared.chmod(0o1777)
    proc = as_user(1000, place, "build", "--json", "--cache-dir", str(shared / "cache"),
                   images["two"][0])
    assert Path(result(proc)["path"]).parent == own_cache(place, 1000), proc.stderr
    assert not (shared / "cache").exists()
