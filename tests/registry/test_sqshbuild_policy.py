"""The site image policy, containers-policy.json(5), against Debian's real docker-registry:
images pushed there, and cosign's signatures beside them (the ``sha256-<digest>.sig`` tag,
a simple-signing payload, ECDSA P-256 over it) made here with a key made in the test, as
``cosign sign --key`` stores them. Each case calls the builder's check directly with a
RegistryClient, as the build does once it knows the manifest's digest."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Registry, one_error_line, run_env, sqshbuild_cmd
from imagekit import OCI_CONFIG, OCI_MANIFEST, Image, index, layer, sha

from gate import missing
from squall.errors import SquallError
from squall.sqshbuild.policy import PolicyRefused, check_image
from squall.sqshbuild.refs import Source
from squall.sqshbuild.registry import RegistryClient

pytestmark = pytest.mark.registry

try:
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
except ImportError:  # pragma: no cover - the gate says how to get it
    ec = None

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"


@pytest.fixture(scope="module")
def keys() -> tuple[Any, Any]:
    """The site's key and another one (cosign generate-key-pair makes ECDSA P-256)."""
    if ec is None:
        missing("the cryptography Python module is not installed",
                "apt-get install python3-cryptography")
    return ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())


def pem(key: Any) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def payload(digest: str, reference: str) -> bytes:
    """What cosign signs: its simple-signing payload (optional: null without -a)."""
    return json.dumps({"critical": {"identity": {"docker-reference": reference},
                                    "image": {"docker-manifest-digest": digest},
                                    "type": "cosign container image signature"},
                       "optional": None}).encode()


def push_signatures(reg: Registry, repo: str, digest: str,
                    signed: list[tuple[Any, bytes]]) -> str:
    """cosign's signature manifest for ``digest``: one simple-signing layer per signature,
    its base64 ECDSA signature in the layer's annotation; tag sha256-<hex>.sig."""
    headers: dict[str, str] = {}
    config = json.dumps({"architecture": "", "os": "", "config": {},
                         "rootfs": {"type": "layers",
                                    "diff_ids": [sha(p) for _, p in signed]}}).encode()
    reg.pusher.blob(repo, config, headers)
    layers = []
    for key, body in signed:
        reg.pusher.blob(repo, body, headers)
        sig = key.sign(body, ec.ECDSA(hashes.SHA256()))
        layers.append({"mediaType": SIMPLE_SIGNING, "size": len(body), "digest": sha(body),
                       "annotations": {SIGNATURE_ANNOTATION: base64.b64encode(sig).decode()}})
    doc = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
           "config": {"mediaType": OCI_CONFIG, "size": len(config), "digest": sha(config)},
           "layers": layers}
    tag = digest.replace(":", "-") + ".sig"
    return reg.pusher.manifest(repo, tag, json.dumps(doc).encode(), OCI_MANIFEST, headers)


def push_image(reg: Registry, repo: str, tag: str, what: str) -> str:
    return reg.pusher.push(repo, tag, Image([layer(("file", "who", what))], {"Cmd": ["x"]}))


def source(reg: Registry, repo: str, tag: str = "", digest: str = "") -> Source:
    text = f"{reg.host}/{repo}" + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
    return Source(kind="registry", text=text, registry=reg.host, repository=repo, tag=tag,
                  digest=digest)


def check(reg: Registry, repo: str, digest: str, tag: str = "v1", by_digest: bool = False
          ) -> None:
    src = source(reg, repo, "" if by_digest else tag, digest if by_digest else "")
    check_image(src, RegistryClient(reg.host, repo), digest)


def refusal(call: Callable[[], None]) -> str:
    with pytest.raises(PolicyRefused) as info:
        call()
    line = str(info.value)
    assert "\n" not in line and line.strip() == line, line
    return line


@pytest.fixture
def policy(tmp_path, monkeypatch, clean_env) -> Callable[..., Path]:
    """Writes the site policy (SQSHBUILD_POLICY) from ``{transport scope: [requirements]}``
    and a default."""
    path = tmp_path / "policy.json"
    monkeypatch.setenv("SQSHBUILD_POLICY", str(path))

    def write(scopes: dict[str, list[dict[str, Any]]],
              default: list[dict[str, Any]] | None = None) -> Path:
        doc = {"default": default or [{"type": "reject"}], "transports": {"docker": scopes}}
        path.write_text(json.dumps(doc, indent=1))
        return path
    return write


def key_file(tmp_path: Path, key: Any, name: str = "site.pub") -> str:
    path = tmp_path / name
    path.write_bytes(pem(key))
    path.chmod(0o644)
    return str(path)


