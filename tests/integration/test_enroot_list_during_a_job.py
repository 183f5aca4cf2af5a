"""What users and site epilogs see with `enroot list -f` while a job runs (issue 22).

Enroot lists, per mount namespace, its lowest PID whose root holds Enroot's /.lock. The
tasks of a kept container run in layers of their own and must be listed; the kept
container's own stopped first process (`sh -c 'kill -STOP $$; exit 0'`, squall's holder)
must not. A named container is listed under its name, as with Pyxis.
"""

from __future__ import annotations

import time

from .cluster import Cluster
from .pyxis_helpers import ENROOT, NODE, running_step


def listing(cluster: Cluster) -> str:
    return cluster.run(f"{ENROOT} list -f", node=NODE).out


def test_a_kept_container_shows_its_tasks_and_nothing_of_squall(cluster: Cluster,
                                                                image: str) -> None:
    # $$: the task's shell, which then becomes running_step's "sleep 300" (same PID)
    with running_step(cluster, f"--container-image={image}", "echo $$") as (_, task):
        out = listing(cluster)
        rows = [line.split() for line in out.splitlines()]
        assert any(row[1:2] == [task] and row[-2:] == ["sleep", "300"] for row in rows), out
        assert "kill -STOP" not in out, out
        assert "squall" not in out, out


def test_a_named_container_is_listed_under_its_name_by_its_task(cluster: Cluster,
                                                                 image: str) -> None:
    """As with Pyxis: the name, then the task's PID and command, nothing of squall's (its
    stopped first shell, state T, was listed here until issue 30)."""
    name = f"l{time.time_ns()}"
    with running_step(cluster, f"--container-image={image} --container-name={name}",
                      "echo $$", name=name) as (_, task):
        out = listing(cluster)
        rows = [line.split() for line in out.splitlines()]
        mine = [row for row in rows if row and row[0] == f"pyxis_{name}"]
        assert mine and mine[0][1] == task and mine[0][-2:] == ["sleep", "300"], out
        assert "kill -STOP" not in out and "squall" not in out, out


def test_a_step_joining_a_named_container_shares_its_tasks_namespace(cluster: Cluster,
                                                                     image: str) -> None:
    """`--container-name=NAME` joins the running instance: its tasks, the listed one among
    them, see the same mount namespace, and start in the container's working directory."""
    name = f"j{time.time_ns()}"
    with running_step(cluster, f"--container-image={image} --container-name={name}",
                      "readlink /proc/self/ns/mnt", name=name) as (jobid, task_ns):
        joined = cluster.run(f"srun --jobid={jobid} -N1 -w {NODE} --overlap "
                             f"--container-name={name} bash -c 'readlink /proc/self/ns/mnt; pwd'")
        assert joined.out.split()[-2:] == [task_ns, "/work"], joined


def test_enroot_exec_into_a_running_named_container(cluster: Cluster, image: str) -> None:
    """What a Pyxis user does: find the container's PID with `enroot list -f`, then
    `enroot exec PID CMD` into it (Enroot's own exec)."""
    name = f"x{time.time_ns()}"
    with running_step(cluster, f"--container-image={image} --container-name={name}",
                      "readlink /proc/self/ns/mnt", name=name) as (_, task_ns):
        rows = [line.split() for line in listing(cluster).splitlines()]
        pid = next(row[1] for row in rows if row and row[0] == f"pyxis_{name}")
        res = cluster.run(f"{ENROOT} exec {pid} sh -c 'readlink /proc/self/ns/mnt; "
                          "grep ^ID= /etc/os-release'", node=NODE)
        assert res.out.split() == [task_ns, "ID=squalltest"], res
