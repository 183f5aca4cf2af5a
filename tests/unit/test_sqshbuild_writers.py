"""Root and the builder never touch what another user made (docs/security.md): the walk to
a directory, scratch trees in TMPDIR, ``-o`` targets, the conversion of an old cache.
Another user is a uid nobody trusts, its entries made by root and chowned (the registry
tier runs the same attacks as a real second user through setpriv)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from squall.errors import SquallError
from squall.sqshbuild import fdtree, safefs
from squall.sqshbuild.cache import convert
from squall.sqshbuild.cache.image_cache import open_shared
from squall.sqshbuild.cache.leftovers import remove_dead_work_dirs
from squall.sqshbuild.outpath import OutputTarget
from squall.sqshbuild.trust import BUILDER_ENV, Trust

OTHER = 4242
pytestmark = pytest.mark.needs_root("chown to another user")


@pytest.fixture(autouse=True)
def _no_builder(monkeypatch):
    monkeypatch.setenv(BUILDER_ENV, "none")


def _theirs(p: Path) -> Path:
    os.lchown(p, OTHER, OTHER)
    return p


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_the_walk_follows_roots_links_and_refuses_another_users(tmp_path):
    real = tmp_path / "lustre"
    real.mkdir()
    (tmp_path / "fsx").symlink_to(real)  # the admin's /fsx -> /mnt/lustre
    fd, where = safefs.walk(tmp_path / "fsx", Trust.shared(), dirs=Trust.shared())
    os.close(fd)
    assert where == real
    _theirs(tmp_path / "fsx")
    with pytest.raises(safefs.Unsafe, match="symlink of 4242's"):
        safefs.walk(tmp_path / "fsx" / "squall", Trust.shared())


def test_a_link_above_the_cache_root_is_not_followed(tmp_path):
    """A user's fsx/squall -> <root's directory>: the cache is not created in there
    (was: mode 1777, inside root's directory)."""
    fsx = tmp_path / "fsx"
    fsx.mkdir()
    os.chmod(fsx, 0o1777)
    roots = tmp_path / "roots"
    roots.mkdir(mode=0o700)
    (fsx / "squall").symlink_to(roots)
    _theirs(fsx / "squall")
    with pytest.raises(SquallError, match="symlink of 4242's"):
        open_shared(fsx / "squall" / "images")
    assert os.listdir(roots) == [] and stat.S_IMODE(roots.stat().st_mode) == 0o700


def test_root_removes_only_its_own_dead_scratch_trees(tmp_path):
    """A dead-looking sqshbuild-*-<host>.<pid>.* directory of another user in a 1777
    TMPDIR, with a link inside to root's directory: root's cleanup neither enters nor
    changes it, nor TMPDIR (was: TMPDIR chmodded 0700, root's files deleted)."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    os.chmod(tmpdir, 0o1777)
    victim = tmp_path / "etc"
    victim.mkdir()
    (victim / "passwd").write_text("root:x:0:0\n")
    name = f"sqshbuild-rootfs-{socket.gethostname()}.{_dead_pid()}."
    theirs = tmpdir / (name + "alice")
    theirs.mkdir()
    (theirs / "inner").symlink_to(victim)
    _theirs(theirs / "inner")
    _theirs(theirs)
    os.chmod(theirs, 0o555)
    mine = tmpdir / (name + "root")
    (mine / "rootfs" / "ro").mkdir(parents=True)
    (mine / "rootfs" / "ro" / "f").write_text("x")
    (mine / "rootfs" / "link").symlink_to(victim)
    os.chmod(mine / "rootfs" / "ro", 0o555)
    os.chmod(mine, 0o700)
    removed = remove_dead_work_dirs(tmpdir)
    assert [p for p, _ in removed] == [mine]
    assert theirs.is_dir() and (theirs / "inner").is_symlink()
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o555
    assert stat.S_IMODE(tmpdir.stat().st_mode) == 0o1777
    assert (victim / "passwd").read_text() == "root:x:0:0\n"


def test_remove_tree_removes_a_swapped_in_link_as_a_link(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("k")
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "b").symlink_to(victim)
    fdtree.remove_path(str(tree))
    assert not tree.exists() and (victim / "keep").read_text() == "k"


def test_an_output_target_that_is_a_link_or_anothers_file_is_refused(tmp_path):
    out = tmp_path / "shared"
    out.mkdir()
    os.chmod(out, 0o777)  # a directory others can write, without the sticky bit
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    os.chmod(secret, 0o600)
    (out / "x.sqsh").symlink_to(secret)
    _theirs(out / "x.sqsh")
    with pytest.raises(SquallError, match="exists and is a symlink"):
        OutputTarget(out / "x.sqsh")
    (out / "y.sqsh").write_text("theirs")
    _theirs(out / "y.sqsh")
    with pytest.raises(SquallError, match="is not yours"):
        OutputTarget(out / "y.sqsh")
    assert secret.read_text() == "root's\n" and stat.S_IMODE(secret.stat().st_mode) == 0o600


def test_an_output_is_written_in_a_private_directory_and_renamed_into_place(tmp_path):
    out = tmp_path / "shared"
    out.mkdir()
    os.chmod(out, 0o777)
    (out / "z.sqsh").write_text("my old image")
    with OutputTarget(out / "z.sqsh") as target:
        work = [p for p in out.iterdir() if p.name.startswith("sqshbuild-out-")]
        assert len(work) == 1 and stat.S_IMODE(work[0].stat().st_mode) == 0o700
        # a name planted meanwhile in the shared directory changes nothing
        os.rename(work[0], out / "moved-away")
        (out / work[0].name).symlink_to(tmp_path)
        target.temp.write_bytes(b"hsqs new")
        target.write_sidecar("{}")
        assert target.publish() == out / "z.sqsh"
    assert (out / "z.sqsh").read_bytes() == b"hsqs new"
    assert (out / "z.json").read_text() == "{}"
    assert stat.S_IMODE((out / "z.sqsh").stat().st_mode) == 0o644
    assert (out / work[0].name).is_symlink()  # not ours: left alone


def test_convert_moves_trusted_entries_and_leaves_the_rest(tmp_path):
    old = tmp_path / "images"
    (old / "layers" / "sha256").mkdir(parents=True)
    os.chmod(old, 0o1777)
    d = "sha256-" + "1" * 64
    (old / f"{d}.sqsh").write_bytes(b"hsqs")
    (old / f"{d}.json").write_text("{}")
    (old / "layers" / "sha256" / ("2" * 64 + ".tar")).write_bytes(b"t")
    bad = "sha256-" + "3" * 64
    (old / f"{bad}.sqsh").write_bytes(b"hsqs alice")
    _theirs(old / f"{bad}.sqsh")
    with pytest.raises(SquallError, match="convert-cache"):
        open_shared(old)
    done = convert.convert(old)
    assert sorted(done.moved) == sorted([f"{d}.json", f"{d}.sqsh",
                                         "layers/sha256/" + "2" * 64 + ".tar"])
    assert done.left >= 1 and (done.old / f"{bad}.sqsh").exists()
    cache = open_shared(old)
    assert cache.has("sha256:" + "1" * 64) and not (old / f"{bad}.sqsh").exists()
    assert stat.S_IMODE(old.stat().st_mode) == 0o755


def _old_cache_with_swapped_layers(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """An earlier squall's cache whose layers/ a user made: root's layer files in it, two
    of them swapped by her (issue 39), beside a plain layer and a config whose bytes hash
    to their names, and one config that does not."""
    import gzip
    import hashlib
    old = tmp_path / "images"
    sha = old / "layers" / "sha256"
    sha.mkdir(parents=True)
    os.chmod(old, 0o1777)

    def name(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    base, app = b"base layer tar" * 50, b"app layer tar" * 50
    gz_base, gz_app = name(gzip.compress(base)), name(gzip.compress(app))
    plain, config = b"a plain layer's tar" * 50, b'{"rootfs": {}}'
    files = {f"{gz_base}.tar": app, f"{gz_app}.tar": base,   # swapped
             f"{name(plain)}.tar": plain, f"{name(config)}.config": config,
             "f" * 64 + ".config": b'{"not": "its name"}'}
    for n, data in files.items():
        (sha / n).write_bytes(data)
        if n.endswith(".tar"):
            (sha / (n[:-4] + ".ok")).write_bytes(b"")
    for d in (old / "layers", sha):
        _theirs(d)   # her first build made them
    d = "sha256-" + "1" * 64
    (old / f"{d}.sqsh").write_bytes(b"hsqs")
    (old / f"{d}.json").write_text("{}")
    return old, {"plain": name(plain), "config": name(config), "base": gz_base,
                 "app": gz_app, "image": d}


def test_convert_moves_only_proven_layers_out_of_a_directory_a_user_wrote(tmp_path, caplog):
    """Her directory: names prove nothing, so layers and configs are re-hashed; the plain
    layer and the config move (a fresh .ok), the swapped inflated layers stay behind;
    the images in root's sticky directory move as before."""
    old, n = _old_cache_with_swapped_layers(tmp_path)
    done = convert.convert(old)
    layers = old / "layers" / "sha256"
    assert sorted(p.name for p in layers.iterdir()) == sorted(
        [f"{n['plain']}.tar", f"{n['plain']}.ok", f"{n['config']}.config"])
    assert stat.S_IMODE((layers / f"{n['plain']}.ok").stat().st_mode) == 0o644
    assert f"{n['image']}.sqsh" in done.moved and f"{n['image']}.json" in done.moved
    kept = done.old / "layers" / "sha256"
    assert (kept / f"{n['base']}.tar").read_bytes().startswith(b"app layer tar")
    assert (kept / f"{n['app']}.tar").exists() and (kept / ("f" * 64 + ".config")).exists()
    assert done.unproven == {"layers/sha256": (
        "layers belongs to 4242, who is not root", 3)}
    cache = open_shared(old)
    assert not cache.has("sha256:" + "2" * 64)
    assert any("so a name there proves nothing: 3 layers and configs" in r.getMessage()
               for r in caplog.records), caplog.text


def test_convert_leaves_images_of_a_directory_a_group_could_write(tmp_path):
    """A 2775 cache: any of the group could have swapped root's images: none moves."""
    old, n = _old_cache_with_swapped_layers(tmp_path)
    os.chmod(old, 0o2775)
    for d in (old / "layers", old / "layers" / "sha256"):
        os.lchown(d, 0, 0)
    done = convert.convert(old)
    assert not (old / f"{n['image']}.sqsh").exists()
    assert (done.old / f"{n['image']}.sqsh").exists()
    assert done.unproven[""] == ("images is writable by its group (mode 2775)", 2)
    assert sorted(done.moved) == sorted(["layers/sha256/" + n["plain"] + ".tar",
                                         "layers/sha256/" + n["config"] + ".config"])
