"""Failover that every training program survives (issue 28, docs/failover.md).

Programs find rank 0 in many ways. Each test runs the coupled all-reduce program
(sbatch/demo/allreduce.py, every step an all-reduce over TCP) behind
``programs/find_rank0.py``, which finds rank 0 the ways programs do (``MASTER_ADDR``, the
first host of ``SLURM_STEP_NODELIST`` or of ``SLURM_NODELIST``, the node with
``SLURM_NODEID`` 0: all four in one job, at every launch; Open MPI's rank under
``launcher: mpirun``) and fails at once when the rank that is 0 is not where a way says,
or when the ways disagree. Two active nodes and a spare: the batch host is the last
spare, so killing the second active node makes the new set {first active, batch host},
which Slurm orders with the batch host first: rank 0 moves, and every way of finding it
must move with it. Each job must train again in the same allocation and end with the
state of an uninterrupted run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .cluster import Cluster
from .failover_job import run_with_failure
from .mksbatch_site import DEMO_DIR, Site

pytestmark = pytest.mark.cluster
PROGRAMS = Path(__file__).resolve().parent / "programs"
STEPS = 60


def program(site: Site, mode: str, launcher: str = "srun") -> dict[str, object]:
    b = site.base
    site.cluster.put(f"{b}/find_rank0.py", (PROGRAMS / "find_rank0.py").read_bytes(),
                     mode=0o755)
    site.cluster.put(f"{b}/allreduce.py", (DEMO_DIR / "allreduce.py").read_bytes(),
                     mode=0o755)
    return {"launcher": launcher, "command": [
        "python3", f"{b}/find_rank0.py", mode, f"{b}/allreduce.py", f"--steps={STEPS}",
        "--checkpoint-every=10", "--sleep=0.3", "--step-timeout=600",
        f"--checkpoint-dir={b}/ckpt", f"--final={b}/final.json", f"--log={b}/steps.log"]}


def kill_second(cluster: Cluster):  # type: ignore[no-untyped-def]
    def strike(active: list[str], spares: list[str]) -> list[str]:
        cluster.kill_node(active[1])
        return [active[1]]
    return strike


def survives(cluster: Cluster, site: Site, tmp_path: Path, mode: str) -> None:
    log, back, _ = run_with_failure(cluster, site, tmp_path, STEPS, kill_second(cluster),
                                    **program(site, mode))
    assert "says rank 0 is on" not in log and "disagree where rank 0 is" not in log, log
    assert re.search(r"node node\d lost: reported by the step", log), log
    assert back < 15, (back, log)


def test_rank_0_every_way_programs_find_it(cluster: Cluster, site: Site,
                                           tmp_path: Path) -> None:
    """MASTER_ADDR, the first host of SLURM_STEP_NODELIST and of SLURM_NODELIST, the node
    with SLURM_NODEID 0: one failover checks them all (four jobs did, one way each, for
    the same kill and relaunch)."""
    survives(cluster, site, tmp_path, "all")


def test_mpirun_fails_over_end_to_end(cluster: Cluster, site: Site,
                                      tmp_path: Path) -> None:
    log, back, _ = run_with_failure(cluster, site, tmp_path, STEPS, kill_second(cluster),
                                    container=False, **program(site, "mpi", "mpirun"))
    assert "says rank 0 is on" not in log, log
    assert "attempt 1 on" in log, log
