"""The files Enroot reads from an image, generated from the image config as ``enroot import`` does.

- ``/etc/rc``: the labels as comments, then ``cd`` to the working directory (created if
  missing), source ``/etc/rc.local`` when it is not empty, and ``exec`` the entrypoint with
  the start arguments, or entrypoint + cmd when there are none (``/bin/sh`` when the image
  names neither).
- ``/etc/rc.local``: replaced by a comment-only file, as Enroot does.
- ``/etc/environment``: the config's ``Env`` lines, one ``KEY=VALUE`` a line.
- ``/etc/fstab``: one bind mount of the image's own directory per ``Volumes`` key,
  ``${ENROOT_ROOTFS}/VOL VOL none x-create=dir,bind,rw,nosuid,nodev`` (Enroot expands the
  variable when it reads the file).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from squall.errors import SquallError

RC_LOCAL = (
    "# This file is sourced by /etc/rc when the container starts.\n"
    "# Edit it to change the entrypoint or the command of the container.\n"
)


@dataclass
class EnrootFiles:
    rc: str
    rc_local: str
    environment: str
    fstab: str
    workdir: str

    def as_synthetic(self) -> dict[str, tuple[bytes, int]]:
        """Paths (relative to the root) to (content, mode), as the merge takes them."""
        return {
            "etc/rc": (self.rc.encode(), 0o755),
            "etc/rc.local": (self.rc_local.encode(), 0o644),
            "etc/environment": (self.environment.encode(), 0o644),
            "etc/fstab": (self.fstab.encode(), 0o644),
        }


def _strings(value: Any, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):  # Docker stores shell-form as a list already; be lenient
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SquallError(f"image config field {key} is not a list of strings: "
                          "the image config is malformed; rebuild the image")
    return list(value)


def _fstab_escape(path: str) -> str:
    return (path.replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011")
            .replace("\n", "\\012"))


def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def generate(config: dict[str, Any]) -> EnrootFiles:
    """Build the files from an image config (the JSON blob, or Docker's inspect output)."""
    inner = config.get("config") or config.get("Config") or {}
    if not isinstance(inner, dict):
        raise SquallError("image config has no 'config' object: the image is malformed")
    env = _strings(inner.get("Env"), "Env")
    entrypoint = _strings(inner.get("Entrypoint"), "Entrypoint")
    cmd = _strings(inner.get("Cmd"), "Cmd")
    workdir = inner.get("WorkingDir") or "/"
    if not isinstance(workdir, str):
        raise SquallError("image config field WorkingDir is not a string: rebuild the image")
    if not workdir.startswith("/"):
        workdir = "/" + workdir
    volumes = inner.get("Volumes") or {}
    labels = inner.get("Labels") or {}
    if not entrypoint and not cmd:
        cmd = ["/bin/sh"]

    lines = [f"# {_one_line(str(k))} {_one_line(str(v))}" for k, v in labels.items()]
    if lines:
        lines.append("")
    ep = " ".join(shlex.quote(w) for w in entrypoint)
    both = " ".join(shlex.quote(w) for w in entrypoint + cmd)
    wd = shlex.quote(workdir)
    lines += [
        f"mkdir -p {wd} 2> /dev/null",
        f"cd {wd} && unset OLDPWD || exit 1",
        "",
        "if [ -s /etc/rc.local ]; then",
        "    . /etc/rc.local",
        "fi",
        "",
        "if [ $# -gt 0 ]; then",
        f"    exec {ep + ' ' if ep else ''}\"$@\"",
        "else",
        f"    exec {both}",
        "fi",
    ]
    rc = "\n".join(lines) + "\n"
    environment = "".join(f"{_one_line(e)}\n" for e in env)
    fstab = "".join(
        f"${{ENROOT_ROOTFS}}{_fstab_escape(v)} {_fstab_escape(v)} none "
        "x-create=dir,bind,rw,nosuid,nodev\n"
        for v in sorted(volumes)
    )
    return EnrootFiles(rc=rc, rc_local=RC_LOCAL, environment=environment, fstab=fstab,
                       workdir=workdir)
