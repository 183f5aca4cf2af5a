"""``sqshbuild``: build (the default verb), inspect, gc, policy compile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import click

from squall.cliutil import (
    CONTEXT_SETTINGS,
    is_quiet,
    json_option,
    log,
    output_options,
    run_cli,
    version_option,
)
from squall.errors import SquallError, UsageError
from squall.sqshbuild import boundread, filepolicy, jsonbound
from squall.sqshbuild.build import BuildOptions, build
from squall.sqshbuild.cache import convert as cache_convert
from squall.sqshbuild.cache import gc as cache_gc
from squall.sqshbuild.cache.image_cache import ImageCache, open_private, open_reader, open_shared
from squall.sqshbuild.cache.layout import default_cache_dir, parse_size, user_cache_dir
from squall.sqshbuild.cache.leftovers import remove_dead_work_dirs
from squall.sqshbuild.cache.pins import check_job
from squall.sqshbuild.deputy import Deputy
from squall.sqshbuild.policy import policy_path
from squall.sqshbuild.progress import ProgressLines, Reporter, human
from squall.sqshbuild.squash import COMPRESSORS, DEFAULT_LEVEL, ENROOT_COMPAT, SquashOptions
from squall.sqshbuild.trust import builder_name, is_writer


class _DefaultGroup(click.Group):
    """``sqshbuild REF`` means ``sqshbuild build REF``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        first = next((a for a in args if not a.startswith("-")), None)
        if args and first not in self.commands and args[0] not in ("--help", "-h",
                                                                    "--version"):
            args = ["build", *args]
        return super().parse_args(ctx, args)


