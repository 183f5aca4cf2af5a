"""The SPANK plugin on the mini cluster (issue 3): steps run in containers, as the test user.

Every test drives real srun/sbatch on the login node; the containers are started by the
Enroot-compatible runtime on the compute nodes from squashfs images on /fsx.
"""

from __future__ import annotations

import shlex
import time

from .cluster import Cluster
from .images import IMAGE_DIR, build_image
from .pyxis_helpers import wait_for


def srun(cluster: Cluster, args: str, cmd: str, check: bool = True, env=None):
    return cluster.run(f"srun {args} bash -c {shlex.quote(cmd)}", check=check, env=env)


def test_three_node_step_reads_the_image_os_release(cluster: Cluster, image: str) -> None:
    host = cluster.run("grep ^ID= /etc/os-release", node="node1").out.strip()
    assert host != "ID=squalltest"
    res = srun(cluster, f"-N3 --container-image={image}",
               'echo "$(hostname) $(grep ^ID= /etc/os-release)"')
    lines = sorted(res.out.split("\n")[:-1])
    assert lines == ["node1 ID=squalltest", "node2 ID=squalltest", "node3 ID=squalltest"], res


def test_four_tasks_on_one_node_share_one_container(cluster: Cluster, image: str) -> None:
    bare = srun(cluster, "-N1 -w node2", "readlink /proc/self/ns/mnt").out.strip()
    res = srun(cluster, f"-N1 -n4 -w node2 --container-image={image}",
               'echo "$SLURM_PROCID $(readlink /proc/self/ns/mnt)"')
    rows = [line.split() for line in res.out.splitlines()]
    assert sorted(r[0] for r in rows) == ["0", "1", "2", "3"], res
    namespaces = {r[1] for r in rows}
    assert len(namespaces) == 1, res
    assert namespaces != {bare}, "tasks are still in the node's mount namespace"


def test_sbatch_script_runs_inside_the_container(cluster: Cluster, image: str) -> None:
    out = f"/fsx/home/squall/jobs/plugin-sbatch-{time.time_ns()}.out"
    # --container-remap-root, as a Pyxis user's sbatch script often has it.
    script = ("#!/bin/sh\n"
              f"#SBATCH --container-image={image}\n"
              "#SBATCH --container-remap-root\n"
              f"#SBATCH -o {out}\n"
              "grep ^ID= /etc/os-release\n"
              "echo var=$SQUALL_IMAGE_VAR\n")
    jobid = cluster.sbatch(script)
    cluster.wait_job(jobid, {"COMPLETED"}, timeout=60)
    text = cluster.run(f"cat {out}").out
    assert "ID=squalltest" in text and "var=from-image" in text, text


def test_mounts_rw_ro_and_tmpfs(cluster: Cluster, image: str) -> None:
    base = f"/fsx/home/squall/mounts-{time.time_ns()}"
    cluster.put(f"{base}/ro/file", "read-only data\n")
    cluster.put(f"{base}/rw/keep", "")
    mounts = f"{base}/rw:/mnt/rw,{base}/ro:/mnt/ro:ro,tmpfs:/mnt/tmp"
    res = srun(cluster, f"-N1 --container-image={image} --container-mounts={mounts}",
               "cat /mnt/ro/file; echo written > /mnt/rw/new;"
               " (echo x > /mnt/ro/nope) 2>/dev/null && echo ro-writable || echo ro-refused;"
               " awk '$2 == \"/mnt/tmp\" {print \"tmp-fs=\" $3}' /proc/mounts")
    assert "read-only data" in res.out, res
    assert "ro-refused" in res.out, res
    assert "tmp-fs=tmpfs" in res.out, res
    assert cluster.run(f"cat {base}/rw/new").out == "written\n"


def test_workdir_and_entrypoint(cluster: Cluster, image: str) -> None:
    img = f"--container-image={image}"
    assert srun(cluster, f"-N1 {img} --container-workdir=/etc", "pwd").out == "/etc\n"
    plain = srun(cluster, f"-N1 {img}", 'echo "ran=${SQUALL_ENTRYPOINT_RAN:-no}"')
    assert plain.out == "ran=no\n", plain
    with_ep = srun(cluster, f"-N1 {img} --container-entrypoint",
                   'echo "ran=${SQUALL_ENTRYPOINT_RAN:-no} $(pwd)"')
    assert with_ep.out == "ran=1 /work\n", with_ep


def test_environment_precedence(cluster: Cluster, image: str) -> None:
    img = f"--container-image={image}"
    env = {"SQUALL_BOTH_VAR": "host-value", "SQUALL_HOST_ONLY": "host-only"}
    cmd = 'echo "$SQUALL_BOTH_VAR $SQUALL_HOST_ONLY $SQUALL_IMAGE_VAR"'
    assert srun(cluster, f"-N1 {img}", cmd, env=env).out == "image-value host-only from-image\n"
    kept = srun(cluster, f"-N1 {img} --container-env=SQUALL_BOTH_VAR", cmd, env=env)
    assert kept.out == "host-value host-only from-image\n", kept


