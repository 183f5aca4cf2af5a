"""Archives and OCI layouts in the C core's reference parser (issue 39).

`docker-archive:`, `oci-archive:` and `oci:` are transports, as in skopeo and podman: the
text after them is a path, never a registry host that happens to be named like them. The
plugin refuses them in one line that says how to build a .sqsh from them; sqshbuild
(``archives=True``) takes their kind and path from the same parse.
"""

from __future__ import annotations

import pytest

from squall.core import parse_image_ref
from squall.errors import SquallError

PORT_LIKE = [
    ("docker-archive:5000/x", "docker-archive", "5000/x", None),
    ("oci-archive:5000/x", "oci-archive", "5000/x", None),
    ("oci:5000/x", "oci-dir", "5000/x", None),
    ("oci-archive:5000/team/img:v1", "oci-archive", "5000/team/img:v1", None),
    ("oci:5000/team/img:v1", "oci-dir", "5000/team/img", "v1"),
]


@pytest.mark.parametrize(("text", "kind", "path", "tag"), PORT_LIKE)
def test_port_like_paths_are_archives_for_sqshbuild(text, kind, path, tag):
    ref = parse_image_ref(text, archives=True)
    assert (ref.kind, ref.path, ref.tag) == (kind, path, tag)
    assert ref.registry is None and ref.repository is None and ref.digest is None
    assert parse_image_ref(ref.canonical, archives=True) == ref


@pytest.mark.parametrize("text", [t for t, *_ in PORT_LIKE])
def test_plugin_refuses_archives_naming_sqshbuild(text):
    with pytest.raises(SquallError) as exc:
        parse_image_ref(text)
    msg = str(exc.value)
    assert msg.startswith(f"--container-image: '{text}': "), msg
    assert f"sqshbuild build -o IMAGE.sqsh {text}" in msg, msg
    assert "--container-image=./IMAGE.sqsh" in msg, msg
    assert "\n" not in msg and len(msg) < 400, msg


@pytest.mark.parametrize(
    ("text", "path", "tag"),
    [
        ("oci:/some/dir", "/some/dir", None),
        ("oci:/some/dir:v2", "/some/dir", "v2"),
        ("oci:./layout:v1", "./layout", "v1"),
        ("oci:layout", "layout", None),
        # The last ':' starts a tag only when no '/' follows it: a directory whose name
        # holds ':' is written with a trailing '/', with or without a tag after it.
        ("oci:/data/img:v1/", "/data/img:v1/", None),
        ("oci:/data/img:v1/:latest", "/data/img:v1/", "latest"),
        ("oci:/a:b/c", "/a:b/c", None),
        ("oci:/a:b:c", "/a:b", "c"),
    ],
)
def test_oci_layout_tag_is_decided_by_the_text(text, path, tag):
    ref = parse_image_ref(text, archives=True)
    assert (ref.kind, ref.path, ref.tag) == ("oci-dir", path, tag)
    assert parse_image_ref(ref.canonical, archives=True) == ref


def test_archive_path_is_taken_whole():
    ref = parse_image_ref("docker-archive:/tmp/a:b.tar", archives=True)
    assert (ref.kind, ref.path, ref.tag) == ("docker-archive", "/tmp/a:b.tar", None)
    assert ref.canonical == "docker-archive:/tmp/a:b.tar"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("docker-archive:", "names no file (write docker-archive:FILE.tar)"),
        ("oci-archive:", "names no file (write oci-archive:FILE.tar)"),
        ("oci:", "names no directory (write oci:DIR[:TAG])"),
        ("oci::v1", "names no directory (write oci:DIR[:TAG])"),
        ("oci:/x:", "empty tag after ':'"),
        ("oci:/x:-v", "invalid tag '-v'"),
        ("oci:/x:a+b", "trailing '/'"),
    ],
)
def test_bad_archive_forms_name_the_problem(text, needle):
    for archives in (True, False):
        with pytest.raises(SquallError) as exc:
            parse_image_ref(text, archives=archives)
        msg = str(exc.value)
        assert msg.startswith("--container-image:") and needle in msg, msg
        assert "\n" not in msg, msg


@pytest.mark.parametrize(
    ("text", "registry", "repository"),
    [
        ("docker://oci-archive:5000/x", "oci-archive:5000", "x"),
        ("docker://docker-archive:5000/x", "docker-archive:5000", "x"),
        ("docker://oci:5000/x", "oci:5000", "x"),
        ("OCI:5000/x", "OCI:5000", "x"),  # transports are lower-case, as in skopeo
        ("oci-archive/x", "registry-1.docker.io", "oci-archive/x"),
    ],
)
def test_registry_named_like_a_transport_needs_docker_scheme(text, registry, repository):
    for archives in (True, False):
        ref = parse_image_ref(text, archives=archives)
        assert (ref.kind, ref.registry, ref.repository) == ("registry", registry, repository)
        # Its canonical form keeps docker:// where it would read back as an archive.
        assert parse_image_ref(ref.canonical, archives=archives) == ref


def test_transport_like_registry_canonical_keeps_docker_scheme():
    assert parse_image_ref("docker://oci:5000/x").canonical == "docker://oci:5000/x:latest"
    assert parse_image_ref("oci.io:5000/x").canonical == "oci.io:5000/x:latest"


def test_other_forms_parse_the_same_either_way():
    for text in ("ubuntu:24.04", "/fsx/x.sqsh", "./x.sqsh", "dockerd://ubuntu",
                 "$oauthtoken@nvcr.io#nvidia/pytorch:24.05-py3", "login:5000/team/app:v3"):
        assert parse_image_ref(text, archives=True) == parse_image_ref(text)
