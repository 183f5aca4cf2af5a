"""--container-image parsing in the C core (spank/core/imageref.c), driven through cffi."""

import pytest

from squall.core import ImageRef, parse_image_ref
from squall.errors import SquallError

HEX = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "canonical"),
    [
        ("ubuntu:24.04", "registry-1.docker.io", "library/ubuntu", "24.04",
         "registry-1.docker.io/library/ubuntu:24.04"),
        ("ubuntu", "registry-1.docker.io", "library/ubuntu", "latest",
         "registry-1.docker.io/library/ubuntu:latest"),
        ("docker://ubuntu:24.04", "registry-1.docker.io", "library/ubuntu", "24.04",
         "registry-1.docker.io/library/ubuntu:24.04"),
        ("nvidia/cuda:12.4.1-base-ubuntu22.04", "registry-1.docker.io", "nvidia/cuda",
         "12.4.1-base-ubuntu22.04", "registry-1.docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04"),
        ("nvcr.io#nvidia/pytorch:24.05-py3", "nvcr.io", "nvidia/pytorch", "24.05-py3",
         "nvcr.io/nvidia/pytorch:24.05-py3"),
        ("docker://nvcr.io#nvidia/pytorch:24.05-py3", "nvcr.io", "nvidia/pytorch", "24.05-py3",
         "nvcr.io/nvidia/pytorch:24.05-py3"),
        ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io", "nvidia/pytorch", "24.05-py3",
         "nvcr.io/nvidia/pytorch:24.05-py3"),
        ("localhost:5000/team/img", "localhost:5000", "team/img", "latest",
         "localhost:5000/team/img:latest"),
        ("localhost/img:v1", "localhost", "img", "v1", "localhost/img:v1"),
        ("docker.io/library/debian:trixie", "registry-1.docker.io", "library/debian", "trixie",
         "registry-1.docker.io/library/debian:trixie"),
        ("docker.io/debian", "registry-1.docker.io", "library/debian", "latest",
         "registry-1.docker.io/library/debian:latest"),
        ("a__b/c-d.e---f_g:_T.a-g", "registry-1.docker.io", "a__b/c-d.e---f_g", "_T.a-g",
         "registry-1.docker.io/a__b/c-d.e---f_g:_T.a-g"),
    ],
)
def test_registry_forms(text, registry, repository, tag, canonical):
    ref = parse_image_ref(text)
    assert ref.kind == "registry"
    assert (ref.registry, ref.repository, ref.tag, ref.canonical) == (
        registry, repository, tag, canonical)
    assert ref.path is None and ref.digest is None


def test_bare_host_registry_keeps_enroot_hash_in_canonical():
    ref = parse_image_ref("myreg#team/img:1")
    assert (ref.registry, ref.repository, ref.tag) == ("myreg", "team/img", "1")
    assert ref.canonical == "myreg#team/img:1"
    assert parse_image_ref(ref.canonical) == ref


def test_user_is_kept_but_not_canonical():
    ref = parse_image_ref("$oauthtoken@nvcr.io#nvidia/pytorch:24.05-py3")
    assert ref.user == "$oauthtoken"
    assert ref.canonical == "nvcr.io/nvidia/pytorch:24.05-py3"


def test_digest_without_tag_has_no_default_tag():
    ref = parse_image_ref(f"ubuntu@sha256:{HEX}")
    assert ref.tag is None
    assert ref.digest == f"sha256:{HEX}"
    assert ref.canonical == f"registry-1.docker.io/library/ubuntu@sha256:{HEX}"


def test_tag_and_digest_and_user_together():
    ref = parse_image_ref(f"me@registry.example.com:443#ml/train:v2@sha256:{HEX}")
    assert ref == ImageRef(
        kind="registry", canonical=f"registry.example.com:443/ml/train:v2@sha256:{HEX}",
        user="me", registry="registry.example.com:443", repository="ml/train", tag="v2",
        digest=f"sha256:{HEX}")


