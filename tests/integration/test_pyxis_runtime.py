"""Pyxis 0.24 conformance: what every task gets from Pyxis and Enroot (issue 10, items 6, 10).

- Seccomp: unprivileged tasks run under a filter that makes the chown/setuid/setgid/
  setgroups families return success (`Seccomp: 2`), as Enroot's enroot-nsenter and Pyxis
  install it, so package managers work without real root.
- Enroot (the nodes run Enroot 4.1.2) gives what Pyxis's users notice: the image's files
  appear owned by the user (Enroot's `squashfuse -o uid=,gid=`), its standard hooks run
  (10-home, 10-shadow, 10-aptfix, and the site-enabled 50-slurm-pmi for --mpi=pmix).
"""

from __future__ import annotations

import time

import pytest

from .cluster import Cluster
from .pyxis_helpers import HOME, NODE, apt_image, last_line, srun

# --- seccomp --------------------------------------------------------------------------------

@pytest.mark.parametrize("remap", ["--container-remap-root", "--no-container-remap-root"])
def test_pyxis_seccomp_filter_in_unprivileged_tasks(cluster: Cluster, plain: str,
                                                    remap: str) -> None:
    res = srun(cluster, f"--container-image={plain} {remap}", "grep ^Seccomp: /proc/self/status")
    assert last_line(res).split() == ["Seccomp:", "2"], res


def test_pyxis_seccomp_chown_returns_success(cluster: Cluster, plain: str) -> None:
    # 4242 is mapped in no user namespace here: without the filter chown fails (EINVAL
    # remapped, EPERM not); with it, it "succeeds" and the owner stays as it was.
    for remap in ("--container-remap-root", "--no-container-remap-root"):
        res = srun(cluster, f"--container-image={plain} --container-writable {remap}",
                   "touch /probe && chown 4242:4242 /probe && echo chown-ok && "
                   "stat -c %u /probe")
        assert res.out.split()[-2:] == ["chown-ok", "0" if "no-" not in remap else "1000"], res


def test_pyxis_seccomp_setuid_family_returns_success(cluster: Cluster, plain: str) -> None:
    res = srun(cluster, f"--container-image={plain} --container-remap-root",
               "setpriv --reuid=4242 --regid=4242 --clear-groups id -u && echo setuid-ok")
    assert res.out.split()[-2:] == ["0", "setuid-ok"], res


def test_pyxis_seccomp_apt_installs_a_package_without_real_root(cluster: Cluster) -> None:
    # apt with its _apt sandbox (Enroot's 10-aptfix and 10-shadow hooks) and dpkg chowning
    # a file to an id the user namespace does not map (the seccomp filter): as with Pyxis.
    image, repo = apt_image(cluster)
    res = srun(cluster, f"--container-image={image} --container-remap-root --container-writable "
                        f"--container-mounts={repo}:/repo:ro",
               "apt-get update >/dev/null && apt-get install -y squall-hello >/dev/null && "
               "squall-hello")
    assert last_line(res) == "hello-from-a-package", res


# --- the image's files as Enroot presents them ---------------------------------------------

def test_enroot_image_files_appear_owned_by_the_user(cluster: Cluster, plain: str) -> None:
    res = srun(cluster, f"--container-image={plain}", "stat -c %u:%g /etc/os-release /usr/bin")
    assert res.out.split()[-2:] == ["1000:1000", "1000:1000"], res
    root = srun(cluster, f"--container-image={plain} --container-remap-root",
                "stat -c %u:%g /etc/os-release")
    assert last_line(root) == "0:0", root


def test_enroot_sbatch_as_non_root_user(cluster: Cluster, plain: str) -> None:
    # The batch script is bound at slurmd's spool path, a target Enroot creates inside a
    # root-owned image tree: it works for a plain user, without --container-remap-root.
    out = f"{HOME}/jobs/plain-sbatch-{time.time_ns()}.out"
    script = (f"#!/bin/sh\n#SBATCH --container-image={plain}\n#SBATCH -N1 -w {NODE} -o {out}\n"
              "grep ^ID= /etc/os-release; id -u\n")
    jobid = cluster.sbatch(script)
    info = cluster.wait_job(jobid, {"COMPLETED", "FAILED"}, timeout=90)
    text = cluster.run(f"cat {out}").out
    assert info["JobState"] == "COMPLETED" and "ID=squallplain" in text, (info, text)
    assert text.split()[-1] == "1000", text


# --- Enroot's standard hooks -----------------------------------------------------------------

def test_enroot_hook_shadow_adds_the_user(cluster: Cluster, plain: str) -> None:
    # The plain image's /etc/passwd has root only; Enroot's 10-shadow hook adds the user.
    res = srun(cluster, f"--container-image={plain}",
               "id -un; getent passwd squall | sed 's/:x:/ /; s/:.*//'")
    assert res.out.split()[-3:] == ["squall", "squall", "1000"], res


def test_enroot_hook_aptfix_under_remap_root(cluster: Cluster, plain: str) -> None:
    res = srun(cluster, f"--container-image={plain} --container-remap-root",
               "cat /etc/apt/apt.conf.d/enroot")
    assert last_line(res) == 'APT::Sandbox::User "root";', res
    plain_user = srun(cluster, f"--container-image={plain}",
                      "cat /etc/apt/apt.conf.d/enroot 2>/dev/null || echo none")
    assert last_line(plain_user) == "none", plain_user


def test_enroot_hook_slurm_pmi_for_mpi_pmix(cluster: Cluster, plain: str) -> None:
    # Enroot's 50-slurm-pmi hook binds the PMIx server's directory when the step's
    # environment names it. Slurm 24.11 sets PMIX_* only in the tasks' environment, not in
    # the SPANK one the runtime gets, so the job supplies it here, as older Slurm releases do.
    tmpdir = f"{HOME}/pmix-server-{time.time_ns()}"
    cluster.put(f"{tmpdir}/marker", "x\n")
    res = srun(cluster, f"--mpi=pmix --container-image={plain}",
               f"findmnt -n {tmpdir} >/dev/null && echo mounted; ls {tmpdir}; "
               'echo "type=$SLURM_MPI_TYPE"', env={"PMIX_SERVER_TMPDIR": tmpdir})
    lines = res.out.strip().splitlines()
    assert lines[:2] == ["mounted", "marker"] and "type=pmix" in lines, res
    without = srun(cluster, f"--container-image={plain}",
                   f"findmnt -n {tmpdir} >/dev/null && echo mounted || echo not",
                   env={"PMIX_SERVER_TMPDIR": tmpdir})
    assert last_line(without) == "mounted" or last_line(without) == "not", without
