"""The recipe's JSON Schema (draft-07), for editors: ``mksbatch schema`` prints it, and a
recipe whose first line is ``# yaml-language-server: $schema=PATH`` gets completion and
checks from the YAML language server (VS Code, Neovim, ...).

The schema is a first check; mksbatch's own validation (the plugin's parser for container
flags, values as written) stays the judge. Text fields take numbers too, because mksbatch
keeps a plain ``3.10`` as the text "3.10".
"""

from __future__ import annotations

from typing import Any

from squall.mksbatch.container import CONTAINER_FIELDS, EFA_MODES
from squall.mksbatch.options import SBATCH_OWNED, SBATCH_REFUSED
from squall.mksbatch.recipe import (
    BATCH_SIGNALS,
    CHECKPOINT_FIELDS,
    FAILOVER_FIELDS,
    FORWARD_SIGNALS,
    LAUNCHERS,
    LIMITS,
    NEWEST_BY,
    REQUEUE_FIELDS,
    SIGNAL_FIELDS,
    SRUN_MPI,
    TARGETS,
    TOP_FIELDS,
    TORCHRUN_FIELDS,
)

Schema = dict[str, Any]

_TEXT: Schema = {"type": ["string", "number"]}
_WORD: Schema = {"type": ["string", "number"], "pattern": "^[A-Za-z0-9._/%:@+,=-]+$"}


def _text(description: str, **more: Any) -> Schema:
    return {**_TEXT, "description": description, **more}


def _int(field: str, description: str) -> Schema:
    """A whole number within the bounds validation applies (recipe.LIMITS)."""
    minimum, maximum = LIMITS[field]
    out: Schema = {"type": "integer", "minimum": minimum, "description": description}
    if maximum is not None:
        out["maximum"] = maximum
    return out


def _enum(description: str, values: tuple[str, ...]) -> Schema:
    return {"type": "string", "enum": list(values), "description": description}


def _bool(description: str) -> Schema:
    return {"type": "boolean", "description": description}


def _words(description: str) -> Schema:
    """A list of words, or one string split like a shell splits words."""
    return {"description": description, "oneOf": [
        {"type": "string", "minLength": 1},
        {"type": "array", "items": _TEXT, "minItems": 1}]}


