"""--container-prestart: the job's container started by the job prolog (issue 44).

A job that names its image at submission (``sbatch --container-prestart=IMAGE``) gets its
kept container started on every node by the job prolog, while its batch script gets going;
its first ``srun --container-image=IMAGE`` joins that container instead of starting the
runtime. What the prolog starts is the job's: it ends with the job, nothing is started for
a job that did not ask, and a prestart that fails is one line in slurmd's log while the
job's first step starts its container as without it.
"""

from __future__ import annotations

import re
import shlex
import time
import uuid
from contextlib import AbstractContextManager

from .cluster import Cluster
from .images import IMAGE_DIR, MKIMAGE, build_image
from .leftovers import wait_clean
from .pyxis_helpers import current_args, plugstack_args
from .registry_image import REGISTRY
from .verbose_log import served

NODES = "node1,node2"
# The job's kept containers on the node: their keepers' sockets (kept.h), counted once any
# start under way (its lock held) is done.
KEPT = ("for l in /run/squall/1000/kept-$SLURM_JOB_ID-*.lock; do [ -e \"$l\" ] && "
        "flock \"$l\" true; done; ")
KEPT += "ls /run/squall/1000/ | grep -c \"^kept-$SLURM_JOB_ID-.*\\.sock$\" || true"


def run_job(cluster: Cluster, lines: list[str], args: str) -> tuple[str, str]:
    """Submit a 2-node job of these shell lines; its id and its output once it ended."""
    out = f"/fsx/home/squall/jobs/prestart-{time.time_ns()}.out"
    script = "#!/bin/bash\n" + "\n".join(lines) + "\n"
    jobid = cluster.sbatch(script, f"-N2 -w {NODES} --output={out} {args}")
    info = cluster.wait_job(jobid, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"},
                            timeout=180)
    text = cluster.run(f"cat {out}").out
    assert info["JobState"] == "COMPLETED", (info, text)
    return jobid, text


# An image whose start takes 5 s more: its /etc/rc (run once, at the container's start)
# sleeps first.
SLOW_RC = 'sleep 5\nmkdir -p "/work" 2>/dev/null\n'
MKIMAGE_SLOW = MKIMAGE.replace('mkdir -p "/work" 2>/dev/null\n', SLOW_RC, 1)


def keepers_per_node(text: str) -> list[str]:
    return sorted(re.findall(r"^keepers (\d+)$", text, re.M))


def test_the_first_step_joins_the_container_the_prolog_started(cluster: Cluster,
                                                                image: str) -> None:
    step = (f"srun --container-image={image} --container-log=verbose "
            "bash -c 'grep ^ID= /etc/os-release'")
    jobid, text = run_job(cluster, [step, step], f"--container-prestart={image}")
    ways = served(text)
    assert len(ways) == 4, text
    assert all("started by the job prolog" in w and "no runtime start" in w
               for w in ways), ways
    assert "start container" not in text, text
    assert text.count("ID=squalltest") == 4, text
    for node in NODES.split(","):
        assert wait_clean(cluster, node=node) == "", (jobid, node)


def test_the_prolog_does_not_hold_the_job_until_its_container_is_up(cluster: Cluster) -> None:
    assert MKIMAGE_SLOW != MKIMAGE
    slow = build_image(cluster, f"{IMAGE_DIR}/slow-start.sqsh", "slowstart",
                       script=(f"{IMAGE_DIR}/mkimage-slow.sh", MKIMAGE_SLOW))
    # Slurm waits for the prolog before the batch script runs: the script must find the
    # prolog's start still under way (its lock held, for the 5 s the image's rc sleeps),
    # and its first step then waits for that start and joins it.
    probe = ("for l in /run/squall/1000/kept-$SLURM_JOB_ID-*.lock; do "
             "flock -n \"$l\" true && echo lock free || echo lock held; done")
    step = f"srun --container-image={slow} --container-log=verbose true"
    _, text = run_job(cluster, [probe, step], f"--container-prestart={slow}")
    assert text.count("lock held") == 1 and "lock free" not in text, text
    ways = served(text)
    assert len(ways) == 2 and all("started by the job prolog" in w for w in ways), text
    for node in NODES.split(","):
        assert wait_clean(cluster, node=node) == ""


def test_a_job_that_ends_while_its_container_starts_leaves_nothing(cluster: Cluster) -> None:
    slow = build_image(cluster, f"{IMAGE_DIR}/slow-start.sqsh", "slowstart",
                       script=(f"{IMAGE_DIR}/mkimage-slow.sh", MKIMAGE_SLOW))
    # The job is over before the prolog's start is (the image's rc sleeps 5 s): its epilog
    # waits for the start, then ends what it started, as for any job's container.
    jobid, _ = run_job(cluster, ["true"], f"--container-prestart={slow}")
    for node in NODES.split(","):
        assert wait_clean(cluster, node=node) == "", (jobid, node)


