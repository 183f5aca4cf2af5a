"""The recipe: its dataclasses, and loading + validation with file:line messages.

Every field is documented in docs/mksbatch.md. Validation happens completely before
anything is rendered, so a bad recipe never produces a half-written script.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from squall.errors import SetupError, SquallError
from squall.failover.spec import TORCHRUN_LIKE
from squall.mksbatch.container import CONTAINER_FIELDS, Container, read_container
from squall.mksbatch.options import read_sbatch, read_setup, read_srun
from squall.mksbatch.overrides import Override, apply, normalize, yaml_text
from squall.mksbatch.reader import Reader, Section
from squall.mksbatch.yamlpos import MAX_BYTES, RecipeError, compose, mapping_items

TARGETS = ("generic", "parallelcluster", "hyperpod")
LAUNCHERS = ("torchrun", "ft_launcher", "srun", "mpirun")
SRUN_MPI = ("pmix", "pmi2", "none")
BATCH_SIGNALS = ("USR1", "USR2")
FORWARD_SIGNALS = ("USR1", "USR2", "TERM", "INT", "HUP")
NEWEST_BY = ("numeric", "name", "mtime")

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
class Checkpoint:
    dir: str
    resume: tuple[str, ...]
    complete_marker: str
    pattern: str = "*"
    newest_by: str = "numeric"


@dataclass(frozen=True)
class Failover:
    """In-job failover (docs/failover.md): how a lost node or a hang is told."""

    detect_seconds: int = 10
    hang_seconds: int = 0  # 0: progress is not watched
    max_restarts: int = 3
    elastic: bool = False  # no spare left: go on with fewer nodes, down to min_nodes
    min_nodes: int = 1


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
    spares: int = 0
    failover: Failover | None = None  # set whenever spares > 0 or the section is given
    sbatch: tuple[tuple[str, str | None], ...] = ()  # (option, value; None for a flag)
    srun: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    overrides: tuple[Override, ...] = ()  # applied over the file, in order
    text: str = field(default="", repr=False, compare=False)  # the file, for override()
    lineless: bool = field(default=False, repr=False, compare=False)  # text from a dict


TOP_FIELDS = (
    "name", "target", "nodes", "tasks_per_node", "gpus_per_node", "cpus_per_task",
    "partition", "account", "qos", "time", "exclusive", "log_dir", "environment",
    "container", "launcher", "command", "torchrun", "mpi", "checkpoint", "requeue", "signal",
    "spares", "failover", "sbatch", "srun", "setup",
)
FAILOVER_FIELDS = ("detect_seconds", "hang_seconds", "max_restarts", "elastic", "min_nodes")
# The bounds of every number a recipe gives, by field as written in the recipe: (minimum,
# maximum or None). Stated once: validation and the JSON Schema both read them.
LIMITS: dict[str, tuple[int, int | None]] = {
    "nodes": (1, None), "tasks_per_node": (1, None), "gpus_per_node": (0, None),
    "cpus_per_task": (1, None), "requeue.max_restarts": (0, 1000),
    "signal.lead_seconds": (1, 65535), "torchrun.port_base": (1024, 64535),
    "spares": (0, 64), "failover.detect_seconds": (2, 3600),
    "failover.hang_seconds": (0, 7 * 86400), "failover.max_restarts": (0, 100),
    "failover.min_nodes": (1, None),
}
CHECKPOINT_FIELDS = ("dir", "pattern", "complete_marker", "newest_by", "resume")
REQUEUE_FIELDS = ("max_restarts",)
SIGNAL_FIELDS = ("name", "forward", "lead_seconds")
TORCHRUN_FIELDS = ("port_base",)


Overrides = Mapping[str, object] | Iterable[str | Override] | None


def load_recipe(path: str | Path, display_path: str | None = None,
                overrides: Overrides = None) -> Recipe:
    """Read and validate the recipe at ``path``; raise RecipeError naming file:line: field.

    ``overrides``: ``{"nodes": 8, "environment.LR": "3e-4"}`` (Python values) or
    ``["nodes=8", ...]`` (``--set`` text), applied over the file and validated with it.
    """
    shown = display_path or str(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)  # bounded: the path may be /dev/zero or a FIFO
    except OSError as exc:
        raise SetupError(f"cannot read recipe {shown}: {exc.strerror}: "
                         "check the path") from None
    if len(data) > MAX_BYTES:
        raise SquallError(f"cannot read recipe {shown}: it is larger than "
                          f"{MAX_BYTES >> 20} MiB, and a recipe is a small YAML file: "
                          "check the path")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecipeError(f"{shown}:1: recipe: not UTF-8 text (byte {exc.start}): "
                          "save the file as UTF-8") from None
    return parse_recipe(text, shown, hashlib.sha256(data).hexdigest(), overrides)


def parse_recipe(text: str, path: str = "<recipe>", sha256: str | None = None,
                 overrides: Overrides = None, lineless: bool = False) -> Recipe:
    """Validate recipe ``text``; ``path`` is what error messages and the header show."""
    if sha256 is None:
        sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()
    changes = normalize(overrides)
    source, root = compose(path, text, lineless)
    root = apply(source, root, changes)
    r = Reader(source)
    top = Section(r, root, "", TOP_FIELDS)

    name = top.require("name", lambda n, f: r.matching(
        n, f, _NAME, "may only use letters, digits and . _ - (starting with a letter or "
        "digit)"), "name: my-training")
    target = top.get("target", lambda n, f: r.choice(n, f, TARGETS), "generic")
    number = _number(r)
    nodes = top.require("nodes", number, "nodes: 2")
    launcher = top.require("launcher", lambda n, f: r.choice(n, f, LAUNCHERS),
                           "launcher: srun")
    command = top.require("command", lambda n, f: r.string_list(n, f, split=True, argv=True),
                          "command: [python3, train.py]")
    gpus = top.get("gpus_per_node", number, 0)
    default_tasks = gpus if (launcher in TORCHRUN_LIKE and gpus > 0) else 1
    tasks = top.get("tasks_per_node", number, default_tasks)
    cpus = top.optional("cpus_per_task", number)
    sbatch_word = _sbatch_word(r)
    partition = top.optional("partition", sbatch_word)
    account = top.optional("account", sbatch_word)
    qos = top.optional("qos", sbatch_word)
    time = top.optional("time", lambda n, f: r.matching(
        n, f, _TIME, "is not a Slurm time: use MINUTES, HH:MM:SS or D-HH:MM:SS, e.g. "
        "\"2-00:00:00\""))
    exclusive = top.get("exclusive", r.boolean, False)
    log_dir = top.require("log_dir", sbatch_word, "log_dir: /fsx/logs")
    if not log_dir.startswith("/") or "%" in log_dir:
        raise r.err(top.node_of("log_dir"), "log_dir", f"{log_dir!r} must be an absolute "
                    "directory path without %, e.g. /fsx/logs")

    environment: tuple[tuple[str, str], ...] = top.get("environment", _read_environment(r),
                                                       ())
    container = (read_container(top.section("container", CONTAINER_FIELDS),
                                tuple(name for name, _ in environment))
                 if top.has("container") else None)
    checkpoint = (_read_checkpoint(top.section("checkpoint", CHECKPOINT_FIELDS))
                  if top.has("checkpoint") else None)

    max_restarts = 3
    if top.has("requeue"):
        sec = top.section("requeue", REQUEUE_FIELDS)
        max_restarts = sec.get("max_restarts", number, 3)

    signal, forward, lead = _read_signal(top, r, launcher)
    port_base = _read_port_base(top, r, launcher)
    spares = top.get("spares", number, 0)
    failover = _read_failover(top, r, launcher, nodes) if top.has("failover") else (
        Failover() if spares else None)

    mpi = top.optional("mpi", lambda n, f: r.choice(n, f, SRUN_MPI))
    if mpi is not None and launcher != "srun":
        raise r.err(top.key_of("mpi"), "mpi", f"selects srun's --mpi and only applies to "
                    f"launcher: srun (launcher is {launcher}): remove it")
    sbatch: tuple[tuple[str, str | None], ...] = top.get("sbatch", read_sbatch(r), ())
    srun: tuple[str, ...] = top.get("srun", read_srun(r), ())
    if srun and launcher == "mpirun":
        raise r.err(top.key_of("srun"), "srun", "adds options to srun, which launcher: "
                    "mpirun does not use: remove it")
    setup: tuple[str, ...] = top.get("setup", read_setup(r), ())
    if container is not None and launcher == "mpirun":
        raise r.err(top.key_of("container"), "container", "launcher: mpirun starts ranks "
                    "outside any container; use launcher: srun with mpi: pmix for a "
                    "containerised MPI job")

    return Recipe(
        path=path, sha256=sha256, name=name, nodes=nodes, launcher=launcher,
        command=command, log_dir=log_dir.rstrip("/") or "/", target=target,
        tasks_per_node=tasks, gpus_per_node=gpus, cpus_per_task=cpus, partition=partition,
        account=account, qos=qos, time=time, exclusive=exclusive, environment=environment,
        container=container, checkpoint=checkpoint, max_restarts=max_restarts,
        signal=signal, forward_signal=forward, signal_lead=lead, rdzv_port_base=port_base,
        mpi=mpi, spares=spares, failover=failover, sbatch=sbatch, srun=srun, setup=setup,
        overrides=changes, text=text,
        lineless=lineless,
    )


def _read_signal(top: Section, r: Reader, launcher: str) -> tuple[str, str, int]:
    """signal: (the batch signal, the one forwarded to the program, its lead seconds)."""
    default_forward = "TERM" if launcher in TORCHRUN_LIKE else "USR1"
    signal, forward, lead = "USR1", default_forward, 120
    if top.has("signal"):
        sec = top.section("signal", SIGNAL_FIELDS)
        signal = sec.get("name", lambda n, f: r.choice(n, f, BATCH_SIGNALS), signal)
        forward = sec.get("forward", lambda n, f: r.choice(n, f, FORWARD_SIGNALS), forward)
        lead = sec.get("lead_seconds", _number(r), lead)
    return signal, forward, lead


def _read_port_base(top: Section, r: Reader, launcher: str) -> int:
    """torchrun.port_base, for the torchrun-like launchers only."""
    port_base = 29500
    if top.has("torchrun"):
        if launcher not in TORCHRUN_LIKE:
            raise r.err(top.key_of("torchrun"), "torchrun", f"only applies to launcher: "
                        f"torchrun or ft_launcher (launcher is {launcher}): remove this "
                        "section")
        sec = top.section("torchrun", TORCHRUN_FIELDS)
        port_base = sec.get("port_base", _number(r), port_base)
    return port_base


def _read_failover(top: Section, r: Reader, launcher: str, nodes: int) -> Failover:
    """The failover: section, checked against the launcher and the node count."""
    number = _number(r)
    sec = top.section("failover", FAILOVER_FIELDS)
    failover = Failover(
        detect_seconds=sec.get("detect_seconds", number, 10),
        hang_seconds=sec.get("hang_seconds", number, 0),
        max_restarts=sec.get("max_restarts", number, 3),
        elastic=sec.get("elastic", r.boolean, False),
        min_nodes=sec.get("min_nodes", number, 1))
    if failover.elastic and launcher not in TORCHRUN_LIKE:
        raise r.err(sec.node_of("elastic"), "failover.elastic", "going on with fewer "
                    "nodes needs a launcher whose ranks meet again by rendezvous "
                    f"(torchrun or ft_launcher; launcher is {launcher}): remove it or "
                    "use launcher: torchrun")
    if sec.has("min_nodes") and not failover.elastic:
        raise r.err(sec.node_of("min_nodes"), "failover.min_nodes", "only applies with "
                    "failover.elastic: true: add it or remove min_nodes")
    if failover.min_nodes > nodes:
        raise r.err(sec.node_of("min_nodes"), "failover.min_nodes",
                    f"{failover.min_nodes} is more than nodes ({nodes}): give at most "
                    f"{nodes}")
    if failover.hang_seconds and failover.hang_seconds < failover.detect_seconds:
        raise r.err(sec.node_of("hang_seconds"), "failover.hang_seconds",
                    f"{failover.hang_seconds} is shorter than failover.detect_seconds "
                    f"({failover.detect_seconds}): give it at least the time of a few "
                    "steps, or 0 not to watch progress")
    return failover


def recipe_dict(recipe: Recipe) -> dict[str, Any]:
    """The resolved recipe as JSON-ready data: every field with its default filled in."""
    out = {f.name: getattr(recipe, f.name) for f in fields(recipe)
           if f.name not in ("text", "lineless")}
    out["environment"] = dict(recipe.environment)
    out["sbatch"] = {name: True if value is None else value for name, value in recipe.sbatch}
    out["overrides"] = [o.written for o in recipe.overrides]
    for section in ("container", "checkpoint", "failover"):
        value = getattr(recipe, section)
        out[section] = None if value is None else asdict(value)
    data: dict[str, Any] = json.loads(json.dumps(out))  # tuples become lists
    return data


def override(recipe: Recipe, overrides: Overrides) -> Recipe:
    """``recipe`` with more overrides, validated again from its file (line numbers and
    defaults as if all of them had been given at once)."""
    if not recipe.text:
        raise SquallError("override() needs a Recipe made by load_recipe, parse_recipe or "
                          "recipe_from_dict (it validates the recipe's text again)")
    return parse_recipe(recipe.text, recipe.path, recipe.sha256,
                        (*recipe.overrides, *normalize(overrides)),
                        lineless=recipe.lineless)


def recipe_from_dict(data: Mapping[str, object], path: str = "<dict>",
                     overrides: Overrides = None) -> Recipe:
    """Validate a recipe given as Python data (what the YAML file would hold); messages
    name ``path`` and the field, without a line."""
    if not isinstance(data, Mapping):
        raise SquallError(f"{path}: a recipe is a mapping of fields, not "
                          f"{type(data).__name__}")
    return parse_recipe(yaml_text(dict(data), path), path, None, overrides, lineless=True)


def _number(r: Reader) -> Callable[[yaml.Node, str], int]:
    """A whole number within the field's :data:`LIMITS`."""
    def read(node: yaml.Node, fld: str) -> int:
        return r.integer(node, fld, *LIMITS[fld])

    return read


