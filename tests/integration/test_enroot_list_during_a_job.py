"""What users and site epilogs see with `enroot list -f` while a job runs (issue 22).

Enroot lists, per mount namespace, its lowest PID whose root holds Enroot's /.lock. The
tasks of a kept container run in layers of their own and must be listed; the kept
container's own stopped first process (`sh -c 'kill -STOP $$; exit 0'`, squall's holder)
must not. A named container is listed under its name, as with Pyxis.
"""

from __future__ import annotations

import time

from .cluster import Cluster
from .pyxis_helpers import ENROOT, HOME, NODE, allocate, background_step, end_job, wait_for


def listing(cluster: Cluster) -> str:
    return cluster.run(f"{ENROOT} list -f", node=NODE).out


def test_a_kept_container_shows_its_tasks_and_nothing_of_squall(cluster: Cluster,
                                                                image: str) -> None:
    tag = f"{time.time_ns()}"
    ready = f"{HOME}/list-{tag}.ready"
    jobid = allocate(cluster)
    try:
        background_step(cluster, jobid, f"--container-image={image} --container-mounts={HOME}",
                        f"touch {ready}.tmp && echo up > {ready}.tmp && mv {ready}.tmp {ready} "
                        f"&& exec sleep 3{tag[-3:]}")
        wait_for(cluster, ready)
        out = listing(cluster)
        assert f"sleep 3{tag[-3:]}" in out, out
        assert "kill -STOP" not in out, out
        assert "squall" not in out, out
    finally:
        end_job(cluster, jobid)


def test_a_named_container_is_listed_under_its_name(cluster: Cluster, image: str) -> None:
    name = f"l{time.time_ns()}"
    ready = f"{HOME}/list-{name}.ready"
    jobid = allocate(cluster)
    try:
        background_step(cluster, jobid, f"--container-image={image} --container-name={name} "
                                        f"--container-mounts={HOME}",
                        f"echo up > {ready}.tmp && mv {ready}.tmp {ready} && exec sleep 300")
        wait_for(cluster, ready)
        rows = [line.split() for line in listing(cluster).splitlines()]
        mine = [row for row in rows if row and row[0] == f"pyxis_{name}"]
        assert mine and any(word.isdigit() for word in mine[0][1:3]), rows
    finally:
        end_job(cluster, jobid)
        cluster.run(f"{ENROOT} remove -f pyxis_{name}", node=NODE, check=False)


def test_enroot_exec_into_a_running_named_container(cluster: Cluster, image: str) -> None:
    """What a Pyxis user does: find the container's PID with `enroot list -f`, then
    `enroot exec PID CMD` into it (the test runtime's exec, as Enroot's)."""
    name = f"x{time.time_ns()}"
    ready = f"{HOME}/exec-{name}.ready"
    jobid = allocate(cluster)
    try:
        background_step(cluster, jobid, f"--container-image={image} --container-name={name} "
                                        f"--container-mounts={HOME}",
                        f"readlink /proc/self/ns/mnt > {ready}.tmp && "
                        f"mv {ready}.tmp {ready} && exec sleep 300")
        task_ns = wait_for(cluster, ready).strip()
        rows = [line.split() for line in listing(cluster).splitlines()]
        pid = next(row[1] for row in rows if row and row[0] == f"pyxis_{name}")
        res = cluster.run(f"{ENROOT} exec {pid} sh -c 'readlink /proc/self/ns/mnt; "
                          "grep ^ID= /etc/os-release'", node=NODE)
        assert res.out.split() == [task_ns, "ID=squalltest"], res
    finally:
        end_job(cluster, jobid)
        cluster.run(f"{ENROOT} remove -f pyxis_{name}", node=NODE, check=False)
