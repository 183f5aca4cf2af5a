"""A hostile second user of the shared cache (issue 19, docs/security.md).

The attacker is uid 1000, a real user acting through setpriv; the victims are root (the
admin warming the cache, running gc) and uid 1001. The attacker plants symlinks, files,
FIFOs, sockets, locks and look-alike images wherever users may write. After each attack:
a canary tree outside the cache (root's and the victim's files and directories, with
their modes, owners and contents) is unchanged, the victim never gets the attacker's
bytes (a marker file in the image), and the build either succeeds from trusted entries or
fails in one line. The host's kernel protections are off here (protected_symlinks=0,
protected_fifos=0 is Debian's default inside containers too), so squall itself must
refuse.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from imagekit import Image, layer, sha
from sqfs import cat
from users import as_user

from squall.sqshbuild.refs import parse_source

pytestmark = [pytest.mark.registry,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                 reason="acting as other users needs root and setpriv")]
ATTACKER, VICTIM = 1000, 1001
TRUTH = "the registry's own bytes\n"


# -- the canary: what must never change ----------------------------------------------------
def make_canary(place: Path) -> Path:
    c = place / "canary"
    (c / "rootdir").mkdir(parents=True)
    os.chmod(c, 0o755)
    os.chmod(c / "rootdir", 0o700)
    (c / "rootdir" / "secret").write_text("root's secret\n")
    os.chmod(c / "rootdir" / "secret", 0o600)
    (c / "root-file").write_text("root's file\n")
    os.chmod(c / "root-file", 0o644)
    v = c / "victim"
    v.mkdir()
    (v / "file").write_text("victim's file\n")
    os.chmod(v, 0o700)
    os.chmod(v / "file", 0o600)
    os.chown(v / "file", VICTIM, VICTIM)
    os.chown(v, VICTIM, VICTIM)
    return c


def snapshot(c: Path) -> dict[str, tuple[object, ...]]:
    out: dict[str, tuple[object, ...]] = {}
    for p in sorted([c, *c.rglob("*")]):
        s = p.lstat()
        body: object = ""
        if stat.S_ISREG(s.st_mode):
            body = hashlib.sha256(p.read_bytes()).hexdigest()
        elif stat.S_ISDIR(s.st_mode):
            body = tuple(sorted(os.listdir(p)))
        out[str(p)] = (stat.S_IFMT(s.st_mode), stat.S_IMODE(s.st_mode), s.st_uid, s.st_gid,
                       s.st_size, int(s.st_mtime), body)
    return out


# -- the attacker --------------------------------------------------------------------------
_PLANT = r"""
import json, os, socket, sys, time
for path, kind, arg in json.loads(sys.argv[1]):
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    if os.path.lexists(path):
        continue
    if kind == "symlink":
        os.symlink(arg, path)
    elif kind == "fifo":
        os.mkfifo(path, 0o666)
    elif kind == "socket":
        os.chdir(d); s = socket.socket(socket.AF_UNIX); s.bind(os.path.basename(path))
    elif kind == "dir":
        os.mkdir(path, 0o777)
    elif kind == "copy":
        with open(arg, "rb") as src, open(path, "wb") as dst:
            dst.write(src.read())
        os.chmod(path, 0o644)
    elif kind == "lock":
        with open(path, "w") as f:
            f.write(json.dumps({"host": "elsewhere", "pid": 1, "since": time.time()}))
        later = time.time() + 365 * 86400
        os.utime(path, (later, later))
    else:
        with open(path, "w") as f:
            f.write(arg)
        os.chmod(path, 0o666)
