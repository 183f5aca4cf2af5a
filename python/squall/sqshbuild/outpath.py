"""``-o PATH``: an image written where the caller asked, never through a link.

The output's directory may be one that other users write (a project directory, /tmp).
So it is opened once, through descriptors that follow only root's and the caller's links
(:func:`safefs.walk`), and everything after goes through that descriptor: a private
``0700`` work directory made in it under an unguessable name, where the squash tool
writes (addressed as ``/proc/self/fd/N/...``, which names that very directory whatever is
renamed meanwhile), then a rename into place. An existing target is replaced only when
it is a regular file of the caller's with one link; a name someone planted meanwhile is
refused (``link`` never replaces), and the work directory is removed through its
parent's descriptor.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import Any

from squall.errors import SquallError
from squall.sqshbuild import fdtree, safefs
from squall.sqshbuild.cache.layout import disk_error, work_dir_prefix
from squall.sqshbuild.cache.leftovers import remove_dead_work_dirs_at
from squall.sqshbuild.trust import Trust, kind

IMAGE = "image.sqsh"
SIDECAR = "image.json"


def sidecar_name(name: str) -> str:
    return name[:-5] + ".json" if name.endswith(".sqsh") else name + ".json"


class OutputTarget:
    """``with OutputTarget(path) as out:`` write ``out.temp`` (and :meth:`write_sidecar`),
    then :meth:`publish`."""

    def __init__(self, final: Path) -> None:
        self.final = final
        self.name = final.name
        if not self.name or self.name in (".", ".."):
            raise SquallError(f"-o {final}: give a file name, e.g. -o ./image.sqsh")
        links = Trust(Trust.private().uids | Trust.shared().uids)
        try:
            self.dir_fd, self.dir = safefs.walk(final.parent, links)
        except safefs.Unsafe as exc:
            raise SquallError(f"-o {final}: {exc}: write the image elsewhere") from None
        except OSError as exc:
            raise SquallError(f"-o {final}: cannot open {final.parent}: "
                              f"{exc.strerror}") from None
        self.work_name = f"{work_dir_prefix('out')}{secrets.token_hex(8)}"
        self.work_fd = -1
        try:
            remove_dead_work_dirs_at(self.dir_fd, self.dir)  # what a killed -o build left
            self._check_target(self.name)
            self._check_target(sidecar_name(self.name))
            os.mkdir(self.work_name, 0o700, dir_fd=self.dir_fd)
            self.work_fd = safefs.open_dir(self.work_name, dir_fd=self.dir_fd)
        except BaseException:
            self.close()
            raise

    @property
    def temp(self) -> Path:
        """Where the squash tool writes; a child needs ``pass_fds=out.fds``."""
        return Path(f"/proc/self/fd/{self.work_fd}/{IMAGE}")

    @property
    def fds(self) -> tuple[int, ...]:
        return (self.work_fd,)

    def __enter__(self) -> OutputTarget:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_target(self, name: str) -> None:
        st = safefs.lstat_at(self.dir_fd, name)
        if st is None:
            return
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
            why = (f"is {kind(st.st_mode)}" if not stat.S_ISREG(st.st_mode) else
                   "is not yours" if st.st_uid != os.geteuid() else "has other hard links")
            raise SquallError(f"-o {self.dir / name} exists and {why}: only a regular file "
                              "of yours is replaced; remove it or choose another name")

    def write_sidecar(self, text: str) -> None:
        fd = os.open(SIDECAR, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW |
                     os.O_CLOEXEC, 0o644, dir_fd=self.work_fd)
        try:
            os.fchmod(fd, 0o644)
            data = memoryview(text.encode())
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)

    def publish(self) -> Path:
        """The image (and its sidecar, when written) renamed into place; the final path."""
        fd = os.open(IMAGE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.work_fd)
        try:
            os.fchmod(fd, 0o644)
            os.fsync(fd)
        finally:
            os.close(fd)
        if safefs.lstat_at(self.work_fd, SIDECAR) is not None:
            self._place(SIDECAR, sidecar_name(self.name))
        self._place(IMAGE, self.name)
        os.fsync(self.dir_fd)
        return self.dir / self.name

    def _place(self, src: str, dst: str) -> None:
        self._check_target(dst)
        try:
            if safefs.lstat_at(self.dir_fd, dst) is None:
                os.link(src, dst, src_dir_fd=self.work_fd, dst_dir_fd=self.dir_fd,
                        follow_symlinks=False)
                os.unlink(src, dir_fd=self.work_fd)
            else:
                os.replace(src, dst, src_dir_fd=self.work_fd, dst_dir_fd=self.dir_fd)
        except FileExistsError:
            raise SquallError(f"-o {self.dir / dst}: someone created that name while the "
                              "image was built: choose a directory only you write") from None
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.EXDEV, errno.EOPNOTSUPP):
                # no hard links here (some file systems): a checked rename
                self._check_target(dst)
                os.replace(src, dst, src_dir_fd=self.work_fd, dst_dir_fd=self.dir_fd)
                return
            raise

    def close(self) -> None:
        if self.work_fd >= 0:
            mine = os.fstat(self.work_fd)
            os.close(self.work_fd)
            self.work_fd = -1
            st = safefs.lstat_at(self.dir_fd, self.work_name)
            if st is not None and (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                try:
                    fdtree.remove_tree(self.dir_fd, self.work_name)
                except OSError:
                    pass
        if getattr(self, "dir_fd", -1) >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1


def publish_to(target: OutputTarget, sidecar: dict[str, Any]) -> Path:
    """The image in ``target.temp`` and its sidecar (with the image's size and final path)
    renamed into place; a full disk said as one."""
    final = target.dir / target.name
    try:
        size = os.stat(target.temp).st_size
        target.write_sidecar(json.dumps(dict(sidecar, size=size, path=str(final)), indent=2,
                                        sort_keys=True) + "\n")
        return target.publish()
    except OSError as exc:
        raise disk_error(exc, final) from None


def copy_out(path: Path, output: Path, sidecar: dict[str, Any]) -> Path:
    """A cached image copied to ``-o``, with its sidecar."""
    with OutputTarget(output) as target:
        try:
            with open(path, "rb") as src, open(target.temp, "xb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except OSError as exc:
            raise disk_error(exc, target.dir / target.name) from None
        return publish_to(target, dict(sidecar))