def test_image_from_environment_variables_and_command_line_wins(cluster: Cluster,
                                                                image: str) -> None:
    cmd = "grep ^ID= /etc/os-release"
    for var in ("SQUALL_CONTAINER_IMAGE", "PYXIS_CONTAINER_IMAGE"):
        res = srun(cluster, "-N1", cmd, env={var: image})
        assert res.out == "ID=squalltest\n", (var, res)
    res = srun(cluster, f"-N1 --container-image={image}", cmd,
               env={"SQUALL_CONTAINER_IMAGE": "/fsx/images/does-not-exist.sqsh"})
    assert res.out == "ID=squalltest\n", res


def test_writable_versus_read_only_root(cluster: Cluster, image: str) -> None:
    # As root inside (remapped), so that only the root filesystem's mode decides.
    img = f"--container-image={image} --container-remap-root"
    probe = "touch /etc/probe 2>&1 && echo wrote || echo refused"
    assert srun(cluster, f"-N1 {img} --container-writable", probe).out.endswith("wrote\n")
    ro = srun(cluster, f"-N1 {img} --container-readonly", probe).out
    assert ro.endswith("refused\n") and "Read-only file system" in ro, ro


def test_named_container_reused_after_image_change_with_a_warning_and_job_scope_cleanup(
        cluster: Cluster) -> None:
    # container_scope=job: names live for one job (pyxis_JOBID_NAME), so every step runs
    # in one allocation; the job epilog removes the containers.
    from .pyxis_helpers import current_args, plugstack_args

    tag = time.time_ns()
    path = f"/fsx/home/squall/images/named-{tag}.sqsh"
    build_image(cluster, path, f"named-a-{tag}", rebuild=True)
    with plugstack_args(cluster, f"{current_args(cluster, 'node3')} container_scope=job",
                        nodes=("node3",)):
        alloc = cluster.run("salloc -N1 -w node3 --no-shell 2>&1")
        jobid = alloc.out.split("Granted job allocation ")[1].split()[0]
        name = f"n{tag}"
        args = (f"--jobid={jobid} -N1 --container-image={path} --container-writable "
                f"--container-name={name}")
        try:
            srun(cluster, args, "echo kept > /etc/marker")
            second = srun(cluster, args, "cat /etc/marker; grep ^ID= /etc/os-release")
            assert second.out == f"kept\nID=named-a-{tag}\n", second
            assert "warning" not in second.err, second

            # Another image under the same name: reused as it is (as Pyxis), said once.
            build_image(cluster, path, f"named-b-{tag}", rebuild=True)
            reused = srun(cluster, args, "cat /etc/marker; grep ^ID= /etc/os-release")
            assert reused.out == f"kept\nID=named-a-{tag}\n", reused
            assert (f"--container-name={name}: reusing container pyxis_{jobid}_{name} as it is"
                    in reused.err), reused
            # Removed by hand, as a Pyxis user does: the next step starts afresh.
            cluster.run(f"/usr/bin/enroot remove -f pyxis_{jobid}_{name}",
                        node="node3")
            fresh = srun(cluster, args, "cat /etc/marker 2>/dev/null || echo no-marker; "
                                        "grep ^ID= /etc/os-release")
            assert fresh.out == f"no-marker\nID=named-b-{tag}\n", fresh
        finally:
            cluster.run(f"scancel {jobid}")
        cluster.wait_job(jobid, {"CANCELLED", "COMPLETED"}, timeout=60)
        listed = ""
        for _ in range(40):  # the epilog runs after the job ends
            listed = cluster.run("/usr/bin/enroot list", node="node3").out
            if name not in listed:
                break
            time.sleep(0.5)
    assert name not in listed, f"the job epilog left the named container: {listed}"