"""


def plant(entries: list[tuple[Path, str, str]]) -> None:
    """Create ``entries`` (path, kind, argument) as the attacker."""
    arg = json.dumps([(str(p), k, a) for p, k, a in entries])
    subprocess.run(["setpriv", f"--reuid={ATTACKER}", f"--regid={ATTACKER}", "--clear-groups",
                    sys.executable, "-c", "import os; os.umask(0); " + _PLANT, arg],
                   check=True, timeout=30)


# -- the images ----------------------------------------------------------------------------
class Target:
    """The victim's image: a base layer, a marker layer; its digests and cache names."""

    def __init__(self, registry, name: str) -> None:
        self.base = layer(("dir", "etc"), ("file", "etc/os-release", f"ID={name}\n"),
                          ("file", "etc/build-id", uuid.uuid4().hex))
        self.top = layer(("file", "marker", TRUTH), ("file", "unique", uuid.uuid4().hex))
        repo = f"test/hostile-{name}-{uuid.uuid4().hex[:8]}"
        image = Image([self.base, self.top], {"Cmd": ["/bin/true"]})
        self.digest = registry.pusher.push(repo, "v1", image)
        self.ref = f"{registry.host}/{repo}:v1"
        self.config = json.loads(image.manifest())["config"]["digest"]
        self.layers = [sha(self.base), sha(self.top)]
        self.registry = registry

    def names(self, cache: Path) -> dict[str, Path]:
        """Every name a build of this image reads or writes in ``cache``."""
        entry = "sha256-" + self.digest.split(":")[1]
        key = hashlib.sha256(f"{parse_source(self.ref).canonical}\0linux/amd64".encode())
        out = {"sqsh": cache / f"{entry}.sqsh", "sidecar": cache / f"{entry}.json",
               "used": cache / f"{entry}.used", "lock": cache / "locks" / f"{entry}.lock",
               "index": cache / "index" / f"{key.hexdigest()}.json",
               "config": cache / "layers" / "sha256" / (self.config.split(":")[1] + ".config")}
        for i, d in enumerate(self.layers):
            h = d.split(":")[1]
            for ext in ("tar", "ok", "partial", "tar.tmp", "lock"):
                out[f"layer{i}.{ext}"] = cache / "layers" / "sha256" / f"{h}.{ext}"
        return out

    def layer_gets(self) -> int:
        gets = self.registry.blob_gets()
        return sum(gets[d] for d in self.layers)


def admin_makes(cache: Path) -> None:
    """The cache as a site's admin makes it: an empty root-owned sticky 1777 directory."""
    cache.mkdir(mode=0o755)
    os.chmod(cache, 0o1777)


def admin_prepares(cache: Path) -> None:
    """... and with its subdirectories made by root's first sqshbuild (gc)."""
    admin_makes(cache)
    run_root("gc", "--max-size", "1T", "--cache-dir", str(cache))


def run_root(*argv: str, env: dict[str, str] | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-c", "import os; os.umask(0o077); "
                           "from squall.sqshbuild.cli import main; main()", *argv],
                          env=dict(os.environ, PYTHONPATH=str(ROOT / "python"), **(env or {})),
                          capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def built_or_one_line(proc: subprocess.CompletedProcess[str]) -> Path | None:
    """The image a build printed (JSON), or None after a failure of exactly one line."""
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    if proc.returncode != 0:
        errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
        assert len(errors) == 1 and proc.stderr.strip().endswith(errors[0]), proc.stderr
        return None
    return Path(json.loads(proc.stdout.strip().splitlines()[-1])["path"])


def truthful(image: Path | None, owners: tuple[int, ...] = (0, VICTIM)) -> None:
    """The image has the registry's bytes, in a file of a user the reader trusts."""
    if image is not None:
        assert cat(image, "marker") == TRUTH, f"{image} holds another user's bytes"
        assert image.lstat().st_uid in owners and stat.S_ISREG(image.lstat().st_mode)


@pytest.fixture
def scene(place, registry, clean_env):
    """(place, cache, canary, image) with the admin's empty cache."""
    cache = place / "images"
    canary = make_canary(place)
    target = Target(registry, "v")
    return place, cache, canary, target


# -- root follows no link ------------------------------------------------------------------
@pytest.mark.parametrize("name,kind,aim", [
    ("layer1.ok", "symlink", "rootdir/secret"),      # was: truncated to 0 bytes
    ("layer1.partial", "symlink", "rootdir/new"),     # was: the layer's bytes written there
    ("layer1.tar.tmp", "symlink", "rootdir/secret"),
    ("layer0.tar", "symlink", "root-file"),
    ("lock", "symlink", "rootdir/secret"),
    ("layer1.lock", "symlink", "rootdir/secret"),
    ("sidecar", "symlink", "rootdir/secret"),
    ("used", "symlink", "rootdir/secret"),
    ("index", "symlink", "rootdir/secret"),
    ("config", "symlink", "rootdir/secret"),
])
def test_root_follows_no_planted_link(scene, name, kind, aim):
    place, cache, canary, target = scene
    admin_prepares(cache)
    before = snapshot(canary)
    planted = target.names(cache)[name]
    plant([(planted, kind, str(canary / aim))])
    proc = run_root("build", "--json", "--cache-dir", str(cache), target.ref)
    truthful(built_or_one_line(proc))
    assert proc.returncode == 0, proc.stderr
    assert snapshot(canary) == before
    run_root("gc", "--max-size", "1", "--cache-dir", str(cache))
    assert snapshot(canary) == before
    assert planted.is_symlink(), "another user's entry is never removed"


