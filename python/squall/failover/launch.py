"""The command lines and environment of an attempt, from the spec and the node set.

Slurm's own rank order is kept: the step runs with ``--distribution=block`` on its nodes,
which Slurm orders by its node table (the order of the job's node list), whatever order
``--nodelist`` names them in. So rank 0 is on the first node of that order, and everything
else that says where rank 0 is, is set to that node too: ``MASTER_ADDR``, torchrun's
``--rdzv-endpoint``, mpirun's first ``--host``, and ``SLURM_NODELIST`` (which a step
otherwise inherits as the whole job's list, spares and lost nodes included). So
``SLURM_PROCID``/``SLURM_NODEID`` 0, the first host of ``SLURM_STEP_NODELIST`` and of
``SLURM_NODELIST``, and ``MASTER_ADDR`` agree, as in a job without squall.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from squall.failover.spec import TORCHRUN_LIKE, Spec, torchrun_script_options


def slurm_order(nodes: Sequence[str], allocation: Sequence[str]) -> list[str]:
    """``nodes`` in the order Slurm places ranks on them: the job's node table order."""
    index = {n: i for i, n in enumerate(allocation)}
    return sorted(nodes, key=lambda n: (index.get(n, len(index)), n))


def port(spec: Spec, job: str, attempt: int) -> int:
    """Rank 0's port: per job, and a new one each attempt (the last attempt's may still be
    in TIME_WAIT on rank 0's node)."""
    return spec.port_base + (int(job) % 100) * 10 + attempt % 10


def per_node(spec: Spec) -> int:
    return 1 if spec.launcher in TORCHRUN_LIKE else spec.tasks_per_node


def main_argv(spec: Spec, job: str, attempt: int, nodes: Sequence[str], nodelist: str,
              resume: str | None) -> list[str]:
    """The attempt's command line; ``nodes`` in Slurm's order (rank 0's first),
    ``nodelist`` the same compressed (``node[1-2]``)."""
    words = list(spec.command)
    if resume is not None and spec.checkpoint is not None:
        words += [w.replace("{checkpoint}", resume) for w in spec.checkpoint.resume]
    # slurmstepd sets SLURM_NODELIST to the job's list (spares and lost nodes too), over
    # any value srun's environment has: the step's own list is set in the task itself
    in_task = ["env", f"SLURM_NODELIST={nodelist}"]
    if spec.launcher == "mpirun":
        # mpirun starts its daemons with srun itself (Open MPI's plm/slurm); ranks are
        # placed in --host order
        return ["mpirun", "--host", ",".join(f"{n}:{spec.tasks_per_node}" for n in nodes),
                *in_task, *words]
    argv = ["srun", "--overlap", f"--job-name=squall-main-{attempt}", f"--nodes={len(nodes)}",
            f"--ntasks={len(nodes) * per_node(spec)}", f"--ntasks-per-node={per_node(spec)}",
            f"--nodelist={','.join(nodes)}", "--distribution=block",
            *spec.srun_args, *spec.container_args, *in_task]
    if spec.launcher in TORCHRUN_LIKE:
        argv += [spec.launcher, f"--nnodes={len(nodes)}",
                 f"--nproc-per-node={spec.nproc_per_node}", "--rdzv-backend=c10d",
                 f"--rdzv-endpoint={nodes[0]}:{port(spec, job, attempt)}",
                 f"--rdzv-id=squall-{job}-{attempt}", *torchrun_script_options(spec.command)]
    return argv + words


def step_env(base: Mapping[str, str], spec: Spec, job: str, attempt: int,
             nodes: Sequence[str], directory: Path) -> dict[str, str]:
    """The environment of the attempt's launcher (``nodes`` in Slurm's order)."""
    env = dict(base, MASTER_ADDR=nodes[0], MASTER_PORT=str(port(spec, job, attempt)),
               SQUALL_PROGRESS_FILE=str(directory / "progress.{rank}"),
               SQUALL_PEER_LOST_FILE=str(peer_lost_file(directory, attempt)),
               SQUALL_FAILOVER_ATTEMPT=str(attempt))
    env.pop("SLURM_HOSTFILE", None)
    env.pop("SLURM_DISTRIBUTION", None)
    if spec.launcher == "mpirun":
        env["SLURM_OVERLAP"] = "1"  # mpirun's own srun beside the heartbeat steps
    return env


def step_names(spec: Spec, attempt: int) -> tuple[str, ...]:
    """The name prefixes of the attempt's steps: the launcher's, and under mpirun the
    daemons' step (srun ignores SLURM_JOB_NAME inside an allocation; Open MPI 5 names it
    after prted, 4 after orted)."""
    own = f"squall-main-{attempt}"
    return (own, "prted", "orted") if spec.launcher == "mpirun" else (own,)


def peer_lost_file(directory: Path, attempt: int) -> Path:
    """Where a rank that lost a peer appends a line: one file per attempt, so a late
    report of the last attempt is never read as this one's."""
    return directory / f"peer-lost.{attempt}"


def warm_argv(spares: Sequence[str], container_args: Sequence[str]) -> list[str]:
    """A container step on the spares that does nothing: the shell's ``exit 0``. Not
    ``true``, a program that a small image may lack (the demo's has none: "execve(): true:
    No such file or directory" in every failover log), and not ``sh -c :``, whose ``:``
    srun reads as its separator of heterogeneous job components, leaving the second
    without a command ("srun: fatal: No command given to execute.")."""
    return ["srun", "--overlap", "--job-name=squall-warm-spares", f"--nodes={len(spares)}",
            f"--ntasks={len(spares)}", "--ntasks-per-node=1", f"--nodelist={','.join(spares)}",
            "--quiet", *container_args, "sh", "-c", "exit 0"]
