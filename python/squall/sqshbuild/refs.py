"""What the user asked to build: a registry image, a local Docker image, or an archive on disk.

The forms that name files (``docker-archive:FILE.tar``, ``oci-archive:FILE.tar``,
``oci:DIR[:TAG]``) are recognised here; every registry form (``REGISTRY/NAME[:TAG|@DIGEST]``,
Docker Hub short names, Enroot's ``[USER@][REGISTRY#]IMAGE[:TAG]`` and ``docker://``) and
``dockerd://`` go through the C core's parser, ``squall.core.parse_image_ref``, the one the
plugin uses, so the two never disagree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from squall.errors import SquallError

DOCKER_HUB = "registry-1.docker.io"
DOCKER_HUB_ALIASES = {"", "docker.io", "index.docker.io", "registry-1.docker.io",
                      "registry.hub.docker.com"}


@dataclass(frozen=True)
class Source:
    """A parsed build source.

    kind: ``registry``, ``dockerd``, ``docker-archive``, ``oci-archive`` or ``oci-dir``.
    For ``registry``: registry host[:port], repository, tag and/or digest, optional user.
    For ``dockerd``: ``name`` is the image name given to the daemon.
    For archives and layouts: ``path`` and, for ``oci-dir``, an optional ``tag``.
    """

    kind: str
    text: str
    registry: str = ""
    repository: str = ""
    tag: str = ""
    digest: str = ""
    user: str = ""
    name: str = ""
    path: str = ""

    @property
    def canonical(self) -> str:
        if self.kind == "registry":
            ref = f"{self.registry}/{self.repository}"
            if self.tag:
                ref += f":{self.tag}"
            if self.digest:
                ref += f"@{self.digest}"
            return ref
        if self.kind == "dockerd":
            return f"dockerd://{self.name}"
        if self.kind == "oci-dir":
            return f"oci:{self.path}" + (f":{self.tag}" if self.tag else "")
        return f"{self.kind}:{self.path}"


def _file_form(text: str) -> Source | None:
    for prefix in ("docker-archive:", "oci-archive:"):
        if text.startswith(prefix):
            path = text[len(prefix):]
            if not path:
                raise SquallError(f"{text!r} names no file: write {prefix}PATH.tar")
            return Source(kind=prefix[:-1], text=text, path=os.path.abspath(path))
    if text.startswith("oci:"):
        rest = text[4:]
        if not rest:
            raise SquallError(f"{text!r} names no directory: write oci:DIR[:TAG]")
        path, tag = rest, ""
        if ":" in rest and not os.path.isdir(rest):
            path, _, tag = rest.rpartition(":")
        return Source(kind="oci-dir", text=text, path=os.path.abspath(path), tag=tag)
    return None


def normalise_registry(registry: str, repository: str) -> tuple[str, str]:
    """Docker Hub's API host and ``library/`` for its official images."""
    if registry in DOCKER_HUB_ALIASES:
        registry = DOCKER_HUB
        if "/" not in repository:
            repository = f"library/{repository}"
    return registry, repository


def parse_source(text: str) -> Source:
    """Parse a build reference; raise SquallError naming the problem for anything else."""
    text = text.strip()
    if not text:
        raise SquallError("empty image reference: give REGISTRY/NAME[:TAG], docker://..., "
                          "dockerd://NAME, docker-archive:FILE, oci-archive:FILE or oci:DIR")
    found = _file_form(text)
    if found is not None:
        return found
    try:
        from squall import core
    except ImportError as exc:  # the compiled core is missing: say how to build it
        raise SquallError(f"the squall C core is not available ({exc}): run 'make core' "
                          "or reinstall squall") from None
    ref = core.parse_image_ref(text)
    if ref.kind == "dockerd":
        name = ref.canonical.removeprefix("dockerd://")
        return Source(kind="dockerd", text=text, name=name)
    if ref.kind == "file":
        raise SquallError(f"{text!r} is a squashfs file path, not an image to build: "
                          "pass it to the plugin as it is, or build from a registry reference")
    registry, repository = normalise_registry(ref.registry or "", ref.repository or "")
    tag = ref.tag or ("" if ref.digest else "latest")
    return Source(kind="registry", text=text, registry=registry, repository=repository,
                  tag=tag, digest=ref.digest or "", user=ref.user or "")
