"""dockerd:// against the local Docker engine, read-only, with the project's squall-base image
(in the integration tier: tests/unit runs without a Docker engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gate import missing

ROOT = Path(__file__).resolve().parents[2]
IMAGE = f"squall-base:{os.environ.get('SQUALL_RELEASE', 'trixie')}"


def _image_id() -> str:
    try:
        import docker
        return docker.from_env().images.get(IMAGE).id
    except Exception as exc:  # no SDK, no daemon, no image
        missing(f"{IMAGE} not available from the Docker engine ({exc})", "run 'make images'")


def test_dockerd_image_builds_like_enroot_import(tmp_path):
    image_id = _image_id()
    out = tmp_path / "base.sqsh"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    proc = subprocess.run(
        [sys.executable, "-c", "from squall.sqshbuild.cli import main; main()", "build",
         "--json", "--cache-dir", str(tmp_path / "cache"), "--work-dir", str(tmp_path),
         "-o", str(out), f"dockerd://{IMAGE}"],
        capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["digest"] == image_id and result["path"] == str(out)
    listing = subprocess.run(["unsquashfs", "-lln", "-d", "R", str(out)], capture_output=True,
                             text=True, check=True).stdout.splitlines()
    names = {ln.split(None, 5)[5][2:].split(" -> ")[0] for ln in listing if " R/" in ln}
    owners = {ln.split()[1] for ln in listing}
    assert {"etc/os-release", "etc/rc", "etc/environment", "etc/fstab"} <= names
    assert not [n for n in names if n.startswith("dev/")]
    assert owners == {"0/0"}
    rc = subprocess.run(["unsquashfs", "-cat", str(out), "etc/rc"], capture_output=True,
                        text=True, check=True).stdout
    assert "exec" in rc and "cd /" in rc
    assert not list(tmp_path.glob("sqshbuild-*"))  # the docker save scratch file is gone
    side = json.loads(out.with_suffix(".json").read_text())
    assert side["reference"] == f"dockerd://{IMAGE}" and side["config_digest"] == image_id
