"""Hard links in a layer to a symlink or a FIFO (issue 26, the last round's leftovers): as
Docker and Enroot extract them (link(2) links the symlink itself, never its target), a hard
link to a symlink is another symlink with the same target and one to a FIFO is a FIFO, in
both pipelines, and nothing outside the rootfs is followed."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
from conftest import run_env, sqshbuild_cmd
from imagekit import Image, layer
from sqfs import cat, listing

pytestmark = pytest.mark.registry


@pytest.mark.parametrize("pipeline", ["stream", "unpack"])
@pytest.mark.parametrize("split", [False, True], ids=["one-layer", "link-in-the-layer-above"])
def test_hard_links_to_a_symlink_and_a_fifo(registry, cache_dir, clean_env, pipeline, split):
    entries = [("file", "real", "content"), ("symlink", "abs", "/etc/shadow"),
               ("symlink", "rel", "real"), ("fifo", "pipe")]
    links = [("hardlink", "abs2", "abs"), ("hardlink", "rel2", "rel"),
             ("hardlink", "pipe2", "pipe")]
    layers = [layer(*entries), layer(*links)] if split else [layer(*entries, *links)]
    repo = f"hardlinks/{uuid.uuid4().hex[:8]}"
    registry.pusher.push(repo, "v1", Image(layers, {"Cmd": ["x"]}))
    proc = subprocess.run([*sqshbuild_cmd(), "-q", "--cache-dir", str(cache_dir), "--pipeline",
                           pipeline, f"{registry.host}/{repo}:v1"], env=run_env(clean_env),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr  # was: "not a file in the image"
    image = Path(proc.stdout.strip())
    got = listing(image)
    assert got["abs2"][0].startswith("l") and got["abs2"][2] == "/etc/shadow", got
    assert got["rel2"][0].startswith("l") and got["rel2"][2] == "real", got
    assert got["pipe2"][0].startswith("p") and got["pipe"][0].startswith("p"), got
    assert cat(image, "real") == "content"
