"""Datasets (enroot#180): a --container-mounts source that is a squashfs file, told by its
content (spank/core/dataset.c), driven through cffi. Checked as the job user: here a
child process as nobody stands for a user who cannot read another's file."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from squall.core import mount_datasets
from squall.errors import SquallError

NOBODY = 65534


@pytest.fixture()
def files() -> Iterator[Path]:
    # Under /tmp itself: pytest's own tmp directory is closed to other users.
    tmp_path = Path(tempfile.mkdtemp(prefix="squall-dataset-"))
    try:
        yield make_files(tmp_path)
    finally:
        shutil.rmtree(tmp_path)


def make_files(tmp_path: Path) -> Path:
    if shutil.which("mksquashfs") is None:
        pytest.fail("mksquashfs is missing: apt-get install squashfs-tools")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("data\n")
    subprocess.run(["mksquashfs", str(tree), str(tmp_path / "data.bin"), "-noappend",
                    "-quiet", "-no-progress"], check=True, stdout=subprocess.DEVNULL)
    (tmp_path / "plain.sqsh").write_text("not a squashfs, whatever its name\n")
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "link.sqsh").symlink_to(tmp_path / "data.bin")
    tmp_path.chmod(0o755)
    return tmp_path


def test_a_squashfs_file_is_a_dataset_by_its_content_not_its_name(files: Path) -> None:
    spec = (f"{files}/data.bin:/data,{files}/plain.sqsh:/plain,{files}/empty:/e,"
            f"{files}/tree:/tree,{files}/link.sqsh:/via-link:ro")
    assert mount_datasets(spec) == ["/data", "/via-link"]


def test_a_dataset_with_rw_is_refused_in_one_line(files: Path) -> None:
    with pytest.raises(SquallError) as e:
        mount_datasets(f"{files}/data.bin:/data:rw")
    assert f"{files}/data.bin is a squashfs dataset, mounted read-only: drop the rw" in str(e.value)
    assert "\n" not in str(e.value)
    assert mount_datasets(f"{files}/data.bin:/data:ro+nosuid") == ["/data"]


def as_nobody(spec: str) -> str:
    """mount_datasets(spec) in a child that has become nobody: its result, or 'refused: '
    and the error."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            try:
                out = str(mount_datasets(spec))
            except SquallError as e:
                out = f"refused: {e}"
            os.write(write, out.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


@pytest.mark.needs_root("to act as another user")
def test_a_file_the_user_cannot_read_is_refused_naming_it_and_the_fix(files: Path) -> None:
    (files / "data.bin").chmod(0o600)
    out = as_nobody(f"{files}/data.bin:/data")
    assert out.startswith(f"refused: --container-mounts: cannot read {files}/data.bin: "
                          "Permission denied: make it readable by the job's user"), out
    # through a link: both named
    out = as_nobody(f"{files}/link.sqsh:/data")
    assert f"cannot read {files}/link.sqsh (a link to {files}/data.bin): Permission " \
           "denied" in out, out
    # readable again: a dataset for that user too
    (files / "data.bin").chmod(0o644)
    assert as_nobody(f"{files}/link.sqsh:/data") == "['/data']"
