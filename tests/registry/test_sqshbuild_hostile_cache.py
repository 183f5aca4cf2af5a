"""A hostile second user against a shared cache that only root and the builder write
(issues 19 and 26, docs/security.md).

The attacker is uid 1000, a real user acting through setpriv; the victims are root (the
admin warming the cache, running gc, building with -o), the builder account and uid 1001.
The attacker plants symlinks, files, FIFOs, sockets and look-alike scratch directories
wherever users may write: TMPDIR, a directory root writes an image to with -o, the
directories above the cache root, and an earlier squall's 1777 cache. After each attack:
a canary tree outside the cache (root's and the victim's files and directories, with
their modes, owners and contents) is unchanged, the victim never gets the attacker's
bytes (a marker file in the image), and the build either succeeds or fails in one line.
The host's kernel protections are off here (protected_symlinks=0, protected_fifos=0 is
Debian's default inside containers too), so squall itself must refuse.
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
import tarfile
import uuid
from pathlib import Path

import pytest
from conftest import BUILDER, ROOT, builder_account
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from imagekit import Image, layer, sha
from sqfs import cat
from users import as_user

from squall.sqshbuild.refs import parse_source

pytestmark = [pytest.mark.registry, pytest.mark.needs_root("acting as other users")]
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


def attempt(path: Path, kind: str = "file") -> bool:
    """The attacker tries to create ``path``; True when she could."""
    code = ("import os, sys\np = sys.argv[1]\ntry:\n"
            "    os.symlink('/etc/shadow', p) if sys.argv[2] == 'symlink' else "
            "os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o666))\n"
            "except OSError:\n    sys.exit(3)\n")
    proc = subprocess.run(["setpriv", f"--reuid={ATTACKER}", f"--regid={ATTACKER}",
                           "--clear-groups", sys.executable, "-c", code, str(path), kind],
                          timeout=30, capture_output=True)
    return proc.returncode == 0


def sound(cache: Path, writers: tuple[int, ...]) -> None:
    """Every entry of the cache belongs to a writer and is writable by nobody else."""
    for p in [cache, *cache.rglob("*")]:
        st = p.lstat()
        assert st.st_uid in writers, (p, st.st_uid)
        assert not stat.S_IMODE(st.st_mode) & 0o022, (p, oct(st.st_mode))
        assert stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode), p


def dead_pid() -> int:
    proc = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    return int(proc.stdout)


@pytest.fixture
def scene(place, registry, clean_env):
    """(place, cache, canary, image): /fsx as sites have it (root's, 1777) with root's
    /fsx/squall (0755) above a cache that does not exist yet."""
    fsx = place / "fsx"
    (fsx / "squall").mkdir(parents=True)
    os.chmod(fsx, 0o1777)
    os.chmod(fsx / "squall", 0o755)
    cache = fsx / "squall" / "images"
    canary = make_canary(place)
    target = Target(registry, "v")
    return place, cache, canary, target


# -- the shared cache: written by root and the builder alone -------------------------------
def test_root_makes_the_cache_the_builders_and_users_can_write_nothing_in_it(scene):
    place, cache, canary, target = scene
    proc = run_root("build", "--json", "--cache-dir", str(cache), target.ref)
    truthful(built_or_one_line(proc), (0,))
    assert proc.returncode == 0, proc.stderr
    builder = builder_account()
    assert cache.stat().st_uid == builder and stat.S_IMODE(cache.stat().st_mode) == 0o755
    sound(cache, (0, builder))
    names = target.names(cache)
    for name, path in sorted(names.items()):
        for kind in ("file", "symlink"):
            assert not attempt(path.with_name(path.name + ".x"), kind), (name, kind)
    assert not attempt(cache / "planted")
    before = snapshot(canary)
    proc = as_user(VICTIM, place, "build", "--json", "--cache-dir", str(cache), target.ref)
    assert built_or_one_line(proc) == names["sqsh"] and "note:" not in proc.stderr, proc.stderr
    assert snapshot(canary) == before


def test_root_warms_then_three_users_one_pull(scene):
    place, cache, canary, target = scene
    assert run_root("build", "--json", "--cache-dir", str(cache), target.ref).returncode == 0
    before = {str(p): p.lstat().st_mtime_ns for p in cache.rglob("*")}
    for uid in (1001, 1002, 1003):
        proc = as_user(uid, place, "build", "--json", "--cache-dir", str(cache), target.ref)
        got = built_or_one_line(proc)
        assert got == target.names(cache)["sqsh"] and "note:" not in proc.stderr, proc.stderr
    assert target.layer_gets() == len(target.layers)  # one pull for the cluster
    after = {str(p): p.lstat().st_mtime_ns for p in cache.rglob("*")}
    assert after == before, "a user's hit wrote nothing in the shared cache"


def test_the_builder_pulls_once_for_everyone(scene):
    """The plugin's case: the builder account builds (its own HOME, no login), then users
    and root hit: one pull, every file the builder's."""
    place, cache, canary, target = scene
    builder = builder_account()
    home = place / "builder-home"
    home.mkdir(mode=0o700)
    os.chown(home, builder, builder)
    os.chown(cache.parent, builder, builder)  # the packages: /fsx/squall the builder's
    proc = subprocess.run(
        ["setpriv", f"--reuid={builder}", f"--regid={builder}", "--init-groups",
         sys.executable, "-c", "from squall.sqshbuild.cli import main; main()",
         "build", "--json", "--cache-dir", str(cache), target.ref],
        env={"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8",
             "PYTHONPATH": str(ROOT / "python"), "SQSHBUILD_BUILDER": BUILDER},
        capture_output=True, text=True, timeout=120, cwd="/")
    truthful(built_or_one_line(proc), (builder,))
    sound(cache, (builder,))
    for uid in (1001, 1002):
        proc = as_user(uid, place, "build", "--json", "--cache-dir", str(cache), target.ref)
        assert built_or_one_line(proc) == target.names(cache)["sqsh"], proc.stderr
    assert run_root("build", "--json", "--cache-dir", str(cache), target.ref).returncode == 0
    assert target.layer_gets() == len(target.layers)


def test_users_build_in_their_own_caches_and_never_make_the_shared_one(scene):
    """A user first, in a cluster whose shared cache was never made: each user's image is
    in that user's own 0700 cache (no user trusts another's bytes), and no user made the
    shared cache's directories (was: the first user owned index/ locks/ layers/)."""
    place, cache, canary, target = scene
    for uid in (1000, 1001):
        proc = as_user(uid, place, "build", "--json", "--cache-dir", str(cache), target.ref)
        got = built_or_one_line(proc)
        truthful(got, (uid,))
        own = place / f"home{uid}" / ".cache" / "squall" / "images"
        assert got is not None and got.parent == own, proc.stderr
        assert stat.S_IMODE(own.stat().st_mode) == 0o700 and own.stat().st_uid == uid
    assert not cache.exists()
    assert run_root("build", "--json", "--cache-dir", str(cache), target.ref).returncode == 0
    sound(cache, (0, builder_account()))


def test_a_users_gc_never_touches_or_reports_the_shared_cache(scene):
    place, cache, canary, target = scene
    assert run_root("build", "--json", "--cache-dir", str(cache), target.ref).returncode == 0
    before = snapshot(cache)
    for env in ({}, {"SQSHBUILD_BUILDER": str(ATTACKER)}):
        proc = as_user(ATTACKER, place, "gc", "--max-size", "1", "--cache-dir", str(cache),
                       env=env)
        assert "Traceback" not in proc.stderr
        assert "removed image" not in proc.stdout, proc.stdout
        assert snapshot(cache) == before


# -- TMPDIR, -o and the directories above the cache: nobody else's entry is touched --------
def test_root_never_removes_or_chmods_a_users_dead_looking_scratch_directory(scene):
    """A user's sqshbuild-*-<host>.<pid>.* directory in a 1777 TMPDIR, with links inside to
    root's directory (was: TMPDIR chmodded 0700; root's files deleted)."""
    place, cache, canary, target = scene
    tmp = place / "tmp"
    tmp.mkdir()
    os.chmod(tmp, 0o1777)
    host = socket.gethostname()
    theirs = [tmp / f"sqshbuild-{kind}-{host}.{dead_pid()}.ab12" for kind in
              ("rootfs", "src", "layers", "out")]
    plant([(d / "inner", "symlink", str(canary / "rootdir")) for d in theirs] +
          [(theirs[0] / "fifo", "fifo", ""), (theirs[1] / "x", "file", "x")])
    for d in theirs:
        subprocess.run(["setpriv", f"--reuid={ATTACKER}", f"--regid={ATTACKER}",
                        "--clear-groups", "chmod", "0555", str(d)], check=True)
    before, tmp_before = snapshot(canary), [snapshot(d) for d in theirs]
    env = {"TMPDIR": str(tmp)}
    truthful(built_or_one_line(run_root("build", "--json", "--cache-dir", str(cache),
                                        "--pipeline", "unpack", target.ref, env=env)))
    assert run_root("gc", "--max-size", "1", "--cache-dir", str(cache), env=env).returncode == 0
    assert snapshot(canary) == before and [snapshot(d) for d in theirs] == tmp_before
    assert stat.S_IMODE(tmp.stat().st_mode) == 0o1777 and tmp.stat().st_uid == 0
    assert sorted(os.listdir(tmp)) == sorted(d.name for d in theirs), "root's own are gone"


@pytest.mark.parametrize("mode", [0o777, 0o1777])
def test_root_s_output_never_follows_a_planted_link(scene, mode):
    """-o DIR/x.sqsh where others may write DIR: a planted x.sqsh -> root's file is refused
    in one line (was: root's 0600 file replaced by the image, 0644), and planted
    .building-y.sqsh.<host>.<pid> links for the next pids change nothing."""
    place, cache, canary, target = scene
    out = place / "out"
    out.mkdir()
    os.chmod(out, mode)
    secret = canary / "rootdir" / "secret"
    host = socket.gethostname()
    pid = dead_pid()
    plant([(out / "x.sqsh", "symlink", str(secret)), (out / "x.json", "symlink", str(secret))]
          + [(out / f".building-y.sqsh.{host}.{pid + n}", "symlink", str(secret))
             for n in range(1, 60)])
    before = snapshot(canary)
    proc = run_root("build", "--json", "--cache-dir", str(cache), "-o", str(out / "x.sqsh"),
                    target.ref)
    assert built_or_one_line(proc) is None and "is a symlink" in proc.stderr, proc.stderr
    for pipeline in ("stream", "unpack"):
        name = f"y-{pipeline}.sqsh"
        proc = run_root("build", "--json", "--cache-dir", str(cache), "--pipeline", pipeline,
                        "-o", str(out / name), target.ref)
        got = built_or_one_line(proc)
        assert got == out / name, proc.stderr
        truthful(got, (0,))
        assert stat.S_IMODE(got.stat().st_mode) == 0o644
    assert snapshot(canary) == before
    assert (out / "x.sqsh").is_symlink(), "another user's entry is never removed"
    assert not [p for p in out.iterdir() if p.name.startswith("sqshbuild-")]


def test_a_link_above_the_cache_root_is_never_followed(place, registry, clean_env):
    """A user's fsx/squall -> <root's directory> (was: the cache made there, mode 1777)."""
    fsx = place / "fsx"
    fsx.mkdir()
    os.chmod(fsx, 0o1777)
    canary = make_canary(place)
    target = Target(registry, "above")
    plant([(fsx / "squall", "symlink", str(canary / "rootdir"))])
    before = snapshot(canary)
    proc = run_root("build", "--json", "--cache-dir", str(fsx / "squall" / "images"),
                    target.ref)
    assert built_or_one_line(proc) is None, proc.stderr
    assert "symlink of" in proc.stderr and str(fsx / "squall") in proc.stderr, proc.stderr
    assert snapshot(canary) == before


# -- an earlier squall's 1777 cache ---------------------------------------------------------
def test_an_earlier_squalls_cache_is_refused_then_converted(scene, registry):
    """1777 directories with the attacker's look-alike image, links, FIFOs and a hard link
    to root's marker: root's build names the conversion in one line; a user's build
    ignores the cache (one note) and builds in the user's own; convert-cache moves root's
    entries into a new cache and leaves the attacker's, untouched, in the old directory."""
    place, cache, canary, target = scene
    assert run_root("build", "--json", "--cache-dir", str(cache), target.ref).returncode == 0
    for d in [cache, *[p for p in cache.rglob("*") if p.is_dir()]]:
        os.chown(d, 0, 0)
        os.chmod(d, 0o1777)  # as an earlier squall made it
    other = Target(registry, "other")
    names = other.names(cache)
    plant([(names["sqsh"], "file", "hsqs alice's bytes"),
           (names["sidecar"], "symlink", str(canary / "rootdir" / "secret")),
           (names["lock"], "fifo", ""), (names["layer0.partial"], "symlink",
                                          str(canary / "rootdir" / "new"))])
    before = snapshot(canary)
    proc = run_root("build", "--json", "--cache-dir", str(cache), other.ref)
    assert built_or_one_line(proc) is None and "convert-cache" in proc.stderr, proc.stderr
    proc = as_user(VICTIM, place, "build", "--json", "--cache-dir", str(cache), other.ref)
    got = built_or_one_line(proc)
    truthful(got, (VICTIM,))
    assert got is not None and got.parent == place / f"home{VICTIM}" / ".cache" / "squall" / \
        "images", proc.stderr
    assert proc.stderr.count("note: ignoring the image cache") == 1, proc.stderr
    proc = run_root("convert-cache", "--json", "--cache-dir", str(cache))
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout)
    assert f"{target.names(cache)['sqsh'].name}" in done["moved"]
    old = Path(done["old"])
    assert (old / names["sqsh"].name).read_text() == "hsqs alice's bytes"
    assert (old / "locks" / names["lock"].name).is_fifo()
    sound(cache, (0, builder_account()))
    proc = run_root("build", "--json", "--cache-dir", str(cache), target.ref)
    assert json.loads(proc.stdout.strip().splitlines()[-1])["cached"] is True, proc.stderr
    assert snapshot(canary) == before


