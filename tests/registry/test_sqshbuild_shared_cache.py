"""One cache, several users (docs/sqshbuild.md, "Permissions"): an admin warms it as root,
then users with umask 077 build and hit in it; an older version's root-owned directories,
a cache users may not write and a read-only filesystem still serve hits, and a build then
goes to the per-user cache with one line of notice. Other users are real (setpriv)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import ROOT, Proxy
from imagekit import Image, layer, sha
from sqfs import cat
from users import USERS, as_root, as_user, known, result

pytestmark = [pytest.mark.registry,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                 reason="acting as other users needs root and setpriv")]
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
        assert built["cached"] is False and Path(built["path"]).parent == cache
        # root's image serves every user; another user's is never used (docs/security.md):
        # 1001 builds "one" again, from root's base layer and its own download of 1000's
        other = "one" if own == "two" else "warm"
        out_file = place / f"home{uid}" / "copy.sqsh"
        proc = as_user(uid, place, "build", "--json", "--cache-dir", str(cache), "-o",
                       str(out_file), images[other][0])
        copied = result(proc)
        assert out_file.stat().st_uid == uid
        assert cat(out_file, other) == other * 1000
        if other == "warm":
            assert copied["cached"] is True and "note:" not in proc.stderr, proc.stderr
        else:
            assert copied["cached"] is False, proc.stderr
            owner = pwd.getpwuid(1000).pw_name if known(1000) else "1000"
            assert f"note: ignoring {cache}/sha256-" in proc.stderr, proc.stderr
            assert f"belongs to {owner}, who is not root" in proc.stderr, proc.stderr
    got = modes(cache)
    assert got["."] == "1777"
    for d in ("index", "locks", "layers", "layers/sha256"):
        assert got[d] == "1777", (d, got)
    files = {k: v for k, v in got.items() if (cache / k).is_file()}
    assert {v for k, v in files.items() if not k.endswith(".used")} == {"0644"}, files
    assert {v for k, v in files.items() if k.endswith(".used")} == {"0666"}, files
    assert not list(cache.glob(".building-*")) and not list(cache.glob("locks/*"))
    assert len(list(cache.glob("*.sqsh"))) == 3
    # the first user's per-user cache was never needed
    assert not (place / "home1000" / ".cache").exists()


def test_a_user_takes_over_a_layer_roots_killed_build_left(place, registry, clean_env):
    """The admin's warm-up (umask 077) is killed in the middle of a layer: its partial blob
    and layer file are root's, which no user may write or remove (a sticky directory); a
    user then builds the same image in the same cache: it downloads that layer for its
    build only, publishes the image, leaves nothing of its own; root's gc takes root's
    leftovers."""
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
        assert Path(res["path"]).parent == cache and res["cached"] is False
        assert cat(Path(res["path"]), "big") == text
        assert slow.gets[sha(big)] == 2  # root's cut download, then the user's whole one
        layers = cache / "layers" / "sha256"
        left = [*layers.glob("*.partial"), *layers.glob("*.tmp"), *cache.glob(".building-*")]
        # root's dead files are in sticky directories, where only root may remove them:
        # the user leaves them (and none of its own), root's gc takes them
        assert left and all(p.stat().st_uid == 0 for p in left), left
        assert not [p for p in cache.rglob("*") if p.stat().st_uid == 1000
                    and p.is_file() and p.suffix not in (".sqsh", ".json", ".used", ".tar",
                                                         ".ok", ".config")]
        subprocess.run([sys.executable, "-c", "from squall.sqshbuild.cli import main; main()",
                        "gc", "--max-size", "1T", "--cache-dir", str(cache)], check=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "python")),
                       capture_output=True)
        assert not list(cache.glob(".building-*")) and not list(layers.glob("*.partial"))
        assert not list(layers.glob("*.tmp"))
    finally:
        slow.close()


def test_directories_an_older_version_made_as_root(place, images, clean_env):
    """make demo's case: the root belongs to the user (0755), index/ and locks/ were made
    by root 0755 by an older sqshbuild: the user gets a notice naming the directory and
    the fix, builds in the per-user cache. Root's gc does not work in a directory of
    another user's (one line naming it); the admin's fix from the notice does."""
    cache = place / "images"
    cache.mkdir()
    os.chown(cache, 1000, 1000)
    for sub in ("index", "locks"):
        (cache / sub).mkdir(mode=0o755)
    proc = as_user(1000, place, "build", "--json", "--cache-dir", str(cache),
                   images["one"][0])
    res = result(proc)
    user_cache = place / "home1000" / ".cache" / "squall" / "images"
    assert Path(res["path"]).parent == user_cache
    note = [line for line in proc.stderr.splitlines() if "note:" in line]
    assert len(note) == 1, proc.stderr
    assert f"chown --reference={cache} {cache}/index" in note[0], note
    assert "per-user cache" in note[0] and str(user_cache) in note[0]
    assert modes(user_cache)["."] == "0700"
    # a hit in the per-user cache the second time, without a notice
    proc = as_user(1000, place, "build", "--json", "--cache-dir", str(cache),
                   images["one"][0])
    assert result(proc)["cached"] is True and "note:" not in proc.stderr
    # root trusts no directory of another user's (who could swap what is in it)
    proc = subprocess.run([sys.executable, "-c", "from squall.sqshbuild.cli import main; "
                           "main()", "gc", "--max-size", "1T", "--cache-dir", str(cache)],
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "python")),
                          capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{cache} is not safe to use" in proc.stderr and "belongs to" in proc.stderr
    assert (cache / "index").stat().st_uid == 0
    # the admin's fix the notice gave: the user builds in place
    for sub in ("index", "locks"):
        subprocess.run(["chown", f"--reference={cache}", str(cache / sub)], check=True)
    res = result(as_user(1000, place, "build", "--json", "--cache-dir", str(cache),
                         images["two"][0]))
    assert Path(res["path"]).parent == cache and res["cached"] is False


def test_cache_users_cannot_write_serves_hits_and_builds_per_user(place, images, clean_env,
                                                                  monkeypatch, capsys):
    cache = place / "images"
    rc, out, err = as_root(monkeypatch, capsys, "build", "--json", "--cache-dir", str(cache),
                           images["warm"][0])
    assert rc == 0, err
    os.chmod(cache, 0o755)  # the admin keeps it read-only for users
    before = modes(cache)
    hit = result(as_user(1001, place, "build", "--json", "--cache-dir", str(cache),
                         images["warm"][0]))
    assert hit["cached"] is True and Path(hit["path"]).parent == cache
    proc = as_user(1001, place, "build", "--json", "--cache-dir", str(cache), images["two"][0])
    res = result(proc)
    assert Path(res["path"]).parent == place / "home1001" / ".cache" / "squall" / "images"
    note = [line for line in proc.stderr.splitlines() if "note:" in line]
    assert len(note) == 1 and f"chmod 1777 {cache}" in note[0], proc.stderr
    assert modes(cache) == before
    # -o needs no writable cache at all
    out_file = place / "home1001" / "out.sqsh"
    res = result(as_user(1001, place, "build", "--json", "--cache-dir", str(cache), "-o",
                         str(out_file), images["one"][0]))
    assert res["cached"] is False and out_file.is_file()
    # gc cannot work there: one line
    proc = as_user(1001, place, "gc", "--max-size", "1K", "--cache-dir", str(cache))
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1, proc.stderr
    assert "not writable by" in proc.stderr


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
