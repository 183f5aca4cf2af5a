"""A small OCI distribution client: manifests, indexes, blobs, with auth and clear errors.

Plain HTTP is used only for loopback registries or the ones named with
``--insecure-registry HOST:PORT`` / ``SQSHBUILD_INSECURE_REGISTRIES`` (comma separated);
everything else is HTTPS.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import requests

from squall.errors import SquallError
from squall.sqshbuild.auth import Challenge, Credentials, find_credentials, parse_challenge
from squall.sqshbuild.credentials import remember_secret
from squall.sqshbuild.jsonbound import check as check_depth
from squall.sqshbuild.transport import (
    CONFIG_CAP,
    MANIFEST_CAP,
    TOKEN_CAP,
    deadline,
    describe,
    http_timeout,
    new_session,
    read_capped,
)
from squall.sqshbuild.transport import retries as transport_retries

MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MT_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MT_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_ACCEPT = ", ".join([MT_OCI_INDEX, MT_OCI_MANIFEST, MT_DOCKER_LIST, MT_DOCKER_MANIFEST])
INDEX_TYPES = {MT_DOCKER_LIST, MT_OCI_INDEX}
MANIFEST_TYPES = {MT_DOCKER_MANIFEST, MT_OCI_MANIFEST}
INSECURE_ENV = "SQSHBUILD_INSECURE_REGISTRIES"


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int


@dataclass
class Manifest:
    """A resolved single-platform image manifest."""

    digest: str
    media_type: str
    config: Descriptor
    layers: list[Descriptor]
    platform: str
    raw: bytes = field(repr=False, default=b"")


class Refused(SquallError):
    """The registry refused this image to the credentials used (401, 403, or 404): exit
    status 3, on which the plugin builds the image as the job's user instead of the
    builder (docs/security.md)."""

    exit_code = 3


class NotFound(Refused):
    """The registry answered 404 for the image, tag or blob."""


def is_loopback(registry: str) -> bool:
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def insecure_registries(extra: tuple[str, ...] | list[str] = ()) -> set[str]:
    names = {n.strip() for n in os.environ.get(INSECURE_ENV, "").split(",") if n.strip()}
    return names | {n.strip() for n in extra if n.strip()}


def normalise_arch(arch: str) -> tuple[str, str]:
    """``amd64``/``x86_64`` -> (amd64, ""), ``arm64``/``aarch64`` -> (arm64, ""),
    ``arm/v7`` -> (arm, v7)."""
    arch = arch.strip().lower().removeprefix("linux/")
    name, _, variant = arch.partition("/")
    aliases = {"x86_64": "amd64", "x86-64": "amd64", "aarch64": "arm64", "armhf": "arm",
               "ppc64el": "ppc64le"}
    return aliases.get(name, name), variant


def host_arch() -> str:
    return normalise_arch(os.uname().machine)[0]


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class RegistryClient:
    """One repository on one registry, shared by the download threads."""

    def __init__(self, registry: str, repository: str, user: str = "",
                 insecure: set[str] | None = None, retries: int | None = None,
                 anonymous: str = "") -> None:
        self.registry = registry
        self.repository = repository
        self.user = user
        self.insecure = set(insecure or ())
        plain = is_loopback(registry) or registry in self.insecure
        self.base = f"{'http' if plain else 'https'}://{registry}/v2/{repository}"
        self.retries = retries or transport_retries()
        # A build for another user (sqshbuild --for-user) never spends these credentials:
        # the reason, said when the registry asks for some (docs/security.md).
        self.anonymous = anonymous
        self.used_credentials = False  # sent a password or a token got with one
        # looked up when the registry first asks (a password command runs only then)
        self._creds: Credentials | None = (find_credentials(registry, user)
                                           if user and not anonymous else None)
        self._creds_looked = bool(user) or bool(anonymous)
        self._auth_header: str | None = None
        self._auth_expires = float("inf")  # a Bearer token is reused until then
        self._challenge: Challenge | None = None
        self._lock = threading.Lock()
        self._local = threading.local()
        if user and self._creds is None and not anonymous:
            raise SquallError(
                f"no credentials for user {user!r} on {registry}: add 'machine "
                f"{registry.split(':')[0]} login {user} password ...' to "
                "~/.config/enroot/.credentials or run 'docker login'")

    @property
    def credentialed(self) -> bool:
        """This client sent a password, or a token it got with one."""
        return self.used_credentials

    @property
    def session(self) -> requests.Session:
        s = getattr(self._local, "session", None)
        if s is None:
            s = new_session()
            self._local.session = s
        return s

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"

    # -- auth -----------------------------------------------------------------------------
    def credentials(self) -> Credentials | None:
        if not self._creds_looked:
            self._creds = find_credentials(self.registry, self.user)
            self._creds_looked = True
        return self._creds

    def _current_auth(self) -> str | None:
        """The Authorization header to send; a Bearer token past its lifetime is renewed
        first (tokens are otherwise reused for every request of the build)."""
        with self._lock:
            if (self._auth_header is not None and self._challenge is not None
                    and time.monotonic() >= self._auth_expires):
                self._auth_header = None
                self._set_bearer(self._challenge, None)
            return self._auth_header

    def _authenticate(self, challenge_header: str, used: str | None) -> None:
        with self._lock:
            if self._auth_header is not None and self._auth_header != used:
                return  # another thread already refreshed it
            challenge = parse_challenge(challenge_header)
            if challenge is None:
                raise self._refused("the registry asked for authentication without a challenge")
            creds = self.credentials()
            if challenge.scheme == "basic":
                if creds is None:
                    raise self._refused("it requires a user name and password")
                if used is not None and used == creds.basic_header():
                    raise self._refused(f"it refused the credentials from {creds.origin}")
                self._auth_header = creds.basic_header()
                self.used_credentials = True
                return
            if challenge.scheme == "bearer":
                self._set_bearer(challenge, used)
                return
            raise self._refused(f"it asks for unsupported authentication {challenge.scheme!r}")

    def _set_bearer(self, challenge: Challenge, used: str | None) -> None:
        started = time.monotonic()
        token, lifetime = self._fetch_token(challenge, used)
        self._auth_header = "Bearer " + token
        self._challenge = challenge
        # renew a little early; the distribution spec's default lifetime is 60 s
        self._auth_expires = started + max(1.0, lifetime - min(10.0, lifetime / 5))

    def _fetch_token(self, challenge: Challenge, used: str | None) -> tuple[str, float]:
        realm = challenge.params.get("realm")
        if not realm:
            raise self._refused("its Bearer challenge names no realm")
        params = {"scope": challenge.params.get("scope") or f"repository:{self.repository}:pull"}
        if challenge.params.get("service"):
            params["service"] = challenge.params["service"]
        creds = self.credentials()
        if creds is not None and not self._may_send_to(realm):
            creds = None  # asked anonymously: a refusal says why (_refused)
            self._plain_realm = realm
        headers = {}
        try:
            if creds is not None and creds.identity_token:
                # OAuth2 refresh token (docker login with an identity token, ACR's helper)
                form = dict(params, grant_type="refresh_token", client_id="squall-sqshbuild",
                            refresh_token=creds.password)
                resp = self.session.post(realm, data=form, timeout=http_timeout(),
                                         stream=True)  # read_capped reads it, capped
            else:
                if creds is not None:
                    headers["Authorization"] = creds.basic_header()
                resp = self.session.get(realm, params=params, headers=headers,
                                        timeout=http_timeout(), stream=True)
            body = read_capped(resp, TOKEN_CAP, f"the token from {realm}", deadline())
        except requests.RequestException as exc:
            raise SquallError(f"registry unreachable: cannot get a token from {realm} "
                              f"({describe(exc)}): check the network") from None
        if resp.status_code in (401, 403):
            who = (f"the credentials from {creds.origin}" if creds else "anonymous access")
            raise self._refused(f"its token server {realm} refused {who}")
        if resp.status_code != 200:
            raise self._refused(f"its token server {realm} answered HTTP {resp.status_code}")
        token: object = None
        lifetime = 60.0
        try:
            check_depth(body, f"the token from {realm}")
            doc = json.loads(body)
            token = doc.get("token") or doc.get("access_token")
            if isinstance(doc.get("expires_in"), int | float) and doc["expires_in"] > 0:
                lifetime = float(doc["expires_in"])
        except (ValueError, AttributeError):
            token = None
        if not token or not isinstance(token, str):
            raise self._refused(f"its token server {realm} returned no token")
        remember_secret(token)
        if used is not None and used == f"Bearer {token}":
            raise self._refused("it refused a fresh token")
        self.used_credentials = self.used_credentials or creds is not None
        return token, lifetime

    def _may_send_to(self, url: str) -> bool:
        """A password goes over HTTPS, to a server on this node, or to a plain-HTTP one the
        site declared insecure (registries.conf, --insecure-registry): never in the clear
        over a network to a place nobody vouched for (a token realm names any URL)."""
        scheme, _, rest = url.partition("://")
        hostport = rest.split("/", 1)[0].rpartition("@")[2]
        return scheme.lower() == "https" or is_loopback(hostport) or hostport in self.insecure

    def _refused(self, why: str) -> Refused:
        hint = ("check the user and password in ~/.config/enroot/.credentials or "
                "~/.docker/config.json (or NGC_API_KEY for nvcr.io)")
        if self.anonymous:
            hint = f"asked anonymously: {self.anonymous}"
        elif getattr(self, "_plain_realm", ""):
            hint = (f"no password is sent over plain HTTP to {self._plain_realm}: declare "
                    "its host insecure in registries.conf if that is meant")
        return Refused(f"auth refused by {self.registry} for {self.repository}: {why}; {hint}")

    # -- requests -------------------------------------------------------------------------
    def request(self, method: str, url: str, headers: dict[str, str] | None = None,
                stream: bool = False, what: str = "") -> requests.Response:
        """A request with auth; urllib3 retries connection failures, 429 and 5xx under the
        request's deadline (:mod:`squall.sqshbuild.transport`)."""
        headers = dict(headers or {})
        for _ in range(3):
            used = self._current_auth()
            if used:
                headers["Authorization"] = used
            try:
                resp = self.session.request(method, url, headers=headers, stream=stream,
                                            timeout=http_timeout(), allow_redirects=True)
            except requests.RequestException as exc:
                raise SquallError(
                    f"registry unreachable: {self.registry} ({describe(exc)}) after "
                    f"{self.retries} "
                    "tries: check the name, the network, and that plain HTTP registries are "
                    "named with --insecure-registry") from None
            if resp.status_code == 401:
                challenge = resp.headers.get("WWW-Authenticate", "")
                resp.close()
                self._authenticate(challenge, used)
                continue
            return resp
        raise self._refused(f"it kept asking for authentication for {what or url}")

    def _check(self, resp: requests.Response, what: str) -> None:
        if resp.status_code in (401, 403):
            raise self._refused(f"HTTP {resp.status_code} for {what}")
        if resp.status_code == 404:
            raise NotFound(f"image or tag not found: {self.name} has no {what}; check the "
                              "name and tag (the registry answered 404)")
        if resp.status_code == 429:
            resp.close()
            wait = resp.headers.get("Retry-After", "").strip()
            asks = f": it asks to wait {wait} s" if wait.isdigit() else ""
            raise SquallError(f"rate limited by {self.registry} (HTTP 429) for {what}{asks}: "
                              "try again later or pull through a mirror (registries.conf)")
        if resp.status_code >= 400:
            resp.close()
            raise SquallError(f"registry {self.registry} answered HTTP {resp.status_code} for "
                              f"{what}: try again later or check the reference")

    # -- manifests ------------------------------------------------------------------------
    def get_manifest(self, reference: str) -> tuple[bytes, str, str]:
        """(body, media type, digest) of a manifest or index by tag or digest."""
        what = f"manifest {reference}"
        until = deadline()
        resp = self.request("GET", f"{self.base}/manifests/{reference}",
                            headers={"Accept": MANIFEST_ACCEPT}, stream=True, what=what)
        self._check(resp, what)
        body = read_capped(resp, MANIFEST_CAP, f"{self.name} {what}", until)
        digest = _sha256(body)
        if reference.startswith("sha256:") and digest != reference:
            raise SquallError(f"digest mismatch: manifest {reference} from {self.name} hashes "
                              f"to {digest}; the registry served corrupt or tampered content")
        media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
        check_depth(body, f"{self.name} {what}")
        try:
            doc = json.loads(body)
        except ValueError:
            raise SquallError(f"{self.name} {what} is not JSON: the registry or image is "
                              "broken") from None
        if not isinstance(doc, dict):
            raise SquallError(f"{self.name} {what} is not a JSON object: the registry or "
                              "image is broken")
        media_type = str(doc.get("mediaType") or media_type)
        if media_type not in INDEX_TYPES | MANIFEST_TYPES:
            if "manifests" in doc:
                media_type = MT_OCI_INDEX
            elif "layers" in doc:
                media_type = MT_OCI_MANIFEST
            else:
                raise SquallError(f"{self.name} {what} has unsupported type {media_type!r} "
                                  "(schema 1 images are not supported): re-push the image")
        return body, media_type, digest

    def resolve(self, reference: str, arch: str) -> Manifest:
        body, media_type, digest = self.get_manifest(reference)
        platform = ""
        if media_type in INDEX_TYPES:
            digest, platform = select_platform(json.loads(body), arch, self.name, reference)
            body, media_type, digest2 = self.get_manifest(digest)
            if media_type in INDEX_TYPES:
                raise SquallError(f"{self.name}@{digest} is an index inside an index: "
                                  "not supported; name a platform manifest by digest")
        return parse_manifest(body, media_type, digest, self.name, platform)

    # -- blobs ----------------------------------------------------------------------------
    def open_blob(self, digest: str, offset: int = 0) -> requests.Response:
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        what = f"blob {digest}"
        resp = self.request("GET", f"{self.base}/blobs/{digest}", headers=headers, stream=True,
                            what=what)
        if resp.status_code == 416:
            return resp
        self._check(resp, what)
        return resp

    def get_blob(self, digest: str, cap: int = CONFIG_CAP) -> bytes:
        """A small blob (an image config), read whole: at most ``cap`` bytes."""
        until = deadline()
        resp = self.open_blob(digest)
        data = read_capped(resp, cap, f"blob {digest} of {self.name}", until)
        if _sha256(data) != digest:
            raise SquallError(f"digest mismatch: blob {digest} from {self.name} hashes to "
                              f"{_sha256(data)}; the registry served corrupt or tampered content")
        return data


    def blob_failed(self, digest: str) -> bool:
        """The blob served for ``digest`` was wrong; True if another source may serve it
        (:class:`squall.sqshbuild.mirrors.MirroredClient`)."""
        return False


