"""Pyxis 0.24 conformance: what every task gets from Pyxis and Enroot (issue 10, items 6, 10).

- Seccomp: unprivileged tasks run under a filter that makes the chown/setuid/setgid/
  setgroups families return success (`Seccomp: 2`), as Enroot's enroot-nsenter and Pyxis
  install it, so package managers work without real root.
- Enroot (the nodes run Enroot 4.1.2) gives what Pyxis's users notice: the image's files
  appear owned by the user (Enroot's `squashfuse -o uid=,gid=`), its standard hooks run
  (10-home, 10-shadow, 10-aptfix); with --mpi=pmix every step gets its own PMIx server
  directory, as Enroot's site-enabled 50-slurm-pmi hook would give it.
"""

from __future__ import annotations

import re
import shlex
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


def test_each_pmix_step_gets_its_own_server_directory(cluster: Cluster, plain: str) -> None:
    # Slurm's mpi/pmix gives each step its own server directory (PMIX_SERVER_TMPDIR) after
    # the container started: squall brings it into every step, the kept container's later
    # step included, with PMIX_MCA_psec as Enroot's 50-slurm-pmi hook sets it.
    show = ('echo "dir=$PMIX_SERVER_TMPDIR"; ls -d "$PMIX_SERVER_TMPDIR" >/dev/null && '
            'echo seen; echo "psec=$PMIX_MCA_psec/$PMIX_SECURITY_MODE"')
    step = f"srun -N1 -w {NODE} --mpi=pmix --container-image={plain} sh -c {shlex.quote(show)}"
    res = cluster.run(f"salloc -N1 -w {NODE} bash -c {shlex.quote(step + '; ' + step)}",
                      timeout=300)
    dirs = re.findall(r"^dir=(\S+)$", res.out, re.M)
    assert len(dirs) == 2 and dirs[0] != dirs[1], res
    assert [d.rstrip("/").rsplit(".", 1)[1] for d in dirs] == ["0", "1"], res
    assert res.out.count("seen") == 2, res
    psec = re.findall(r"^psec=(\S*)/(\S*)$", res.out, re.M)
    assert len(psec) == 2 and all(a == b and a for a, b in psec), res
    plain_step = srun(cluster, f"--container-image={plain}", 'echo "[$PMIX_SERVER_TMPDIR]"')
    assert last_line(plain_step) == "[]", plain_step
