"""A container kept for the job: later steps reuse it, each with a fresh root (issue 12).

The first container step of a job on a node starts the runtime and keeps it for the job;
later steps with the same image and flags reuse its image mount and setup (the verbose log
says so and shows no runtime start), yet every unnamed step still sees a fresh writable
root and fresh tmpfs mounts, as with Pyxis: what one step writes, the next does not see,
nor does a step running at the same time. Nothing is left on a node after the job.
"""

from __future__ import annotations

import shlex
import time

from .cluster import Cluster
from .leftovers import leftovers, wait_clean
from .verbose_log import served

NODE = "node2"



def in_job(cluster: Cluster, steps: list[str], salloc: str = "", check: bool = True):
    """Run shell lines (srun steps) one after the other inside one allocation on NODE."""
    script = "\n".join(steps)
    return cluster.run(f"salloc -N1 -w {NODE} {salloc} -Q bash -c {shlex.quote(script)}",
                       check=check, timeout=300)


def test_later_steps_reuse_the_kept_container_with_a_fresh_root(cluster: Cluster,
                                                                image: str) -> None:
    step = (f"srun --container-image={image} --container-writable --container-log=verbose "
            "--container-mounts=tmpfs:/mnt/tmp bash -c "
            + shlex.quote("ls /etc/step-mark /mnt/tmp/mark 2>/dev/null | wc -l;"
                          " touch /etc/step-mark /mnt/tmp/mark; grep ^ID= /etc/os-release"))
    # The node's extracted copy of the image first (a kept container started from the file
    # extracts it, and the next one starts from the copy: test_plugin_localcache.py).
    in_job(cluster, [f"srun --container-image={image} sleep 5"])
    res = in_job(cluster, [step, step, step])
    ways = served(res.err)
    assert len(ways) == 3, res
    assert "started" in ways[0] and "kept for the job" in ways[0], ways
    assert all("reused" in w and "no runtime start" in w for w in ways[1:]), ways
    assert "start container" not in res.err.split("timings on", 2)[2], res.err
    # Each step: 0 marks found (fresh root and tmpfs), then the image's own files.
    assert res.out.split() == ["0", "ID=squalltest"] * 3, res
    assert wait_clean(cluster, node=NODE) == ""


def test_concurrent_steps_do_not_see_each_others_writes(cluster: Cluster, image: str) -> None:
    barrier = f"/fsx/home/squall/kept-barrier-{time.time_ns()}"
    cluster.run(f"mkdir -p {barrier}")
    body = (f"touch /etc/mine-$SLURM_STEP_ID; touch {barrier}/$SLURM_STEP_ID;"
            f" while [ $(ls {barrier} | wc -l) -lt 2 ]; do sleep 0.1; done;"
            " ls /etc | grep -c '^mine-'; readlink /proc/self/ns/mnt")
    step = (f"srun -n1 --exact --container-image={image} --container-writable "
            f"--container-mounts={barrier} bash -c {shlex.quote(body)}")
    res = in_job(cluster, [f"{step} & {step} & wait"], salloc="-n2")
    lines = res.out.split()
    assert lines.count("1") == 2, res            # each sees only its own file
    namespaces = [x for x in lines if x.startswith("mnt:")]
    assert len(set(namespaces)) == 2, res        # two layers
    assert wait_clean(cluster, node=NODE) == ""


def test_reuse_off_by_flag_starts_a_container_per_step(cluster: Cluster, image: str) -> None:
    step = f"srun --container-image={image} --no-container-reuse --container-log=verbose true"
    res = in_job(cluster, [step, step])
    ways = served(res.err)
    assert len(ways) == 2 and all("--no-container-reuse" in w for w in ways), res
    assert res.err.count("start container") == 2, res.err


def test_different_flags_get_their_own_kept_container(cluster: Cluster, image: str) -> None:
    a = f"srun --container-image={image} --container-log=verbose true"
    b = f"srun --container-image={image} --container-remap-root --container-log=verbose id -u"
    res = in_job(cluster, [a, b, a, b])
    ways = served(res.err)
    assert ["started" in w for w in ways] == [True, True, False, False], ways
    assert res.out.split() == ["0", "0"], res
    assert wait_clean(cluster, node=NODE) == ""


def test_steps_with_other_task_counts_share_the_kept_container(cluster: Cluster,
                                                               image: str) -> None:
    """srun -n 1, -n 4 and -n 8 in one job: one runtime start on the node, and each task
    sees its own step's task count (not the one the container started with)."""
    v = f"--container-image={image} --container-log=verbose"
    show = "bash -c 'echo $SLURM_NTASKS.$SLURM_STEP_NUM_TASKS'"
    res = in_job(cluster, [f"srun -n1 {v} {show}", f"srun -n4 -O {v} {show}",
                           f"srun -n8 -O {v} {show}", f"srun -n1 {v} {show}"])
    ways = served(res.err)
    assert len(ways) == 4, res
    assert ["started" in w for w in ways] == [True, False, False, False], ways
    assert res.err.count("start container") == 1, res.err
    assert sorted(res.out.split()) == sorted(["1.1"] + ["4.4"] * 4 + ["8.8"] * 8 + ["1.1"]), res
    assert wait_clean(cluster, node=NODE) == ""


def test_named_containers_keep_their_own_rules(cluster: Cluster, image: str) -> None:
    name = f"kn{time.time_ns() % 100000}"
    step = (f"srun --container-image={image} --container-name={name} --container-writable "
            "--container-log=verbose bash -c 'ls /etc/named-mark 2>/dev/null | wc -l; "
            "touch /etc/named-mark'")
    res = in_job(cluster, [step, step])
    assert res.out.split() == ["0", "1"], res    # a named container keeps what it wrote
    assert not any("kept" in w for w in served(res.err)), res.err


def test_scancel_of_a_job_with_a_kept_container_leaves_nothing(cluster: Cluster,
                                                               image: str) -> None:
    script = ("#!/bin/sh\n"
              f"srun --container-image={image} true\n"
              f"srun --container-image={image} sleep 300\n")
    jobid = cluster.sbatch(script, f"-N1 -w {NODE} -o /dev/null")
    try:
        deadline = time.monotonic() + 60
        while not cluster.run("pgrep -u squall -x sleep", node=NODE, user="root",
                              check=False).out.strip():
            assert time.monotonic() < deadline, "the second step never started"
            time.sleep(0.5)
        kept = cluster.run("ls /run/squall/1000", node=NODE, user="root").out
        assert "kept-" in kept, kept
    finally:
        cluster.run(f"scancel {jobid}")
    cluster.wait_job(jobid, {"CANCELLED"}, timeout=60)
    assert wait_clean(cluster, node=NODE) == "", leftovers(cluster, node=NODE)
    left = cluster.run("ls /run/squall/1000", node=NODE, user="root").out
    assert "kept-" not in left and "keeper-" not in left, left
