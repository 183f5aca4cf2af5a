"""The image check of the plugin (spank/plugin/image.c) never blocks on its input (issue 19).

`srun --container-image=/fsx/fifo` used to leave slurmstepd blocked in open() on the FIFO
until a writer came: srun was killed with no squall line and the job stayed COMPLETING.
A path that is not a regular file (FIFO, device, directory, socket) is refused in one line
naming the path and what it is, without being opened at all; the probe
(spank/plugin/tests/image_probe.c) runs sq_image_check_file as the plugin does, under a
timeout.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from plugin_probe import build_probe

FIX = "give the path of a .sqsh image (a file built by sqshbuild or mksquashfs)"


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    return build_probe(tmp_path_factory.mktemp("image") / "image_probe", "image_probe.c",
                       "image.c", "filepolicy.c", "pinmemo.c", "builder.c", "runcmd.c",
                       "srunwatch.c")


def check(probe: Path, path: Path | str, what: str | None = None) -> dict[str, str]:
    what = what or f"--container-image={path}"
    # A blocking open is a TimeoutExpired here: the test fails instead of hanging.
    res = subprocess.run([str(probe), what, str(path)], capture_output=True, text=True,
                         timeout=10, check=True)
    return dict(line.split("=", 1) for line in res.stdout.splitlines())


def image(path: Path) -> Path:
    path.write_bytes(b"hsqs" + bytes(200))
    return path


def test_a_fifo_is_refused_at_once_and_never_opened(probe, tmp_path):
    fifo = tmp_path / "img.sqsh"
    os.mkfifo(fifo, 0o644)
    # A writer waits in open() until a reader opens the FIFO: if the check opened it, even
    # without blocking, the writer would get through and say so.
    writer = subprocess.Popen(["sh", "-c", f"exec 3>'{fifo}'; echo opened"],
                              stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.2)
        out = check(probe, fifo)
        assert out == {"rc": "-1", "err": f"--container-image={fifo}: {fifo} is a FIFO (named "
                                          f"pipe), not a regular file: {FIX}"}, out
        time.sleep(0.2)
        assert writer.poll() is None, "the check opened the FIFO"
    finally:
        writer.kill()
        writer.communicate()


def test_a_device_a_directory_and_a_socket_are_refused_in_one_line(probe, tmp_path):
    sock_path = tmp_path / "img.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    sock.close()
    (tmp_path / "img.d").mkdir()
    for path, kind in [(Path("/dev/null"), "a character device"),
                       (tmp_path / "img.d", "a directory"),
                       (sock_path, "a UNIX socket")]:
        out = check(probe, path)
        assert out == {"rc": "-1", "err": f"--container-image={path}: {path} is {kind}, not a "
                                          f"regular file: {FIX}"}, out


def test_the_cached_file_of_a_registry_image_is_checked_the_same_way(probe, tmp_path):
    fifo = tmp_path / "sha256-abc.sqsh"
    os.mkfifo(fifo)
    what = f"--container-image=login:5000/x:1 (cached as {fifo})"
    out = check(probe, fifo, what)
    assert out["err"] == f"{what}: {fifo} is a FIFO (named pipe), not a regular file: {FIX}"


def test_a_link_to_an_image_is_followed_and_to_a_fifo_refused(probe, tmp_path):
    good = image(tmp_path / "good.sqsh")
    link = tmp_path / "link.sqsh"
    link.symlink_to(good)
    assert check(probe, link)["rc"] == "0"
    assert check(probe, link)["identity"] == check(probe, good)["identity"]
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    bad = tmp_path / "bad.sqsh"
    bad.symlink_to(fifo)
    assert check(probe, bad)["err"] == (f"--container-image={bad}: {bad} is a FIFO (named "
                                        f"pipe), not a regular file: {FIX}")


def test_regular_files_keep_their_messages(probe, tmp_path):
    assert check(probe, image(tmp_path / "ok.sqsh"))["rc"] == "0"
    script = tmp_path / "script.sqsh"
    script.write_text("#!/bin/sh\n")
    assert check(probe, script)["err"] == (
        f"--container-image={script}: not a squashfs image (no 'hsqs' magic at the start): "
        "build one with sqshbuild or mksquashfs")
    missing = tmp_path / "missing.sqsh"
    assert check(probe, missing)["err"].startswith(
        f"--container-image={missing}: no such file on ")
