"""Layer merge semantics: whiteouts, opaque dirs, replacement, links, normalisation, escapes."""

from __future__ import annotations

import os
import stat

import pytest
from layer_tars import (
    LAYER_KINDS,
    file_layers,
    layers,
    merged_dir,
    merged_tar,
    read_layers_as,
    tar_layer,
)

from squall.errors import SquallError


@pytest.fixture(autouse=True, params=LAYER_KINDS)
def layer_kind(request, tmp_path_factory):
    """Every test runs on layers read as streams (archives: tarfile) and as files (the layer
    cache: tarhead's reader and sendfile)."""
    yield from read_layers_as(request.param, tmp_path_factory)


BASE = tar_layer(
    ("dir", "a"), ("file", "a/keep", "k"), ("file", "a/gone", "g"),
    ("dir", "b"), ("file", "b/x", "x"), ("dir", "b/sub"), ("file", "b/sub/y", "y"),
    ("dir", "c"), ("file", "c/z", "z"), ("dir", "d"), ("file", "d/w", "w"),
    ("symlink", "s", "a"), ("file", "f", "file"),
)
UPPER = tar_layer(
    ("file", "a/.wh.gone", ""),                 # whiteout one file
    ("file", ".wh.c", ""),                      # whiteout a whole directory
    ("dir", "b"), ("file", "b/.wh..wh..opq", ""), ("file", "b/new", "n"),  # opaque
    ("file", "d", "now a file"),                # a file replaces a directory
    ("dir", "s"), ("file", "s/in", "i"),        # a directory replaces a symlink
    ("file", "f", "changed"),
)


@pytest.mark.parametrize("sink", ["tar", "dir"])
def test_whiteouts_opaque_and_replacement(sink, tmp_path):
    expected = {"a", "a/keep", "b", "b/new", "d", "s", "s/in", "f"}
    if sink == "tar":
        got = merged_tar(layers(BASE, UPPER))
        assert set(got) == expected
        assert got["d"].isfile() and got["s"].isdir()
    else:
        got_dir = merged_dir(layers(BASE, UPPER), tmp_path / "r")
        assert got_dir == expected
        assert (tmp_path / "r/f").read_text() == "changed"
        assert (tmp_path / "r/d").read_text() == "now a file"


def test_recreated_after_whiteout_shows_only_new_content():
    third = tar_layer(("dir", "c"), ("file", "c/again", "1"))
    got = merged_tar(layers(BASE, UPPER, third))
    assert {n for n in got if n.startswith("c")} == {"c", "c/again"}


def test_root_opaque_hides_everything_below():
    top = tar_layer(("file", ".wh..wh..opq", ""), ("file", "only", "o"))
    assert set(merged_tar(layers(BASE, top))) == {"only"}


def test_ownership_and_modes_are_normalised_like_enroot(tmp_path):
    t = tar_layer(("file", "suid", "s", 0o4755), ("file", "none", "n", 0o000),
                  ("file", "gx", "x", 0o010), ("dir", "ro", 0o555), ("file", "ro/f", "f", 0o444))
    got = merged_tar(layers(t))
    assert {(m.uid, m.gid, m.uname) for m in got.values()} == {(0, 0, "root")}
    assert got["suid"].mode == 0o4755
    assert got["none"].mode == 0o400
    assert got["gx"].mode == 0o510
    assert got["ro"].mode == 0o755
    merged_dir(layers(t), tmp_path / "r")
    assert stat.S_IMODE((tmp_path / "r/suid").stat().st_mode) == 0o4755
    assert stat.S_IMODE((tmp_path / "r/ro").stat().st_mode) == 0o755


def test_devices_and_dev_contents_are_skipped():
    t = tar_layer(("dir", "dev"), ("chr", "dev/null"), ("file", "dev/x", "x"), ("chr", "tty0"),
                  ("file", "ok", "ok"))
    assert set(merged_tar(layers(t))) == {"dev", "ok"}


@pytest.mark.parametrize("sink", ["tar", "dir"])
def test_hardlinks_are_written_after_their_target(sink, tmp_path):
    t = tar_layer(("hardlink", "early", "bin/tool"), ("dir", "bin"), ("file", "bin/tool", "T"))
    if sink == "tar":
        got = merged_tar(layers(t))
        assert got["early"].islnk() and got["early"].linkname == "bin/tool"
    else:
        merged_dir(layers(t), tmp_path / "r")
        assert os.path.samefile(tmp_path / "r/early", tmp_path / "r/bin/tool")


def test_dangling_hardlink_is_an_error():
    t = tar_layer(("hardlink", "h", "missing"))
    with pytest.raises(SquallError, match="hard link 'h'"):
        merged_tar(layers(t))


