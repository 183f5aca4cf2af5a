"""The recipe's ``container:`` section: every flag of the plugin, each value checked by the
plugin's own parser (the C core through ``squall.core``), so a recipe that passes here
passes in ``srun``."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from squall.errors import SquallError
from squall.mksbatch.options import sbatch_safe
from squall.mksbatch.reader import Reader, Section

EFA_MODES = ("auto", "require", "off")

# recipe field -> the flags it writes (a boolean field: the flag for true, then for false).
FLAG_FIELDS: dict[str, tuple[str, ...]] = {
    "image": ("container-image",),
    "mounts": ("container-mounts",),
    "workdir": ("container-workdir",),
    "name": ("container-name",),
    "save": ("container-save",),
    "mount_home": ("container-mount-home", "no-container-mount-home"),
    "remap_root": ("container-remap-root", "no-container-remap-root"),
    "entrypoint": ("container-entrypoint", "no-container-entrypoint"),
    "entrypoint_log": ("container-entrypoint-log",),
    "writable": ("container-writable", "container-readonly"),
    "reuse": ("container-reuse", "no-container-reuse"),
    "unshare": ("container-unshare",),
    "efa": ("container-efa",),
    "nccl_debug": ("container-nccl-debug",),
    "log": ("container-log",),
    "env": ("container-env",),
}
# prestart: no srun flag; the job's --container-prestart (prestart_flags).
CONTAINER_FIELDS = (*FLAG_FIELDS, "prestart")
# Flags the job prolog cannot start a container with: a named or saved container is a
# step's own, and --container-env's values are in the job's environment, not the prolog's.
_NOT_PRESTARTED = ("container-image", "container-name", "container-save", "container-env")
_SWITCHES = ("mount_home", "remap_root", "entrypoint", "entrypoint_log", "writable", "reuse")
_VALUES = ("name", "save", "nccl_debug", "log")


@dataclass(frozen=True)
class Container:
    image: str
    mounts: tuple[str, ...] = ()
    workdir: str | None = None
    efa: str | None = None
    mount_home: bool | None = None
    name: str | None = None
    save: str | None = None
    remap_root: bool | None = None
    entrypoint: bool | None = None
    entrypoint_log: bool | None = None
    writable: bool | None = None
    reuse: bool | None = None  # later steps of the job reuse the node's container
    unshare: tuple[str, ...] = ()
    nccl_debug: str | None = None
    log: str | None = None
    env: tuple[str, ...] = ()  # host variables that win over the image's (--container-env)
    prestart: bool | None = None  # the job prolog starts the container (--container-prestart)


def container_flags(c: Container, env_names: tuple[str, ...] = ()) -> list[tuple[str, str | None]]:
    """The srun flags for ``c`` in the order the script writes them: (flag, value or None).
    ``env_names`` (the recipe's environment) go into --container-env before ``c.env``."""
    flags: list[tuple[str, str | None]] = [("container-image", c.image)]
    if c.mounts:
        flags.append(("container-mounts", ",".join(c.mounts)))
    for field in ("workdir", "name", "save"):
        value = getattr(c, field)
        if value is not None:
            flags.append((FLAG_FIELDS[field][0], value))
    for field in _SWITCHES:
        value = getattr(c, field)
        names = FLAG_FIELDS[field]
        if value is True:
            flags.append((names[0], None))
        elif value is False and len(names) > 1:
            flags.append((names[1], None))
    if c.unshare:
        flags.append(("container-unshare", ",".join(c.unshare)))
    for field in ("efa", "nccl_debug", "log"):
        value = getattr(c, field)
        if value is not None:
            flags.append((FLAG_FIELDS[field][0], value))
    env = list(dict.fromkeys([*env_names, *c.env]))
    if env:
        flags.append(("container-env", ",".join(env)))
    return flags


def prestart_flags(c: Container, env_names: tuple[str, ...] = ()) -> list[tuple[str, str | None]]:
    """The sbatch flags of ``prestart: true``: --container-prestart=IMAGE and the container's
    other flags, which the job prolog starts it with and the steps inherit (docs/plugin.md,
    *Started at allocation*); none without it."""
    if not c.prestart:
        return []
    return [("container-prestart", c.image)] + [
        (flag, value) for flag, value in container_flags(c, env_names)
        if flag not in _NOT_PRESTARTED]


def read_container(sec: Section, env_names: tuple[str, ...]) -> Container:
    r, fld = sec.reader, sec.prefix
    image = sec.require("image", r.string, "image: /fsx/images/train.sqsh")
    check_flag(r, sec.node_of("image"), f"{fld}.image", "container-image", image)
    mounts: tuple[str, ...] = sec.get("mounts", lambda n, f: r.string_list(n, f), ())
    for i, mount in enumerate(mounts):
        item = sec.node_of("mounts").value[i]
        if "," in mount:
            raise r.err(item, f"{fld}.mounts[{i}]", "holds a comma: give one mount per "
                        "list item")
        check_flag(r, item, f"{fld}.mounts[{i}]", "container-mounts", mount)
    values: dict[str, str | None] = {}
    for field in ("workdir", *_VALUES):
        values[field] = sec.optional(field, r.string)
    values["efa"] = sec.optional("efa", lambda n, f: r.choice(n, f, EFA_MODES))
    for field, value in values.items():
        if value is not None:
            check_flag(r, sec.node_of(field), f"{fld}.{field}", FLAG_FIELDS[field][0], value)
    switches = {field: sec.optional(field, r.boolean) for field in _SWITCHES}
    env = _name_list(sec, "env", "container-env")
    unshare = _name_list(sec, "unshare", "container-unshare")
    container = Container(
        image=image, mounts=mounts, workdir=values["workdir"], efa=values["efa"],
        mount_home=switches["mount_home"], name=values["name"], save=values["save"],
        remap_root=switches["remap_root"], entrypoint=switches["entrypoint"],
        entrypoint_log=switches["entrypoint_log"], writable=switches["writable"],
        reuse=switches["reuse"],
        unshare=unshare, nccl_debug=values["nccl_debug"], log=values["log"], env=env,
        prestart=sec.optional("prestart", r.boolean))
    _check_together(r, sec, container, env_names)
    _check_prestart(r, sec, container, env_names)
    return container


def _check_prestart(r: Reader, sec: Section, c: Container, env_names: tuple[str, ...]) -> None:
    """``prestart: true`` writes the container's flags on #SBATCH lines: sbatch must read
    each value whole."""
    for flag, value in prestart_flags(c, env_names):
        if value is not None and not sbatch_safe(value):
            raise r.err(sec.node_of("prestart"), f"{sec.prefix}.prestart",
                        f"--{flag}={value!r} would be written on an #SBATCH line, where "
                        "sbatch splits at spaces and reads quotes, backslashes and # "
                        "itself: leave those out of the container's values, or prestart out")


def _name_list(sec: Section, field: str, flag: str) -> tuple[str, ...]:
    """A list of names for a comma-separated flag; each checked by the plugin's parser."""
    r = sec.reader
    names: tuple[str, ...] = sec.get(field, lambda n, f: r.string_list(n, f), ())
    for i, name in enumerate(names):
        item, where = sec.node_of(field).value[i], f"{sec.prefix}.{field}[{i}]"
        if "," in name:
            raise r.err(item, where, "holds a comma: give one name per list item")
        if field != "unshare":
            check_flag(r, item, where, flag, name)
    if names and field == "unshare":
        check_flag(r, sec.node_of(field), f"{sec.prefix}.{field}", flag, ",".join(names))
    return names


def _check_together(r: Reader, sec: Section, c: Container, env_names: tuple[str, ...]) -> None:
    """The whole set of flags as the plugin resolves a step's options."""
    from squall import core

    try:
        core.resolve_step_options(container_flags(c, env_names))
    except SquallError as exc:
        raise r.err(sec.anchor, sec.prefix, str(exc)) from None


def check_flag(r: Reader, node: yaml.Node, fld: str, flag: str, value: str | None) -> None:
    """Validate one container flag with the plugin's own parser (the C core)."""
    try:
        from squall import core
    except ImportError as exc:
        raise SquallError(f"cannot validate {fld}: the squall C core is not built "
                          f"({exc}): run `make core`") from None
    try:
        core.check_container_option(flag, value)
    except SquallError as exc:
        raise r.err(node, fld, str(exc)) from None