@pytest.mark.parametrize("sub", ["layers", "layers/sha256", "locks", "index"])
def test_cache_directories_replaced_by_links(scene, sub):
    """The admin made only the root; the attacker made a subdirectory a link to root's
    0700 directory (or, for layers/sha256, made layers/ hers): root's build, gc and the
    victim's build never chmod, chown or write through it."""
    place, cache, canary, target = scene
    admin_makes(cache)
    plant([(cache / sub, "symlink", str(canary / "rootdir"))])
    before = snapshot(canary)
    for run in (lambda: run_root("build", "--json", "--cache-dir", str(cache), target.ref),
                lambda: as_user(VICTIM, place, "build", "--json", "--cache-dir", str(cache),
                                target.ref)):
        proc = run()
        truthful(built_or_one_line(proc))
        assert snapshot(canary) == before
        assert "not safe" in proc.stderr, proc.stderr
    proc = run_root("gc", "--max-size", "1", "--cache-dir", str(cache))
    built_or_one_line(proc)
    assert snapshot(canary) == before


# -- poisoning -----------------------------------------------------------------------------
def test_a_look_alike_image_is_never_served(scene, registry):
    """The attacker copies an image of hers under the victim's digest name (and a sidecar):
    the victim's srun-like build and root's get the registry's bytes."""
    place, cache, canary, target = scene
    admin_prepares(cache)
    # the attacker's own image, with her marker
    img = Image([layer(("file", "marker", "alice was here\n"))], {"Cmd": ["/bin/true"]})
    repo = f"test/poison-{uuid.uuid4().hex[:8]}"
    registry.pusher.push(repo, "v1", img)
    own = as_user(ATTACKER, place, "build", "--json", "--cache-dir", str(cache),
                  f"{registry.host}/{repo}:v1")
    mine = built_or_one_line(own)
    assert mine is not None
    names = target.names(cache)
    plant([(names["sqsh"], "copy", str(mine)),
           (names["sidecar"], "file", json.dumps({"path": str(names["sqsh"])}))])
    before = snapshot(canary)
    proc = as_user(VICTIM, place, "build", "--json", "--cache-dir", str(cache), target.ref)
    got = built_or_one_line(proc)
    assert got is not None and got != names["sqsh"], proc.stderr
    truthful(got)
    assert f"note: ignoring {names['sqsh']}" in proc.stderr
    proc = run_root("build", "--json", "--cache-dir", str(cache), target.ref)
    truthful(built_or_one_line(proc))
    assert snapshot(canary) == before


def test_a_planted_layer_is_never_used(scene):
    """The attacker plants the victim's top layer as her tar (with its .ok): the victim's
    image has the registry's bytes."""
    place, cache, canary, target = scene
    admin_prepares(cache)
    fake = place / "fake.tar"
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        data = b"alice was here\n"
        info = tarfile.TarInfo("marker")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    fake.write_bytes(buf.getvalue())
    os.chmod(fake, 0o644)
    names = target.names(cache)
    plant([(names["layer1.tar"], "copy", str(fake)), (names["layer1.ok"], "file", "")])
    for run in (lambda: as_user(VICTIM, place, "build", "--json", "--cache-dir", str(cache),
                                target.ref),
                lambda: run_root("build", "--json", "--cache-dir", str(cache), target.ref)):
        proc = run()
        got = built_or_one_line(proc)
        assert got is not None, proc.stderr
        truthful(got)


