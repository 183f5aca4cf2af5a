"""Pyxis 0.24 conformance: every flag from its PYXIS_CONTAINER_* variable, the job's ENROOT_*
settings, and the runtime's PATH (issues 10 and 9 item 3).

- Every flag can come from PYXIS_CONTAINER_<FLAG> (booleans 1/0, true/false, yes/no, y/n);
  the command line wins.
- The job's ENROOT_* variables reach the runtime, except the paths and import settings
  Pyxis denies (`ENROOT_ROOTFS_WRITABLE=yes srun ...` works as with Pyxis).
- The runtime runs with a fixed PATH (slurmstepd's, plus the runtime's own directory),
  so a job PATH that shadows its tools cannot break it; the tasks keep the job's PATH.
"""

from __future__ import annotations

import shlex
import time

import pytest

from .cluster import Cluster
from .pyxis_helpers import HOME, NODE, last_line, mounted, srun


def test_pyxis_env_container_image(cluster: Cluster, image: str) -> None:
    res = srun(cluster, "", "grep ^ID= /etc/os-release", env={"PYXIS_CONTAINER_IMAGE": image})
    assert last_line(res) == "ID=squalltest", res


def test_pyxis_env_container_image_command_line_wins(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image}", "grep ^ID= /etc/os-release",
               env={"PYXIS_CONTAINER_IMAGE": "/fsx/images/none.sqsh"})
    assert last_line(res) == "ID=squalltest", res


def test_pyxis_env_container_mounts(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image}", f"{mounted('/mnt/a')} && echo ok",
               env={"PYXIS_CONTAINER_MOUNTS": "/tmp:/mnt/a"})
    assert last_line(res) == "ok", res
    cli = srun(cluster, f"--container-image={image} --container-mounts=/tmp:/mnt/b",
               f"{mounted('/mnt/b')} && ! {mounted('/mnt/a')} && echo ok",
               env={"PYXIS_CONTAINER_MOUNTS": "/tmp:/mnt/a"})
    assert last_line(cli) == "ok", cli


def test_pyxis_env_container_workdir(cluster: Cluster, image: str) -> None:
    env = {"PYXIS_CONTAINER_WORKDIR": "/usr/bin"}
    assert last_line(srun(cluster, f"--container-image={image}", "pwd", env=env)) == "/usr/bin"
    cli = srun(cluster, f"--container-image={image} --container-workdir=/tmp", "pwd", env=env)
    assert last_line(cli) == "/tmp", cli


def test_pyxis_env_container_name(cluster: Cluster, image: str) -> None:
    name = f"env{time.time_ns()}"
    try:
        srun(cluster, f"--container-image={image} --container-writable", "echo e > /etc/env-marker",
             env={"PYXIS_CONTAINER_NAME": name})
        res = srun(cluster, f"--container-name={name}", "cat /etc/env-marker")
        assert last_line(res) == "e", res
    finally:
        cluster.run(f"/usr/bin/enroot remove -f pyxis_{name}", node=NODE,
                    check=False)


def test_pyxis_env_container_save(cluster: Cluster, image: str) -> None:
    out = f"{HOME}/env-save-{time.time_ns()}.sqsh"
    srun(cluster, f"--container-image={image} --container-remap-root --container-writable",
         "echo pyxis > /test", env={"PYXIS_CONTAINER_SAVE": out})
    res = srun(cluster, f"--container-image={out}", "cat /test")
    assert last_line(res) == "pyxis", res
    cluster.run(f"rm -f {out}")


@pytest.mark.parametrize(("value", "home"), [("1", True), ("y", True), ("0", False),
                                              ("false", False)])
def test_pyxis_env_container_mount_home(cluster: Cluster, image: str, value: str,
                                        home: bool) -> None:
    res = srun(cluster, f"--container-image={image}",
               f"{mounted(HOME)} && echo mounted || echo not",
               env={"PYXIS_CONTAINER_MOUNT_HOME": value})
    assert last_line(res) == ("mounted" if home else "not"), res


def test_pyxis_env_container_mount_home_command_line_wins(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image} --no-container-mount-home",
               f"{mounted(HOME)} && echo mounted || echo not",
               env={"PYXIS_CONTAINER_MOUNT_HOME": "1"})
    assert last_line(res) == "not", res


@pytest.mark.parametrize(("value", "first"), [("1", "0"), ("yes", "0"), ("0", "1000"),
                                              ("n", "1000")])
