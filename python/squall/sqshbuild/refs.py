"""What the user asked to build: a registry image, a local Docker image, or an archive on disk.

Every form is parsed by the C core, ``squall.core.parse_image_ref(text, archives=True)``:
the parse the plugin runs for ``--container-image``, which also returns the forms that
name files (``docker-archive:FILE.tar``, ``oci-archive:FILE.tar``, ``oci:DIR[:TAG]``) where
the plugin refuses them. So the two never read one text differently: ``oci-archive:5000/x``
is the file ``5000/x`` for both, never a registry ``oci-archive:5000``
(``docker://oci-archive:5000/x`` is that registry).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from squall.errors import SquallError

DOCKER_HUB = "registry-1.docker.io"
_TRANSPORTS = ("docker-archive:", "oci-archive:", "oci:")


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
            if ref.startswith(_TRANSPORTS):  # oci:5000/x is a layout: the core's form
                ref = f"docker://{ref}"
            if self.tag:
                ref += f":{self.tag}"
            if self.digest:
                ref += f"@{self.digest}"
            return ref
        if self.kind == "dockerd":
            return f"dockerd://{self.name}"
        if self.kind == "oci-dir":
            if self.tag:
                return f"oci:{self.path}:{self.tag}"
            # A last component holding ':' would read back as DIR:TAG without the '/'.
            return f"oci:{self.path}" + ("/" if ":" in os.path.basename(self.path) else "")
        return f"{self.kind}:{self.path}"


_ARCHIVES = ("docker-archive", "oci-archive", "oci-dir")


def parse_source(text: str) -> Source:
    """Parse a build reference; raise SquallError naming the problem for anything else.

    The text is taken as given (no stripping): a value the plugin refuses, sqshbuild
    refuses, with the same message.
    """
    if not text:
        raise SquallError("empty image reference: give REGISTRY/NAME[:TAG], docker://..., "
                          "dockerd://NAME, docker-archive:FILE, oci-archive:FILE or oci:DIR")
    try:
        from squall import core
    except ImportError as exc:  # the compiled core is missing: say how to build it
        raise SquallError(f"the squall C core is not available ({exc}): run 'make core' "
                          "or reinstall squall") from None
    ref = core.parse_image_ref(text, archives=True)
    if ref.kind in _ARCHIVES:
        return Source(kind=ref.kind, text=text, path=os.path.abspath(ref.path or ""),
                      tag=ref.tag or "")
    if ref.kind == "dockerd":
        name = ref.canonical.removeprefix("dockerd://")
        return Source(kind="dockerd", text=text, name=name)
    if ref.kind == "file":
        raise SquallError(f"{text!r} is a squashfs file path, not an image to build: "
                          "pass it to the plugin as it is, or build from a registry reference")
    # The core names Docker Hub registry-1.docker.io with library/ for official images.
    return Source(kind="registry", text=text, registry=ref.registry or "",
                  repository=ref.repository or "", tag=ref.tag or "", digest=ref.digest or "",
                  user=ref.user or "")