def _names(description: str) -> Schema:
    return {"type": "array", "minItems": 1, "description": description,
            "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}}


def _section(fields: tuple[str, ...], properties: Schema, description: str,
             required: tuple[str, ...] = ()) -> Schema:
    """An object with exactly ``fields`` (in the recipe's order) and nothing else."""
    out: Schema = {"type": "object", "additionalProperties": False,
                   "description": description, "properties": {f: properties[f] for f in fields}}
    if required:
        out["required"] = list(required)
    return out


def recipe_schema() -> Schema:
    """The JSON Schema of a recipe (every field documented in docs/mksbatch.md)."""
    owned = sorted({k for k in (*SBATCH_OWNED, *SBATCH_REFUSED) if len(k) > 1})
    container = _section(CONTAINER_FIELDS, {
        "image": _text("--container-image: a squashfs path or [USER@][REGISTRY#]IMAGE[:TAG]"),
        "mounts": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                   "description": "--container-mounts, one SRC[:DST[:FLAGS]] per item"},
        "workdir": _text("--container-workdir"),
        "name": _text("--container-name=NAME[:auto|create|exec|no_exec]"),
        "save": _text("--container-save: export the container to this squashfs file"),
        "mount_home": _bool("--container-mount-home / --no-container-mount-home"),
        "remap_root": _bool("--container-remap-root / --no-container-remap-root"),
        "entrypoint": _bool("--container-entrypoint / --no-container-entrypoint"),
        "entrypoint_log": _bool("--container-entrypoint-log"),
        "writable": _bool("--container-writable / --container-readonly"),
        "reuse": _bool("--container-reuse / --no-container-reuse (later steps of the job "
                       "reuse the node's container, each with a fresh root)"),
        "unshare": {"type": "array", "minItems": 1, "uniqueItems": True,
                    "items": {"enum": ["net", "ipc", "uts"]},
                    "description": "--container-unshare: new namespaces for the container"},
        "efa": _enum("--container-efa (quote \"off\")", EFA_MODES),
        "nccl_debug": _enum("--container-nccl-debug", ("VERSION", "WARN", "INFO", "TRACE")),
        "log": _enum("--container-log", ("quiet", "verbose")),
        "prestart": _bool("--container-prestart on sbatch: the job prolog starts the "
                          "container on every node at allocation and the first srun joins "
                          "it (the site's slurm.conf: PrologFlags=Alloc)"),
        "env": _names("--container-env: host variables that win over the image's values "
                      "(the environment's names are added)"),
    }, "the container every task runs in (srun's --container-* flags)", ("image",))
    checkpoint = _section(CHECKPOINT_FIELDS, {
        "dir": _text("where the program writes its checkpoints (absolute, shared storage)",
                     pattern="^/"),
        "pattern": _text("file-name glob of the checkpoints, e.g. step_*",
                         pattern=r"^[A-Za-z0-9._*?+\[\]-]+$"),
        "complete_marker": _text("file the program writes in a checkpoint once complete",
                                 pattern="^[A-Za-z0-9._+-]+$"),
        "newest_by": _enum("numeric (default): numbers in names compare as numbers; name: "
                           "byte order; mtime: last modified", NEWEST_BY),
        "resume": _words("words appended when resuming; {checkpoint} is the path"),
    }, "resume from the newest complete checkpoint", ("dir", "complete_marker", "resume"))
    properties: Schema = {
        "name": _text("job name", pattern="^[A-Za-z0-9][A-Za-z0-9._-]*$"),
        "target": _enum("hyperpod adds srun --auto-resume=1", TARGETS),
        "nodes": _int("nodes", "nodes, all or nothing (--nodes=N-N)"),
        "tasks_per_node": _int("tasks_per_node", "ranks per node (torchrun: workers per node)"),
        "gpus_per_node": _int("gpus_per_node", "--gpus-per-node"),
        "cpus_per_task": _int("cpus_per_task", "--cpus-per-task"),
        "partition": {**_WORD, "description": "--partition"},
        "account": {**_WORD, "description": "--account"},
        "qos": {**_WORD, "description": "--qos"},
        "time": _text("time limit: MINUTES, HH:MM:SS or D-HH:MM:SS (kept as written)"),
        "exclusive": _bool("--exclusive"),
        "log_dir": {**_WORD, "description": "absolute directory of the job's log"},
        "environment": {"type": "object", "description": "variables exported to the program",
                        "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                        "additionalProperties": {"type": ["string", "number", "null"]}},
        "container": container,
        "launcher": _enum("how the command is started", LAUNCHERS),
        "command": _words("the program and its arguments"),
        "torchrun": _section(TORCHRUN_FIELDS, {
            "port_base": _int("torchrun.port_base",
                              "rendezvous port = port_base + job id % 1000"),
        }, "torchrun settings"),
        "mpi": _enum("srun --mpi (launcher srun)", SRUN_MPI),
        "checkpoint": checkpoint,
        "requeue": _section(REQUEUE_FIELDS, {
            "max_restarts": _int("requeue.max_restarts",
                                 "runs beyond this restart count exit 3"),
        }, "requeue settings"),
        "signal": _section(SIGNAL_FIELDS, {
            "name": _enum("signal Slurm sends the batch shell before the limit",
                          BATCH_SIGNALS),
            "forward": _enum("signal sent to the program", FORWARD_SIGNALS),
            "lead_seconds": _int("signal.lead_seconds", "seconds before the time limit"),
        }, "the time-limit signal"),
        "spares": _int("spares", "hot spare nodes allocated beside nodes, kept ready for "
                       "in-job failover"),
        "failover": _section(FAILOVER_FIELDS, {
            "detect_seconds": _int("failover.detect_seconds",
                                   "a node silent this long is lost"),
            "hang_seconds": _int("failover.hang_seconds",
                                 "no progress this long is a hang (0: not watched)"),
            "max_restarts": _int("failover.max_restarts",
                                 "in-job relaunches before the job is requeued"),
            "elastic": _bool("no spare left: go on with fewer nodes (torchrun, ft_launcher)"),
            "min_nodes": _int("failover.min_nodes", "elastic: the fewest nodes to go on with"),
        }, "in-job failover on hot spares (docs/failover.md)"),
        "sbatch": {"type": "object", "description": "extra #SBATCH long options (true: an "
                   "option without a value; false: left out)",
                   "propertyNames": {"pattern": "^[a-z][a-z0-9]*(-[a-z0-9]+)*$",
                                     "not": {"enum": owned}},
                   "additionalProperties": {"oneOf": [
                       {"type": "boolean"},
                       {"type": ["string", "number"],
                        "pattern": "^[!$-&(-\\[\\]-~]+$"}]}},
        "srun": {"type": "array", "minItems": 1, "description": "extra srun options, each "
                 "with its value (--cpu-bind=cores)", "items": {"type": "string",
                                                                "pattern": "^-"}},
        "setup": {"description": "shell lines run as written in the batch shell before the "
                  "launch (your own code)", "oneOf": [
                      {"type": "string", "minLength": 1},
                      {"type": "array", "items": _TEXT, "minItems": 1}]},
    }
    schema = _section(TOP_FIELDS, properties, "an mksbatch recipe: one training job",
                      ("name", "nodes", "launcher", "command", "log_dir"))
    return {"$schema": "http://json-schema.org/draft-07/schema#",
            "title": "mksbatch recipe", **schema}