def sigstore(key_path: str, identity: str = "matchRepository") -> dict[str, Any]:
    return {"type": "sigstoreSigned", "keyPath": key_path,
            "signedIdentity": {"type": identity}}


# -- the four answers a signed scope gives -------------------------------------------------------
def test_an_image_signed_by_the_sites_key_is_accepted(registry, policy, keys, tmp_path):
    site, _ = keys
    digest = push_image(registry, "pol/signed", "v1", "signed")
    push_signatures(registry, "pol/signed", digest,
                    [(site, payload(digest, f"{registry.host}/pol/signed"))])
    policy({f"{registry.host}/pol": [sigstore(key_file(tmp_path, site))]})
    check(registry, "pol/signed", digest)
    check(registry, "pol/signed", digest, by_digest=True)  # a cache hit by its digest


def test_an_unsigned_image_is_refused_in_one_line(registry, policy, keys, tmp_path):
    site, _ = keys
    digest = push_image(registry, "pol/unsigned", "v1", "unsigned")
    path = policy({f"{registry.host}/pol": [sigstore(key_file(tmp_path, site))]})
    line = refusal(lambda: check(registry, "pol/unsigned", digest))
    assert f"{registry.host}/pol/unsigned:v1" in line  # the image
    assert digest[:19] in line
    assert f'"{registry.host}/pol"' in line and str(path) in line  # the scope, the file
    assert "no signature" in line


def test_an_image_signed_by_another_key_is_refused(registry, policy, keys, tmp_path):
    site, other = keys
    digest = push_image(registry, "pol/other-key", "v1", "other key")
    push_signatures(registry, "pol/other-key", digest,
                    [(other, payload(digest, f"{registry.host}/pol/other-key"))])
    policy({f"{registry.host}/pol": [sigstore(key_file(tmp_path, site))]})
    line = refusal(lambda: check(registry, "pol/other-key", digest))
    assert "another key" in line and f"{registry.host}/pol/other-key:v1" in line


def test_a_signature_for_another_digest_is_refused(registry, policy, keys, tmp_path):
    """A valid signature by the site's key, moved beside an image it does not name."""
    site, _ = keys
    signed = push_image(registry, "pol/moved", "v1", "the signed one")
    digest = push_image(registry, "pol/moved", "v2", "another one")
    push_signatures(registry, "pol/moved", digest,
                    [(site, payload(signed, f"{registry.host}/pol/moved"))])
    policy({f"{registry.host}/pol": [sigstore(key_file(tmp_path, site))]})
    line = refusal(lambda: check(registry, "pol/moved", digest, tag="v2"))
    assert "another digest" in line and signed in line


def test_one_good_signature_among_others_is_enough(registry, policy, keys, tmp_path):
    site, other = keys
    digest = push_image(registry, "pol/many", "v1", "many")
    ref = f"{registry.host}/pol/many"
    push_signatures(registry, "pol/many", digest,
                    [(other, payload(digest, ref)), (site, payload(digest, ref))])
    policy({f"{registry.host}/pol": [sigstore(key_file(tmp_path, site))]})
    check(registry, "pol/many", digest)


# -- scopes -------------------------------------------------------------------------------------
def test_a_rejected_registry_is_refused(registry, policy):
    digest = push_image(registry, "pol/rejected", "v1", "rejected")
    policy({registry.host: [{"type": "reject"}]}, default=[{"type": "insecureAcceptAnything"}])
    line = refusal(lambda: check(registry, "pol/rejected", digest))
    assert f'"{registry.host}"' in line and "rejects every image" in line


def test_accept_by_default_with_a_stricter_repository(registry, policy, keys, tmp_path):
    site, _ = keys
    free = push_image(registry, "pol/free", "v1", "free")
    strict = push_image(registry, "pol/strict", "v1", "strict")
    policy({f"{registry.host}/pol/strict": [sigstore(key_file(tmp_path, site))]},
           default=[{"type": "insecureAcceptAnything"}])
    check(registry, "pol/free", free)
    line = refusal(lambda: check(registry, "pol/strict", strict))
    assert f'"{registry.host}/pol/strict"' in line and "no signature" in line
    push_signatures(registry, "pol/strict", strict,
                    [(site, payload(strict, f"{registry.host}/pol/strict"))])
    check(registry, "pol/strict", strict)


def test_the_default_refuses_what_no_scope_allows(registry, policy):
    digest = push_image(registry, "pol/nowhere", "v1", "nowhere")
    policy({"other.example:5000": [{"type": "insecureAcceptAnything"}]})
    line = refusal(lambda: check(registry, "pol/nowhere", digest))
    assert "default" in line and "rejects every image" in line