@pytest.mark.parametrize("text", ["/fsx/images/pytorch.sqsh", "./x.sqsh", "../up/x.sqsh",
                                  "/données/image.sqsh", ".hidden"])
def test_paths_are_files(text):
    ref = parse_image_ref(text)
    assert ref.kind == "file"
    assert ref.path == text and ref.canonical == text
    assert ref.registry is None


def test_dockerd_keeps_daemon_names():
    ref = parse_image_ref("dockerd://ubuntu:24.04")
    assert ref.kind == "dockerd"
    assert ref.registry is None and ref.repository == "ubuntu"
    assert ref.canonical == "dockerd://ubuntu:24.04"
    ref = parse_image_ref("dockerd://localhost:5000/x")
    assert ref.registry == "localhost:5000" and ref.canonical == "dockerd://localhost:5000/x:latest"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty value"),
        ("Ubuntu:24.04", "must be lower-case"),
        ("ubuntu:", "empty tag"),
        ("ubuntu:-bad", "invalid tag"),
        ("ubuntu:" + "t" * 129, "invalid tag"),
        ("ubuntu@sha256:1234", "malformed digest"),
        (f"ubuntu@sha256:{HEX.upper()}", "malformed digest"),
        (f"ubuntu@sha512:{HEX}{HEX}", "unsupported digest"),
        ("a@b@c", "more than one '@'"),
        ("@nvcr.io#x", "invalid user"),
        ("nvcr.io#", "empty image name"),
        ("#ubuntu", "empty registry"),
        ("a#b#c", "more than one '#'"),
        ("nvcr..io#x", "invalid registry"),
        ("-nvcr.io#x", "invalid registry"),
        ("nvcr.io:99999#x", "invalid registry"),
        ("nvcr.io:#x", "invalid registry"),
        ("team//img", "empty path component"),
        ("team/img/", "empty path component"),
        ("a..b", "invalid repository"),
        ("-a", "invalid repository"),
        ("a_-b", "invalid repository"),
        ("x" * 256, "limit is 255"),
        ("podman://ubuntu", "unsupported scheme 'podman://'"),
        ("docker://", "empty image name"),
        ("docker:///abs/path", "a path after the scheme"),
        ("ubuntu;rm -rf /", "cannot appear"),
        ("$(id)", "cannot appear"),
        ("ub$untu", "'$'"),
        ("ubuntu\n", "control character"),
        ("ubuntu\t24", "control character"),
        ("dockerd://me@ubuntu", "take no USER@"),
        ("dockerd://r.io#ubuntu", "take no REGISTRY#"),
        ("/" + "a" * 5000, "limit is 4095"),
    ],
)
def test_bad_references_name_the_problem(text, needle):
    with pytest.raises(SquallError) as exc:
        parse_image_ref(text)
    msg = str(exc.value)
    assert msg.startswith("--container-image:"), msg
    assert needle in msg, msg
    assert "\n" not in msg


def test_non_utf8_bytes_are_refused_with_offset():
    with pytest.raises(SquallError, match=r"not valid UTF-8 \(byte 0xff at offset 3"):
        parse_image_ref(b"ubu\xffntu")
    with pytest.raises(SquallError, match="not valid UTF-8"):
        parse_image_ref(b"/fsx/\xc0\xafimage.sqsh")  # overlong '/'
    with pytest.raises(SquallError, match="not valid UTF-8"):
        parse_image_ref(b"/fsx/\xed\xa0\x80.sqsh")  # UTF-16 surrogate


def test_nul_is_refused_not_truncated():
    with pytest.raises(SquallError, match="NUL"):
        parse_image_ref("ubuntu\0;evil")


def test_overlong_value_message_stays_short():
    with pytest.raises(SquallError) as exc:
        parse_image_ref("a" * 300)
    assert len(str(exc.value)) < 400