def test_pyxis_env_container_remap_root(cluster: Cluster, image: str, value: str,
                                        first: str) -> None:
    res = srun(cluster, f"--container-image={image}", "cat /proc/self/uid_map",
               env={"PYXIS_CONTAINER_REMAP_ROOT": value})
    assert last_line(res).split()[0] == first, res


def test_pyxis_env_container_entrypoint(cluster: Cluster, image: str) -> None:
    cmd = 'echo "ran=${SQUALL_ENTRYPOINT_RAN:-no}"'
    on = srun(cluster, f"--container-image={image}", cmd, env={"PYXIS_CONTAINER_ENTRYPOINT": "1"})
    assert last_line(on) == "ran=1", on
    off = srun(cluster, f"--container-image={image}", cmd,
               env={"PYXIS_CONTAINER_ENTRYPOINT": "0"})
    assert last_line(off) == "ran=no", off
    cli = srun(cluster, f"--container-image={image} --container-entrypoint", cmd,
               env={"PYXIS_CONTAINER_ENTRYPOINT": "0"})
    assert last_line(cli) == "ran=1", cli


def test_pyxis_env_container_entrypoint_log(cluster: Cluster, image: str) -> None:
    on = srun(cluster, f"--container-image={image} --container-entrypoint", "true",
              env={"PYXIS_CONTAINER_ENTRYPOINT_LOG": "1"})
    assert "squall-entrypoint: ran" in on.out + on.err, on
    off = srun(cluster, f"--container-image={image} --container-entrypoint", "true",
               env={"PYXIS_CONTAINER_ENTRYPOINT_LOG": "0"})
    assert "squall-entrypoint: ran" not in off.out + off.err, off


@pytest.mark.parametrize(("var", "value", "writable"),
                         [("PYXIS_CONTAINER_WRITABLE", "1", True),
                          ("PYXIS_CONTAINER_WRITABLE", "0", False),
                          ("PYXIS_CONTAINER_READONLY", "1", False),
                          ("PYXIS_CONTAINER_READONLY", "0", True)])
def test_pyxis_env_container_writable_and_readonly(cluster: Cluster, plain: str, var: str,
                                                   value: str, writable: bool) -> None:
    res = srun(cluster, f"--container-image={plain}", "touch /newfile 2>&1 && echo wrote || true",
               env={var: value})
    assert (last_line(res) == "wrote") == writable, res
    if not writable:
        assert "Read-only file system" in res.out, res


def test_pyxis_env_container_readonly_command_line_wins(cluster: Cluster, plain: str) -> None:
    res = srun(cluster, f"--container-image={plain} --container-readonly",
               "touch /newfile 2>&1 && echo wrote || true", env={"PYXIS_CONTAINER_WRITABLE": "1"})
    assert "Read-only file system" in res.out, res


def test_pyxis_env_container_env(cluster: Cluster, image: str) -> None:
    env = {"SQUALL_BOTH_VAR": "host-value", "PYXIS_CONTAINER_ENV": "SQUALL_BOTH_VAR"}
    res = srun(cluster, f"--container-image={image}", "echo $SQUALL_BOTH_VAR", env=env)
    assert last_line(res) == "host-value", res


# --- the job's ENROOT_* settings --------------------------------------------------------------

def test_pyxis_job_enroot_rootfs_writable_reaches_the_runtime(cluster: Cluster,
                                                              plain: str) -> None:
    res = srun(cluster, f"--container-image={plain}", "touch /newfile && echo wrote",
               env={"ENROOT_ROOTFS_WRITABLE": "yes"})
    assert last_line(res) == "wrote", res


def test_pyxis_job_enroot_remap_root_reaches_the_runtime(cluster: Cluster, image: str) -> None:
    res = srun(cluster, f"--container-image={image}", "id -u", env={"ENROOT_REMAP_ROOT": "yes"})
    assert last_line(res) == "0", res
    flag = srun(cluster, f"--container-image={image} --no-container-remap-root", "id -u",
                env={"ENROOT_REMAP_ROOT": "yes"})
    assert last_line(flag) == "1000", flag


def test_pyxis_job_enroot_paths_are_denied(cluster: Cluster, image: str) -> None:
    # A job cannot move the runtime's own directories (Pyxis's deny list).
    res = srun(cluster, f"--container-image={image}", "grep ^ID= /etc/os-release",
               env={"ENROOT_RUNTIME_PATH": "/nonexistent/rt", "ENROOT_DATA_PATH": "/nonexistent",
                    "ENROOT_TEMP_PATH": "/nonexistent", "ENROOT_CACHE_PATH": "/nonexistent"})
    assert last_line(res) == "ID=squalltest", res


# --- issue 9, item 3: the runtime's PATH -------------------------------------------------------

