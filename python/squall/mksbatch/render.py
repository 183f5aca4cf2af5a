"""Render a validated Recipe into a bash sbatch script.

The bash lives in ``templates/sbatch.sh.tmpl``; this module picks its sections and fills
in the recipe's values. Every recipe value reaches the script inside single quotes
(``q``), or, on ``#SBATCH`` lines, only after validation restricted it to characters with
no meaning to bash or sbatch. The script is plain bash that passes ``bash -n`` and
``shellcheck``.
"""

from __future__ import annotations

from collections.abc import Sequence

from squall.errors import SquallError
from squall.failover.spec import TORCHRUN_LIKE, CheckpointSpec, Spec, torchrun_script_options
from squall.mksbatch.container import container_flags, prestart_flags
from squall.mksbatch.recipe import PLACEHOLDER, Recipe
from squall.mksbatch.template import Template, load_template


def q(value: str) -> str:
    """Single-quote ``value`` for bash: nothing inside is expanded or executed.

    Always quoted, even when nothing needs it, so every recipe value is visibly inert. The
    quoting is the C core's (fuzzed, and the one the plugin writes enroot's config with).
    """
    try:
        from squall import core
    except ImportError as exc:
        raise SquallError(f"cannot render the sbatch script: the squall C core is not built "
                          f"({exc}): run `make core`") from None
    return core.shell_quote(value)


