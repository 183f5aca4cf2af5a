"""cosign's signatures of an image, as ``cosign sign --key`` stores them in the registry and
containers/image reads them: the tag ``sha256-<hex>.sig`` beside the image in its repository,
an OCI manifest with one layer per signature, each layer (media type
``application/vnd.dev.cosign.simplesigning.v1+json``) a simple-signing payload naming the
signed manifest's digest, its annotation ``dev.cosignproject.cosign/signature`` the base64
signature over the payload's exact bytes (ECDSA with SHA-256 for cosign's P-256 keys).

Everything here is read untrusted and bounded; :func:`verify` is the only judge, and the
payload is read only once its signature verified (policy.py). The ``cryptography`` package
is imported only when a key is loaded: a run without a signed scope (most, and every run
without a policy file) does not pay for it.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from squall.errors import SquallError
from squall.sqshbuild.jsonbound import check as check_depth
from squall.sqshbuild.mirrors import MirroredClient
from squall.sqshbuild.registry import NotFound, RegistryClient

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
COSIGN_TYPE = "cosign container image signature"
PAYLOAD_CAP = 256 << 10  # cosign's payloads are a few hundred bytes
MAX_SIGNATURES = 64  # each costs a blob request: a hostile manifest may list thousands

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    PublicKey: TypeAlias = (ec.EllipticCurvePublicKey | rsa.RSAPublicKey
                            | ed25519.Ed25519PublicKey)


@dataclass(frozen=True)
class Signature:
    """One layer of the signature manifest: its payload and the signature bytes (empty
    when the annotation is missing or not base64: it then verifies with no key)."""

    payload: bytes
    signature: bytes


@dataclass(frozen=True)
class Payload:
    digest: str  # critical.image.docker-manifest-digest
    reference: str  # critical.identity.docker-reference


def signature_tag(digest: str) -> str:
    return digest.replace(":", "-", 1) + ".sig"


def load_public_key(data: bytes, where: str) -> PublicKey:
    """A PEM public key (cosign.pub) of a type sigstore verifies; ``where`` names it."""
    try:
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    except ImportError:
        raise SquallError("the site policy asks for signatures, and verifying them needs the "
                          "Python package cryptography: install python3-cryptography") from None
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise SquallError(f"{where} is not a PEM public key (cosign.pub, "
                          "-----BEGIN PUBLIC KEY-----)") from None
    if not isinstance(key, ec.EllipticCurvePublicKey | rsa.RSAPublicKey
                      | ed25519.Ed25519PublicKey):
        raise SquallError(f"{where} is a {type(key).__name__}: sigstore keys are ECDSA, RSA "
                          "or Ed25519")
    return key


def verify(key: PublicKey, payload: bytes, signature: bytes) -> bool:
    """The key signed exactly these bytes (SHA-256, as containers/image hard-codes it)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, payload, ec.ECDSA(hashes.SHA256()))
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, payload, padding.PKCS1v15(), hashes.SHA256())
        else:
            key.verify(signature, payload)
    except (InvalidSignature, ValueError):
        return False
    return True


# -- the payload, as strictly as containers/image reads it ---------------------------------------
def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} is given twice")
        out[key] = value
    return out


def no_constant(name: str) -> Any:
    """NaN and Infinity are not JSON (Python's json would take them)."""
    raise ValueError(f"{name} is not a JSON value")


def _exact(obj: Any, fields: tuple[str, ...], what: str) -> dict[str, Any]:
    if not isinstance(obj, dict) or set(obj) != set(fields):
        raise ValueError(f"{what} must hold exactly {', '.join(fields)}")
    return obj


def _string(obj: dict[str, Any], key: str, what: str) -> str:
    value = obj[key]
    if not isinstance(value, str):
        raise ValueError(f"{what}.{key} is not a string")
    return value


def _optional(obj: Any) -> None:
    """``optional``: null (cosign without -a) or an object whose creator is text and whose
    timestamp is a whole number; anything else in it is the signer's own."""
    if obj is None:
        return
    if not isinstance(obj, dict):
        raise ValueError("optional is neither null nor an object")
    if "creator" in obj and not isinstance(obj["creator"], str):
        raise ValueError("optional.creator is not a string")
    stamp = obj.get("timestamp", 0)
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) or stamp != int(stamp):
        raise ValueError("optional.timestamp is not an integer")


