"""The Python face of squall's C core (``spank/core/``, compiled as ``squall._core``).

Every function here calls the same C code the SPANK plugin runs, so a value that passes
here passes in ``srun`` and the other way round. Bad input raises
:class:`squall.errors.SquallError` carrying the core's one-line message.

Text goes to C as UTF-8 (``surrogateescape``, so bytes that came from the OS reach the
core as they were); ``bytes`` are passed through untouched. A NUL byte cannot reach C
(its strings end there), so it is refused here rather than silently cutting the value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from squall.errors import SquallError

# The one bridge to the C core: other modules (squall.efa.detect) take ffi and lib from here.
try:
    from squall._core import ffi as ffi
    from squall._core import lib as lib
except ImportError as exc:  # a checkout where `make core` has not run, or a broken install
    raise ImportError(f"squall's C core (squall._core) cannot be loaded ({exc}): run `make "
                      "core` in a checkout, or reinstall squall") from exc

__all__ = [
    "Flag",
    "ImageRef",
    "LifecyclePlan",
    "Mount",
    "PlugstackConfig",
    "StepOptions",
    "check_container_option",
    "check_mount_sources",
    "clean_environment",
    "container_flags",
    "env_denied",
    "keep_environ_lines",
    "lifecycle_decide",
    "lifecycle_env_step_specific",
    "lifecycle_key",
    "merge_environment",
    "overlay_environment",
    "parse_container_name",
    "parse_image_ref",
    "parse_mounts",
    "parse_plugstack_args",
    "render_enroot_conf",
    "resolve_step_options",
    "shell_quote",
    "task_unset",
]

# The error buffer and text helpers below are public: squall.efa.detect calls the core too.
ERRLEN = 1024
_Text = str | bytes
_T = TypeVar("_T")


def _bytes(what: str, value: _Text) -> bytes:
    """Encode for C; refuse NUL, which would silently end the C string early."""
    data = value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")
    if b"\0" in data:
        raise SquallError(f"{what}: value holds a NUL byte (remove it)")
    return data


def _cstr(what: str, value: _Text | None) -> Any:
    return ffi.NULL if value is None else ffi.new("char[]", _bytes(what, value))


def c_text(ptr: Any) -> str | None:
    """A C string's text; None for NULL."""
    return None if ptr == ffi.NULL else ffi.string(ptr).decode("utf-8", "surrogateescape")


def errbuf() -> Any:
    """A buffer of ERRLEN bytes for the core's one-line error message."""
    return ffi.new(f"char[{ERRLEN}]")


def core_error(err: Any) -> SquallError:
    """The core's message in ``err`` (from :func:`errbuf`) as the error to raise."""
    return SquallError(ffi.string(err).decode("utf-8", "replace"))


class _CArray:
    """A NULL-terminated ``char *[]`` whose strings stay alive as long as this object."""

    def __init__(self, what: str, items: Iterable[_Text]) -> None:
        self._keep = [ffi.new("char[]", _bytes(what, item)) for item in items]
        self.ptr = ffi.new("char *[]", [*self._keep, ffi.NULL])


def _take_env(arr: Any) -> list[str]:
    """Copy a core ``char **`` environment out and free it."""
    out: list[str] = []
    try:
        i = 0
        while arr[i] != ffi.NULL:
            out.append(ffi.string(arr[i]).decode("utf-8", "surrogateescape"))
            i += 1
    finally:
        lib.sq_env_free(arr)
    return out


def _env_items(env: Mapping[str, str] | Iterable[str]) -> list[str]:
    if isinstance(env, Mapping):
        return [f"{k}={v}" for k, v in env.items()]
    return list(env)


