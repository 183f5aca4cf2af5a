"""Pyxis 0.24 conformance: --container-name (issue 10, items 4 and 5).

Pyxis's Enroot containers are named pyxis_NAME (container_scope=global, the default) and
pyxis_JOBID_NAME (container_scope=job); sites and users run `enroot list/remove/export`
on those names. A named container found with another --container-image is reused as it is
(squall says so in one warning line; container_name_strict=1 refuses instead).
`--container-name=JOBID.STEPID` (with --overlap) joins the running container of an
unnamed step.
"""

from __future__ import annotations

import time

from .cluster import Cluster
from .images import IMAGE_DIR, build_image
from .pyxis_helpers import (
    ENROOT,
    HOME,
    NODE,
    allocate,
    background_step,
    current_args,
    end_job,
    error_lines,
    last_line,
    plugstack_args,
    srun,
    wait_for,
    warning_lines,
)


def enroot_list(cluster: Cluster, node: str = NODE) -> list[str]:
    return cluster.run(f"{ENROOT} list", node=node).out.split()


def remove(cluster: Cluster, *names: str, node: str = NODE) -> None:
    cluster.run(f"{ENROOT} remove -f {' '.join(names)} 2>/dev/null || true", node=node)


def test_pyxis_container_name_global_scope_is_pyxis_name(cluster: Cluster, image: str) -> None:
    name = f"g{time.time_ns()}"
    try:
        srun(cluster, f"--container-image={image} --container-name={name}", "true")
        assert f"pyxis_{name}" in enroot_list(cluster), enroot_list(cluster)
        # The user's own `enroot` commands work on it, as with Pyxis.
        out = cluster.run(f"{ENROOT} export -o {HOME}/exported-{name}.sqsh pyxis_{name}",
                          node=NODE)
        assert out.rc == 0, out
    finally:
        remove(cluster, f"pyxis_{name}")
        cluster.run(f"rm -f {HOME}/exported-{name}.sqsh")


def test_pyxis_container_name_persists_across_jobs(cluster: Cluster, image: str) -> None:
    name = f"p{time.time_ns()}"
    try:
        srun(cluster, f"--container-image={image} --container-name={name} --container-writable",
             "echo kept > /etc/marker")
        res = srun(cluster, f"--container-name={name}", "cat /etc/marker")
        assert last_line(res) == "kept", res
        # Removed by hand with enroot, as a Pyxis user does: the name is free again.
        remove(cluster, f"pyxis_{name}")
        gone = srun(cluster, f"--container-name={name}", "true", check=False)
        assert gone.rc != 0 and error_lines(gone), gone
    finally:
        remove(cluster, f"pyxis_{name}")


def test_records_of_containers_removed_with_enroot_are_dropped(cluster: Cluster,
                                                               image: str) -> None:
    """squall keeps the image a named container was made from beside it; once the user's
    `enroot remove` takes the container away, the next named step drops that record."""
    gone, other = f"r{time.time_ns()}", f"o{time.time_ns()}"
    record = f"/run/squall/1000/image-pyxis_{gone}"
    try:
        srun(cluster, f"--container-image={image} --container-name={gone}", "true")
        assert cluster.run(f"test -f {record}", node=NODE, check=False).rc == 0
        remove(cluster, f"pyxis_{gone}")
        time.sleep(1.1)   # records written in the second of a listing are kept (a racer's)
        srun(cluster, f"--container-image={image} --container-name={other}", "true")
        assert cluster.run(f"test -e {record}", node=NODE, check=False).rc != 0, \
            "the record of a removed container is still there"
        # The record of a container that still exists stays.
        assert cluster.run(f"test -f /run/squall/1000/image-pyxis_{other}", node=NODE,
                           check=False).rc == 0
    finally:
        remove(cluster, f"pyxis_{gone}", f"pyxis_{other}")


def test_pyxis_container_name_job_scope_is_pyxis_jobid_name(cluster: Cluster,
                                                            image: str) -> None:
    name = f"j{time.time_ns()}"
    args = current_args(cluster)
    with plugstack_args(cluster, f"{args} container_scope=job"):
        jobid = allocate(cluster)
        try:
            cluster.run(f"srun --jobid={jobid} -N1 --container-image={image} "
                        f"--container-name={name} true")
            assert f"pyxis_{jobid}_{name}" in enroot_list(cluster), enroot_list(cluster)
        finally:
            end_job(cluster, jobid)
        listed: list[str] = []
        for _ in range(40):  # the job epilog removes the job's containers
            listed = enroot_list(cluster)
            if f"pyxis_{jobid}_{name}" not in listed:
                break
            time.sleep(0.5)
        assert f"pyxis_{jobid}_{name}" not in listed, listed