def test_no_policy_file_accepts_anything(registry, tmp_path, monkeypatch, clean_env):
    monkeypatch.setenv("SQSHBUILD_POLICY", str(tmp_path / "absent.json"))
    digest = push_image(registry, "pol/nofile", "v1", "no file")
    check(registry, "pol/nofile", digest)


# -- keys and identities ------------------------------------------------------------------------
def test_key_data_inline(registry, policy, keys):
    site, other = keys
    digest = push_image(registry, "pol/keydata", "v1", "key data")
    push_signatures(registry, "pol/keydata", digest,
                    [(site, payload(digest, f"{registry.host}/pol/keydata"))])
    inline = {"type": "sigstoreSigned", "keyData": base64.b64encode(pem(site)).decode(),
              "signedIdentity": {"type": "matchRepository"}}
    policy({f"{registry.host}/pol/keydata": [inline]})
    check(registry, "pol/keydata", digest)
    inline["keyData"] = base64.b64encode(pem(other)).decode()
    policy({f"{registry.host}/pol/keydata": [inline]})
    assert "another key" in refusal(lambda: check(registry, "pol/keydata", digest))


def test_cosigns_identity_needs_match_repository(registry, policy, keys, tmp_path):
    """cosign names the repository alone, which the format's default identity,
    matchRepoDigestOrExact, never accepts (podman refuses it too); the line says what to
    write. A signature naming the tag (podman push --sign-by-sigstore) passes the default,
    for that tag and for the digest."""
    site, _ = keys
    digest = push_image(registry, "pol/ident", "v1", "identity")
    repo = f"{registry.host}/pol/ident"
    push_signatures(registry, "pol/ident", digest, [(site, payload(digest, repo))])
    policy({f"{registry.host}/pol": [{"type": "sigstoreSigned",
                                     "keyPath": key_file(tmp_path, site)}]})
    for by_digest in (False, True):
        line = refusal(lambda d=by_digest: check(registry, "pol/ident", digest, by_digest=d))
        assert "matchRepoDigestOrExact" in line and '"matchRepository"' in line
    push_signatures(registry, "pol/ident", digest, [(site, payload(digest, f"{repo}:v1"))])
    check(registry, "pol/ident", digest)
    check(registry, "pol/ident", digest, by_digest=True)
    line = refusal(lambda: check(registry, "pol/ident", digest, tag="v2"))
    assert f"names {repo}:v1" in line


def test_a_signature_naming_another_repository_is_refused(registry, policy, keys, tmp_path):
    site, _ = keys
    digest = push_image(registry, "pol/copied", "v1", "copied")
    push_signatures(registry, "pol/copied", digest,
                    [(site, payload(digest, f"{registry.host}/pol/original"))])
    policy({f"{registry.host}/pol": [sigstore(key_file(tmp_path, site))]})
    line = refusal(lambda: check(registry, "pol/copied", digest))
    assert f"{registry.host}/pol/original" in line


def test_every_requirement_of_a_scope_must_pass(registry, policy, keys, tmp_path):
    site, other = keys
    digest = push_image(registry, "pol/both", "v1", "both")
    ref = f"{registry.host}/pol/both"
    push_signatures(registry, "pol/both", digest, [(site, payload(digest, ref))])
    both = [sigstore(key_file(tmp_path, site)), sigstore(key_file(tmp_path, other, "o.pub"))]
    policy({f"{registry.host}/pol/both": both})
    assert "another key" in refusal(lambda: check(registry, "pol/both", digest))
    push_signatures(registry, "pol/both", digest,
                    [(site, payload(digest, ref)), (other, payload(digest, ref))])
    check(registry, "pol/both", digest)


def test_a_multi_platform_image_is_checked_by_its_platforms_manifest(registry, policy, keys,
                                                                       tmp_path):
    """As podman: the manifest pulled is the one signed (cosign sign --recursive signs each
    platform's); the index's signature alone does not stand for it."""
    site, _ = keys
    images = [Image([layer(("file", "arch", a))], {"Cmd": ["x"]}, architecture=a)
              for a in ("amd64", "arm64")]
    top = registry.pusher.push_index("pol/multi", "v1", images)
    assert top == sha(index(images))
    amd64 = sha(images[0].manifest())
    ref = f"{registry.host}/pol/multi"
    push_signatures(registry, "pol/multi", top, [(site, payload(top, ref))])
    policy({f"{registry.host}/pol": [sigstore(key_file(tmp_path, site))]})
    assert "no signature" in refusal(lambda: check(registry, "pol/multi", amd64))
    push_signatures(registry, "pol/multi", amd64, [(site, payload(amd64, ref))])
    check(registry, "pol/multi", amd64)