# -- locks ---------------------------------------------------------------------------------
def test_a_lock_of_another_user_does_not_hold_a_build(scene):
    """A lock file with a foreign host and an mtime a year ahead (was: 'waiting for
    elsewhere pid 1' for the 6 h timeout)."""
    place, cache, canary, target = scene
    admin_prepares(cache)
    names = target.names(cache)
    plant([(names["lock"], "lock", ""), (names["layer0.lock"], "lock", ""),
           (names["layer1.lock"], "lock", "")])
    started = time.monotonic()
    proc = as_user(VICTIM, place, "build", "--json", "--cache-dir", str(cache), target.ref,
                   timeout=60)
    truthful(built_or_one_line(proc))
    assert proc.returncode == 0 and time.monotonic() - started < 30, proc.stderr
    assert f"note: ignoring the lock {names['lock']}" in proc.stderr


def test_fifos_and_sockets_never_block_a_build(scene):
    """Every name a build opens, planted as a FIFO or a socket: the builds end (no open()
    blocks) and take nothing from them."""
    place, cache, canary, target = scene
    admin_prepares(cache)
    names = target.names(cache)
    kinds = ["fifo", "socket"]
    plant([(p, kinds[i % 2], "") for i, (n, p) in enumerate(sorted(names.items()))
           if n != "layer0.tar"])
    plant([(names["layer0.tar"], "fifo", "")])
    before = snapshot(canary)
    for run in (lambda: as_user(VICTIM, place, "build", "--json", "--cache-dir", str(cache),
                                target.ref, timeout=60),
                lambda: run_root("build", "--json", "--cache-dir", str(cache), target.ref,
                                 timeout=60),
                lambda: run_root("gc", "--max-size", "1", "--cache-dir", str(cache),
                                 timeout=60)):
        proc = run()
        if "gc" not in proc.args:
            got = built_or_one_line(proc)
            assert got is not None, proc.stderr
            truthful(got)
        else:
            assert proc.returncode == 0, proc.stderr
    assert snapshot(canary) == before


def test_malformed_metadata_is_absence(scene):
    """Root's own index record, sidecar and lock, malformed: one note naming each, then
    treated as missing (was: internal error: AttributeError)."""
    place, cache, canary, target = scene
    admin_prepares(cache)
    assert run_root("build", "--json", "--cache-dir", str(cache), target.ref).returncode == 0
    names = target.names(cache)
    for body in ("[1, 2]", '{"digest": 7}', '{"digest": "sha256:zz"}', "{not json",
                 '{"digest": ["x"]}'):
        names["index"].write_text(body)
        names["sidecar"].write_text(body)
        proc = run_root("build", "--json", "--cache-dir", str(cache),
                        target.ref)
        truthful(built_or_one_line(proc))
        assert proc.returncode == 0, proc.stderr
        assert "malformed" in proc.stderr, (body, proc.stderr)
        proc = run_root("inspect", "--json", str(names["sqsh"]))
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


# -- pulls ---------------------------------------------------------------------------------
def test_root_warms_then_three_users_one_pull(scene):
    place, cache, canary, target = scene
    admin_makes(cache)
    assert run_root("build", "--json", "--cache-dir", str(cache), target.ref).returncode == 0
    for uid in (1001, 1002, 1003):
        proc = as_user(uid, place, "build", "--json", "--cache-dir", str(cache), target.ref)
        got = built_or_one_line(proc)
        assert got == target.names(cache)["sqsh"] and "note:" not in proc.stderr, proc.stderr
    assert target.layer_gets() == len(target.layers)  # one pull for the cluster


@pytest.mark.parametrize("builders", [None, "1001", "@builders"])
def test_a_user_pulls_first_then_two_others(scene, builders):
    """Without a builder identity each user pulls once (no user trusts another's bytes);
    with 1001 named a builder (by uid or by a group), one pull in all."""
    place, cache, canary, target = scene
    admin_makes(cache)
    env = {}
    if builders == "@builders":
        subprocess.run(["groupadd", "-f", "squall-test-builders"], check=True)
        subprocess.run(["usermod", "-a", "-G", "squall-test-builders",
                        _name(1001)], check=True)
        env["SQSHBUILD_BUILDERS"] = "@squall-test-builders"
    elif builders:
        env["SQSHBUILD_BUILDERS"] = builders
    for uid in (1001, 1002, 1003):
        proc = as_user(uid, place, "build", "--json", "--cache-dir", str(cache), target.ref,
                       env=env)
        assert built_or_one_line(proc) is not None, proc.stderr
        truthful(built_or_one_line(proc), (0, uid) if builders is None else (0, uid, 1001))
    pulls = target.layer_gets() // len(target.layers)
    assert pulls == (3 if builders is None else 1), target.registry.blob_gets()


