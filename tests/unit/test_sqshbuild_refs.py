"""sqshbuild's references come from the C core's parser, archives included (issue 39).

The plugin and sqshbuild once split `oci-archive:5000/x` differently: a registry
`oci-archive:5000` for the plugin, a local file for sqshbuild. Now refs.parse_source takes
kind, path and tag from ``squall.core.parse_image_ref(text, archives=True)``.
"""

from __future__ import annotations

import os

import pytest

from squall.errors import SquallError
from squall.sqshbuild.refs import parse_source


@pytest.mark.parametrize(
    ("text", "kind", "path", "tag"),
    [
        ("docker-archive:5000/x", "docker-archive", "5000/x", ""),
        ("oci-archive:5000/x", "oci-archive", "5000/x", ""),
        ("oci:5000/x", "oci-dir", "5000/x", ""),
        ("oci:5000/x:v1", "oci-dir", "5000/x", "v1"),
    ],
)
def test_port_like_paths_are_local_sources(text, kind, path, tag):
    src = parse_source(text)
    assert (src.kind, src.path, src.tag) == (kind, os.path.abspath(path), tag)
    assert (src.registry, src.repository, src.digest) == ("", "", "")


def test_layout_tag_is_split_by_the_text_not_the_disk(tmp_path):
    # A directory named "a:b" exists; without a trailing '/' the last ':' still starts a
    # tag, so the same text means the same source on every node.
    (tmp_path / "a:b").mkdir()
    src = parse_source(f"oci:{tmp_path}/a:b")
    assert (src.path, src.tag) == (f"{tmp_path}/a", "b")
    src = parse_source(f"oci:{tmp_path}/a:b/")
    assert (src.path, src.tag) == (f"{tmp_path}/a:b", "")
    again = parse_source(src.canonical)  # the cache's key names the same directory
    assert (again.kind, again.path, again.tag) == ("oci-dir", src.path, "")


def test_registry_named_like_a_transport_is_docker_scheme():
    src = parse_source("docker://oci-archive:5000/x:v1")
    assert (src.kind, src.registry, src.repository, src.tag) == (
        "registry", "oci-archive:5000", "x", "v1")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("docker-archive:", "names no file (write docker-archive:FILE.tar)"),
        ("oci-archive:", "names no file (write oci-archive:FILE.tar)"),
        ("oci:", "names no directory (write oci:DIR[:TAG])"),
        ("oci:/x:", "empty tag after ':'"),
        ("oci:/x:a+b", "trailing '/'"),
        (" ubuntu", "character ' ' cannot appear"),
        ("ubuntu\n", "control character"),
        ("/fsx/x.sqsh", "is a squashfs file path, not an image to build"),
    ],
)
def test_refusals_are_one_line_naming_the_fix(text, needle):
    with pytest.raises(SquallError) as exc:
        parse_source(text)
    msg = str(exc.value)
    assert needle in msg and "\n" not in msg, msg