def as_attacker(code: str, *args: str) -> None:
    subprocess.run(["setpriv", f"--reuid={ATTACKER}", f"--regid={ATTACKER}", "--clear-groups",
                    sys.executable, "-c", code, *args], check=True, timeout=30)


def test_convert_cache_re_hashes_layers_in_a_directory_the_attacker_owns(scene, registry):
    """Issue 39: an earlier squall's cache whose layers/ belonged to its first user; she
    swaps two of root's layer files before root converts. convert-cache moves from her
    directories only what the bytes prove (the plain layer, the config: sha256 = name),
    leaves the swapped layers in the old directory, and the next image built on the same
    base layer has the base's files (was: the app layer's)."""
    place, cache, canary, _target = scene
    base = layer(("dir", "etc"), ("file", "etc/os-release", "ID=base\n"))
    app = layer(("file", "marker", TRUTH))
    plain = layer(("file", "plain", "uncompressed\n"), compress=False)
    repo = f"test/swap-{uuid.uuid4().hex[:8]}"
    image = Image([base, plain, app], {"Cmd": ["/bin/true"]})
    registry.pusher.push(repo, "v1", image)
    registry.pusher.push(repo, "v2", Image([base, layer(("file", "v2", "two\n"))],
                                           {"Cmd": ["/bin/true"]}))
    assert run_root("build", "--json", "--cache-dir", str(cache),
                    f"{registry.host}/{repo}:v1").returncode == 0
    layers = cache / "layers" / "sha256"
    for d in [cache, *[p for p in cache.rglob("*") if p.is_dir()]]:
        os.chown(d, 0, 0)
        os.chmod(d, 0o1777)  # as an earlier squall made it...
    for d in (cache / "layers", layers):
        os.chown(d, ATTACKER, ATTACKER)  # ...with layers/ made by its first user
        os.chmod(d, 0o755)
    a, b = (layers / f"{sha(x).split(':')[1]}.tar" for x in (base, app))
    as_attacker("import os, sys; a, b = sys.argv[1:]; os.rename(a, a + '.x'); "
                "os.rename(b, a); os.rename(a + '.x', b)", str(a), str(b))
    assert cat_tar_names(a) == ["marker"]  # the base's name holds the app layer now
    before = snapshot(canary)
    proc = run_root("convert-cache", "--json", "--cache-dir", str(cache))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    done = json.loads(proc.stdout)
    assert "so a name there proves nothing" in proc.stderr, proc.stderr
    moved = set(done["moved"])
    assert f"layers/sha256/{sha(plain).split(':')[1]}.tar" in moved
    assert f"layers/sha256/{json.loads(image.manifest())['config']['digest'][7:]}.config" \
        in moved
    assert not a.exists() and not b.exists()
    old = Path(done["old"]) / "layers" / "sha256"
    assert cat_tar_names(old / a.name) == ["marker"]   # hers to look at, untouched
    sound(cache, (0, builder_account()))
    proc = run_root("build", "--json", "--cache-dir", str(cache), f"{registry.host}/{repo}:v2")
    built = built_or_one_line(proc)
    assert built is not None and cat(built, "etc/os-release") == "ID=base\n"
    assert cat(built, "v2") == "two\n"
    assert snapshot(canary) == before