def _name(uid: int) -> str:
    import pwd
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        subprocess.run(["useradd", "-M", "-u", str(uid), f"sqtest{uid}"], check=True)
        return f"sqtest{uid}"


# -- random hostile trees ------------------------------------------------------------------
KINDS = ["symlink-file", "symlink-dir", "symlink-missing", "hardlink", "fifo", "socket",
         "garbage", "dir", "root-0666"]
NAMES = ["sqsh", "sidecar", "used", "lock", "index", "config", "layer0.tar", "layer0.ok",
         "layer0.partial", "layer1.tar", "layer1.ok", "layer1.partial", "layer1.tar.tmp",
         "layer1.lock"]
SUBDIRS = ["index", "locks", "layers", "layers/sha256"]


def _plant_one(path: Path, kind: str, canary: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(path):
        return
    aim = {"symlink-file": canary / "rootdir" / "secret", "symlink-dir": canary / "rootdir",
           "symlink-missing": canary / "rootdir" / "new"}
    if kind in aim:
        os.symlink(aim[kind], path)
    elif kind == "hardlink":
        os.link(canary / "root-file", path)  # root's file under another name
        return  # root's own: the owner check alone cannot refuse it
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        here = os.getcwd()
        os.chdir(path.parent)  # a socket's path is limited to 107 bytes: bind its name
        try:
            s = socket.socket(socket.AF_UNIX)
            s.bind(path.name)
            s.close()
        finally:
            os.chdir(here)
    elif kind == "garbage":
        path.write_bytes(b"hsqs" + os.urandom(64))
    elif kind == "dir":
        path.mkdir()
    elif kind == "root-0666":
        path.write_bytes(b"hsqs writable by all")
        os.chmod(path, 0o666)
        return
    os.lchown(path, ATTACKER, ATTACKER)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(entries=st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(KINDS)),
                        min_size=1, max_size=8),
       attacker_dirs=st.lists(st.sampled_from(SUBDIRS), max_size=2, unique=True))
def test_random_hostile_trees(place, registry, clean_env, entries, attacker_dirs):
    """Random trees of links, hard links, FIFOs, sockets, wrong owners and modes under the
    cache root, then root's build, a user's build and gc: the canary is unchanged and no
    build trusts a planted entry."""
    run = uuid.uuid4().hex[:8]
    cache = place / f"images-{run}"
    canary = place / "canary"
    if not canary.exists():
        make_canary(place)
    target = _target(registry)
    admin_makes(cache)
    for sub in attacker_dirs:  # made by the attacker before root ever ran
        d = cache / sub
        d.mkdir(parents=True, exist_ok=True)
        for p in [d, *d.parents]:
            if p == cache:
                break
            os.chmod(p, 0o777)
            os.chown(p, ATTACKER, ATTACKER)
    run_root("gc", "--max-size", "1T", "--cache-dir", str(cache))
    names = target.names(cache)
    for name, kind in entries:
        if names[name].parent.is_dir() and not names[name].parent.is_symlink():
            _plant_one(names[name], kind, canary)
    before = snapshot(canary)
    for go in (lambda: run_root("build", "--json", "--cache-dir", str(cache), target.ref,
                                timeout=90),
               lambda: as_user(VICTIM, place, "build", "--json", "--cache-dir", str(cache),
                               target.ref, timeout=90)):
        proc = go()
        got = built_or_one_line(proc)
        truthful(got)
        assert snapshot(canary) == before
    proc = run_root("gc", "--max-size", "1", "--cache-dir", str(cache), timeout=90)
    assert "Traceback" not in proc.stderr
    assert snapshot(canary) == before
    shutil.rmtree(cache, ignore_errors=True)


_TARGETS: dict[str, Target] = {}


def _target(registry) -> Target:
    if registry.host not in _TARGETS:
        _TARGETS[registry.host] = Target(registry, "random")
    return _TARGETS[registry.host]
