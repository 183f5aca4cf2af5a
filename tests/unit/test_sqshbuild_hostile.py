"""Hostile images (issue 11): a WorkingDir below an in-image symlink, symlinks pointing out
of the root, and a hard link whose target an upper layer replaces. Every case runs on both
pipelines (a tar stream for tar2sqfs, a directory for mksquashfs) and on layers read as
streams and as files (the autouse fixture layer_kind, as in test_sqshbuild_unpack)."""

from __future__ import annotations

import os

import pytest
from layer_tars import LAYER_KINDS, layers, merged_dir, merged_tar, read_layers_as, tar_layer

from squall.errors import SquallError


@pytest.fixture(autouse=True, params=LAYER_KINDS)
def layer_kind(request, tmp_path_factory):
    """Every test runs on layers read as streams and as files (layer_tars.read_layers_as)."""
    yield from read_layers_as(request.param, tmp_path_factory)


@pytest.mark.parametrize("link", ["opt/app", "/opt/app", "../../../opt/app",
                                  "../opt/app", "/../opt/./app"])
def test_workdir_below_a_symlink_resolves_in_the_image(link, tmp_path):
    image = tar_layer(("dir", "opt"), ("dir", "opt/app"), ("symlink", "app", link))
    got = merged_tar(layers(image), ensure_dirs=["/app/src"])
    assert got["app"].issym() and got["opt/app/src"].isdir()
    assert "app/src" not in got
    if link.startswith("/"):
        return  # the directory pipeline with an absolute link: the next test, in tmp_path
    root = tmp_path / "x/y/z/r"  # deep enough that an unresolved ../../../ stays in tmp_path
    merged_dir(layers(image), root, ensure_dirs=["/app/src"])
    assert (root / "opt/app/src").is_dir() and (root / "app").is_symlink()
    assert not (tmp_path / "opt").exists() and not (tmp_path / "x/opt").exists()


def test_workdir_symlink_out_of_the_root_never_creates_a_host_directory(tmp_path):
    """/app -> <a host directory>: resolved against the image root, never the host."""
    host = tmp_path / "host-side"
    image = tar_layer(("symlink", "app", str(host)))
    merged_dir(layers(image), tmp_path / "r", ensure_dirs=["/app/src"])
    assert not host.exists()
    assert (tmp_path / "r" / str(host).lstrip("/") / "src").is_dir()
    got = merged_tar(layers(image), ensure_dirs=["/app/src"])
    assert got[str(host).lstrip("/") + "/src"].isdir()


def test_workdir_relative_escape_stays_in_the_root(tmp_path):
    (tmp_path / "r").mkdir()
    image = tar_layer(("dir", "d"), ("symlink", "d/up", "../../../../escaped"))
    merged_dir(layers(image), tmp_path / "r/root", ensure_dirs=["/d/up/src"])
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "r/escaped").exists()
    assert (tmp_path / "r/root/escaped/src").is_dir()


def test_workdir_existing_through_symlink_adds_nothing():
    image = tar_layer(("dir", "opt"), ("dir", "opt/app"), ("dir", "opt/app/src"),
                      ("symlink", "app", "opt/app"))
    got = merged_tar(layers(image), ensure_dirs=["/app/src"])
    assert sorted(got) == ["app", "opt", "opt/app", "opt/app/src"]


def test_workdir_through_a_file_or_a_loop_is_one_line_error(tmp_path):
    cases = [(tar_layer(("file", "app", "x")), "'app', which is a file"),
             (tar_layer(("symlink", "a", "b"), ("symlink", "b", "a")), "symlink loop")]
    for i, (image, what) in enumerate(cases):
        for run in (lambda image=image: merged_tar(layers(image),
                                                   ensure_dirs=["/a/src", "/app/src"]),
                    lambda image=image, i=i: merged_dir(layers(image), tmp_path / f"r{i}",
                                                        ensure_dirs=["/app/src", "/a/src"])):
            with pytest.raises(SquallError) as exc:
                run()
            assert "working directory" in str(exc.value) and what in str(exc.value)
            assert "\n" not in str(exc.value)


def test_symlink_hidden_by_upper_whiteout_is_not_followed(tmp_path):
    lower = tar_layer(("symlink", "app", "/etc"))
    upper = tar_layer(("file", ".wh.app", ""))
    got = merged_tar(layers(lower, upper), ensure_dirs=["/app/src"])
    assert got["app/src"].isdir() and "etc/src" not in got


@pytest.mark.parametrize("sink", ["tar", "dir"])
def test_hard_link_keeps_content_when_upper_replaces_target(sink, tmp_path):
    """umoci's and overlayfs's result, on streamed layers too (archives, OCI layouts)."""
    lower = tar_layer(("file", "a", "old"), ("hardlink", "b", "a"), ("hardlink", "c", "a"))
    upper = tar_layer(("file", "a", "new!"))
    if sink == "tar":
        got = merged_tar(layers(lower, upper))
        assert got["a"].size == 4
        assert got["b"].isfile() and got["b"].size == 3
        assert got["c"].islnk() and got["c"].linkname == "b" or got["c"].size == 3
    else:
        merged_dir(layers(lower, upper), tmp_path / "r")
        assert (tmp_path / "r/a").read_text() == "new!"
        assert (tmp_path / "r/b").read_text() == "old" == (tmp_path / "r/c").read_text()
        assert os.path.samefile(tmp_path / "r/b", tmp_path / "r/c")
