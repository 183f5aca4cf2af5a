"""The site's image policy in the containers ecosystem's own file, containers-policy.json(5):
``/etc/containers/policy.json``, which podman, skopeo and buildah read (``SQSHBUILD_POLICY``
names another, for tests). No file: every image is accepted, as before.

For a registry image (the ``docker`` transport) the requirements of the most specific scope
apply: the image's own name with its tag or digest, its repository, each namespace above
it, its registry, the wildcarded domains (``*.example.com``), the transport's ``""``, then
the global ``default``. All of them must pass:

- ``insecureAcceptAnything``; ``reject``;
- ``sigstoreSigned`` with ``keyPath``/``keyPaths``/``keyData``/``keyDatas``: one of the
  image's cosign signatures (sigstore.py) verifies with one of the keys, names the very
  manifest digest being pulled, and an identity its ``signedIdentity`` accepts.

The file is read as strictly as containers/image reads it (an unknown field or a bad value
stops every build in one line naming the file). What squall cannot verify (``signedBy``'s
GPG, ``sigstoreSigned`` with Fulcio, Rekor or PKI, ``signedBaseLayer``) refuses the images of
its scope only, saying so: a distribution's file that signs its own registry with GPG does
not stop the rest. Refusals are one line naming the image, the scope and why.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from squall.errors import SquallError
from squall.sqshbuild import sigstore
from squall.sqshbuild.jsonbound import MAX_DEPTH, depth
from squall.sqshbuild.policy_names import (
    ImageName,
    SignedIdentity,
    image_name,
    parse_reference,
    scope_names,
)
from squall.sqshbuild.refs import Source
from squall.sqshbuild.registry import RegistryClient
from squall.sqshbuild.safefs import read_trusted

if TYPE_CHECKING:
    from squall.sqshbuild.sigstore import PublicKey

POLICY_ENV = "SQSHBUILD_POLICY"
POLICY_FILE = Path("/etc/containers/policy.json")
TRANSPORT = "docker"
FILES_TRANSPORT = "squall-sqsh"  # squall's own: .sqsh files named by path (filepolicy.py)
_FILE_LIMIT = 1 << 20
_KEY_LIMIT = 64 << 10
_SEE = "(containers-policy.json(5), docs/registries.md)"


class PolicyRefused(SquallError):
    """The site policy refuses the image: no identity may build it (exit status 1)."""


# -- requirements --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Requirement:
    """``kind``: insecureAcceptAnything, reject, sigstoreSigned, or unsupported (``why``:
    what squall cannot verify)."""

    kind: str
    keys: tuple[PublicKey, ...] = ()
    key_origin: str = ""
    identity: SignedIdentity = field(default_factory=SignedIdentity)
    why: str = ""


_FIELDS = {
    "insecureAcceptAnything": {"type"},
    "reject": {"type"},
    "signedBy": {"type", "keyType", "keyPath", "keyPaths", "keyData", "signedIdentity"},
    "sigstoreSigned": {"type", "keyPath", "keyPaths", "keyData", "keyDatas", "fulcio", "pki",
                       "rekorPublicKeyPath", "rekorPublicKeyPaths", "rekorPublicKeyData",
                       "rekorPublicKeyDatas", "signedIdentity"},
    "signedBaseLayer": {"type", "baseLayerIdentity"},
}
_KEY_SOURCES = ("keyPath", "keyPaths", "keyData", "keyDatas", "fulcio", "pki")


def _strings(raw: dict[str, Any], key: str, where: str) -> list[str]:
    value = raw[key]
    many = key.endswith("s")
    items = value if many and isinstance(value, list) else [value]
    if not items or not all(isinstance(v, str) and v for v in items):
        raise SquallError(f"{where}.{key} must be " + ("a non-empty list of strings"
                                                      if many else "a non-empty string"))
    return list(items)


def _keys(raw: dict[str, Any], source: str, where: str, load: bool) -> tuple[PublicKey, ...]:
    """The scope's public keys; only checked, not loaded, for a transport squall does not
    use (``load`` false: the crypto library is not even imported)."""
    items = _strings(raw, source, where)
    if source.startswith("keyData"):
        try:
            blobs = [base64.b64decode(v, validate=True) for v in items]
        except (binascii.Error, ValueError):
            raise SquallError(f"{where}.{source} is not base64 (of a PEM public key)") from None
        named: list[tuple[bytes | None, str]] = [(b, f"{where}.{source}") for b in blobs]
    elif load:
        named = [(read_trusted(Path(p), f"the key file {p} (at {where}.{source})", _KEY_LIMIT),
                  f"the key file {p} (at {where}.{source})") for p in items]
    if not load:
        return ()
    return tuple(sigstore.load_public_key(data or b"", what) for data, what in named)


def _sigstore(raw: dict[str, Any], where: str, load: bool) -> Requirement:
    given = [k for k in _KEY_SOURCES if k in raw]
    if len(given) != 1:
        raise SquallError(f"{where}: give exactly one of {', '.join(_KEY_SOURCES)}")
    source = given[0]
    identity = SignedIdentity.parse(raw.get("signedIdentity", {"type":
                                                               "matchRepoDigestOrExact"}), where)
    rekor = sorted(k for k in raw if k.startswith("rekor"))
    if source in ("fulcio", "pki") or rekor:
        what = source if source in ("fulcio", "pki") else f"a Rekor key ({rekor[0]})"
        return Requirement("unsupported", why=f"sigstoreSigned with {what}")
    keys = _keys(raw, source, where, load)
    origin = (f"{source} {', '.join(_strings(raw, source, where))}"
              if source.startswith("keyPath") else f"the {source} of this scope")
    return Requirement("sigstoreSigned", keys, origin, identity)


def _requirement(raw: Any, where: str, load: bool) -> Requirement:
    kind = raw.get("type") if isinstance(raw, dict) else None
    if not isinstance(raw, dict) or not isinstance(kind, str):
        raise SquallError(f"{where} must be an object with a type")
    if kind not in _FIELDS:
        raise SquallError(f"{where}: {kind!r} is not a requirement type: use "
                          "insecureAcceptAnything, reject or sigstoreSigned")
    unknown = sorted(set(raw) - _FIELDS[kind])
    if unknown:
        raise SquallError(f"{where}: {kind} has no field {unknown[0]!r}")
    if kind == "sigstoreSigned":
        return _sigstore(raw, where, load)
    if kind == "signedBy":
        SignedIdentity.parse(raw.get("signedIdentity", {"type": "matchRepoDigestOrExact"}),
                             where)
        return Requirement("unsupported", why="signedBy (GPG simple signing)")
    if kind == "signedBaseLayer":
        return Requirement("unsupported", why="signedBaseLayer")
    return Requirement(kind)


def _requirements(raw: Any, where: str, load: bool) -> tuple[Requirement, ...]:
    if not isinstance(raw, list) or not raw:
        raise SquallError(f"{where} must be a list of requirements, and not empty (write "
                          '[{"type": "insecureAcceptAnything"}] to accept anything)')
    return tuple(_requirement(r, f"{where}[{n}]", load) for n, r in enumerate(raw))


# -- the policy ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scope:
    label: str  # for messages: 'the scope "login:5000/team" of transport docker'
    requirements: tuple[Requirement, ...]


@dataclass(frozen=True)
class Policy:
    path: Path
    default: tuple[Requirement, ...]
    docker: dict[str, tuple[Requirement, ...]]
    # The squall-sqsh transport's scopes; None when the file has none (files run unjudged)
    files: dict[str, tuple[Requirement, ...]] | None = None

    def lookup(self, img: ImageName) -> Scope:
        for name in scope_names(img):
            if name in self.docker:
                return Scope(f'the scope "{name}" of transport {TRANSPORT}', self.docker[name])
        if "" in self.docker:
            return Scope(f'the {TRANSPORT} transport\'s default scope ""', self.docker[""])
        return Scope("the global default", self.default)


def _document(data: bytes, path: Path) -> dict[str, Any]:
    if depth(data) > MAX_DEPTH:
        raise SquallError(f"the site policy {path} nests JSON deeper than {MAX_DEPTH} levels")
    try:
        doc = json.loads(data, object_pairs_hook=sigstore.no_duplicate_keys,
                         parse_constant=sigstore.no_constant)
    except json.JSONDecodeError as exc:
        raise SquallError(f"the site policy {path} is not valid JSON ({exc.msg} at line "
                          f"{exc.lineno}): fix it {_SEE}") from None
    except ValueError as exc:  # a duplicate key, or bytes that are not text
        raise SquallError(f"the site policy {path} is not valid: {exc}: fix it {_SEE}") \
            from None
    if not isinstance(doc, dict):
        raise SquallError(f"the site policy {path} is not a JSON object: fix it {_SEE}")
    return doc


def parse(data: bytes, path: Path) -> Policy:
    """The policy in ``data``; one line naming ``path`` and the place for anything wrong."""
    doc = _document(data, path)
    try:
        unknown = sorted(set(doc) - {"default", "transports"})
        if unknown or "default" not in doc:
            raise SquallError(f"it must hold a default list and may hold transports, not "
                              f"{unknown[0]!r}" if unknown else "it has no default list")
        default = _requirements(doc["default"], "default", True)
        transports = doc.get("transports", {})
        if not isinstance(transports, dict):
            raise SquallError("transports must be an object of transport names")
        docker: dict[str, tuple[Requirement, ...]] = {}
        files: dict[str, tuple[Requirement, ...]] | None = None
        for name, scopes in transports.items():
            if not isinstance(scopes, dict):
                raise SquallError(f"transports.{name} must be an object of scopes")
            for scope, raw in scopes.items():
                where = f"transports.{name}[{json.dumps(scope)}]"
                reqs = _requirements(raw, where, name == TRANSPORT)
                if name == TRANSPORT:
                    docker[scope] = reqs
                elif name == FILES_TRANSPORT:
                    files = {**(files or {}), _file_scope(scope, where): reqs}
            if name == FILES_TRANSPORT and files is None:
                files = {}
    except SquallError as exc:
        raise SquallError(f"the site policy {path}: {exc} {_SEE}") from None
    return Policy(path, default, docker, files)


def _file_scope(scope: str, where: str) -> str:
    """A scope of squall-sqsh: "" or an absolute, normalized path (a file or directory), as
    containers/image asks of its path-based transports (dir, oci)."""
    if scope and not (scope.startswith("/") and not scope.startswith("//")
                      and posixpath.normpath(scope) == scope and scope.isprintable()):
        raise SquallError(f"{where}: a scope of {FILES_TRANSPORT} must be an absolute, "
                          'normalized path (/fsx/images: no trailing slash, no ., .. or //) '
                          'or ""')
    return scope


def policy_path() -> Path:
    return Path(os.environ.get(POLICY_ENV) or POLICY_FILE)


def load() -> Policy | None:
    """The policy in force; None when there is no file (every image is accepted)."""
    path = policy_path()
    data = read_trusted(path, f"the site policy {path}", _FILE_LIMIT, missing_ok=True)
    return None if data is None else parse(data, path)


# -- the check -----------------------------------------------------------------------------------
_FIX_SIGN = ("sign it with that key (cosign sign --key) or ask the site's administrators "
             "(docs/registries.md)")


def _shown(text: str) -> str:
    """A payload's text in the one line: printable, bounded (a signer's own words)."""
    return "".join(c if c.isprintable() else "?" for c in text[:300])


def _identity_refused(req: Requirement, img: ImageName, signed: str) -> str:
    why = (f"its signature names {_shown(signed)}, which signedIdentity {req.identity.kind} "
           f"does not accept for {img.text}")
    ref = parse_reference(signed)
    if req.identity.kind == "matchRepoDigestOrExact" and ref is not None and not ref.exact:
        why += (' (cosign signs the repository alone: write "signedIdentity": {"type": '
                '"matchRepository"} for this scope, as podman needs too)')
    return why


def _signature_refused(req: Requirement, sig: sigstore.Signature, img: ImageName,
                       digest: str) -> str:
    """Why this signature does not satisfy ``req``; "" when it does."""
    if not any(sigstore.verify(k, sig.payload, sig.signature) for k in req.keys):
        return "it is signed by another key (its signature does not verify with that key)"
    try:
        payload = sigstore.parse_payload(sig.payload)
    except ValueError as exc:
        return f"its signature's payload is malformed ({exc})"
    if payload.digest != digest:
        return f"its signature is for another digest ({_shown(payload.digest)})"
    if not req.identity.accepts(img, payload.reference):
        return _identity_refused(req, img, payload.reference)
    return ""


def _sigstore_refused(req: Requirement, sigs: list[sigstore.Signature], img: ImageName,
                      digest: str) -> str:
    if not sigs:
        return "it has no signature (no cosign signature tag beside it)"
    reasons: list[str] = []
    for sig in sigs:
        why = _signature_refused(req, sig, img, digest)
        if not why:
            return ""
        if why not in reasons:
            reasons.append(why)
    if len(reasons) == 1:
        return reasons[0]
    return f"none of its {len(sigs)} signatures is accepted: {'; '.join(reasons)}"


def check_image(src: Source, client: RegistryClient, manifest_digest: str) -> None:
    """Raise :class:`PolicyRefused` (one line) unless the site policy accepts the registry
    image ``src`` resolved to ``manifest_digest``; nothing without a policy file. Call it
    once the manifest's digest is known, before anything is downloaded or served from the
    cache. Sources that are not registry images are not checked here."""
    policy = load()
    if policy is None or src.kind != "registry":
        return
    img = image_name(src.registry, src.repository, src.tag, src.digest)
    scope = policy.lookup(img)
    sigs: list[sigstore.Signature] | None = None
    for req in scope.requirements:
        if req.kind == "insecureAcceptAnything":
            continue
        if req.kind == "reject":
            why, fix = "rejects every image", ("pull from a registry the site allows, or ask "
                                               "the site's administrators (docs/registries.md)")
        elif req.kind == "unsupported":
            why, fix = (f"requires {req.why}, which squall cannot verify",
                        "ask the site's administrators for a sigstoreSigned key for this "
                        "scope (docs/registries.md)")
        else:
            if sigs is None:
                sigs = sigstore.fetch(client, manifest_digest)
            refused = _sigstore_refused(req, sigs, img, manifest_digest)
            if not refused:
                continue
            why, fix = f"requires a signature by {req.key_origin}: {refused}", _FIX_SIGN
        shown = img.text if img.digest == manifest_digest else \
            f"{img.text} ({manifest_digest})"
        raise PolicyRefused(f"the site policy {policy.path} refuses {shown}: {scope.label} "
                            f"{why}; {fix}")