def cat_tar_names(path: Path) -> list[str]:
    with tarfile.open(path) as t:
        return [m.name for m in t.getmembers() if m.isfile()]


# -- random hostile trees -------------------------------------------------------------------
KINDS = ["symlink-file", "symlink-dir", "symlink-missing", "hardlink", "fifo", "socket",
         "garbage", "dir", "dir-with-link"]
WHERE = ["tmp", "out", "above"]


def _names(place: Path, where: str, host: str, pid: int) -> list[Path]:
    if where == "tmp":
        return [place / "tmp" / f"sqshbuild-{k}-{host}.{pid + n}.zz" for n in range(3)
                for k in ("rootfs", "src", "layers", "cache")]
    if where == "out":
        return [place / "out" / n for n in ("x.sqsh", "x.json", f".building-x.sqsh.{host}."
                                            f"{pid + 1}", f"sqshbuild-out-{host}.{pid}.aa")]
    return [place / "fsx" / "squall", place / "fsx" / "squall-old"]


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
        return
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
    elif kind in ("dir", "dir-with-link"):
        path.mkdir()
        if kind == "dir-with-link":
            os.symlink(canary / "rootdir", path / "inner")
            os.lchown(path / "inner", ATTACKER, ATTACKER)
    os.lchown(path, ATTACKER, ATTACKER)