@pytest.mark.parametrize("entries,named", [
    ([("file", "../x", "x")], "../x"),
    ([("file", "a/../../x", "x")], "a/../../x"),
    ([("file", "/etc/passwd", "x")], "/etc/passwd"),
    ([("symlink", "l", "/"), ("file", "l/etc/passwd", "x")], "l/etc/passwd"),
    ([("file", "l/x", "x"), ("symlink", "l", "/")], "'l'"),
    ([("file", "l/.wh.x", ""), ("symlink", "l", "/"), ("file", "l/etc/passwd", "x")],
     "l/etc/passwd"),  # a whiteout below l does not make l a known directory
    ([("file", "a/b/x", "x"), ("symlink", "a", "/")], "'a'"),
    ([("hardlink", "h", "../../etc/shadow")], "../../etc/shadow"),
])
def test_escapes_are_refused_naming_layer_and_entry(entries, named, tmp_path):
    ls = layers(tar_layer(("file", "ok", "ok")), tar_layer(*entries))
    for run in (lambda: merged_tar(ls), lambda: merged_dir(ls, tmp_path / "r")):
        with pytest.raises(SquallError) as exc:
            run()
        assert f"sha256:{1:064d}" in str(exc.value) and named in str(exc.value)


def test_lower_symlink_does_not_redirect_upper_files(tmp_path):
    # usr/lib in the upper layer must not be written through a lower symlink usr/lib -> /
    lower = tar_layer(("dir", "usr"), ("symlink", "usr/lib", "/"))
    upper = tar_layer(("file", "usr/lib/evil", "x"))
    got = merged_dir(layers(lower, upper), tmp_path / "r")
    assert "usr/lib/evil" in got and (tmp_path / "r/usr/lib").is_dir()
    assert not (tmp_path / "evil").exists()


def test_synthetic_files_win_and_workdir_is_created():
    t = tar_layer(("dir", "etc", 0o700), ("file", "etc/rc", "old"))
    got = merged_tar(layers(t), synthetic={"etc/rc": (b"new", 0o755)},
                     ensure_dirs=["/work/dir"])
    assert got["etc"].mode == 0o700  # the layer's own /etc metadata is kept
    assert got["work/dir"].isdir()
    assert got["etc/rc"].size == 3


def test_not_a_tar_is_a_clear_error():
    with pytest.raises(SquallError, match="not a tar archive|truncated or corrupt"):
        merged_tar(layers(b"this is not a tar archive at all" * 40))


@pytest.mark.parametrize("sink", ["tar", "dir"])
def test_hard_link_outlives_its_deleted_or_replaced_target(sink, tmp_path):
    lower = tar_layer(("file", "perl", "old perl"), ("hardlink", "perl5", "perl"),
                      ("file", "keep", "k"), ("hardlink", "keep2", "keep"))
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    # perl5 deleted, perl replaced by a new file; keep2 still linked to keep
    ls = file_layers(tmp_path / "one", lower,
                     tar_layer(("file", ".wh.perl5", "")), tar_layer(("file", "perl", "new perl")))
    # only the link's target deleted: the link keeps the old content as a file of its own
    ls2 = file_layers(tmp_path / "two", lower, tar_layer(("file", ".wh.perl", "")))
    if sink == "tar":
        got = merged_tar(ls)
        assert set(got) == {"perl", "keep", "keep2"}
        assert got["keep2"].islnk()
        got2 = merged_tar(ls2)
        assert set(got2) == {"perl5", "keep", "keep2"} and got2["perl5"].isfile()
        assert got2["perl5"].size == len("old perl")
    else:
        merged_dir(ls, tmp_path / "r1")
        assert (tmp_path / "r1/perl").read_text() == "new perl"
        assert os.path.samefile(tmp_path / "r1/keep", tmp_path / "r1/keep2")
        merged_dir(ls2, tmp_path / "r2")
        assert (tmp_path / "r2/perl5").read_text() == "old perl"
        assert not (tmp_path / "r2/perl").exists()


def test_hard_link_to_a_replaced_target_keeps_its_own_content(tmp_path):
    lower = tar_layer(("file", "a", "old"), ("hardlink", "b", "a"))
    upper = tar_layer(("file", "a", "new"))
    merged_dir(file_layers(tmp_path, lower, upper), tmp_path / "r")
    assert (tmp_path / "r/a").read_text() == "new"
    assert (tmp_path / "r/b").read_text() == "old"


def test_duplicate_entry_in_one_layer_keeps_the_first(tmp_path):
    t = tar_layer(("file", "x", "first"), ("file", "x", "second"))
    got = merged_tar(layers(t))
    assert list(got) == ["x"] and got["x"].size == len("first")
    merged_dir(layers(t), tmp_path / "r")
    assert (tmp_path / "r/x").read_text() == "first"