def test_pyxis_container_name_other_image_is_reused_with_a_warning(cluster: Cluster,
                                                                  image: str) -> None:
    name = f"r{time.time_ns()}"
    other = build_image(cluster, f"{IMAGE_DIR}/name-other.sqsh", "name-other")
    try:
        srun(cluster, f"--container-image={image} --container-name={name} --container-writable",
             "echo first > /etc/marker")
        res = srun(cluster, f"--container-image={other} --container-name={name}",
                   "cat /etc/marker; grep ^ID= /etc/os-release")
        assert res.out.splitlines()[-2:] == ["first", "ID=squalltest"], res
        warned = warning_lines(res)
        assert len(warned) == 1 and image in warned[0] and other in warned[0], res.err
    finally:
        remove(cluster, f"pyxis_{name}")


def test_pyxis_plugstack_container_name_strict_refuses_another_image(cluster: Cluster,
                                                                     image: str) -> None:
    name = f"s{time.time_ns()}"
    other = build_image(cluster, f"{IMAGE_DIR}/name-other.sqsh", "name-other")
    args = current_args(cluster)
    try:
        with plugstack_args(cluster, f"{args} container_name_strict=1"):
            srun(cluster, f"--container-image={image} --container-name={name}", "true")
            res = srun(cluster, f"--container-image={other} --container-name={name}", "true",
                       check=False)
            assert res.rc != 0, res
            assert any(image in line and other in line for line in error_lines(res)), res
            same = srun(cluster, f"--container-image={image} --container-name={name}", "true")
            assert same.rc == 0, same
    finally:
        remove(cluster, f"pyxis_{name}")


def test_pyxis_container_name_create_flag(cluster: Cluster, image: str) -> None:
    name = f"c{time.time_ns()}"
    try:
        srun(cluster, f"--container-image={image} --container-name={name}:create", "true")
        again = srun(cluster, f"--container-image={image} --container-name={name}:create", "true",
                     check=False)
        assert again.rc != 0 and error_lines(again), again
    finally:
        remove(cluster, f"pyxis_{name}")


def test_pyxis_container_name_without_image_and_no_container_fails(cluster: Cluster) -> None:
    res = srun(cluster, f"--container-name=none{time.time_ns()}", "true", check=False)
    assert res.rc != 0 and error_lines(res), res


def test_pyxis_container_name_exec_and_no_exec_on_a_running_container(cluster: Cluster,
                                                                       image: str) -> None:
    name = f"e{time.time_ns()}"
    ready = f"{HOME}/exec-{name}.ready"
    jobid = allocate(cluster)
    try:
        background_step(cluster, jobid, f"--container-image={image} --container-name={name} "
                                        f"--container-mounts={HOME}:{HOME}",
                        f"readlink /proc/self/ns/mnt > {ready}.tmp && mv {ready}.tmp {ready} "
                        "&& exec sleep 300")
        held = wait_for(cluster, ready).strip()
        joined = cluster.run(f"srun --jobid={jobid} -N1 --overlap --container-name={name}:exec "
                             "readlink /proc/self/ns/mnt")
        assert last_line(joined) == held, joined
        own = cluster.run(f"srun --jobid={jobid} -N1 --overlap --container-name={name}:no_exec "
                          "readlink /proc/self/ns/mnt")
        assert last_line(own) != held, own
    finally:
        end_job(cluster, jobid)
        remove(cluster, f"pyxis_{name}")


def test_pyxis_container_name_jobid_stepid_attaches_to_an_unnamed_step(cluster: Cluster,
                                                                      image: str) -> None:
    tag = time.time_ns()
    ready = f"{HOME}/attach-{tag}.ready"
    jobid = allocate(cluster)
    try:
        background_step(cluster, jobid, f"--container-image={image} --container-mounts={HOME}",
                        f"echo \"$SLURM_STEP_ID $(readlink /proc/self/ns/mnt)\" > {ready}.tmp && "
                        f"mv {ready}.tmp {ready} && exec sleep 300")
        step, held = wait_for(cluster, ready).split()
        res = cluster.run(f"srun --jobid={jobid} -N1 --overlap --container-name={jobid}.{step} "
                          "bash -c 'readlink /proc/self/ns/mnt; grep ^ID= /etc/os-release'")
        assert res.out.split()[-2:] == [held, "ID=squalltest"], res
        none = cluster.run(f"srun --jobid={jobid} -N1 --overlap --container-name={jobid}.999 true",
                           check=False)
        assert none.rc != 0 and error_lines(none), none
    finally:
        end_job(cluster, jobid)