def _sbatch_word(r: Reader) -> Callable[[yaml.Node, str], str]:
    def read(node: yaml.Node, fld: str) -> str:
        return r.matching(node, fld, _SBATCH_SAFE, "is written on an #SBATCH line and may "
                          "only use letters, digits and . _ / % : @ + , = -")

    return read


def _read_environment(r: Reader) -> Callable[[yaml.Node, str], tuple[tuple[str, str], ...]]:
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
            out.append((key, "" if r.is_null(value_node) else r.string(value_node, name)))
        return tuple(out)

    return read


def _read_checkpoint(sec: Section) -> Checkpoint:
    r, fld = sec.reader, sec.prefix
    directory = sec.require("dir", r.string, "dir: /fsx/checkpoints/my-run")
    if not directory.startswith("/"):
        raise r.err(sec.node_of("dir"), f"{fld}.dir", f"{directory!r} must be an "
                    "absolute path on shared storage, e.g. /fsx/checkpoints/my-run")
    pattern = sec.get("pattern", lambda n, f: r.matching(
        n, f, _GLOB, "must be a file-name glob made of letters, digits, . _ - + and "
        "* ? [ ], e.g. step_*"), "*")
    marker = sec.require("complete_marker", r.string, "complete_marker: COMPLETE")
    if not _MARKER.fullmatch(marker) or marker in (".", ".."):
        raise r.err(sec.node_of("complete_marker"), f"{fld}.complete_marker",
                    f"{marker!r} must be a plain file name (letters, digits, . _ - +) "
                    "that the program writes inside a checkpoint once it is complete")
    newest = sec.get("newest_by", lambda n, f: r.choice(n, f, NEWEST_BY), "numeric")
    resume = sec.require("resume", lambda n, f: r.string_list(n, f, split=True),
                         "resume: \"--resume {checkpoint}\"")
    if not any(PLACEHOLDER in word for word in resume):
        raise r.err(sec.node_of("resume"), f"{fld}.resume", "must contain {checkpoint} "
                    "where the checkpoint path goes, e.g. \"--resume {checkpoint}\"")
    return Checkpoint(dir=directory.rstrip("/") or "/", resume=resume,
                      complete_marker=marker, pattern=pattern, newest_by=newest)