def parse_payload(raw: bytes) -> Payload:
    """The simple-signing payload; ValueError saying what is wrong with it."""
    try:
        check_depth(raw, "the signature payload")
        doc = json.loads(raw, object_pairs_hook=no_duplicate_keys, parse_constant=no_constant)
    except SquallError as exc:
        raise ValueError(str(exc)) from None
    except json.JSONDecodeError:
        raise ValueError("it is not JSON") from None
    top = _exact(doc, ("critical", "optional"), "the payload")
    _optional(top["optional"])
    critical = _exact(top["critical"], ("type", "image", "identity"), "critical")
    if critical["type"] != COSIGN_TYPE:
        raise ValueError(f"its type is {critical['type']!r}, not {COSIGN_TYPE!r}")
    image = _exact(critical["image"], ("docker-manifest-digest",), "critical.image")
    identity = _exact(critical["identity"], ("docker-reference",), "critical.identity")
    return Payload(_string(image, "docker-manifest-digest", "critical.image"),
                   _string(identity, "docker-reference", "critical.identity"))


# -- the registry -------------------------------------------------------------------------------
def _signature_layers(body: bytes, what: str) -> list[dict[str, Any]]:
    try:
        doc = json.loads(body)
        layers = doc["layers"]
    except (ValueError, KeyError, TypeError):
        raise SquallError(f"{what} is not an image manifest: the registry is broken or "
                          "hostile") from None
    if not isinstance(layers, list) or not all(isinstance(x, dict) for x in layers):
        raise SquallError(f"{what} has no list of layers: the registry is broken or hostile")
    signing = [x for x in layers if x.get("mediaType") == SIMPLE_SIGNING]
    if len(signing) > MAX_SIGNATURES:
        raise SquallError(f"{what} holds {len(signing)} signatures, more than the "
                          f"{MAX_SIGNATURES} read: the registry is broken or hostile; "
                          "re-sign the image after removing its old signatures")
    return signing


def _signature(client: RegistryClient, desc: dict[str, Any], what: str) -> Signature:
    digest, size = desc.get("digest"), desc.get("size", 0)
    if not isinstance(digest, str) or not digest.startswith("sha256:") or len(digest) != 71:
        raise SquallError(f"{what} names a payload by {digest!r}: the registry is broken or "
                          "hostile")
    if not isinstance(size, int) or size > PAYLOAD_CAP:
        raise SquallError(f"{what} gives a payload the size {size!r}, above the "
                          f"{PAYLOAD_CAP} bytes a signature payload may have")
    payload = client.get_blob(digest, PAYLOAD_CAP)
    notes = desc.get("annotations")
    text = notes.get(SIGNATURE_ANNOTATION) if isinstance(notes, dict) else None
    try:
        raw = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
    except (binascii.Error, ValueError):
        raw = b""
    return Signature(payload, raw)


def _sources(client: RegistryClient) -> list[RegistryClient]:
    """Whoever serves the image may serve its signatures (a mirror too: they are
    verified, never trusted)."""
    return client.sources() if isinstance(client, MirroredClient) else [client]


def fetch(client: RegistryClient, manifest_digest: str) -> list[Signature]:
    """The signatures stored beside ``manifest_digest``; none when no source has the tag.
    A registry that cannot be asked is an error (never taken for "unsigned")."""
    tag = signature_tag(manifest_digest)
    failed: SquallError | None = None
    for source in _sources(client):
        what = f"the signatures {source.name}:{tag}"
        try:
            body, _media_type, _digest = source.get_manifest(tag)
        except NotFound:
            continue
        except SquallError as exc:
            failed = exc
            continue
        return [_signature(source, desc, what) for desc in _signature_layers(body, what)]
    if failed is not None:
        raise type(failed)(f"cannot read the signatures of {client.name}@{manifest_digest} "
                           f"that the site policy asks for: {failed}")
    return []
