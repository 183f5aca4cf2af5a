"""Image names and signed identities as containers-policy.json(5) knows them: the names
normalised as github.com/distribution/reference does, the docker transport's scopes for a
name (most specific first), and ``signedIdentity``: which name a signature may carry for
the image being pulled. Pure functions over strings; the policy file and its checks are
:mod:`squall.sqshbuild.policy`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from squall.errors import SquallError
from squall.sqshbuild.mirrors import hub_name

# -- names, as github.com/distribution/reference normalises them -------------------------------
_DOMAIN = (r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
           r"(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(
    rf"({_DOMAIN}/{_COMPONENT}(?:/{_COMPONENT})*)(?::([\w][\w.-]{{0,127}}))?"
    r"(?:@([A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?", re.ASCII)


@dataclass(frozen=True)
class ImageName:
    """A fully expanded name (``docker.io/library/ubuntu``) with its tag and/or digest."""

    name: str
    tag: str = ""
    digest: str = ""

    @property
    def text(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + \
            (f"@{self.digest}" if self.digest else "")

    @property
    def exact(self) -> bool:
        return bool(self.tag or self.digest)


def image_name(registry: str, repository: str, tag: str, digest: str) -> ImageName:
    """The name policy.json knows a registry image by: Docker Hub is docker.io; a digest,
    when given, is what is pulled (the tag beside it is dropped)."""
    return ImageName(f"{hub_name(registry)}/{repository}", "" if digest else tag, digest)


def parse_reference(text: str) -> ImageName | None:
    """``reference.ParseNormalizedNamed``: ``busybox`` is docker.io/library/busybox; None for
    anything that is not a reference."""
    first, slash, rest = text.partition("/")
    if not slash or ("." not in first and ":" not in first and first != "localhost"
                     and first.lower() == first):
        first, rest = "docker.io", text
    if first == "index.docker.io":
        first = "docker.io"
    if first == "docker.io" and "/" not in rest:
        rest = f"library/{rest}"
    m = _REFERENCE.fullmatch(f"{first}/{rest}")
    if m is None or len(m.group(1)) > 255:
        return None
    return ImageName(m.group(1), m.group(2) or "", m.group(3) or "")


def scope_names(img: ImageName) -> list[str]:
    """Where the docker transport looks the image up, most specific first
    (containers/image's PolicyConfigurationIdentity, then its Namespaces)."""
    names = [img.text]
    name = img.name
    while True:
        names.append(name)
        if "/" not in name:
            break
        name = name.rsplit("/", 1)[0]
    host = name.split(":", 1)[0]
    while "." in host:
        host = host.split(".", 1)[1]
        names.append(f"*.{host}")
    return names


# -- signedIdentity ------------------------------------------------------------------------------
_IDENTITIES = {"matchExact": (), "matchRepoDigestOrExact": (), "matchRepository": (),
               "exactReference": ("dockerReference",), "exactRepository": ("dockerRepository",),
               "remapIdentity": ("prefix", "signedPrefix")}


def _repo_digest_or_exact(intended: ImageName, signed: ImageName) -> bool:
    if not signed.exact:
        return False
    if intended.tag:
        return signed.text == intended.text
    return bool(intended.digest) and signed.name == intended.name


@dataclass(frozen=True)
class SignedIdentity:
    """What image a signature may name, for the image being pulled."""

    kind: str = "matchRepoDigestOrExact"
    values: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: Any, where: str) -> SignedIdentity:
        kind = raw.get("type") if isinstance(raw, dict) else None
        if not isinstance(raw, dict) or not isinstance(kind, str) or kind not in _IDENTITIES:
            raise SquallError(f"{where}.signedIdentity must be an object whose type is one of "
                              f"{', '.join(_IDENTITIES)}")
        fields = _IDENTITIES[kind]
        if set(raw) != {"type", *fields} or not all(isinstance(raw[f], str) for f in fields):
            want = ", ".join(fields) or "nothing else"
            raise SquallError(f"{where}.signedIdentity {kind} takes {want}")
        values = tuple(str(raw[f]) for f in fields)
        ref = parse_reference(values[0]) if kind.startswith("exact") else None
        if kind.startswith("exact") and (ref is None or (kind == "exactReference"
                                                         and not ref.exact)):
            raise SquallError(f"{where}.signedIdentity {kind}: {values[0]!r} is not a "
                              + ("reference with a tag or digest" if kind == "exactReference"
                                 else "repository"))
        if kind == "remapIdentity" and not all(_is_prefix(v) for v in values):
            raise SquallError(f"{where}.signedIdentity remapIdentity: prefix and signedPrefix "
                              "must each be a registry host[:port], namespace or repository, "
                              "fully expanded")
        return cls(kind, values)

    def accepts(self, image: ImageName, signed_text: str) -> bool:
        signed = parse_reference(signed_text)
        if signed is None:
            return False
        if self.kind == "matchExact":
            return image.exact and signed.exact and signed.text == image.text
        if self.kind == "matchRepoDigestOrExact":
            return _repo_digest_or_exact(image, signed)
        if self.kind == "matchRepository":
            return signed.name == image.name
        given = parse_reference(self.values[0])
        if self.kind == "exactReference":
            return given is not None and signed.exact and signed.text == given.text
        if self.kind == "exactRepository":
            return given is not None and signed.name == given.name
        return _repo_digest_or_exact(self._remap(image), signed)

    def _remap(self, image: ImageName) -> ImageName:
        prefix, signed_prefix = self.values
        if image.name != prefix and not image.name.startswith(prefix + "/"):
            return image
        text = signed_prefix + image.text[len(prefix):]
        remapped = parse_reference(text)
        return remapped if remapped is not None and remapped.text == text else ImageName("")


def _is_prefix(text: str) -> bool:
    ref = parse_reference(text)
    return re.fullmatch(_DOMAIN, text, re.ASCII) is not None or (
        ref is not None and not ref.exact and ref.name == text)