def test_named_container_exec_joins_the_container_another_step_runs(cluster: Cluster,
                                                                     image: str) -> None:
    tag = time.time_ns()
    name = f"x{tag}"
    home = "/fsx/home/squall"
    ready = f"{home}/exec-{tag}.ready"
    alloc = cluster.run("salloc -N1 -w node2 --no-shell 2>&1")
    jobid = alloc.out.split("Granted job allocation ")[1].split()[0]
    base = f"--jobid={jobid} -N1 --overlap"
    try:
        none = srun(cluster, f"{base} --container-name={name}:exec", "true", check=False)
        assert none.rc != 0
        assert (f"--container-name={name}:exec: no container of that name runs on this node"
                in none.err), none

        # The holder: a named container with a bind mount, kept running by `sleep`.
        inside = f"/held/exec-{tag}.ready"  # {ready}, as the holder sees it
        hold = (f"echo \"$SLURM_STEP_ID $(readlink /proc/self/ns/mnt)\" > {inside}.tmp && "
                f"mv {inside}.tmp {inside} && exec sleep 300")
        cluster.run(f"setsid nohup srun {base} --container-image={image} "
                    f"--container-name={name} --container-mounts={home}:/held "
                    f"bash -c {shlex.quote(hold)} > /dev/null 2>&1 < /dev/null &")
        step, held_ns = wait_for(cluster, ready).split()

        probe = ("readlink /proc/self/ns/mnt; ls /held/exec-*.ready | wc -l; "
                 "grep ^ID= /etc/os-release")
        joined = srun(cluster, f"{base} --container-name={name}:exec --container-log=verbose",
                      probe)
        ns, held_files, os_id = joined.out.split()
        assert ns == held_ns and int(held_files) >= 1 and os_id == "ID=squalltest", joined
        assert "join running container" in joined.err, joined.err

        # Default flag (auto) with the same image joins it too; no_exec starts its own.
        auto = srun(cluster, f"{base} --container-image={image} --container-name={name}",
                    "readlink /proc/self/ns/mnt")
        assert auto.out.strip() == held_ns, auto
        own = srun(cluster, f"{base} --container-image={image} --container-name={name}:no_exec",
                   "readlink /proc/self/ns/mnt; ls /held 2>/dev/null | wc -l")
        own_ns, held_seen = own.out.split()
        assert own_ns != held_ns and held_seen == "0", own

        # :exec with another image than the running container's: joined as it is (as
        # Pyxis), with one warning naming both images.
        other = build_image(cluster, f"{IMAGE_DIR}/exec-other.sqsh", "exec-other")
        joined_other = srun(cluster, f"{base} --container-image={other} "
                                     f"--container-name={name}:exec", "readlink /proc/self/ns/mnt")
        assert joined_other.out.strip() == held_ns, joined_other
        assert image in joined_other.err and other in joined_other.err, joined_other

        # Flags that shape a new container are said not to apply.
        warned = srun(cluster, f"{base} --container-name={name}:exec --container-mounts=/tmp:/x",
                      "test -e /x && echo mounted || echo not-mounted")
        assert warned.out == "not-mounted\n", warned
        # Pyxis's words (exec.bats greps "ignoring --container-mounts").
        assert ("ignoring --container-mounts when attaching to a running container"
                in warned.err), warned.err

        # The joiners' ends left the holder running; its end ends the container.
        listed = cluster.run(f"squeue -h -s -j {jobid} -o %i").out.split()
        assert f"{jobid}.{step}" in listed, listed
        cluster.run(f"scancel {jobid}.{step}")
        for _ in range(60):
            if f"{jobid}.{step}" not in cluster.run(f"squeue -h -s -j {jobid} -o %i").out:
                break
            time.sleep(0.5)
        gone = srun(cluster, f"{base} --container-name={name}:exec", "true", check=False)
        assert gone.rc != 0 and "no container of that name runs on this node" in gone.err, gone
    finally:
        cluster.run(f"scancel {jobid}")
    cluster.wait_job(jobid, {"CANCELLED", "COMPLETED"}, timeout=60)
    cluster.run(f"/usr/bin/enroot remove -f pyxis_{name}", node="node2")
    left = cluster.run("pgrep -u squall -a sleep || true", node="node2").out
    assert left == "", f"processes left on node2: {left}"


def test_container_save_in_a_multi_node_step_is_written_once(cluster: Cluster,
                                                             image: str) -> None:
    tag = time.time_ns()
    out = f"/fsx/home/squall/saved-{tag}.sqsh"
    res = srun(cluster, f"-N2 --container-image={image} --container-remap-root "
                        f"--container-writable --container-save={out}",
               'echo "written-by-node-$SLURM_NODEID" > /etc/marker; '
               'echo "$SLURM_NODEID $(hostname) pyxis_$SLURM_JOB_ID.$SLURM_STEP_ID"')
    assert res.rc == 0, res
    node0, step_container = next(line.split()[1:] for line in res.out.splitlines()
                                 if line.startswith("0 "))
    assert cluster.run(f"unsquashfs -cat {out} etc/marker").out == "written-by-node-0\n"
    beside = cluster.run(f"ls -a /fsx/home/squall | grep -c 'saved-{tag}' || true").out.strip()
    assert beside == "1", "a temporary file was left beside the saved image"
    listed = cluster.run("/usr/bin/enroot list", node=node0).out
    assert step_container not in listed.split(), listed   # the step's own container is gone
