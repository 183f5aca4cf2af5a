"""The node-local cache's extraction under test (spank/keeper/extracted.c, through
spank/keeper/tests/cache_probe.c): the image the extraction tests extract, the probe's run,
and what they check or hold (the files' inodes, a session killed as a job's end kills it, a
key's lock held as a live extraction holds it)."""

from __future__ import annotations

import fcntl
import os
import random
import signal
import subprocess
from pathlib import Path

from gate import need_tool

KEY = "0123456789abcdef" * 2
OLD = 1_600_000_000     # the image's files' mtimes: from here, long before any extraction
RECENT = 1_700_000_000  # files with an mtime after this were written by an extraction


def run(*argv: str | Path) -> dict[str, str]:
    """The probe, with time to spare: a busy host slows the governed extraction down."""
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300,
                         check=True)
    return dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)


def make_image(tmp: Path, nfiles: int, odd: bool = True, newline: bool = False) -> Path:
    need_tool("mksquashfs", "squashfs-tools")
    need_tool("unsquashfs", "squashfs-tools")
    rnd = random.Random(22)
    src = tmp / "src"
    for d in range(max(1, nfiles // 200)):
        (src / f"d{d}").mkdir(parents=True)
    dirs = sorted(src.iterdir())
    for i in range(nfiles):
        (dirs[i % len(dirs)] / f"f{i}").write_bytes(rnd.randbytes(rnd.randint(4096, 32768)))
    (src / "big").write_bytes(rnd.randbytes(1 << 20))
    os.link(src / "big", src / "zz-link-of-big")                 # a hard link
    (src / "lnk").symlink_to("d0/f0")
    (src / "dangling").symlink_to("/nowhere")
    (src / "ro").mkdir()
    (src / "ro/inside").write_bytes(b"x" * 5000)
    if odd:
        for name in ["a b", "#hash", " lead", "trail ", "back\\slash", "star*", "é"]:
            (src / name).write_bytes(name.encode() * 100)
    if newline:
        (src / "new\nline").write_bytes(b"nl" * 100)
    # Spread over many minutes, as a real image's packages are (the listing has minutes).
    for i, path in enumerate(sorted(src.rglob("*"))):
        t = OLD + 60 * (i % 500)
        os.utime(path, (t, t), follow_symlinks=False)
    (src / "ro").chmod(0o555)
    os.utime(src, (OLD, OLD))
    image = tmp / "img.sqsh"
    subprocess.run(["mksquashfs", str(src), str(image), "-quiet", "-no-progress", "-all-root"],
                   check=True, stdout=subprocess.DEVNULL, timeout=120)
    (src / "ro").chmod(0o755)
    return image


def inodes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.lstat().st_ino for p in root.rglob("f*")
            if p.is_file() and not p.is_symlink()}


def kill_session(proc: subprocess.Popen[bytes]) -> None:
    """As a job's end does: SIGKILL to every process of the extraction's session."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == proc.pid:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    proc.wait(timeout=10)


class Held:
    """A live extraction of key: its lock held exclusively, as sq_extracted_build holds it."""

    def __init__(self, cache: Path, key: str) -> None:
        self.fd = os.open(cache / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def release(self) -> None:
        os.close(self.fd)