class TerminalReporter(Reporter):
    """One redrawn status line on stderr (only when stderr is a terminal)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._total = 0
        self._done = 0
        self._squashed = 0
        self._phase = ""
        self._last = 0.0

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < 0.2:
            return
        self._last = now
        if not self._phase:
            return
        line = ""
        if self._total:
            pct = min(100, self._done * 100 // self._total)
            bar = "#" * (pct // 4)
            line = f"download [{bar:<25}] {pct:3d}% {human(self._done)}/{human(self._total)}"
        if self._phase == "squash":
            line += f"  squash {human(self._squashed)} written"
        sys.stderr.write("\r\033[K" + line)
        sys.stderr.flush()

    def stage(self, text: str) -> None:
        with self._lock:
            sys.stderr.write("\r\033[K" + text + "\n")

    def waiting(self, owner: dict[str, object] | None) -> None:
        who = f"{owner.get('host')} pid {owner.get('pid')}" if owner else "another build"
        self.stage(f"waiting for {who}, which is building this image")

    def download_start(self, total: int) -> None:
        with self._lock:
            self._phase, self._total, self._done = "download", total, 0

    def download_advance(self, n: int) -> None:
        with self._lock:
            self._done += n
            self._draw()

    def squash_start(self, layers: int) -> None:
        with self._lock:
            self._phase, self._squashed = "squash", 0

    def squash_advance(self, n: int) -> None:
        with self._lock:
            self._squashed += n
            self._draw()

    def done(self) -> None:
        with self._lock:
            self._draw(force=True)
            sys.stderr.write("\n")
            self._phase = ""


class PlainReporter(Reporter):
    """Stage lines only (stderr is not a terminal, and not --quiet)."""

    def stage(self, text: str) -> None:
        click.echo(text, err=True)

    def waiting(self, owner: dict[str, object] | None) -> None:
        who = f"{owner.get('host')} pid {owner.get('pid')}" if owner else "another build"
        click.echo(f"waiting for {who}, which is building this image", err=True)


@click.group(cls=_DefaultGroup, context_settings=CONTEXT_SETTINGS, no_args_is_help=False)
@version_option("sqshbuild")
@output_options
def cli() -> None:
    """OCI/Docker images to Enroot squashfs files, built once per cluster and cached by digest.

    REF is REGISTRY/NAME[:TAG|@sha256:...], a Docker Hub name (ubuntu:24.04), Enroot's
    docker://[USER@][REGISTRY#]IMAGE[:TAG], dockerd://IMAGE, docker-archive:FILE.tar,
    oci-archive:FILE.tar or oci:DIR[:TAG]. `sqshbuild REF` is `sqshbuild build REF`.
    """


def _block_size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    try:
        return parse_size(value)
    except SquallError as exc:
        raise click.BadParameter(str(exc)) from None


@cli.command("build")
@click.argument("ref")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None,
              help="Shared image cache [env SQSHBUILD_CACHE, default /fsx/squall/images].")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write the image here instead of (only) the cache.")
@click.option("--arch", default="", help="Platform to pick from an index [default: this host's].")
@click.option("--compressor", type=click.Choice(COMPRESSORS), default="zstd", show_default=True)
@click.option("--level", type=int, default=DEFAULT_LEVEL, show_default=True,
              help="Compression level (zstd, gzip, xz).")
@click.option("--block-size", default="128K", callback=_block_size, show_default=True)
@click.option("--processors", type=int, default=0, help="Squash threads [default: all CPUs].")
@click.option("--enroot-compat", is_flag=True,
              help="Enroot's format: -comp lzo -noD (data blocks left uncompressed).")
@click.option("--pipeline", type=click.Choice(["auto", "stream", "unpack"]), default="auto",
              show_default=True, help="stream: tar2sqfs, no unpacking; unpack: mksquashfs.")
@click.option("--insecure-registry", "insecure", multiple=True, metavar="HOST:PORT",
              help="Allow plain HTTP to this registry [env SQSHBUILD_INSECURE_REGISTRIES].")
@click.option("--jobs", type=int, default=0,
              help="Parallel downloads [default: 2 on 2 CPUs, up to 4 with more].")
@click.option("--work-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Scratch space for dockerd:// and the unpack pipeline [default: TMPDIR].")
@click.option("--progress-every", "progress_every", type=click.FloatRange(min=0), default=0,
              metavar="SECONDS",
              help="Every SECONDS, one 'sqshbuild: progress:' line on stderr (even with -q): "
                   "who pulls what, how much, how fast, also while waiting for another "
                   "node's pull [default: 0, none].")
@click.option("--job", default="", metavar="KEY",
              help="Resolve a tag once for this job and pin it: later builds with the same "
                   "KEY use the pinned digest without asking the registry (the plugin "
                   "passes CLUSTER-UID-JOBID).")
@click.option("--for-user", "for_user", default="", metavar="USER",
              help="Root or the builder building for USER's job (the plugin): only what USER "
                   "may pull, within USER's share (docs/security.md).")
@json_option
@output_options
def build_cmd(ref: str, cache_dir: Path | None, output: Path | None, arch: str, compressor: str,
              level: int, block_size: int, processors: int, enroot_compat: bool, pipeline: str,
              insecure: tuple[str, ...], jobs: int, work_dir: Path | None,
              progress_every: float, job: str, for_user: str, as_json: bool) -> None:
    """Build REF into the cache (or -o PATH) and print the image path (-q: only that)."""
    quiet = is_quiet()
    if job:
        check_job(job)
    if for_user and not is_writer():
        raise UsageError("--for-user is for root and the image builder, building the shared "
                         "cache for a user's job: drop it to build as yourself")
    if enroot_compat:
        squash = ENROOT_COMPAT
        if pipeline == "stream":
            raise UsageError("--enroot-compat needs the unpack pipeline (tar2sqfs has no -noD):"
                              " drop --pipeline stream")
    else:
        squash = SquashOptions(compressor=compressor, level=level, block_size=block_size,
                               processors=processors, pipeline=pipeline)
    if jobs < 0:
        raise UsageError(f"--jobs {jobs}: give at least 1 (or 0 for the default)")
    tty = sys.stderr.isatty() and not quiet and not as_json
    reporter: Reporter
    if tty:
        reporter = TerminalReporter()
    elif quiet or as_json:
        reporter = Reporter()
    else:
        reporter = PlainReporter()
    lines = ProgressLines(reporter, progress_every, ref) if progress_every else None
    squash = SquashOptions(**{**squash.__dict__, "progress": False})
    bopts = BuildOptions(cache_dir=cache_dir, output=output, arch=arch, squash=squash,
                         insecure=insecure, jobs=jobs, work_dir=work_dir, job=job,
                         deputy=Deputy.named(for_user) if for_user else None,
                         reporter=lines or reporter)
    try:
        result = build(ref, bopts)
    finally:
        if lines is not None:
            lines.close()
    if result.offline:  # said even with -q: the plugin passes this line on to srun
        click.echo(f"sqshbuild: offline: {result.offline}", err=True)
    if result.pinned:  # said even with -q: the plugin passes this line on to srun
        click.echo(f"sqshbuild: job {job} pinned {result.reference} to {result.digest}: its "
                   "later steps, failover attempts and requeues run this digest", err=True)
    if as_json:
        click.echo(json.dumps({"path": str(result.path), "digest": result.digest,
                               "reference": result.reference, "cached": result.cached,
                               "seconds": round(result.seconds, 3),
                               "pipeline": result.pipeline, "pinned": result.pinned,
                               "size": result.path.stat().st_size,
                               "versions": result.sidecar.get("versions", {}),
                               "timings": bopts.timings}))
        return
    if not quiet:
        what = "cached" if result.cached else f"built in {result.seconds:.1f} s"
        click.echo(f"{result.reference} ({result.digest}) {what}", err=True)
        log.info("timings (s since start): %s", ", ".join(
            f"{k} {v}" for k, v in bopts.timings.items()))
    click.echo(str(result.path))


def _sidecar_for(image: Path) -> dict[str, Any] | None:
    """The image's sidecar, read bounded (:mod:`squall.sqshbuild.boundread`): a link, a
    FIFO, a device, a huge or deeply nested file there is absent, with one line."""
    for cand in (image.with_suffix(".json"), image.with_name(image.name + ".json")):
        try:
            data = jsonbound.loads(boundread.read_regular(cand, boundread.SIDECAR_CAP),
                                   f"{cand}")
        except FileNotFoundError:
            continue
        except boundread.NotRegular as exc:
            log.warning("note: ignoring the sidecar %s: it %s", _shown(str(cand)), exc)
            continue
        except (OSError, SquallError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "it " + str(exc).removeprefix(
                f"{cand} ")
            log.warning("note: ignoring the sidecar %s: %s", _shown(str(cand)), why)
            continue
        if isinstance(data, dict):
            return data
        log.warning("note: ignoring the sidecar %s: it is not a JSON object",
                    _shown(str(cand)))
    return None


def _shown(value: object) -> str:
    """A value from a file anyone may have written, safe to print on a terminal: control
    characters (escape sequences, newlines) escaped."""
    text = str(value)
    return text if text.isprintable() else repr(text)[1:-1]


def _check_image(image: Path) -> int:
    """A descriptor of IMAGE, a regular file (a link, FIFO or device is refused, never
    followed, opened or read)."""
    try:
        return boundread.open_regular(image)
    except FileNotFoundError:
        raise UsageError(f"{_shown(image)} does not exist: give the path of a .sqsh "
                         "file") from None
    except boundread.NotRegular as exc:
        raise UsageError(f"{_shown(image)} {exc}: give the path of a .sqsh file "
                         "itself") from None
    except OSError as exc:
        raise UsageError(f"cannot open {_shown(image)}: {exc.strerror}") from None


@cli.command()
@click.argument("image", type=click.Path(path_type=Path, dir_okay=False))
@json_option
@output_options
def inspect(image: Path, as_json: bool) -> None:
    """Print what is known about IMAGE.sqsh: reference, digests, size, versions."""
    fd = _check_image(image)
    try:
        size = os.fstat(fd).st_size
        # unsquashfs reads the file checked above, whatever the name points at by now
        probe = subprocess.run(["unsquashfs", "-s", f"/proc/self/fd/{fd}"],
                               capture_output=True, text=True, check=False, pass_fds=(fd,),
                               stdin=subprocess.DEVNULL)
    finally:
        os.close(fd)
    if probe.returncode != 0:
        raise SquallError(f"{_shown(image)} is not a squashfs image (unsquashfs -s refused "
                          "it)")
    side = _sidecar_for(image)
    if side is None:
        sidecar = _shown(image.with_suffix(".json").name)
        raise SquallError(f"{_shown(image)} has no sidecar ({sidecar}): it was not built by "
                          "sqshbuild; rebuild it with sqshbuild to get one")
    if as_json:
        click.echo(json.dumps(side, indent=2, sort_keys=True))
        return
    click.echo(f"image:      {_shown(image)}")
    for key in ("reference", "canonical", "manifest_digest", "config_digest", "platform",
                "created"):
        click.echo(f"{key + ':':<12}{_shown(side.get(key, ''))}")
    shown_size = side.get("size")
    click.echo(f"{'size:':<12}{human(shown_size if isinstance(shown_size, int) else size)}")
    squash = _mapping(side.get("squash"))
    click.echo(f"{'squash:':<12}{_shown(squash.get('pipeline', ''))} "
               f"{_shown(squash.get('compressor', ''))}")
    layers = side.get("layers")
    click.echo(f"{'layers:':<12}{len(layers) if isinstance(layers, list) else 0}")
    versions = _mapping(side.get("versions"))
    click.echo("versions:" + ("" if versions else "    none found"))
    for name in ("cuda", "cudnn", "nccl", "aws-ofi-nccl", "libfabric", "python", "pytorch"):
        if name in versions:
            click.echo(f"  {name + ':':<14}{_shown(versions[name])}")


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@cli.command()
@click.option("--max-size", required=True, help="Keep the cache under this size, e.g. 500G.")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None,
              help="Shared image cache [env SQSHBUILD_CACHE, default /fsx/squall/images].")
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
@json_option
@output_options
def gc(max_size: str, cache_dir: Path | None, dry_run: bool, as_json: bool) -> None:
    """Evict least recently used images (and unused layers) until the cache fits."""
    try:
        limit = parse_size(max_size)
    except SquallError as exc:
        raise UsageError(str(exc)) from None
    cache = _gc_cache(cache_dir)
    removed = cache_gc.gc(cache, limit, dry_run=dry_run)
    if not dry_run:  # scratch trees of killed builds (the unpack pipeline's, dockerd://)
        removed += [{"leftover": str(p), "size": size}
                    for p, size in remove_dead_work_dirs(Path(tempfile.gettempdir()))]
    if as_json:
        click.echo(json.dumps({"removed": removed, "dry_run": dry_run}))
        return
    if is_quiet():
        return
    verb = "would remove" if dry_run else "removed"
    for r in removed:
        kind = next(k for k in ("image", "layer", "leftover") if k in r)
        variant = f" ({r['variant']})" if r.get("variant") else ""
        click.echo(f"{verb} {kind} {r.get(kind)}{variant} ({human(r['size'])})")
    if not removed:
        click.echo(f"cache already under {human(limit)}")


def _gc_cache(cache_dir: Path | None) -> ImageCache:
    """The cache this process's gc works on: the shared one for root and the builder; for
    a user, the --cache-dir of the user's own, else the user's own cache (one line)."""
    root = (cache_dir or default_cache_dir()).absolute()
    if is_writer():
        return open_shared(root)
    found = open_reader(root) if cache_dir is not None else None
    if found is not None and found.writable:
        return found
    own = open_private(user_cache_dir().absolute())
    log.info("gc of your own cache %s: the shared cache %s is cleaned by %s", own.root,
             root, builder_name() or "root")
    return own


@cli.command("convert-cache")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None,
              help="Shared image cache [env SQSHBUILD_CACHE, default /fsx/squall/images].")
@json_option
@output_options
def convert_cache(cache_dir: Path | None, as_json: bool) -> None:
    """Make an earlier squall's shared cache (1777) one that only root and the builder
    write: its trusted images move to a new directory; the rest is left, renamed, for an
    admin to look at."""
    done = cache_convert.convert((cache_dir or default_cache_dir()).absolute())
    if as_json:
        click.echo(json.dumps({"cache": str(done.root), "old": str(done.old),
                               "moved": done.moved, "left": done.left}))
        return
    click.echo(f"{done.root}: {len(done.moved)} entries of root and the builder moved into a "
               f"new cache; the old directory, with {done.left} other entries, is now "
               f"{done.old}: look at it and remove it")



@cli.group("policy", context_settings=CONTEXT_SETTINGS)
def policy_group() -> None:
    """The site image policy (/etc/containers/policy.json, docs/registries.md)."""


@policy_group.command("compile")
@click.option("--output", type=click.Path(path_type=Path, dir_okay=False),
              default=filepolicy.COMPILED, show_default=True,
              help="Where the compiled scope for local files goes.")
@json_option
@output_options
def policy_compile(output: Path, as_json: bool) -> None:
    """Compile the policy's squall-sqsh transport (.sqsh files named by path) for the
    plugin, which runs this as root when the policy file changed."""
    filepolicy.compile_file(policy_path(), output)
    if as_json:
        click.echo(json.dumps({"policy": str(policy_path()), "output": str(output)}))
        return
    log.info("%s: compiled from %s", output, policy_path())

main = run_cli(cli, "sqshbuild")

if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
