"""Read a squashfs image with unsquashfs (test helper)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def listing(image: Path) -> dict[str, tuple[str, str, str]]:
    """path -> (mode string, owner uid/gid, symlink target or '')."""
    out = subprocess.run(["unsquashfs", "-lln", "-d", "R", str(image)], check=True,
                         capture_output=True, text=True).stdout
    entries = {}
    for line in out.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("R"):
            continue
        mode, owner = parts[0], parts[1]
        rest = parts[5][1:].lstrip("/")
        target = ""
        if mode.startswith("l") and " -> " in rest:
            rest, target = rest.split(" -> ", 1)
        entries[rest] = (mode, owner, target)
    return entries


def cat(image: Path, path: str) -> str:
    return subprocess.run(["unsquashfs", "-cat", str(image), path], check=True,
                          capture_output=True, text=True).stdout