# -- the file -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "says"), [
    ("{not json", "not valid JSON"),
    ('{"transports": {}}', "default"),
    ('{"default": []}', "empty"),
    ('{"default": [{"type": "insecureAcceptAnything"}], "extra": 1}', "extra"),
    ('{"default": [{"type": "acceptIfSunny"}]}', "acceptIfSunny"),
    ('{"default": [{"type": "sigstoreSigned", "keyPath": "/nonexistent/k.pub"}]}',
     "/nonexistent/k.pub"),
])
def test_a_malformed_policy_is_one_line(registry, tmp_path, monkeypatch, clean_env, text,
                                        says):
    path = tmp_path / "policy.json"
    path.write_text(text)
    monkeypatch.setenv("SQSHBUILD_POLICY", str(path))
    digest = push_image(registry, "pol/malformed", "v1", "malformed")
    with pytest.raises(SquallError) as info:
        check(registry, "pol/malformed", digest)
    line = str(info.value)
    assert not isinstance(info.value, PolicyRefused)
    assert "\n" not in line and str(path) in line and says in line, line


def test_signatures_come_through_mirrors_as_the_image_does(registry, policy, keys, tmp_path):
    """A mirror that lacks the .sig tag is passed over; one that has it serves it when the
    origin is gone (a signature is verified, never trusted, whoever serves it)."""
    from conftest import start_registry

    from squall.sqshbuild import mirrors
    site, _ = keys
    origin = start_registry(tmp_path / "origin")
    mirror = start_registry(tmp_path / "mirror")
    try:
        digest = push_image(origin, "pol/mirrored", "v1", "mirrored")
        ref = f"{origin.host}/pol/mirrored"
        push_signatures(origin, "pol/mirrored", digest, [(site, payload(digest, ref))])
        policy({f"{origin.host}/pol": [sigstore(key_file(tmp_path, site))]})
        table = mirrors.RegistryTable(origin.host, origin.host,
                                      mirrors=[mirrors.Mirror(mirror.host)])
        conf = mirrors.RegistriesConf(registries={origin.host: table})
        src = source(origin, "pol/mirrored", "v1")
        check_image(src, mirrors.open_client(src, set(), conf), digest)  # the origin's
        push_image(mirror, "pol/mirrored", "v1", "mirrored")
        push_signatures(mirror, "pol/mirrored", digest, [(site, payload(digest, ref))])
        origin.stop()
        check_image(src, mirrors.open_client(src, set(), conf), digest)  # the mirror's
    finally:
        origin.stop()
        mirror.stop()


# -- through `sqshbuild build`: before anything is fetched, and at every hit ----------------------
def _build(ref: str, cache: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*sqshbuild_cmd(), "--json", "--cache-dir", str(cache), *extra, ref],
                          env=run_env(Path(os.environ["HOME"])), capture_output=True,
                          text=True, timeout=120)


def test_sqshbuild_checks_the_policy_before_a_build_and_at_every_hit(
        registry, policy, keys, tmp_path):
    """Signed: built. Then the site's policy changes: the cached image is refused by tag,
    by digest and for a job's later step (its pinned digest), in one line each, and the
    refused build fetched no layer."""
    site, _ = keys
    digest = push_image(registry, "pol/e2e", "v1", "e2e")
    push_signatures(registry, "pol/e2e", digest,
                    [(site, payload(digest, f"{registry.host}/pol/e2e"))])
    scope = f"{registry.host}/pol"
    policy({scope: [sigstore(key_file(tmp_path, site))]})
    cache = tmp_path / "cache"
    tag_ref = f"{registry.host}/pol/e2e:v1"
    first = _build(tag_ref, cache, "--job", "c-1000-7")
    assert first.returncode == 0, first.stderr
    policy({scope: [{"type": "reject"}]})  # the site's policy changes
    for ref, extra in ((tag_ref, ()), (f"{registry.host}/pol/e2e@{digest}", ()),
                       (tag_ref, ("--job", "c-1000-7"))):
        err = one_error_line(_build(ref, cache, *extra))
        assert f'the scope "{scope}" of transport docker rejects every image' in err, err
    unsigned = push_image(registry, "pol/e2e", "v2", "unsigned")
    before = registry.blob_gets
    policy({scope: [sigstore(key_file(tmp_path, site))]})
    err = one_error_line(_build(f"{registry.host}/pol/e2e:v2", cache))
    assert "it has no signature" in err and unsigned.split(":")[1][:8] in err, err
    assert registry.blob_gets == before  # refused before a layer was asked for
