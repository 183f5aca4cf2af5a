"""cosign's signatures as squall checks them: the key's signature over the payload's exact bytes
(ECDSA with SHA-256 as cosign makes it; RSA and Ed25519 keys as sigstore loads them), the
payload read as strictly as containers/image reads it, and the signed identity against the
image's name by each signedIdentity of containers-policy.json(5)."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

from squall.errors import SquallError
from squall.sqshbuild.policy_names import SignedIdentity, image_name, parse_reference
from squall.sqshbuild.sigstore import load_public_key, parse_payload, signature_tag, verify

DIGEST = "sha256:" + "0f" * 32
OTHER = "sha256:" + "e1" * 32
PAYLOAD = json.dumps({"critical": {"identity": {"docker-reference": "login:5000/a/b"},
                                   "image": {"docker-manifest-digest": DIGEST},
                                   "type": "cosign container image signature"},
                      "optional": {"creator": "cosign", "timestamp": 1700000000,
                                   "anything": ["else"]}}).encode()


def pem(private) -> bytes:
    return private.public_key().public_bytes(serialization.Encoding.PEM,
                                             serialization.PublicFormat.SubjectPublicKeyInfo)


def test_the_signature_tag():
    assert signature_tag(DIGEST) == "sha256-" + "0f" * 32 + ".sig"


@pytest.mark.parametrize("make", ["ecdsa-p256", "ecdsa-p384", "rsa", "ed25519"])
def test_each_key_type_verifies_its_own_signature_only(make):
    def pair():
        if make == "ecdsa-p256":
            k = ec.generate_private_key(ec.SECP256R1())
            return k, lambda d: k.sign(d, ec.ECDSA(hashes.SHA256()))
        if make == "ecdsa-p384":
            k = ec.generate_private_key(ec.SECP384R1())
            return k, lambda d: k.sign(d, ec.ECDSA(hashes.SHA256()))
        if make == "rsa":
            k = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            return k, lambda d: k.sign(d, padding.PKCS1v15(), hashes.SHA256())
        k = ed25519.Ed25519PrivateKey.generate()
        return k, k.sign
    private, sign = pair()
    other, _ = pair()
    key = load_public_key(pem(private), "keyPath /k.pub")
    sig = sign(PAYLOAD)
    assert verify(key, PAYLOAD, sig)
    assert not verify(key, PAYLOAD + b" ", sig)  # the exact bytes
    assert not verify(load_public_key(pem(other), "x"), PAYLOAD, sig)
    assert not verify(key, PAYLOAD, b"\x30\x02junk")


def test_a_private_key_or_certificate_is_not_a_public_key():
    private = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    with pytest.raises(SquallError, match="keyPath /k.pub"):
        load_public_key(private, "keyPath /k.pub")


def test_the_payload():
    got = parse_payload(PAYLOAD)
    assert (got.digest, got.reference) == (DIGEST, "login:5000/a/b")
    nulled = json.loads(PAYLOAD)
    nulled["optional"] = None  # cosign without -a
    assert parse_payload(json.dumps(nulled).encode()).digest == DIGEST


@pytest.mark.parametrize("change", [
    lambda d: d["critical"].update(extra=1),
    lambda d: d["critical"]["image"].update(extra=1),
    lambda d: d["critical"]["identity"].update(extra=1),
    lambda d: d.update(extra=1),
    lambda d: d["critical"].update(type="atomic container signature"),
    lambda d: d["critical"].pop("identity"),
    lambda d: d["critical"]["image"].update({"docker-manifest-digest": 5}),
    lambda d: d["optional"].update(timestamp=1.5),
    lambda d: d.update(optional=[]),
])
def test_a_payload_read_strictly(change):
    d = json.loads(PAYLOAD)
    change(d)
    with pytest.raises(ValueError):
        parse_payload(json.dumps(d).encode())


def test_a_payload_with_nan_is_refused():
    raw = PAYLOAD.replace(b'"timestamp": 1700000000', b'"timestamp": NaN')
    with pytest.raises(ValueError, match="NaN"):
        parse_payload(raw)


def test_a_payload_with_a_duplicate_key_is_refused():
    raw = PAYLOAD.replace(b'"critical": {', b'"critical": {"type": "x", ', 1)
    with pytest.raises(ValueError, match="twice"):
        parse_payload(raw)


@pytest.mark.parametrize(("text", "expected"), [
    ("busybox", ("docker.io/library/busybox", "", "")),
    ("busybox:1", ("docker.io/library/busybox", "1", "")),
    ("index.docker.io/library/ubuntu", ("docker.io/library/ubuntu", "", "")),
    ("team/app", ("docker.io/team/app", "", "")),
    ("localhost/app:v1", ("localhost/app", "v1", "")),
    ("login:5000/a/b@" + DIGEST, ("login:5000/a/b", "", DIGEST)),
    ("Login.Example/a", ("Login.Example/a", "", "")),
])
def test_references_as_docker_normalises_them(text, expected):
    ref = parse_reference(text)
    assert ref is not None and (ref.name, ref.tag, ref.digest) == expected


@pytest.mark.parametrize("text", ["", "Upper", "a//b", "login:5000/a:", "a b", "x@sha256:1",
                                  "https://login/a", "login:5000/a:v\u00e9"])
def test_what_is_not_a_reference(text):
    assert parse_reference(text) is None


TAGGED = image_name("login:5000", "a/b", "v1", "")
DIGESTED = image_name("login:5000", "a/b", "", DIGEST)


@pytest.mark.parametrize(("identity", "image", "signed", "ok"), [
    ({"type": "matchExact"}, TAGGED, "login:5000/a/b:v1", True),
    ({"type": "matchExact"}, TAGGED, "login:5000/a/b", False),
    ({"type": "matchExact"}, DIGESTED, "login:5000/a/b:v1", False),
    ({"type": "matchRepoDigestOrExact"}, TAGGED, "login:5000/a/b:v1", True),
    ({"type": "matchRepoDigestOrExact"}, TAGGED, "login:5000/a/b:v2", False),
    ({"type": "matchRepoDigestOrExact"}, TAGGED, "login:5000/a/b", False),  # cosign's
    ({"type": "matchRepoDigestOrExact"}, DIGESTED, "login:5000/a/b:v9", True),
    ({"type": "matchRepoDigestOrExact"}, DIGESTED, "login:5000/a/b", False),
    ({"type": "matchRepository"}, TAGGED, "login:5000/a/b", True),
    ({"type": "matchRepository"}, DIGESTED, "login:5000/a/b:v3", True),
    ({"type": "matchRepository"}, TAGGED, "login:5000/a/c", False),
    ({"type": "matchRepository"}, TAGGED, "not a reference", False),
    ({"type": "exactReference", "dockerReference": "up.example/a/b:v1"}, TAGGED,
     "up.example/a/b:v1", True),
    ({"type": "exactReference", "dockerReference": "up.example/a/b:v1"}, TAGGED,
     "login:5000/a/b:v1", False),
    ({"type": "exactRepository", "dockerRepository": "up.example/a/b"}, TAGGED,
     "up.example/a/b", True),
    ({"type": "exactRepository", "dockerRepository": "up.example/a/b"}, TAGGED,
     "login:5000/a/b", False),
    ({"type": "remapIdentity", "prefix": "login:5000/a", "signedPrefix": "up.example/x"},
     TAGGED, "up.example/x/b:v1", True),
    ({"type": "remapIdentity", "prefix": "login:5000/a", "signedPrefix": "up.example/x"},
     DIGESTED, "up.example/x/b", False),
    ({"type": "remapIdentity", "prefix": "login:5000/a", "signedPrefix": "up.example/x"},
     DIGESTED, "up.example/x/b:v7", True),
    ({"type": "remapIdentity", "prefix": "other:5000", "signedPrefix": "up.example/x"},
     TAGGED, "login:5000/a/b:v1", True),
])
def test_signed_identities(identity, image, signed, ok):
    assert SignedIdentity.parse(identity, "here").accepts(image, signed) is ok


# -- reading them from a registry (a stand-in client; the registry tier uses a real one) ---------
class Client:
    """get_manifest/get_blob of a RegistryClient, from dicts; a 404 for what is missing."""

    name = "login:5000/a/b"

    def __init__(self, manifests: dict[str, bytes], blobs: dict[str, bytes],
                 fail: Exception | None = None) -> None:
        self.manifests, self.blobs, self.fail, self.asked = manifests, blobs, fail, []

    def get_manifest(self, ref: str):
        from squall.sqshbuild.registry import NotFound
        self.asked.append(ref)
        if self.fail is not None:
            raise self.fail
        if ref not in self.manifests:
            raise NotFound(f"no {ref}")
        return self.manifests[ref], "application/vnd.oci.image.manifest.v1+json", "x"

    def get_blob(self, digest: str, cap: int) -> bytes:
        assert cap <= 256 << 10
        return self.blobs[digest]


def sig_manifest(layers: list[dict]) -> bytes:
    return json.dumps({"schemaVersion": 2, "config": {}, "layers": layers}).encode()


def sha(data: bytes) -> str:
    import hashlib
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_fetch_reads_each_simple_signing_layer():
    from squall.sqshbuild.sigstore import SIGNATURE_ANNOTATION, SIMPLE_SIGNING, fetch
    layers = [{"mediaType": SIMPLE_SIGNING, "digest": sha(PAYLOAD), "size": len(PAYLOAD),
               "annotations": {SIGNATURE_ANNOTATION: "c2ln"}},
              {"mediaType": SIMPLE_SIGNING, "digest": sha(PAYLOAD), "size": len(PAYLOAD),
               "annotations": {SIGNATURE_ANNOTATION: "not base64!"}},
              {"mediaType": "application/vnd.dev.sigstore.bundle+json", "digest": sha(b"x"),
               "size": 1}]
    client = Client({signature_tag(DIGEST): sig_manifest(layers)}, {sha(PAYLOAD): PAYLOAD})
    got = fetch(client, DIGEST)  # type: ignore[arg-type]
    assert [(s.payload, s.signature) for s in got] == [(PAYLOAD, b"sig"), (PAYLOAD, b"")]
    assert client.asked == [signature_tag(DIGEST)]
    assert fetch(Client({}, {}), DIGEST) == []  # type: ignore[arg-type]


@pytest.mark.parametrize(("layers", "says"), [
    ([{"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
       "digest": "sha256:" + "0" * 64, "size": 1}] * 65, "65 signatures"),
    ([{"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
       "digest": "sha256:" + "0" * 64, "size": 1 << 30}], "size"),
    ([{"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
       "digest": "md5:00", "size": 1}], "md5:00"),
    ("not a list", "layers"),
])
def test_fetch_bounds_what_a_registry_sends(layers, says):
    from squall.sqshbuild.sigstore import fetch
    client = Client({signature_tag(DIGEST): sig_manifest(layers)}, {})
    with pytest.raises(SquallError, match=says):
        fetch(client, DIGEST)  # type: ignore[arg-type]


def test_a_registry_that_cannot_be_asked_is_an_error_not_unsigned():
    from squall.sqshbuild.sigstore import fetch
    client = Client({}, {}, fail=SquallError("registry unreachable: login:5000 (timeout)"))
    with pytest.raises(SquallError, match="cannot read the signatures .*unreachable"):
        fetch(client, DIGEST)  # type: ignore[arg-type]


def test_a_signers_words_stay_on_one_line(monkeypatch):
    """What a signed payload names is quoted printable: the refusal stays one line."""
    from squall.sqshbuild import policy as pol
    from squall.sqshbuild.policy import Requirement
    from squall.sqshbuild.sigstore import Signature
    key = ec.generate_private_key(ec.SECP256R1())
    body = json.loads(PAYLOAD)
    body["critical"]["identity"]["docker-reference"] = "login:5000/a/b\nsqshbuild: ok"
    raw = json.dumps(body).encode()
    req = Requirement("sigstoreSigned", (load_public_key(pem(key), "k"),), "k",
                      SignedIdentity("matchRepository"))
    sig = Signature(raw, key.sign(raw, ec.ECDSA(hashes.SHA256())))
    why = pol._sigstore_refused(req, [sig], TAGGED, DIGEST)
    assert "\n" not in why and "login:5000/a/b?sqshbuild: ok" in why