FAKES = ("squashfuse", "fuse-overlayfs", "bash", "sh", "unshare", "mount", "perl", "setpriv",
         "enroot-nsenter", "enroot-mount", "unsquashfs", "jq", "mkdir", "readlink", "cat",
         "getent", "id", "sqshbuild", "env")


def make_fakes(cluster: Cluster) -> str:
    fakebin = f"{HOME}/fakebin-{time.time_ns()}"
    for tool in FAKES:
        cluster.put(f"{fakebin}/{tool}", f"#!/bin/sh\necho 'FAKE {tool} ran' >&2\nexit 66\n",
                    mode=0o755)
    return fakebin


def test_runtime_path_is_fixed_when_the_job_path_shadows_its_tools(cluster: Cluster,
                                                                    image: str) -> None:
    fakebin = make_fakes(cluster)
    # The step's PATH has only the fake tools in front (srun itself is found by its path).
    res = cluster.run(f"PATH={fakebin}:$PATH /usr/bin/srun -N1 -w {NODE} "
                      f"--container-image={image} /usr/bin/printenv PATH")
    assert "FAKE" not in res.err, res
    assert last_line(res) == "/usr/local/bin:/usr/bin:/bin", res   # the image's PATH


def test_runtime_path_is_fixed_for_a_path_without_the_runtime_tools(cluster: Cluster,
                                                                    image: str) -> None:
    # Like a step launched from a containerized batch script: the image's PATH, which
    # names none of the host's directories where the runtime's helpers live.
    fakebin = make_fakes(cluster)
    res = cluster.run(f"env PATH={fakebin} /usr/bin/srun -N1 -w {NODE} "
                      f"--container-image={image} /usr/bin/grep ^ID= /etc/os-release")
    assert last_line(res) == "ID=squalltest" and "FAKE" not in res.err, res


def test_runtime_path_an_image_without_path_gets_enroot_s_default(cluster: Cluster,
                                                                  plain: str) -> None:
    # An image without PATH in its environment: Enroot starts the container as a login does
    # and gives it login's default PATH (enroot-switchroot: ENV_PATH of the image's
    # login.defs, else /usr/bin:/bin), as with Pyxis; the job's PATH (a conda or module
    # directory of the node) does not leak in, and neither does the runtime's own.
    from .images import IMAGE_DIR, build_image
    img = build_image(cluster, f"{IMAGE_DIR}/nopath.sqsh", "squall-nopath",
                      env={"SQUALL_IMAGE_VAR": "x"})
    job_path = f"{HOME}/bin-{time.time_ns()}:/usr/local/bin:/usr/bin:/bin"
    res = cluster.run(f"PATH={shlex.quote(job_path)} /usr/bin/srun -N1 -w {NODE} "
                      f"--container-image={img} /usr/bin/printenv PATH")
    assert last_line(res) == "/usr/bin:/bin", res


def test_runtime_path_step_from_a_containerized_batch_script(cluster: Cluster) -> None:
    # The batch script runs in the container, with the image's PATH (a directory of fake
    # tools first); its srun step starts a container on the host with that PATH.
    from .images import IMAGE_DIR, build_image
    fakebin = make_fakes(cluster)
    img = build_image(cluster, f"{IMAGE_DIR}/fakepath-{time.time_ns()}.sqsh", "squall-fakepath",
                      env={"PATH": f"{fakebin}:/usr/local/bin:/usr/bin:/bin"})
    out = f"{HOME}/jobs/batch-path-{time.time_ns()}.out"
    # The host's /usr, slurm.conf and munge socket inside, so that srun runs in there.
    script = ("#!/bin/sh\n"
              f"#SBATCH --container-image={img}\n"
              "#SBATCH --container-mounts=/usr:/usr:ro,/etc/slurm:/etc/slurm:ro,/run/munge,"
              "/etc/hosts:/etc/hosts:ro,/etc/passwd:/etc/passwd:ro,/etc/group:/etc/group:ro\n"
              f"#SBATCH -o {out} -N1 -w {NODE}\n"
              'echo "batch PATH=$PATH"\n'
              "/usr/bin/srun /usr/bin/grep ^ID= /etc/os-release\n")
    jobid = cluster.sbatch(script)
    info = cluster.wait_job(jobid, {"COMPLETED", "FAILED"}, timeout=120)
    text = cluster.run(f"cat {out}").out
    assert f"batch PATH={fakebin}:" in text, text
    assert "ID=squall-fakepath" in text and "FAKE" not in text, text
    assert info["JobState"] == "COMPLETED", (info, text)