def _to_dict(entries: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in entries:
        key, _, value = entry.partition("=")
        out[key] = value
    return out


# --- quoting -------------------------------------------------------------------------

def shell_quote(s: _Text) -> str:
    """One bash word that stands for exactly ``s`` (single quotes, ``'\\''`` inside)."""
    data = s if isinstance(s, bytes) else s.encode("utf-8", "surrogateescape")
    out = ffi.new("char **")
    err = errbuf()
    if lib.sq_shell_quote(data, len(data), out, err, ERRLEN) != 0:
        raise core_error(err)
    try:
        return c_text(out[0]) or ""
    finally:
        lib.sq_str_free(out[0])


# --- image references ----------------------------------------------------------------

@dataclass(frozen=True)
class ImageRef:
    """A parsed ``--container-image`` value; ``canonical`` is the stable identity.

    ``kind`` is ``file``, ``registry`` or ``dockerd``; with ``archives=True`` also
    ``docker-archive``, ``oci-archive`` (``path``) or ``oci-dir`` (``path``, ``tag``).
    """

    kind: str
    canonical: str
    path: str | None = None
    user: str | None = None
    registry: str | None = None
    repository: str | None = None
    tag: str | None = None
    digest: str | None = None


_IMAGE_KINDS = {lib.SQ_IMAGE_FILE: "file", lib.SQ_IMAGE_REGISTRY: "registry",
                lib.SQ_IMAGE_DOCKERD: "dockerd", lib.SQ_IMAGE_DOCKER_ARCHIVE: "docker-archive",
                lib.SQ_IMAGE_OCI_ARCHIVE: "oci-archive", lib.SQ_IMAGE_OCI_DIR: "oci-dir"}


def parse_image_ref(text: _Text, *, archives: bool = False) -> ImageRef:
    """Parse an image reference exactly as ``--container-image`` does.

    ``archives=True`` is sqshbuild's parse: the same one, which also returns
    ``docker-archive:FILE``, ``oci-archive:FILE`` and ``oci:DIR[:TAG]`` where the plugin
    refuses them (it runs no archive; the message says how to build one with sqshbuild).
    """
    ref = ffi.new("struct sq_image_ref *")
    err = errbuf()
    flags = lib.SQ_IMGREF_ARCHIVES if archives else 0
    if lib.sq_imgref_parse_as(_cstr("--container-image", text), flags, ref, err,
                              ERRLEN) != 0:
        lib.sq_imgref_free(ref)
        raise core_error(err)
    try:
        return ImageRef(
            kind=_IMAGE_KINDS[ref.kind], canonical=c_text(ref.canonical) or "",
            path=c_text(ref.path), user=c_text(ref.user), registry=c_text(ref.registry),
            repository=c_text(ref.repository), tag=c_text(ref.tag), digest=c_text(ref.digest),
        )
    finally:
        lib.sq_imgref_free(ref)


# --- mounts --------------------------------------------------------------------------

@dataclass(frozen=True)
class Mount:
    """One ``--container-mounts`` entry and the Enroot fstab line it becomes."""

    source: str
    target: str
    type: str                # "bind" | "tmpfs" | "umount"
    options: str
    fstab: str


_MOUNT_TYPES = {lib.SQ_MOUNT_BIND: "bind", lib.SQ_MOUNT_TMPFS: "tmpfs",
                lib.SQ_MOUNT_UMOUNT: "umount"}


def _with_mounts(spec: _Text, cwd: _Text | None, use: Callable[[Any, Any], _T]) -> _T:
    lst = ffi.new("struct sq_mount_list *")
    err = errbuf()
    if lib.sq_mounts_parse(_cstr("--container-mounts", spec), _cstr("working directory", cwd),
                           lst, err, ERRLEN) != 0:
        lib.sq_mounts_free(lst)
        raise core_error(err)
    try:
        return use(lst, err)
    finally:
        lib.sq_mounts_free(lst)


def parse_mounts(spec: _Text, cwd: _Text | None = None) -> list[Mount]:
    """Parse a ``--container-mounts`` spec; ``cwd`` makes ``./x`` sources absolute."""

    def collect(lst: Any, _err: Any) -> list[Mount]:
        return [
            Mount(source=c_text(m.source) or "", target=c_text(m.target) or "",
                  type=_MOUNT_TYPES[m.type], options=c_text(m.options) or "",
                  fstab=c_text(m.fstab) or "")
            for m in (lst.items[i] for i in range(lst.count))
        ]

    mounts: list[Mount] = _with_mounts(spec, cwd, collect)
    return mounts


def check_mount_sources(spec: _Text, cwd: _Text | None = None) -> None:
    """Raise unless every bind source of ``spec`` exists (as this process sees it)."""

    def check(lst: Any, err: Any) -> None:
        if lib.sq_mounts_check_sources(lst, err, ERRLEN) != 0:
            raise core_error(err)

    _with_mounts(spec, cwd, check)


def mount_datasets(spec: _Text, cwd: _Text | None = None) -> list[str]:
    """The targets of ``spec``'s bind mounts whose source is a squashfs file (a dataset,
    mounted read-only); raise for one refused (unreadable, or a dataset with ``rw``)."""

    def check(lst: Any, err: Any) -> list[str]:
        found = []
        for m in (lst.items[i] for i in range(lst.count)):
            r = lib.sq_dataset_check(ffi.addressof(m), err, ERRLEN)
            if r < 0:
                raise core_error(err)
            if r == 1:
                found.append(c_text(m.target) or "")
        return found

    targets: list[str] = _with_mounts(spec, cwd, check)
    return targets


# --- container options ---------------------------------------------------------------

@dataclass(frozen=True)
class Flag:
    """One row of the plugin's flag table."""

    id: int
    name: str                # without dashes, e.g. "container-image"
    has_arg: int             # 0 none, 1 required, 2 optional (as spank)
    arg_info: str | None
    help: str

    def env_name(self, prefix: str = "SQUALL_") -> str:
        buf = ffi.new("char[128]")
        if lib.sq_opt_env_name(self.id, prefix.encode(), buf, 128) != 0:
            raise SquallError(f"--{self.name}: no environment name for prefix {prefix!r}")
        return str(ffi.string(buf).decode())


def container_flags() -> list[Flag]:
    """The flags the plugin registers, in its order."""
    flags = []
    for i in range(lib.sq_opt_flag_count()):
        f = lib.sq_opt_flag(i)
        flags.append(Flag(id=f.id, name=c_text(f.name) or "", has_arg=f.has_arg,
                          arg_info=c_text(f.arg_info), help=c_text(f.help) or ""))
    return flags


def check_container_option(flag: str, value: _Text | None) -> None:
    """Validate one flag (``"container-mounts"``, dashes optional) with the plugin's parser.

    ``value`` is ``None`` for flags without an argument.
    """
    err = errbuf()
    if lib.sq_opt_check_value(_cstr("container option", flag), _cstr(f"--{flag}", value),
                              err, ERRLEN) != 0:
        raise core_error(err)


def parse_container_name(text: _Text) -> tuple[str, str]:
    """``NAME[:auto|create|exec|no_exec]`` -> (name, mode)."""
    name = ffi.new("char **")
    mode = ffi.new("int *")
    err = errbuf()
    if lib.sq_opt_parse_name(_cstr("--container-name", text), name, mode, err, ERRLEN) != 0:
        raise core_error(err)
    try:
        return c_text(name[0]) or "", ffi.string(lib.sq_name_mode_str(mode[0])).decode()
    finally:
        lib.sq_str_free(name[0])


_SOURCES = {"cli": lib.SQ_SRC_CLI, "squall": lib.SQ_SRC_ENV_SQUALL,
            "pyxis": lib.SQ_SRC_ENV_PYXIS}
_EFA = {lib.SQ_EFA_SETTING_UNSET: None, lib.SQ_EFA_SETTING_AUTO: "auto",
        lib.SQ_EFA_SETTING_REQUIRE: "require", lib.SQ_EFA_SETTING_OFF: "off"}
_LOG = {lib.SQ_LOG_UNSET: None, lib.SQ_LOG_QUIET: "quiet", lib.SQ_LOG_VERBOSE: "verbose"}


def _unshare_str(mask: int) -> str | None:
    if mask == 0:
        return None
    buf = ffi.new("char[32]")
    return str(ffi.string(lib.sq_unshare_str(mask, buf, 32)).decode())


def _tri(v: int) -> bool | None:
    return None if v < 0 else bool(v)


@dataclass(frozen=True)
class StepOptions:
    """A step's container settings after every source is applied (``None``: not set)."""

    container: bool          # an image or a name was given
    warning: str             # "" or the one-line warning about ignored flags
    image: str | None = None
    mounts: str | None = None
    workdir: str | None = None
    name: str | None = None
    name_mode: str = "auto"
    save: str | None = None
    mount_home: bool | None = None
    remap_root: bool | None = None
    entrypoint: bool | None = None
    entrypoint_log: bool | None = None
    writable: bool | None = None
    env: str | None = None
    efa: str | None = None
    nccl_debug: str | None = None
    log: str | None = None
    unshare: str | None = None   # canonical "net,ipc,uts" order; None: share the node's
    reuse: bool | None = None
    kept_for_job: bool = False   # the job prolog may start its container (prestart.h)


def resolve_step_options(
    cli: Sequence[tuple[str, _Text | None]] = (),
    environ: Mapping[str, str] | Iterable[str] | None = None,
) -> StepOptions:
    """Apply command-line flags and ``SQUALL_``/``PYXIS_CONTAINER_*`` variables the way the
    plugin does: ``cli`` is ``[("container-image", "ubuntu"), ("container-writable", None)]``."""
    opts = ffi.new("struct sq_opts *")
    err = errbuf()
    warn = errbuf()
    lib.sq_opts_init(opts)
    try:
        for flag, value in cli:
            if lib.sq_opt_set_by_name(opts, _cstr("container option", flag),
                                      _cstr(f"--{flag}", value), lib.SQ_SRC_CLI,
                                      err, ERRLEN) != 0:
                raise core_error(err)
        if environ is not None:
            envp = _CArray("environment", _env_items(environ))
            if lib.sq_opts_load_environ(opts, envp.ptr, err, ERRLEN) != 0:
                raise core_error(err)
        rc = lib.sq_opts_check(opts, warn, ERRLEN, err, ERRLEN)
        if rc < 0:
            raise core_error(err)
        return StepOptions(
            container=rc == 1, warning=ffi.string(warn).decode("utf-8", "replace"),
            image=c_text(opts.image), mounts=c_text(opts.mounts), workdir=c_text(opts.workdir),
            name=c_text(opts.name), name_mode=ffi.string(lib.sq_name_mode_str(opts.name_mode))
            .decode(), save=c_text(opts.save), mount_home=_tri(opts.mount_home),
            remap_root=_tri(opts.remap_root), entrypoint=_tri(opts.entrypoint),
            entrypoint_log=_tri(opts.entrypoint_log), writable=_tri(opts.writable),
            env=c_text(opts.env), efa=_EFA[opts.efa], nccl_debug=c_text(opts.nccl_debug),
            log=_LOG[opts.log], unshare=_unshare_str(opts.unshare), reuse=_tri(opts.reuse),
            kept_for_job=bool(lib.sq_opts_kept_for_job(opts)),
        )
    finally:
        lib.sq_opts_free(opts)


# --- plugstack.conf ------------------------------------------------------------------

@dataclass(frozen=True)
class PlugstackConfig:
    runtime_path: str
    enroot: str | None        # None: `enroot` on slurmstepd's PATH (as Pyxis)
    sqshbuild: str
    image_cache: str
    container_scope: str
    execute_entrypoint: bool
    efa: str
    efa_sysfs_root: str
    efa_dev_root: str
    efa_opt_root: str
    sbatch_support: bool
    log: str
    use_squashfuse: bool
    use_enroot_load: bool
    importer: str | None
    container_name_strict: bool
    container_reuse: bool
    local_cache: str
    local_cache_gb: int
    local_cache_max_nodes: int
    local_cache_copy_wait: int
    prestart_srun_jobs: bool
    metrics_dir: str | None   # None: metrics_dir=none, no metrics written


def parse_plugstack_args(args: Sequence[_Text]) -> dict[str, Any]:
    """The plugin's plugstack.conf arguments (``key=value``) -> every setting, defaults
    filled in. Unknown or malformed arguments raise, as the plugin refuses to load."""
    argv = _CArray("plugstack.conf argument", args)
    cfg = ffi.new("struct sq_config *")
    err = errbuf()
    if lib.sq_config_parse(cfg, len(args), argv.ptr, err, ERRLEN) != 0:
        raise core_error(err)
    try:
        scope = "global" if cfg.container_scope == lib.SQ_SCOPE_GLOBAL else "job"
        conf = PlugstackConfig(
            runtime_path=c_text(cfg.runtime_path) or "", enroot=c_text(cfg.enroot),
            sqshbuild=c_text(cfg.sqshbuild) or "", image_cache=c_text(cfg.image_cache) or "",
            container_scope=scope, execute_entrypoint=bool(cfg.execute_entrypoint),
            efa=_EFA[cfg.efa] or "", efa_sysfs_root=c_text(cfg.efa_sysfs_root) or "",
            efa_dev_root=c_text(cfg.efa_dev_root) or "",
            efa_opt_root=c_text(cfg.efa_opt_root) or "",
            sbatch_support=bool(cfg.sbatch_support), log=_LOG[cfg.log] or "",
            use_squashfuse=bool(cfg.use_squashfuse), use_enroot_load=bool(cfg.use_enroot_load),
            importer=c_text(cfg.importer), container_name_strict=bool(cfg.container_name_strict),
            container_reuse=bool(cfg.container_reuse),
            local_cache=c_text(cfg.local_cache) or "", local_cache_gb=int(cfg.local_cache_gb),
            local_cache_max_nodes=int(cfg.local_cache_max_nodes),
            local_cache_copy_wait=int(cfg.local_cache_copy_wait),
            prestart_srun_jobs=bool(cfg.prestart_srun_jobs),
            metrics_dir=c_text(cfg.metrics_dir),
        )
    finally:
        lib.sq_config_free(cfg)
    return dict(conf.__dict__)


# --- environment ---------------------------------------------------------------------

def env_denied(name: str) -> bool:
    """Is ``name`` removed from the environment of runtime calls?"""
    return bool(lib.sq_env_denied(_cstr("variable name", name)))


def clean_environment(env: Mapping[str, str] | Iterable[str]) -> dict[str, str]:
    """The environment an enroot call gets: ``env`` minus the deny list."""
    src = _CArray("environment", _env_items(env))
    out = ffi.new("char ***")
    err = errbuf()
    if lib.sq_env_clean(src.ptr, out, err, ERRLEN) != 0:
        raise core_error(err)
    return _to_dict(_take_env(out[0]))


def _keep_csv(keep: str | Iterable[str] | None) -> Any:
    if keep is None:
        return ffi.NULL
    csv = keep if isinstance(keep, str) else ",".join(keep)
    return _cstr("--container-env", csv)


def overlay_environment(task_env: Mapping[str, str] | Iterable[str], container_block: bytes,
                        keep: str | Iterable[str] | None = None) -> dict[str, str]:
    """The variables to set in a task from the container's ``/proc/PID/environ`` block."""
    task = _CArray("task environment", _env_items(task_env))
    out = ffi.new("char ***")
    err = errbuf()
    if lib.sq_env_overlay(container_block, len(container_block), _keep_csv(keep), task.ptr,
                          out, err, ERRLEN) != 0:
        raise core_error(err)
    return _to_dict(_take_env(out[0]))


def merge_environment(task_env: Mapping[str, str] | Iterable[str], container_block: bytes,
                      keep: str | Iterable[str] | None = None) -> dict[str, str]:
    """A task's complete environment: its own, overlaid with the container's (container
    values win except names in ``keep`` (``--container-env``) and per-task variables)."""
    task = _CArray("task environment", _env_items(task_env))
    out = ffi.new("char ***")
    err = errbuf()
    if lib.sq_env_merge(task.ptr, container_block, len(container_block), _keep_csv(keep),
                        out, err, ERRLEN) != 0:
        raise core_error(err)
    return _to_dict(_take_env(out[0]))


def task_unset(task_env: Mapping[str, str] | Iterable[str],
               keep: str | Iterable[str] | None = None) -> list[str]:
    """The locale variables a task loses (``LANG``, ``LC_ALL``, ``LANGUAGE``) unless
    ``keep`` (``--container-env``) names them."""
    task = _CArray("task environment", _env_items(task_env))
    out = ffi.new("char ***")
    err = errbuf()
    if lib.sq_env_task_unset(task.ptr, _keep_csv(keep), out, err, ERRLEN) != 0:
        raise core_error(err)
    return _take_env(out[0])


def keep_environ_lines(job_env: Mapping[str, str] | Iterable[str],
                       keep: str | Iterable[str] | None) -> list[str]:
    """The ``NAME=VALUE`` lines the runtime's start gets for the ``--container-env`` names."""
    job = _CArray("job environment", _env_items(job_env))
    out = ffi.new("char ***")
    err = errbuf()
    if lib.sq_env_keep_lines(job.ptr, _keep_csv(keep), out, err, ERRLEN) != 0:
        raise core_error(err)
    return _take_env(out[0])


# --- enroot --conf file --------------------------------------------------------------

def render_enroot_conf(
    env: Mapping[str, str] | Iterable[str] | None = None,
    mounts: Iterable[_Text] | None = None,
    hook_argv: Sequence[_Text] | None = None,
    skip_entrypoint: bool = False,
) -> str:
    """The text of an ``enroot start --conf`` file; every value single-quoted.
    ``skip_entrypoint``: hooks() makes the image's ``/etc/rc.local`` ``exec "$@"``."""
    spec = ffi.new("struct sq_conf_spec *")
    spec.skip_entrypoint = 1 if skip_entrypoint else 0
    arrays = []
    if env is not None:
        arrays.append(_CArray("environ()", _env_items(env)))
        spec.env = arrays[-1].ptr
    if mounts is not None:
        arrays.append(_CArray("mounts()", mounts))
        spec.mounts = arrays[-1].ptr
    if hook_argv is not None:
        arrays.append(_CArray("hooks()", hook_argv))
        spec.hook_argv = arrays[-1].ptr
    out = ffi.new("char **")
    err = errbuf()
    if lib.sq_conf_render(spec, out, err, ERRLEN) != 0:
        raise core_error(err)
    try:
        return c_text(out[0]) or ""
    finally:
        lib.sq_str_free(out[0])


# --- container lifecycle -------------------------------------------------------------

_LIFE_ACTIONS = {1: "start-step", 2: "kept"}


@dataclass(frozen=True)
class LifecyclePlan:
    """What a step does with the node's container (spank/core/lifecycle.h).

    action: ``start-step`` (a container for this step alone) or ``kept`` (the job's kept
    container, found or started, with a fresh layer for the step); why: the verbose log's
    words."""

    action: str
    why: str


def lifecycle_decide(*, reuse: bool = True, flag: bool | None = None, named: bool = False,
                     save: bool = False, batch: bool = False,
                     entrypoint: bool = False) -> LifecyclePlan:
    """The plugin's one decision per step, from the same C function."""
    inp = ffi.new("struct sq_life_input *", {
        "reuse": int(reuse), "flag": -1 if flag is None else int(flag), "named": int(named),
        "save": int(save), "batch": int(batch), "entrypoint": int(entrypoint)})
    plan = ffi.new("struct sq_life_plan *")
    if lib.sq_life_decide(inp, plan) != 0:
        raise SquallError(f"lifecycle decision: {c_text(plan.why)}")
    return LifecyclePlan(_LIFE_ACTIONS[plan.action], c_text(plan.why) or "")


def lifecycle_env_step_specific(name: str) -> bool:
    """Is ``name`` left out of a kept container's key (it differs between steps)?"""
    return bool(lib.sq_life_env_step_specific(_cstr("variable name", name)))


def lifecycle_env_differs(started: Mapping[str, str] | Iterable[str],
                          wanted: Mapping[str, str] | Iterable[str],
                          hooks: str | None = None) -> str | None:
    """The first variable a container's start reads whose value differs between the
    environment it was ``started`` with and the one a step ``wanted`` (set in one only, or
    to another value); None when the container serves that step."""
    a = _CArray("environment", _env_items(started))
    b = _CArray("environment", _env_items(wanted))
    h = _cstr("hooks text", hooks)
    name = ffi.new("char[256]")
    if lib.sq_life_env_differs(a.ptr, b.ptr, h, name, 256):
        return c_text(name) or ""
    return None


def lifecycle_key(parts: Sequence[_Text], env: Mapping[str, str] | Iterable[str],
                  hooks: str | None = None) -> str:
    """The key of a kept container: 32 hex digits over ``parts`` and the environment.
    ``hooks``: the text of the hooks the runtime runs (None: not known, so every variable
    that says how many tasks a step runs stays in the key)."""
    p = _CArray("key part", parts)
    e = _CArray("environment", _env_items(env))
    h = _cstr("hooks text", hooks)
    out = ffi.new("char[33]")
    if lib.sq_life_key(p.ptr, e.ptr, h, out) != 0:
        raise SquallError("lifecycle key: out of memory")
    return c_text(out) or ""
