"""containers-policy.json(5) scopes of the docker transport, as containers/image looks them up:
the image's own identity (repository:tag or repository@digest), then the repository and each
namespace above it, the registry, the wildcarded domains (*.example.com, port dropped), the
transport's "" and the global default. Most specific wins; no merging."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from squall.sqshbuild.policy import parse
from squall.sqshbuild.policy_names import ImageName, image_name, scope_names

DIGEST = "sha256:" + "ab" * 32


def test_the_names_a_tagged_image_is_looked_up_under_in_order():
    img = image_name("reg.example.com:5000", "team/ml/app", "v1", "")
    assert scope_names(img) == [
        "reg.example.com:5000/team/ml/app:v1", "reg.example.com:5000/team/ml/app",
        "reg.example.com:5000/team/ml", "reg.example.com:5000/team", "reg.example.com:5000",
        "*.example.com", "*.com"]


def test_a_digest_reference_is_its_own_identity_and_wins_over_the_tag():
    assert scope_names(image_name("login:5000", "a/b", "", DIGEST))[0] == \
        f"login:5000/a/b@{DIGEST}"
    # both given: the digest is what is pulled
    assert image_name("login:5000", "a/b", "v1", DIGEST).text == f"login:5000/a/b@{DIGEST}"


def test_docker_hub_is_docker_io_with_library():
    img = image_name("registry-1.docker.io", "library/ubuntu", "24.04", "")
    assert img == ImageName("docker.io/library/ubuntu", "24.04", "")
    assert scope_names(img) == ["docker.io/library/ubuntu:24.04", "docker.io/library/ubuntu",
                                "docker.io/library", "docker.io", "*.io"]


def test_a_registry_without_dots_has_no_wildcards():
    assert scope_names(image_name("login:5000", "a", "v1", ""))[-1] == "login:5000"


def policy(scopes: dict[str, str], default: str = "reject", tmp: Path = Path("/p.json"),
           transports: dict[str, object] | None = None):
    doc = {"default": [{"type": default}],
           "transports": {"docker": {s: [{"type": t}] for s, t in scopes.items()},
                          **(transports or {})}}
    return parse(json.dumps(doc).encode(), tmp)


@pytest.mark.parametrize(("scopes", "label"), [
    ({"login:5000/a/b:v1": "insecureAcceptAnything", "login:5000/a/b": "reject"},
     '"login:5000/a/b:v1"'),
    ({"login:5000/a/b": "insecureAcceptAnything", "login:5000/a": "reject"},
     '"login:5000/a/b"'),
    ({"login:5000/a": "insecureAcceptAnything", "login:5000": "reject"}, '"login:5000/a"'),
    ({"login:5000": "insecureAcceptAnything", "": "reject"}, '"login:5000"'),
    ({"": "insecureAcceptAnything"}, 'default scope ""'),
])
def test_the_most_specific_scope_wins(scopes, label):
    found = policy(scopes).lookup(image_name("login:5000", "a/b", "v1", ""))
    assert label in found.label
    assert [r.kind for r in found.requirements] == ["insecureAcceptAnything"]


def test_a_wildcard_scope_matches_subdomains_whatever_the_port():
    p = policy({"*.corp.example": "insecureAcceptAnything"})
    assert p.lookup(image_name("reg.corp.example:5000", "x", "v1", "")).label.endswith(
        '"*.corp.example" of transport docker')
    assert p.lookup(image_name("corp.example", "x", "v1", "")).label == "the global default"


def test_prefixes_match_whole_path_components_only():
    p = policy({"login:5000/team": "insecureAcceptAnything"})
    assert p.lookup(image_name("login:5000", "teammate/app", "v1", "")).label == \
        "the global default"
    assert "login:5000/team" in p.lookup(image_name("login:5000", "team/app", "v1", "")).label


def test_a_short_name_scope_never_matches_as_in_podman():
    """Scopes are fully expanded names: "busybox" is not docker.io/library/busybox."""
    p = policy({"busybox": "insecureAcceptAnything"})
    found = p.lookup(image_name("registry-1.docker.io", "library/busybox", "latest", ""))
    assert found.label == "the global default"


def test_other_transports_do_not_apply_to_registry_images():
    p = policy({}, transports={"docker-daemon": {"": [{"type": "insecureAcceptAnything"}]},
                               "oci": {"/data": [{"type": "insecureAcceptAnything"}]}})
    found = p.lookup(image_name("login:5000", "a", "v1", ""))
    assert found.label == "the global default" and found.requirements[0].kind == "reject"


def test_no_docker_transport_falls_to_the_default():
    p = parse(b'{"default": [{"type": "insecureAcceptAnything"}]}', Path("/p.json"))
    assert p.lookup(image_name("login:5000", "a", "v1", "")).label == "the global default"