def test_a_step_with_other_flags_starts_its_own(cluster: Cluster, image: str) -> None:
    step = (f"srun --container-image={image} --container-writable --container-log=verbose "
            "touch /etc/mark")
    _, text = run_job(cluster, [step], f"--container-prestart={image}")
    ways = served(text)
    assert len(ways) == 2 and not any("job prolog" in w for w in ways), ways
    assert all("kept for the job" in w for w in ways), ways
    for node in NODES.split(","):
        assert wait_clean(cluster, node=node) == ""


def test_a_step_whose_environment_sets_the_runtime_otherwise_starts_its_own(
        cluster: Cluster, image: str) -> None:
    # The prolog starts the container with an environment of its own (the passwd entry's,
    # prestart_env.h); the job's ENROOT_ROOTFS_WRITABLE (as Pyxis's users set it) must not
    # be dropped by joining that read-only container: the step starts its own, and says why
    # in slurmd's log.
    step = (f"srun --container-image={image} --container-log=verbose "
            "bash -c 'touch /etc/mark && echo wrote'")
    jobid, text = run_job(cluster, ["export ENROOT_ROOTFS_WRITABLE=yes", step],
                          f"--container-prestart={image}")
    ways = served(text)
    assert len(ways) == 2 and not any("job prolog" in w for w in ways), ways
    assert text.count("wrote") == 2, text
    for node in NODES.split(","):
        log = cluster.run(f"grep -F 'job {jobid}: the job prolog' /var/log/slurm/slurmd.log "
                          "|| true", node=node, user="root").out
        assert ("started with ENROOT_ROOTFS_WRITABLE unset, this step asks for "
                "ENROOT_ROOTFS_WRITABLE=yes") in log, (node, log)
        assert wait_clean(cluster, node=node) == ""


def test_what_the_prolog_starts_is_the_jobs_alone(cluster: Cluster, image: str) -> None:
    count = f"srun bash -c {shlex.quote('echo keepers $(' + KEPT + ')')}"
    # Without the flag nothing runs before a container step; with it, one container a node.
    _, plain = run_job(cluster, [count], "")
    assert keepers_per_node(plain) == ["0", "0"], plain
    jobid, asked = run_job(cluster, [count], f"--container-prestart={image}")
    assert keepers_per_node(asked) == ["1", "1"], asked
    # ... and it ends with the job (the epilog), though no step ever used it.
    for node in NODES.split(","):
        assert wait_clean(cluster, node=node) == "", (jobid, node)


def test_a_failed_prestart_is_one_line_and_the_first_step_still_works(
        cluster: Cluster, image: str) -> None:
    missing = f"/fsx/home/squall/jobs/no-such-image-{time.time_ns()}.sqsh"
    step = f"srun --container-image={image} bash -c 'grep ^ID= /etc/os-release'"
    jobid, text = run_job(cluster, [step], f"--container-prestart={missing}")
    assert text.count("ID=squalltest") == 2, text
    for node in NODES.split(","):
        log = cluster.run(f"grep -F 'job {jobid}: --container-prestart' "
                          "/var/log/slurm/slurmd.log || true", node=node, user="root").out
        lines = log.strip().splitlines()
        assert len(lines) == 1 and missing in lines[0], (node, log)
        assert wait_clean(cluster, node=node) == ""


def test_a_bad_prestart_image_is_refused_at_submission(cluster: Cluster) -> None:
    res = cluster.run("sbatch --container-prestart='no good!' --wrap true", check=False)
    assert res.rc != 0, res
    lines = [x for x in res.err.splitlines() if x.strip()]
    assert lines and lines[0].startswith("squall: error: ") and "Traceback" not in res.err, res


# --- A job srun allocates itself: its image is known at allocation -----------------------
# Where the site's plugstack line says prestart_srun_jobs=1 (off by default).

def srun_job(cluster: Cluster, args: str, cmd: str, nodes: str = "node1") -> tuple[str, str]:
    """A new job on NODES made by srun itself (no sbatch, no salloc): its output and its
    stderr (where the verbose timings go)."""
    count = len(nodes.split(","))
    res = cluster.run(f"srun -N{count} -w {nodes} {args} bash -c {shlex.quote(cmd)}",
                      timeout=180)
    return res.out, res.err


def srun_prestart(cluster: Cluster, nodes: tuple[str, ...] = ("node1",),
                  more: str = "") -> AbstractContextManager[None]:
    """The nodes' plugstack line with prestart_srun_jobs=1 (and MORE), restored after."""
    line = f"{current_args(cluster, nodes[0])} prestart_srun_jobs=1 {more}".strip()
    return plugstack_args(cluster, line, nodes=nodes)