_RENAMER = r"""
import os, sys, time
end = time.monotonic() + float(sys.argv[1])
aim, dirs = sys.argv[2], sys.argv[3:]
while time.monotonic() < end:
    for d in dirs:
        try:
            for name in os.listdir(d):
                p = os.path.join(d, name)
                try:
                    os.rename(p, p + ".moved")
                    os.symlink(aim, p)
                except OSError:
                    pass
        except OSError:
            pass
    time.sleep(0.01)
"""


@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(entries=st.lists(st.tuples(st.sampled_from(WHERE), st.integers(0, 11),
                                  st.sampled_from(KINDS)), min_size=1, max_size=8),
       rename=st.booleans())
def test_random_hostile_trees(place, registry, clean_env, entries, rename):
    """Random trees of links, hard links, FIFOs, sockets, wrong owners and modes in TMPDIR,
    in an -o directory others write and above the cache root, some renamed and replaced
    by links while the builds run: root's build with -o, a user's build and root's gc
    leave the canary as it was and never take a planted entry."""
    run = uuid.uuid4().hex[:8]
    base = place / f"r-{run}"
    base.mkdir()
    canary = make_canary(base)
    for d, mode in (("tmp", 0o1777), ("out", 0o777), ("fsx", 0o1777)):
        (base / d).mkdir()
        os.chmod(base / d, mode)
    host, pid = socket.gethostname(), dead_pid()
    for where, i, kind in entries:
        names = _names(base, where, host, pid)
        _plant_one(names[i % len(names)], kind, canary)
    target = _target(registry)
    cache = base / "fsx" / "squall" / "images"
    before = snapshot(canary)
    renamer = None
    if rename:
        renamer = subprocess.Popen(
            ["setpriv", f"--reuid={ATTACKER}", f"--regid={ATTACKER}", "--clear-groups",
             sys.executable, "-c", _RENAMER, "20", str(canary / "rootdir"), str(base / "tmp"),
             str(base / "out")])
    env = {"TMPDIR": str(base / "tmp")}
    try:
        for go in (lambda: run_root("build", "--json", "--cache-dir", str(cache), "--pipeline",
                                    "unpack", "-o", str(base / "out" / "x.sqsh"), target.ref,
                                    env=env, timeout=90),
                   lambda: as_user(VICTIM, place, "build", "--json", "--cache-dir",
                                   str(cache), target.ref, env=env, timeout=90)):
            got = built_or_one_line(go())
            if got is not None and rename and got.parent == base / "out":
                # the renamer may move what root published in a directory she may write
                # (her right there) and put a link in its place: what matters is that
                # nothing of root's elsewhere changed, and that a file still named so and
                # root's is the registry's. Judged on one open file: a stat, then a read by
                # name, raced the renamer (the test failed, not the product).
                got = held_copy(got, base / "judged.sqsh")
            truthful(got, (0, VICTIM))
            assert snapshot(canary) == before
        proc = run_root("gc", "--max-size", "1", "--cache-dir", str(cache), env=env,
                        timeout=90)
        assert "Traceback" not in proc.stderr
        assert snapshot(canary) == before
    finally:
        if renamer is not None:
            renamer.kill()
            renamer.wait()
    shutil.rmtree(base, ignore_errors=True)


def held_copy(p: Path, copy: Path) -> Path | None:
    """A copy of what ``p`` names now, when that is a regular file of root's (None for a
    link, another's file or nothing), read through the one descriptor that was checked."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != 0:
            return None
        copy.write_bytes(f.read())
    return copy


_TARGETS: dict[str, Target] = {}


def _target(registry) -> Target:
    if registry.host not in _TARGETS:
        _TARGETS[registry.host] = Target(registry, "random")
    return _TARGETS[registry.host]
