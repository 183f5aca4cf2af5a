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

MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MT_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MT_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_ACCEPT = ", ".join([MT_OCI_INDEX, MT_OCI_MANIFEST, MT_DOCKER_LIST, MT_DOCKER_MANIFEST])
INDEX_TYPES = {MT_DOCKER_LIST, MT_OCI_INDEX}
MANIFEST_TYPES = {MT_DOCKER_MANIFEST, MT_OCI_MANIFEST}
INSECURE_ENV = "SQSHBUILD_INSECURE_REGISTRIES"
TIMEOUT = (10, 60)


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
                 insecure: set[str] | None = None, retries: int = 4) -> None:
        self.registry = registry
        self.repository = repository
        self.user = user
        plain = is_loopback(registry) or registry in (insecure or set())
        self.base = f"{'http' if plain else 'https'}://{registry}/v2/{repository}"
        self.retries = retries
        self._creds: Credentials | None = find_credentials(registry, user)
        self._auth_header: str | None = None
        self._lock = threading.Lock()
        self._local = threading.local()
        if user and self._creds is None:
            raise SquallError(
                f"no credentials for user {user!r} on {registry}: add 'machine "
                f"{registry.split(':')[0]} login {user} password ...' to "
                "~/.config/enroot/.credentials or run 'docker login'")

    @property
    def session(self) -> requests.Session:
        s = getattr(self._local, "session", None)
        if s is None:
            s = requests.Session()
            s.headers["User-Agent"] = "squall-sqshbuild/0.1"
            self._local.session = s
        return s

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"

    # -- auth -----------------------------------------------------------------------------
    def _authenticate(self, challenge_header: str, used: str | None) -> None:
        with self._lock:
            if self._auth_header is not None and self._auth_header != used:
                return  # another thread already refreshed it
            challenge = parse_challenge(challenge_header)
            if challenge is None:
                raise self._refused("the registry asked for authentication without a challenge")
            if challenge.scheme == "basic":
                if self._creds is None:
                    raise self._refused("it requires a user name and password")
                if used is not None and used == self._creds.basic_header():
                    raise self._refused(f"it refused the credentials from {self._creds.origin}")
                self._auth_header = self._creds.basic_header()
                return
            if challenge.scheme == "bearer":
                self._auth_header = "Bearer " + self._fetch_token(challenge, used)
                return
            raise self._refused(f"it asks for unsupported authentication {challenge.scheme!r}")

    def _fetch_token(self, challenge: Challenge, used: str | None) -> str:
        realm = challenge.params.get("realm")
        if not realm:
            raise self._refused("its Bearer challenge names no realm")
        params = {"scope": challenge.params.get("scope") or f"repository:{self.repository}:pull"}
        if challenge.params.get("service"):
            params["service"] = challenge.params["service"]
        headers = {}
        if self._creds is not None:
            headers["Authorization"] = self._creds.basic_header()
        try:
            resp = self.session.get(realm, params=params, headers=headers, timeout=TIMEOUT)
        except requests.RequestException as exc:
            raise SquallError(f"registry unreachable: cannot get a token from {realm} "
                              f"({type(exc).__name__}): check the network") from None
        if resp.status_code in (401, 403):
            who = (f"the credentials from {self._creds.origin}" if self._creds
                   else "anonymous access")
            raise self._refused(f"its token server {realm} refused {who}")
        if resp.status_code != 200:
            raise self._refused(f"its token server {realm} answered HTTP {resp.status_code}")
        try:
            body = resp.json()
            token = body.get("token") or body.get("access_token")
        except ValueError:
            token = None
        if not token:
            raise self._refused(f"its token server {realm} returned no token")
        if used is not None and used == f"Bearer {token}":
            raise self._refused("it refused a fresh token")
        return str(token)

    def _refused(self, why: str) -> SquallError:
        hint = ("check the user and password in ~/.config/enroot/.credentials or "
                "~/.docker/config.json (or NGC_API_KEY for nvcr.io)")
        return SquallError(f"auth refused by {self.registry} for {self.repository}: {why}; {hint}")

    # -- requests -------------------------------------------------------------------------
    def request(self, method: str, url: str, headers: dict[str, str] | None = None,
                stream: bool = False, what: str = "") -> requests.Response:
        """A request with auth, retries with backoff on connection errors and 5xx."""
        headers = dict(headers or {})
        attempts_401 = 0
        delay = 0.5
        for attempt in range(self.retries):
            used = self._auth_header
            if used:
                headers["Authorization"] = used
            try:
                resp = self.session.request(method, url, headers=headers, stream=stream,
                                            timeout=TIMEOUT, allow_redirects=True)
            except requests.RequestException as exc:
                if attempt + 1 >= self.retries:
                    raise SquallError(
                        f"registry unreachable: {self.registry} ({type(exc).__name__}) after "
                        f"{self.retries} tries: check the name, the network, and that plain "
                        f"HTTP registries are named with --insecure-registry") from None
                time.sleep(delay)
                delay *= 2
                continue
            if resp.status_code == 401 and attempts_401 < 2:
                attempts_401 += 1
                challenge = resp.headers.get("WWW-Authenticate", "")
                resp.close()
                self._authenticate(challenge, used)
                continue
            if resp.status_code >= 500 and attempt + 1 < self.retries:
                resp.close()
                time.sleep(delay)
                delay *= 2
                continue
            return resp
        raise SquallError(f"registry {self.registry} kept failing for {what or url}: try again")

    def _check(self, resp: requests.Response, what: str) -> None:
        if resp.status_code in (401, 403):
            raise self._refused(f"HTTP {resp.status_code} for {what}")
        if resp.status_code == 404:
            raise SquallError(f"image or tag not found: {self.name} has no {what}; check the "
                              "name and tag (the registry answered 404)")
        if resp.status_code >= 400:
            raise SquallError(f"registry {self.registry} answered HTTP {resp.status_code} for "
                              f"{what}: try again later or check the reference")

    # -- manifests ------------------------------------------------------------------------
    def get_manifest(self, reference: str) -> tuple[bytes, str, str]:
        """(body, media type, digest) of a manifest or index by tag or digest."""
        what = f"manifest {reference}"
        resp = self.request("GET", f"{self.base}/manifests/{reference}",
                            headers={"Accept": MANIFEST_ACCEPT}, what=what)
        self._check(resp, what)
        body = resp.content
        digest = _sha256(body)
        if reference.startswith("sha256:") and digest != reference:
            raise SquallError(f"digest mismatch: manifest {reference} from {self.name} hashes "
                              f"to {digest}; the registry served corrupt or tampered content")
        media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
        try:
            doc = json.loads(body)
        except ValueError:
            raise SquallError(f"{self.name} {what} is not JSON: the registry or image is "
                              "broken") from None
        media_type = doc.get("mediaType") or media_type
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

    def get_blob(self, digest: str) -> bytes:
        resp = self.open_blob(digest)
        data = resp.content
        if _sha256(data) != digest:
            raise SquallError(f"digest mismatch: blob {digest} from {self.name} hashes to "
                              f"{_sha256(data)}; the registry served corrupt or tampered content")
        return data


def select_platform(index: dict[str, Any], arch: str, name: str, reference: str) -> tuple[str, str]:
    want, variant = normalise_arch(arch)
    found = []
    for entry in index.get("manifests") or []:
        plat = entry.get("platform") or {}
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
    try:
        doc = json.loads(body)
        config = doc["config"]
        layers = doc["layers"]
        cfg = Descriptor(config.get("mediaType", ""), config["digest"], int(config.get("size", 0)))
        descs = [Descriptor(x.get("mediaType", ""), x["digest"], int(x.get("size", 0)))
                 for x in layers]
    except (ValueError, KeyError, TypeError):
        raise SquallError(f"manifest {digest} of {name} is malformed: re-push the image") from None
    for d in [cfg, *descs]:
        if not d.digest.startswith("sha256:") or len(d.digest) != 71:
            raise SquallError(f"manifest {digest} of {name} names digest {d.digest!r}: only "
                              "sha256 digests are supported")
    return Manifest(digest, media_type, cfg, descs, platform, body)