def _printable(text: str) -> str:
    """A path for a comment line: control characters (a newline included) become '?'."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def _array(words: Sequence[str]) -> str:
    return "(" + " ".join(q(w) for w in words) + ")"


def _resume_word(word: str) -> str:
    """A resume template word with each {checkpoint} replaced by the runtime variable."""
    parts = word.split(PLACEHOLDER)
    return '"${checkpoint}"'.join(q(p) if p else "" for p in parts) or "''"


def _sbatch_options(r: Recipe) -> list[str]:
    tasks = 1 if r.launcher in TORCHRUN_LIKE else r.tasks_per_node
    nodes = r.nodes + r.spares
    options = [
        f"--job-name={r.name}",
        f"--nodes={nodes}-{nodes}",
        f"--ntasks-per-node={tasks}",
    ]
    if r.cpus_per_task is not None:
        options.append(f"--cpus-per-task={r.cpus_per_task}")
    if r.gpus_per_node:
        options.append(f"--gpus-per-node={r.gpus_per_node}")
    for option, value in (("partition", r.partition), ("account", r.account),
                          ("qos", r.qos), ("time", r.time)):
        if value is not None:
            options.append(f"--{option}={value}")
    if r.exclusive:
        options.append("--exclusive")
    options += [
        "--wait-all-nodes=1",
        "--requeue",
        *(["--no-kill"] if r.failover is not None else []),  # a lost node is ours to handle
        "--open-mode=append",
        f"--signal=B:{r.signal}@{r.signal_lead}",
        f"--output={r.log_dir}/%x-%j.out",
    ]
    if r.container is not None:
        env_names = tuple(name for name, _ in r.environment)
        options += [f"--{flag}" if value is None else f"--{flag}={value}"
                    for flag, value in prestart_flags(r.container, env_names)]
    options += [f"--{name}" if value is None else f"--{name}={value}"
                for name, value in r.sbatch]
    return options


def _container_args(r: Recipe) -> list[str]:
    if r.container is None:
        return []
    env_names = tuple(name for name, _ in r.environment)
    return [f"--{flag}" if value is None else f"--{flag}={value}"
            for flag, value in container_flags(r.container, env_names)]


def _srun_args(r: Recipe) -> list[str]:
    args = ["--kill-on-bad-exit=1"]
    if r.launcher in TORCHRUN_LIKE:
        args.insert(0, "--ntasks-per-node=1")
    if r.mpi is not None:
        args.append(f"--mpi={r.mpi}")
    if r.target == "hyperpod":
        args.append("--auto-resume=1")
    return args + list(r.srun)


def _launcher_values(t: Template, r: Recipe) -> list[str]:
    if r.launcher == "mpirun" or r.failover is not None:  # failover: in its spec
        return t.fill("values-mpirun")
    lines = t.fill("values-srun", {"srun_args": _array(_srun_args(r)),
                                   "container_args": _array(_container_args(r))})
    if r.launcher in TORCHRUN_LIKE:
        lines += t.fill("values-torchrun", {"rdzv_port_base": str(r.rdzv_port_base),
                                            "nproc_per_node": str(r.tasks_per_node)})
    return lines


def _resume(t: Template, r: Recipe) -> list[str]:
    ck = r.checkpoint
    if ck is None:
        return t.fill("no-resume")
    numeric = ck.newest_by == "numeric"
    newest = t.fill("newest-checkpoint", {"locals": ' best_key="" key' if numeric else ""}, {
        "helpers": t.fill("numeric-key") if numeric else [],
        "pick": t.fill(f"pick-{ck.newest_by}")})
    words = " ".join(_resume_word(w) for w in ck.resume)
    return newest + t.fill("resume", {"resume_words": words})


def _failover_spec(r: Recipe) -> str:
    """The JSON the supervisor (``squall failover``) reads: squall/failover/spec.py."""
    assert r.failover is not None
    ck = r.checkpoint
    spec = Spec(
        nodes=r.nodes, spares=r.spares, launcher=r.launcher, command=r.command,
        srun_args=tuple(_srun_args(r)) if r.launcher != "mpirun" else (),
        container_args=tuple(_container_args(r)), nproc_per_node=r.tasks_per_node,
        tasks_per_node=r.tasks_per_node, port_base=r.rdzv_port_base,
        detect_seconds=float(r.failover.detect_seconds),
        hang_seconds=float(r.failover.hang_seconds),
        max_restarts=r.failover.max_restarts,
        elastic=r.failover.elastic, min_nodes=r.failover.min_nodes,
        heartbeat_dir=f"{r.log_dir}/.squall-failover-%JOB%",
        checkpoint=None if ck is None else CheckpointSpec(
            dir=ck.dir, pattern=ck.pattern, marker=ck.complete_marker,
            newest_by=ck.newest_by, resume=ck.resume))
    return spec.to_json()


def _launch(t: Template, r: Recipe) -> list[str]:
    if r.failover is not None:
        return t.fill("launch-failover", {"failover_spec": q(_failover_spec(r))})
    if r.launcher == "srun":
        return t.fill("launch-srun", {"port_base": str(r.rdzv_port_base)})
    if r.launcher in TORCHRUN_LIKE:
        return t.fill("launch-torchrun", {
            "launcher": r.launcher,
            "script_options": "".join(f" {o}" for o in torchrun_script_options(r.command))})
    return []


def render(recipe: Recipe) -> str:
    """The complete sbatch script for ``recipe``."""
    r = recipe
    t = load_template()
    ck = r.checkpoint
    values = {
        "recipe_path": _printable(r.path),
        "recipe_sha256": r.sha256,
        "max_restarts": str(r.max_restarts),
        "batch_signal": r.signal,
        "forward_signal": r.forward_signal,
        "command": _array(r.command),
    }
    blocks = {
        "override_lines": [line for o in r.overrides
                           for line in t.fill("override", {"override": _printable(o.written)})],
        "sbatch_lines": [line for option in _sbatch_options(r)
                         for line in t.fill("sbatch-line", {"option": option})],
        "launcher_values": _launcher_values(t, r),
        "checkpoint_values": [] if ck is None else t.fill("values-checkpoint", {
            "checkpoint_dir": q(ck.dir), "checkpoint_pattern": q(ck.pattern),
            "checkpoint_marker": q(ck.complete_marker)}),
        "exports": [line for name, value in r.environment
                    for line in t.fill("export", {"name": name, "value": q(value)})],
        "setup": t.fill("setup", blocks={
            "lines": [line for text in r.setup for line in text.removesuffix("\n").split("\n")]})
        if r.setup else [],
        "resume": _resume(t, r),
        "launch": _launch(t, r),
    }
    return "\n".join(t.fill("script", values, blocks)) + "\n"