def select_platform(index: dict[str, Any], arch: str, name: str, reference: str) -> tuple[str, str]:
    entries = index.get("manifests") or []
    if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("platform") or {}, dict)
            and isinstance(e.get("digest"), str) for e in entries):
        raise SquallError(f"the index {name}:{reference} is malformed (its manifests must be "
                          "objects with a digest and a platform): re-push the image")
    want, variant = normalise_arch(arch)
    found = []
    for entry in entries:
        plat = entry.get("platform") or {}
        if not all(isinstance(v, str) for v in plat.values()):
            continue  # an os or architecture that is not a name is no match
        found.append(f"{plat.get('os', '?')}/{plat.get('architecture', '?')}"
                     + (f"/{plat['variant']}" if plat.get("variant") else ""))
        if plat.get("os", "linux") != "linux":
            continue
        if normalise_arch(plat.get("architecture", ""))[0] != want:
            continue
        if variant and plat.get("variant", "") != variant:
            continue
        label = f"linux/{want}" + (f"/{plat['variant']}" if plat.get("variant") else "")
        return str(entry["digest"]), label
    raise SquallError(f"no image for the platform linux/{want}{'/' + variant if variant else ''} "
                      f"in {name}:{reference} (it has {', '.join(found) or 'none'}): "
                      "pick one with --arch")


def parse_manifest(body: bytes, media_type: str, digest: str, name: str,
                   platform: str = "") -> Manifest:
    check_depth(body, f"manifest {digest} of {name}")
    try:
        doc = json.loads(body)
        config = doc["config"]
        layers = doc["layers"]
        cfg = Descriptor(config.get("mediaType", ""), config["digest"], int(config.get("size", 0)))
        descs = [Descriptor(x.get("mediaType", ""), x["digest"], int(x.get("size", 0)))
                 for x in layers]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise SquallError(f"manifest {digest} of {name} is malformed: re-push the image") from None
    for d in [cfg, *descs]:
        if not isinstance(d.media_type, str):
            raise SquallError(f"manifest {digest} of {name} is malformed (a mediaType that "
                              "is not text): re-push the image")
        if d.size < 0:
            raise SquallError(f"manifest {digest} of {name} gives {d.digest} the size "
                              f"{d.size}: the manifest is malformed; re-push the image")
        if not isinstance(d.digest, str) or not d.digest.startswith("sha256:") \
                or len(d.digest) != 71:
            raise SquallError(f"manifest {digest} of {name} names digest {d.digest!r}: only "
                              "sha256 digests are supported")
    return Manifest(digest, media_type, cfg, descs, platform, body)
