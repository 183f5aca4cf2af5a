"""The recipe: its dataclasses, and loading + validation with file:line messages.

Every field is documented in docs/mksbatch.md. Validation happens completely before
anything is rendered, so a bad recipe never produces a half-written script.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from squall.errors import SetupError, SquallError
from squall.mksbatch.yamlpos import RecipeError, Source, compose, mapping_items

TARGETS = ("generic", "parallelcluster", "hyperpod")
LAUNCHERS = ("torchrun", "srun", "mpirun")
EFA_MODES = ("auto", "require", "off")
SRUN_MPI = ("pmix", "pmi2", "none")
BATCH_SIGNALS = ("USR1", "USR2")
FORWARD_SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP")
NEWEST_BY = ("name", "mtime")

# Values written on '#SBATCH' lines are not parsed by the shell but by sbatch, which has
# no quoting we can rely on: they must be made of characters with no meaning to either.
_SBATCH_SAFE = re.compile(r"[A-Za-z0-9._/%:@+,=-]+")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TIME = re.compile(r"(\d+)(:\d{1,2}){0,2}|(\d+)-(\d{1,2})(:\d{1,2}){0,2}")
_GLOB = re.compile(r"[A-Za-z0-9._*?+\[\]-]+")
_MARKER = re.compile(r"[A-Za-z0-9._+-]+")
PLACEHOLDER = "{checkpoint}"


@dataclass(frozen=True)
class Container:
    image: str
    mounts: tuple[str, ...] = ()
    workdir: str | None = None
    efa: str | None = None
    mount_home: bool | None = None


@dataclass(frozen=True)
class Checkpoint:
    dir: str
    resume: tuple[str, ...]
    complete_marker: str
    pattern: str = "*"
    newest_by: str = "name"


@dataclass(frozen=True)
class Recipe:
    path: str
    sha256: str
    name: str
    nodes: int
    launcher: str
    command: tuple[str, ...]
    log_dir: str
    target: str = "generic"
    tasks_per_node: int = 1
    gpus_per_node: int = 0
    cpus_per_task: int | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    exclusive: bool = False
    environment: tuple[tuple[str, str], ...] = ()
    container: Container | None = None
    checkpoint: Checkpoint | None = None
    max_restarts: int = 3
    signal: str = "USR1"
    forward_signal: str = "USR1"
    signal_lead: int = 120
    rdzv_port_base: int = 29500
    mpi: str | None = None


# ---------------------------------------------------------------------------------------
# field readers: each takes the value node and the dotted field name, returns the value


class _Reader:
    def __init__(self, source: Source):
        self.source = source

    def err(self, node: yaml.Node | None, fld: str, msg: str) -> RecipeError:
        return self.source.error(node, fld, msg)

    def _scalar(self, node: yaml.Node, fld: str, what: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise self.err(node, fld, f"must be {what}, not a list or mapping")
        return self.source.scalar(node, fld)

    def string(self, node: yaml.Node, fld: str) -> str:
        value = self._scalar(node, fld, "a string")
        if value is None:
            raise self.err(node, fld, "is empty: give a value or remove the field")
        if isinstance(value, bool):
            raise self.err(node, fld, f"{node.value!r} is read as a YAML boolean: quote it, "
                           f"e.g. \"{node.value}\"")
        if not isinstance(value, (str, int, float)):
            raise self.err(node, fld, f"must be a string, got {value!r}: quote it")
        text = str(value)
        if text == "":
            raise self.err(node, fld, "is empty: give a value or remove the field")
        if "\0" in text:
            raise self.err(node, fld, "contains a NUL character: remove it")
        return text

    def integer(self, node: yaml.Node, fld: str, low: int, high: int | None = None) -> int:
        value = self._scalar(node, fld, "a whole number")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.err(node, fld, f"must be a whole number, got {node.value!r}")
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise self.err(node, fld, f"must be {bound}, got {value}")
        return value

    def boolean(self, node: yaml.Node, fld: str) -> bool:
        value = self._scalar(node, fld, "true or false")
        if not isinstance(value, bool):
            raise self.err(node, fld, f"must be true or false, got {node.value!r}")
        return value

    def choice(self, node: yaml.Node, fld: str, choices: tuple[str, ...]) -> str:
        value = self.string(node, fld)
        if value not in choices:
            raise self.err(node, fld, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def sbatch_word(self, node: yaml.Node, fld: str) -> str:
        value = self.string(node, fld)
        if not _SBATCH_SAFE.fullmatch(value):
            raise self.err(node, fld, f"{value!r} is written on an #SBATCH line and may only "
                           "use letters, digits and . _ / % : @ + , = -")
        return value

    def string_list(self, node: yaml.Node, fld: str, split: bool = False) -> tuple[str, ...]:
        if isinstance(node, yaml.ScalarNode) and split:
            text = self.string(node, fld)
            try:
                words = shlex.split(text)
            except ValueError as exc:
                raise self.err(node, fld, f"cannot split into words ({exc}): "
                               "write it as a YAML list instead") from None
            if not words:
                raise self.err(node, fld, "is empty: give at least one word")
            return tuple(words)
        if not isinstance(node, yaml.SequenceNode):
            raise self.err(node, fld, "must be a list, e.g. [a, b]")
        items = tuple(self.string(item, f"{fld}[{i}]") for i, item in enumerate(node.value))
        if not items:
            raise self.err(node, fld, "is an empty list: give at least one item or remove it")
        return items

    def mapping(self, node: yaml.Node, fld: str) -> yaml.MappingNode:
        if not isinstance(node, yaml.MappingNode):
            raise self.err(node, fld, "must be a mapping of fields (key: value)")
        return node


@dataclass
class _Section:
    """The fields of one mapping: read each once; unknown keys are reported by `finish`."""

    reader: _Reader
    node: yaml.MappingNode
    prefix: str
    known: tuple[str, ...]
    anchor: yaml.Node | None = None  # the section's key, where "missing" errors point

    def __post_init__(self) -> None:
        self.items = mapping_items(self.reader.source, self.node, self.prefix)
        for key, (key_node, _) in self.items.items():
            if key not in self.known:
                hint = _closest(key, self.known)
                raise self.reader.err(key_node, self.name(key),
                                      f"unknown field{hint}; known fields here: "
                                      f"{', '.join(self.known)}")

    def name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def get(self, key: str, read: Callable[[yaml.Node, str], Any], default: Any = None) -> Any:
        if key not in self.items:
            return default
        return read(self.items[key][1], self.name(key))

    def require(self, key: str, read: Callable[[yaml.Node, str], Any], example: str) -> Any:
        if key not in self.items:
            where = self.prefix or "recipe"
            raise self.reader.err(self.anchor or self.node, self.name(key),
                                  f"missing: add it to {where}, e.g. {example}")
        return read(self.items[key][1], self.name(key))

    def node_of(self, key: str) -> yaml.Node:
        return self.items[key][1] if key in self.items else self.node


def _closest(key: str, known: tuple[str, ...]) -> str:
    import difflib

    match = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


TOP_FIELDS = (
    "name", "target", "nodes", "tasks_per_node", "gpus_per_node", "cpus_per_task",
    "partition", "account", "qos", "time", "exclusive", "log_dir", "environment",
    "container", "launcher", "command", "torchrun", "mpi", "checkpoint", "requeue", "signal",
)
CONTAINER_FIELDS = ("image", "mounts", "workdir", "efa", "mount_home")
CHECKPOINT_FIELDS = ("dir", "pattern", "complete_marker", "newest_by", "resume")
REQUEUE_FIELDS = ("max_restarts",)
SIGNAL_FIELDS = ("name", "forward", "lead_seconds")
TORCHRUN_FIELDS = ("port_base",)


def load_recipe(path: str | Path, display_path: str | None = None) -> Recipe:
    """Read and validate the recipe at ``path``; raise RecipeError naming file:line: field."""
    shown = display_path or str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SetupError(f"cannot read recipe {shown}: {exc.strerror}: "
                         "check the path") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecipeError(f"{shown}:1: recipe: not UTF-8 text (byte {exc.start}): "
                          "save the file as UTF-8") from None
    return parse_recipe(text, shown, hashlib.sha256(data).hexdigest())


def parse_recipe(text: str, path: str, sha256: str | None = None) -> Recipe:
    """Validate recipe ``text``; ``path`` is what error messages and the header show."""
    if sha256 is None:
        sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()
    source, root = compose(path, text)
    r = _Reader(source)
    top = _Section(r, root, "", TOP_FIELDS)

    name = top.require("name", r.string, "name: my-training")
    if not _NAME.fullmatch(name):
        raise r.err(top.node_of("name"), "name", f"{name!r} may only use letters, digits "
                    "and . _ - (starting with a letter or digit)")
    target = top.get("target", lambda n, f: r.choice(n, f, TARGETS), "generic")
    nodes = top.require("nodes", lambda n, f: r.integer(n, f, 1), "nodes: 2")
    launcher = top.require("launcher", lambda n, f: r.choice(n, f, LAUNCHERS),
                           "launcher: srun")
    command = top.require("command", lambda n, f: r.string_list(n, f, split=True),
                          "command: [python3, train.py]")
    gpus = top.get("gpus_per_node", lambda n, f: r.integer(n, f, 0), 0)
    default_tasks = gpus if (launcher == "torchrun" and gpus > 0) else 1
    tasks = top.get("tasks_per_node", lambda n, f: r.integer(n, f, 1), default_tasks)
    cpus = top.get("cpus_per_task", lambda n, f: r.integer(n, f, 1))
    partition = top.get("partition", r.sbatch_word)
    account = top.get("account", r.sbatch_word)
    qos = top.get("qos", r.sbatch_word)
    time = top.get("time", _read_time(r))
    exclusive = top.get("exclusive", r.boolean, False)
    log_dir = top.require("log_dir", r.sbatch_word, "log_dir: /fsx/logs")
    if not log_dir.startswith("/") or "%" in log_dir:
        raise r.err(top.node_of("log_dir"), "log_dir", f"{log_dir!r} must be an absolute "
                    "directory path without %, e.g. /fsx/logs")

    environment = top.get("environment", _read_environment(r), ())
    container = _read_container(r, *top.items["container"]) if "container" in top.items else None
    checkpoint = (_read_checkpoint(r, *top.items["checkpoint"])
                  if "checkpoint" in top.items else None)

    max_restarts = 3
    if "requeue" in top.items:
        sec = _Section(r, r.mapping(top.node_of("requeue"), "requeue"), "requeue",
                       REQUEUE_FIELDS)
        max_restarts = sec.get("max_restarts", lambda n, f: r.integer(n, f, 0, 1000), 3)

    default_forward = "TERM" if launcher == "torchrun" else "USR1"
    signal, forward, lead = "USR1", default_forward, 120
    if "signal" in top.items:
        sec = _Section(r, r.mapping(top.node_of("signal"), "signal"), "signal", SIGNAL_FIELDS)
        signal = sec.get("name", lambda n, f: r.choice(n, f, BATCH_SIGNALS), signal)
        forward = sec.get("forward", lambda n, f: r.choice(n, f, FORWARD_SIGNALS), forward)
        lead = sec.get("lead_seconds", lambda n, f: r.integer(n, f, 1, 65535), lead)

    port_base = 29500
    if "torchrun" in top.items:
        if launcher != "torchrun":
            raise r.err(top.items["torchrun"][0], "torchrun", f"only applies to launcher: "
                        f"torchrun (launcher is {launcher}): remove this section")
        sec = _Section(r, r.mapping(top.node_of("torchrun"), "torchrun"), "torchrun",
                       TORCHRUN_FIELDS)
        port_base = sec.get("port_base", lambda n, f: r.integer(n, f, 1024, 64535), port_base)

    mpi = top.get("mpi", lambda n, f: r.choice(n, f, SRUN_MPI))
    if mpi is not None and launcher != "srun":
        raise r.err(top.items["mpi"][0], "mpi", f"selects srun's --mpi and only applies to "
                    f"launcher: srun (launcher is {launcher}): remove it")
    if container is not None and launcher == "mpirun":
        raise r.err(top.items["container"][0], "container", "launcher: mpirun starts ranks "
                    "outside any container; use launcher: srun with mpi: pmix for a "
                    "containerised MPI job")

    return Recipe(
        path=path, sha256=sha256, name=name, nodes=nodes, launcher=launcher,
        command=command, log_dir=log_dir.rstrip("/") or "/", target=target,
        tasks_per_node=tasks, gpus_per_node=gpus, cpus_per_task=cpus, partition=partition,
        account=account, qos=qos, time=time, exclusive=exclusive, environment=environment,
        container=container, checkpoint=checkpoint, max_restarts=max_restarts,
        signal=signal, forward_signal=forward, signal_lead=lead, rdzv_port_base=port_base,
        mpi=mpi,
    )


def _read_time(r: _Reader) -> Callable[[yaml.Node, str], str]:
    def read(node: yaml.Node, fld: str) -> str:
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":int"):
            # YAML 1.1 reads 10:00:00 as a base-60 integer: keep the text as written.
            text = str(node.value)
        else:
            text = r.string(node, fld)
        if not _TIME.fullmatch(text):
            raise r.err(node, fld, f"{text!r} is not a Slurm time: use MINUTES, "
                        "HH:MM:SS or D-HH:MM:SS, e.g. \"2-00:00:00\"")
        return text

    return read


def _read_environment(r: _Reader) -> Callable[[yaml.Node, str], tuple[tuple[str, str], ...]]:
    def read(node: yaml.Node, fld: str) -> tuple[tuple[str, str], ...]:
        items = mapping_items(r.source, r.mapping(node, fld), fld)
        out = []
        for key, (key_node, value_node) in items.items():
            name = f"{fld}.{key}"
            if not _ENV_NAME.fullmatch(key):
                raise r.err(key_node, name, "is not a valid variable name: use letters, "
                            "digits and _, not starting with a digit")
            if key.startswith(("SLURM_", "SQUALL_")) or key in ("PATH", "HOME", "USER"):
                raise r.err(key_node, name, "is set by Slurm or squall and cannot be "
                            "overridden from a recipe: choose another name")
            if isinstance(value_node, yaml.ScalarNode) and r.source.scalar(
                value_node, name
            ) is None:
                value = ""
            else:
                value = r.string(value_node, name)
            out.append((key, value))
        return tuple(out)

    return read


def _read_container(r: _Reader, key: yaml.Node, node: yaml.Node) -> Container:
    fld = "container"
    sec = _Section(r, r.mapping(node, fld), fld, CONTAINER_FIELDS, key)
    image = sec.require("image", r.string, "image: /fsx/images/train.sqsh")
    _check_flag(r, sec.node_of("image"), f"{fld}.image", "container-image", image)
    mounts = sec.get("mounts", lambda n, f: r.string_list(n, f), ())
    for i, mount in enumerate(mounts):
        item = sec.node_of("mounts").value[i]
        if "," in mount:
            raise r.err(item, f"{fld}.mounts[{i}]", "holds a comma: give one mount per "
                        "list item")
        _check_flag(r, item, f"{fld}.mounts[{i}]", "container-mounts", mount)
    workdir = sec.get("workdir", r.string)
    if workdir is not None:
        _check_flag(r, sec.node_of("workdir"), f"{fld}.workdir", "container-workdir",
                    workdir)
    efa = sec.get("efa", lambda n, f: r.choice(n, f, EFA_MODES))
    if efa is not None:
        _check_flag(r, sec.node_of("efa"), f"{fld}.efa", "container-efa", efa)
    mount_home = sec.get("mount_home", r.boolean)
    return Container(image=image, mounts=mounts, workdir=workdir, efa=efa,
                     mount_home=mount_home)


def _check_flag(r: _Reader, node: yaml.Node, fld: str, flag: str, value: str | None) -> None:
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


def _read_checkpoint(r: _Reader, key: yaml.Node, node: yaml.Node) -> Checkpoint:
    fld = "checkpoint"
    sec = _Section(r, r.mapping(node, fld), fld, CHECKPOINT_FIELDS, key)
    directory = sec.require("dir", r.string, "dir: /fsx/checkpoints/my-run")
    if not directory.startswith("/"):
        raise r.err(sec.node_of("dir"), f"{fld}.dir", f"{directory!r} must be an "
                    "absolute path on shared storage, e.g. /fsx/checkpoints/my-run")
    pattern = sec.get("pattern", r.string, "*")
    if not _GLOB.fullmatch(pattern):
        raise r.err(sec.node_of("pattern"), f"{fld}.pattern", f"{pattern!r} must be a "
                    "file-name glob made of letters, digits, . _ - + and * ? [ ], "
                    "e.g. step_*")
    marker = sec.require("complete_marker", r.string, "complete_marker: COMPLETE")
    if not _MARKER.fullmatch(marker) or marker in (".", ".."):
        raise r.err(sec.node_of("complete_marker"), f"{fld}.complete_marker",
                    f"{marker!r} must be a plain file name (letters, digits, . _ - +) "
                    "that the program writes inside a checkpoint once it is complete")
    newest = sec.get("newest_by", lambda n, f: r.choice(n, f, NEWEST_BY), "name")
    resume = sec.require("resume", lambda n, f: r.string_list(n, f, split=True),
                         "resume: \"--resume {checkpoint}\"")
    if not any(PLACEHOLDER in word for word in resume):
        raise r.err(sec.node_of("resume"), f"{fld}.resume", "must contain {checkpoint} "
                    "where the checkpoint path goes, e.g. \"--resume {checkpoint}\"")
    return Checkpoint(dir=directory.rstrip("/") or "/", resume=resume,
                      complete_marker=marker, pattern=pattern, newest_by=newest)
