"""What the generated sbatch script tells the supervisor (one JSON argument)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from squall.errors import UsageError

LAUNCHERS = ("srun", "torchrun", "ft_launcher", "mpirun")
# Launchers with torchrun's command line (NVIDIA's nvidia-resiliency-ext ft_launcher is one):
# one launcher per node, rendezvous on the first node, the recipe's torchrun section
# applies. The recipe (mksbatch) and the supervisor (failover) both go by this one.
TORCHRUN_LIKE = ("torchrun", "ft_launcher")


def torchrun_script_options(command: tuple[str, ...] | list[str]) -> list[str]:
    """torchrun runs its first word with Python (`torchrun train.py`), so a recipe's
    `python train.py` would run Python on a file named python. Where the command does
    not start with a .py script or an option of torchrun's own (`-m MODULE`,
    `--no-python`), it is run as written: --no-python."""
    first = command[0] if command else ""
    return [] if first.endswith(".py") or first.startswith("-") else ["--no-python"]


@dataclass(frozen=True)
class CheckpointSpec:
    dir: str
    pattern: str
    marker: str
    newest_by: str
    resume: tuple[str, ...]  # words, each "{checkpoint}" replaced by the path


@dataclass(frozen=True)
class Spec:
    nodes: int                    # nodes the step runs on
    spares: int                   # extra nodes kept ready
    launcher: str                 # srun, torchrun or mpirun
    command: tuple[str, ...]
    srun_args: tuple[str, ...] = ()
    container_args: tuple[str, ...] = ()
    nproc_per_node: int = 1
    port_base: int = 29500
    detect_seconds: float = 10.0  # a node silent this long is dead
    hang_seconds: float = 0.0     # no progress this long: hung (0: not watched)
    max_restarts: int = 3         # in-job relaunches, spares or not
    heartbeat_dir: str = ""
    checkpoint: CheckpointSpec | None = None
    tasks_per_node: int = 1
    elastic: bool = False         # no spare left: go on with fewer nodes, down to min_nodes
    min_nodes: int = 1

    @classmethod
    def from_json(cls, text: str) -> Spec:
        try:
            data: dict[str, Any] = json.loads(text)
            ck = data.pop("checkpoint", None)
            spec = cls(**_tuples(data), checkpoint=None if ck is None else
                       CheckpointSpec(**_tuples(ck)))
        except (ValueError, TypeError, AttributeError) as exc:
            raise UsageError(f"failover spec is not what mksbatch writes ({exc}): "
                             "regenerate the script with mksbatch") from None
        if spec.launcher not in LAUNCHERS or spec.nodes < 1 or spec.spares < 0:
            raise UsageError("failover spec has a bad launcher or node count: regenerate "
                             "the script with mksbatch")
        return spec

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def _tuples(data: dict[str, Any]) -> dict[str, Any]:
    """JSON lists back to the tuples the frozen dataclasses hold."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