def test_a_job_srun_allocates_gets_its_container_from_the_prolog(cluster: Cluster,
                                                                  image: str) -> None:
    # srun tells the job's prolog (its job control environment) that the job it allocates
    # runs this image: the prolog starts it and the step joins it, saying how it started.
    nodes = tuple(NODES.split(","))
    with srun_prestart(cluster, nodes):
        out, err = srun_job(cluster, f"--container-image={image} --container-log=verbose",
                            "grep ^ID= /etc/os-release")
        # A job srun allocates without a container gets nothing from the prolog.
        plain, _ = srun_job(cluster, "", "echo keepers $(" + KEPT + ")", nodes=NODES)
    ways = served(err)
    assert len(ways) == 1 and "started by the job prolog: started from the" in ways[0], ways
    assert "start container" not in err, err
    assert out.count("ID=squalltest") == 1, out
    assert wait_clean(cluster, node="node1") == ""
    assert keepers_per_node(plain) == ["0", "0"], plain


def test_a_multi_node_srun_job_sends_its_image_unless_above_the_cache_s_nodes(
        cluster: Cluster, image: str) -> None:
    # Two nodes under local_cache_max_nodes (16): the step reads the image once and sends
    # it to its nodes (kept.c), which no prolog can: the step starts its containers.
    flags = f"--container-image={image} --container-log=verbose"
    nodes = tuple(NODES.split(","))
    with srun_prestart(cluster, nodes):
        _, under = srun_job(cluster, flags, "true", nodes=NODES)
    # Above it nothing is sent: the prolog starts them on both nodes.
    with srun_prestart(cluster, nodes, "local_cache_max_nodes=1"):
        _, above = srun_job(cluster, flags, "true", nodes=NODES)
    ways = served(under)
    assert len(ways) == 2 and not any("job prolog" in w for w in ways), ways
    ways = served(above)
    assert len(ways) == 2 and all("started by the job prolog" in w for w in ways), ways
    for node in nodes:
        assert wait_clean(cluster, node=node) == "", node


def test_steps_in_an_allocation_start_their_own(cluster: Cluster, image: str) -> None:
    # An sbatch job's steps: nothing known at allocation, nothing started by the prolog
    # (its srun runs in the job, it allocates nothing).
    step = f"srun -N1 -w node1 --container-image={image} --container-log=verbose true"
    with srun_prestart(cluster, tuple(NODES.split(","))):
        _, text = run_job(cluster, [step], "")
    ways = served(text)
    assert len(ways) == 1 and "job prolog" not in ways[0], ways


def test_an_srun_job_with_a_named_container_is_not_prestarted(cluster: Cluster,
                                                               image: str) -> None:
    # A named container is no job's kept one: the prolog leaves it to the step.
    name = f"pre{time.time_ns()}"
    with srun_prestart(cluster):
        _, err = srun_job(cluster, f"--container-image={image} --container-name={name} "
                          "--container-log=verbose", "true")
    ways = served(err)
    assert len(ways) == 1 and "job prolog" not in ways[0], ways
    assert wait_clean(cluster, node="node1") == ""


def test_the_srun_prestart_is_off_by_default(cluster: Cluster, image: str) -> None:
    _, err = srun_job(cluster, f"--container-image={image} --container-log=verbose", "true")
    ways = served(err)
    assert len(ways) == 1 and ways[0].startswith("started from the"), ways


def test_a_registry_image_s_srun_job_is_started_by_its_step(cluster: Cluster,
                                                            tools: str) -> None:
    # A tag's import, its pin and their lines (Pyxis's import lines, the importer's or the
    # builder's errors) are the step's to say on srun's terminal: the prolog leaves it.
    repo = f"prestart/tag-{uuid.uuid4().hex[:6]}"
    cluster.run(f"MARK=tagged python3 {tools}/push.py {repo} v1 0", node="login",
                timeout=300)
    ref = f"{REGISTRY}/{repo}:v1"
    with srun_prestart(cluster):   # the pushed image has no shell: no srun_job
        res = cluster.run(f"srun -N1 -w node1 --container-image={ref} "
                          "--container-log=verbose cat /etc/mark", timeout=300)
    assert res.out.split() == ["tagged"], res
    ways = served(res.err)
    assert len(ways) == 1 and "job prolog" not in ways[0], ways
    log = cluster.run(f"grep -F {shlex.quote(ref)} /var/log/slurm/slurmd.log | "
                      "grep -F \"srun's job\" || true", node="node1", user="root").out
    assert log.strip() == "", log
    assert wait_clean(cluster, node="node1") == ""
