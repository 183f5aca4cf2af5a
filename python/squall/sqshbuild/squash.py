"""Turn an image's layers, merged, into a squashfs file.

Two pipelines, chosen by :func:`pick_pipeline`:

- ``stream``: the merged tree is written as one tar stream into ``tar2sqfs``
  (squashfs-tools-ng); nothing is unpacked to disk.
- ``unpack``: the merged tree is written into a work directory, then ``mksquashfs
  -all-root``; required for Enroot's ``-noD`` (data blocks left uncompressed), which
  ``tar2sqfs`` cannot do.

The benchmark (``bench/bench_sqshbuild.py``, results in ``bench/results/sqshbuild.md``)
measures both; the default follows its numbers. :func:`squash` runs the one picked.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from squall.errors import SquallError
from squall.sqshbuild import fdtree
from squall.sqshbuild.cache.layout import disk_error, work_dir_prefix
from squall.sqshbuild.enroot_files import EnrootFiles
from squall.sqshbuild.pipe import grow_pipe
from squall.sqshbuild.progress import Reporter
from squall.sqshbuild.unpack import DirSink, Layer, TarSink, merge_layers
from squall.sqshbuild.versions import VersionProbe

COMPRESSORS = ("zstd", "gzip", "lzo", "lz4", "xz")
DEFAULT_COMPRESSOR = "zstd"
DEFAULT_LEVEL = 3
DEFAULT_BLOCK_SIZE = 128 * 1024


@dataclass(frozen=True)
class SquashOptions:
    compressor: str = DEFAULT_COMPRESSOR
    level: int | None = DEFAULT_LEVEL  # zstd/gzip/xz level; None = the tool's default
    block_size: int = DEFAULT_BLOCK_SIZE
    processors: int = 0  # 0 = all CPUs
    no_data_compression: bool = False  # Enroot's -noD
    pipeline: str = "auto"  # auto | stream | unpack
    progress: bool = False

    def jobs(self) -> int:
        return self.processors or (os.cpu_count() or 1)

    def variant(self) -> str:
        """'' for the default squash options, else a short name of those that change the
        bytes (compressor, level, block size, -noD): part of the cache key."""
        level = self.level if self.compressor in ("zstd", "gzip", "xz") else None
        if (self.compressor, level, self.block_size, self.no_data_compression) == \
                (DEFAULT_COMPRESSOR, DEFAULT_LEVEL, DEFAULT_BLOCK_SIZE, False):
            return ""
        name = f"{self.compressor}{'' if level is None else level}-b{self.block_size // 1024}k"
        return name + ("-noD" if self.no_data_compression else "")

    def describe(self) -> str:
        lvl = f" level {self.level}" if self.level is not None and self.compressor == "zstd" else ""
        return f"{self.compressor}{lvl}{' -noD' if self.no_data_compression else ''}"


ENROOT_COMPAT = SquashOptions(compressor="lzo", level=None, no_data_compression=True,
                              pipeline="unpack")


# The levels tar2sqfs and mksquashfs take (zstd: ZSTD_maxCLevel); lzo and lz4 take none here.
LEVELS = {"zstd": (1, 22), "gzip": (1, 9), "xz": (0, 9)}


def check_options(opts: SquashOptions) -> None:
    """Refuse what tar2sqfs or mksquashfs would refuse, before anything is downloaded."""
    if opts.compressor not in COMPRESSORS:
        raise SquallError(f"unknown compressor {opts.compressor!r}: use one of "
                          f"{', '.join(COMPRESSORS)}")
    low, high = LEVELS.get(opts.compressor, (0, 0))
    if opts.level is not None and opts.compressor in LEVELS and not low <= opts.level <= high:
        raise SquallError(f"--level {opts.level} is out of range for {opts.compressor}: "
                          f"give {low} to {high}")
    if opts.processors < 0:
        raise SquallError(f"--processors {opts.processors}: give at least 1 (or 0 for all "
                          "CPUs)")
    bs = opts.block_size
    if bs < 4096 or bs > 1 << 20 or bs & (bs - 1):
        raise SquallError(f"block size {bs} is not a power of two between 4K and 1M: "
                          "use e.g. 128K or 1M")
    if opts.pipeline not in ("auto", "stream", "unpack"):
        raise SquallError(f"unknown pipeline {opts.pipeline!r}: use auto, stream or unpack")
    if opts.pipeline == "stream" and opts.no_data_compression:
        raise SquallError("the stream pipeline (tar2sqfs) cannot leave data uncompressed (-noD):"
                          " use --pipeline unpack or drop --enroot-compat")


def pick_pipeline(opts: SquashOptions) -> str:
    if opts.pipeline != "auto":
        return opts.pipeline
    if opts.no_data_compression or shutil.which("tar2sqfs") is None:
        return "unpack"
    return DEFAULT_PIPELINE


# Chosen from bench/results/sqshbuild.md (see docs/sqshbuild.md).
DEFAULT_PIPELINE = "stream"


def _need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise SquallError(f"{tool} not found: install {package} (apt install {package})")
    return path


def mksquashfs_argv(rootfs: str, out: str, opts: SquashOptions) -> list[str]:
    argv = [_need("mksquashfs", "squashfs-tools"), rootfs, out, "-noappend", "-all-root",
            "-no-xattrs", "-comp", opts.compressor, "-b", str(opts.block_size),
            "-processors", str(opts.jobs())]
    if opts.level is not None and opts.compressor in ("zstd", "gzip"):
        argv += ["-Xcompression-level", str(opts.level)]
    if opts.no_data_compression:
        argv.append("-noD")
    argv.append("-progress" if opts.progress else "-no-progress")
    if not opts.progress:
        argv.append("-quiet")
    return argv


def tar2sqfs_argv(out: str, opts: SquashOptions) -> list[str]:
    argv = [_need("tar2sqfs", "squashfs-tools-ng"), "--force", "--quiet", "--no-xattr",
            "--compressor", opts.compressor, "--block-size", str(opts.block_size),
            "--num-jobs", str(opts.jobs()), "--defaults", "uid=0,gid=0,mode=0755"]
    if opts.level is not None and opts.compressor in ("zstd", "gzip", "xz"):
        argv += ["--comp-extra", f"level={opts.level}"]
    argv.append(out)
    return argv


def _nearly_full(path: str) -> bool:
    """tar2sqfs reports a full disk as "I/O error": look at the free space itself."""
    try:
        st = os.statvfs(os.path.dirname(path) or ".")
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 1 << 20


def squash_error(tool: str, rc: int, stderr: str, out: str) -> SquallError:
    last = (stderr or "").strip().splitlines()[-1:] or [""]
    where, _, name = out.rpartition("/")
    if "No space left" in (stderr or "") or _nearly_full(out):
        return SquallError(f"disk full in {where or '.'} ({tool} writing {name}): free space "
                           "there or point --cache-dir / -o elsewhere")
    if "I/O error" in (stderr or ""):
        # tar2sqfs says only "I/O error" for a full disk, and deletes its output first
        return SquallError(f"disk full or failing in {where or '.'} ({tool} writing {name}: "
                           "I/O error): free space there or point --cache-dir / -o elsewhere")
    return SquallError(f"{tool} failed (exit {rc}: {last[0]}) writing {out}: check free space "
                       "and the options")


class Build(Protocol):
    """What a pipeline reads of the build: :class:`squall.sqshbuild.options.BuildOptions`,
    named by shape because that module imports this one (for :class:`SquashOptions`)."""

    @property
    def squash(self) -> SquashOptions: ...
    @property
    def work_dir(self) -> Path | None: ...
    @property
    def reporter(self) -> Reporter: ...
    def mark(self, stage: str) -> None: ...


@dataclass(frozen=True)
class Dest:
    """Where a squash tool writes (``path``), what messages name (``shown``: the -o path,
    not ``/proc/self/fd/N/...``) and the descriptors the tool inherits for it."""

    path: Path
    shown: Path
    fds: tuple[int, ...] = ()


def squash(pipeline: str, layers: list[Layer], files: EnrootFiles, probe: VersionProbe,
           dest: Dest, opts: Build) -> None:
    if pipeline == "stream":
        _squash_stream(layers, files, probe, dest, opts)
    else:
        _squash_unpack(layers, files, probe, dest, opts)


def _squash_stream(layers: list[Layer], files: EnrootFiles, probe: VersionProbe,
                   dest: Dest, opts: Build) -> None:
    argv = tar2sqfs_argv(str(dest.path), opts.squash)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, pass_fds=dest.fds)
    assert proc.stdin is not None
    grow_pipe(proc.stdin.fileno())
    err_text = ""
    sink = TarSink(proc.stdin, opts.reporter.squash_advance)  # type: ignore[arg-type]
    try:
        merge_layers(layers, sink, files.as_synthetic(), [files.workdir], probe)
        proc.stdin.close()
        opts.mark("merge_done")
    except BrokenPipeError:
        sink.abort()
    except BaseException:
        sink.abort()
        proc.kill()
        proc.wait()
        raise
    finally:
        try:
            proc.stdin.close()
        except BrokenPipeError:
            pass
        if proc.stderr is not None:
            err_text = proc.stderr.read().decode(errors="replace")
    rc = proc.wait()
    if rc != 0:
        raise squash_error("tar2sqfs", rc, err_text, str(dest.shown))


def _squash_unpack(layers: list[Layer], files: EnrootFiles, probe: VersionProbe,
                   dest: Dest, opts: Build) -> None:
    work = Path(tempfile.mkdtemp(prefix=work_dir_prefix("rootfs"), dir=opts.work_dir))
    try:
        rootfs = work / "rootfs"
        try:
            merge_layers(layers, DirSink(rootfs, opts.reporter.squash_advance),
                         files.as_synthetic(), [files.workdir], probe)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise disk_error(exc, work, "unpacking the image into") from None
            raise
        opts.mark("merge_done")
        argv = mksquashfs_argv(str(rootfs), str(dest.path), opts.squash)
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL,
                              stdout=None if opts.squash.progress else subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, check=False,
                              pass_fds=dest.fds)
        if proc.returncode != 0:
            raise squash_error("mksquashfs", proc.returncode, proc.stderr, str(dest.shown))
    finally:
        fdtree.remove_scratch(work)
