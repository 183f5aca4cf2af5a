"""``sqshbuild inspect`` of what anyone may have planted (issue 26, "Reads without bounds"):
a FIFO sidecar does not block, a sidecar link is not followed (nor its target printed),
``/dev/zero`` or a huge file is never read whole, and the image itself is a regular file,
not a link, before unsquashfs sees it."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from gate import need_tool

ROOT = Path(__file__).resolve().parents[2]
SECRET = "root-only-secret-7f3a"


def inspect(*args: str, memory: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}

    def limit() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run([sys.executable, "-c",
                           "from squall.sqshbuild.cli import main; main()", "inspect", *args],
                          env=env, capture_output=True, text=True, timeout=30,
                          preexec_fn=limit)


@pytest.fixture
def image(tmp_path: Path) -> Path:
    need_tool("unsquashfs", "squashfs-tools")  # what inspect runs
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "hello").write_text("hi\n")
    out = tmp_path / "img.sqsh"
    subprocess.run([need_tool("mksquashfs", "squashfs-tools"), str(tree), str(out), "-quiet",
                    "-no-progress"], check=True, capture_output=True)
    return out


def sidecar(image: Path) -> Path:
    return image.with_suffix(".json")


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("sqshbuild: error: "), proc.stderr
    return last


def test_a_good_sidecar_is_shown(image: Path) -> None:
    sidecar(image).write_text(json.dumps({"reference": "ubuntu:24.04", "size": 1234,
                                          "versions": {"cuda": "12.4"}}))
    proc = inspect(str(image))
    assert proc.returncode == 0, proc.stderr
    assert "ubuntu:24.04" in proc.stdout and "12.4" in proc.stdout


def test_a_fifo_sidecar_does_not_block(image: Path) -> None:
    os.mkfifo(sidecar(image))
    err = one_line(inspect(str(image)))  # was: blocked for ever (here: the timeout)
    assert "has no sidecar" in err
    assert f"note: ignoring the sidecar {sidecar(image)}: it is" in inspect(str(image)).stderr


def test_a_sidecar_link_is_not_followed(image: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"reference": SECRET}))
    secret.chmod(0o600)
    sidecar(image).symlink_to(secret)
    image.with_name(image.name + ".json").symlink_to(secret)
    proc = inspect("--json", str(image))
    assert SECRET not in proc.stdout + proc.stderr
    one_line(proc)
    assert f"note: ignoring the sidecar {sidecar(image)}: it is a symlink" in proc.stderr


@pytest.mark.parametrize("how", ["dev-zero-link", "huge", "deep", "not-an-object"])
def test_a_sidecar_is_read_bounded(image: Path, how: str) -> None:
    side = sidecar(image)
    if how == "dev-zero-link":
        side.symlink_to("/dev/zero")
    elif how == "huge":
        with open(side, "wb") as f:  # sparse: 8 GiB of '[' would be as bad
            f.write(b'{"reference": "')
            f.truncate(8 << 30)
    elif how == "deep":
        side.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    else:
        side.write_text("[1, 2]")
    proc = inspect(str(image), memory=2 << 30)  # was: MemoryError, or RecursionError
    err = one_line(proc)
    assert "has no sidecar" in err, proc.stderr
    assert f"note: ignoring the sidecar {side}: it " in proc.stderr, proc.stderr


def test_what_a_sidecar_holds_cannot_break_the_output(image: Path) -> None:
    sidecar(image).write_text(json.dumps({"reference": "evil\x1b]0;owned\x07\nsecond line",
                                          "size": "big", "squash": "x", "versions": [1],
                                          "layers": 5}))
    proc = inspect(str(image))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\nsecond line" not in proc.stdout, proc.stdout
    assert "evil\\x1b]0;owned\\x07\\nsecond line" in proc.stdout


@pytest.mark.parametrize("how", ["link", "fifo", "dev-zero"])
def test_the_image_is_a_regular_file_not_followed(image: Path, tmp_path: Path,
                                                  how: str) -> None:
    planted = tmp_path / "planted.sqsh"
    if how == "link":
        planted.symlink_to(image)  # was: followed, and its sidecar read
        sidecar(planted).write_text(json.dumps({"reference": SECRET}))
    elif how == "fifo":
        os.mkfifo(planted)
    else:
        planted.symlink_to("/dev/zero")
    proc = inspect(str(planted), memory=2 << 30)
    err = one_line(proc)
    assert SECRET not in proc.stdout
    assert f"{planted} is a symlink" in err or f"{planted} is a FIFO" in err \
        or f"{planted} is a socket or a FIFO" in err, err
