"""MPI through PMIx in containers (issue 30): Debian's Open MPI, started by Slurm's mpi/pmix
(`srun --mpi=pmix`), all-reduces across two nodes inside `--container-image` containers, in a
job's first step and in a later one, which the job's kept container serves.

A PMIx client reaches Slurm's PMIx server through the step's server directory
(SlurmdSpoolDir/pmix.JOB.STEP: the rendezvous files and the shared-memory store) and the
`PMIX_*` settings slurmstepd gives each task; Enroot's 50-slurm-pmi hook binds that directory
and sets `PMIX_MCA_psec`/`ptl`/`gds` when the runtime starts. Each step has its own
directory, and a kept container was started by an earlier step (or, in the first step, before
Slurm had put `PMIX_*` in the task's environment), so squall gives every step its own.

The image is cut out of a node (Debian's Open MPI and PMIx, with the libraries and plugins
they load), the program built there with mpicc (programs/mpi_allreduce.c).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .cluster import Cluster
from .images import IMAGE_DIR, build_image

PROGRAM = (Path(__file__).parent / "programs" / "mpi_allreduce.c").read_text()

MKIMAGE_MPI = r"""#!/bin/bash
# mkimage-mpi.sh OUT OS_ID EXTRA_MB: an image with Debian's Open MPI and an all-reduce.
set -euo pipefail
out=$1 os_id=$2
# Not in /tmp: the nodes mount it noexec, and ldd refuses what it could not run.
tmp=$(mktemp -d /var/tmp/squall-mpi.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
multi=/usr/lib/$(gcc -dumpmachine)
mkdir -p "$root"/{usr/bin,etc,proc,sys,dev,tmp,run,var/tmp,fsx} "$root$multi"
chmod 1777 "$root/tmp" "$root/var/tmp"
ln -s usr/bin "$root/bin"
cat >"$tmp/allreduce.c" <<'C'
@PROGRAM@
C
mpicc -O2 -o "$root/usr/bin/mpi-allreduce" "$tmp/allreduce.c"
for b in sh cat hostname env ls grep; do cp -L "$(type -P "$b")" "$root/usr/bin/"; done
# Open MPI and PMIx load their components at run time: take their directories whole.
for d in "$multi/openmpi" "$multi/pmix2" /usr/share/openmpi /etc/openmpi; do
    [ -e "$d" ] && { mkdir -p "$root$(dirname "$d")"; cp -a "$d" "$root$d"; }
done
find "$root" -type f \( -name '*.so*' -o -perm -u+x \) | while read -r f; do
    ldd "$f" 2>/dev/null |
        awk '/=>/ && $3 ~ /^\// {print $3} /^\t\/[^ ]*ld-linux/ {print $1}' || true
done | sort -u | while read -r lib; do
    [ -e "$root$lib" ] || { mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"; }
done
printf 'NAME="squall MPI test image"\nID=%s\n' "$os_id" >"$root/etc/os-release"
getent passwd root squall >"$root/etc/passwd"
getent group root squall >"$root/etc/group"
echo "$os_id" >"$root/etc/squall-image-id"
echo "${SQUALL_MKIMAGE:-}" >"$root/etc/squall-mkimage"
mkdir -p "$(dirname "$out")"
mksquashfs "$root" "$out.tmp.$$" -noappend -quiet -no-progress -comp lzo -noD -all-root >/dev/null
chmod 0644 "$out.tmp.$$"
mv -f "$out.tmp.$$" "$out"
""".replace("@PROGRAM@", PROGRAM)


@pytest.fixture(scope="module")
def mpi_image(cluster: Cluster) -> str:
    return build_image(cluster, f"{IMAGE_DIR}/mpi.sqsh", "squallmpi", node="node1",
                       script=(f"{IMAGE_DIR}/mkimage-mpi.sh", MKIMAGE_MPI))


def allreduced(out: str) -> list[tuple[int, str, int]]:
    return sorted((int(m[1]), m[2], int(m[3])) for m in
                  re.finditer(r"^rank (\d+)/2 on (\S+): allreduce (\d+)$", out, re.M))


def test_open_mpi_allreduce_through_pmix_in_a_first_and_a_later_step(
        cluster: Cluster, mpi_image: str) -> None:
    step = f"srun --mpi=pmix --ntasks-per-node=1 --container-image={mpi_image} mpi-allreduce"
    res = cluster.run(f"salloc -N2 -w node1,node2 bash -c "
                      f"'{step}; echo == later step; {step}'", timeout=300, check=False)
    first, _, later = res.out.partition("== later step")
    want = [(0, "node1", 3), (1, "node2", 3)]
    assert allreduced(first) == want, res
    assert allreduced(later) == want, res
    assert res.rc == 0, res


TMPFS = "/var/tmp/squall-pmix-tmpfs"   # its parent is in the image, the directory is not
SCRIPT = "/fsx/squall-test/pmix-tmpfs.sh"


def test_step_directories_bound_alone_with_a_tmpfs_outside_the_image(
        cluster: Cluster, mpi_image: str) -> None:
    """Issue 40: with Slurm's TmpFS on a path the image lacks, the step's application
    directory's parents are made in the container (as Enroot's x-create=dir), so no node
    warns and MPI_Init works; PMIX_SERVER_TMPDIR is a mount point of its own (as Enroot's
    PMI hook makes it) and SlurmdSpoolDir is not bound whole."""
    nodes = (cluster.login, *cluster.nodes)
    for n in nodes:
        cluster.run(f"mkdir -p -m 1777 {TMPFS}; cp /etc/slurm/slurm.conf "
                    f"/etc/slurm/slurm.conf.before-tmpfs; "
                    f"echo TmpFS={TMPFS} >>/etc/slurm/slurm.conf", node=n, user="root")
    try:
        cluster.run("scontrol reconfigure", user="root")
        for n in cluster.nodes:
            cluster.wait_node_state(n, ["IDLE"], timeout=60)
        step = f"srun --mpi=pmix --ntasks-per-node=1 --container-image={mpi_image}"
        probe = ("sh -c 'd=${PMIX_SERVER_TMPDIR%/}; "
                 "echo mounts $(grep -c \" $d \" /proc/self/mountinfo) "
                 "$(grep -c \" /var/spool/slurmd \" /proc/self/mountinfo)'")
        cluster.put(SCRIPT, f"{step} mpi-allreduce\necho == later step\n"
                            f"{step} mpi-allreduce\n{step} {probe}\n")
        res = cluster.run(f"salloc -N2 -w node1,node2 bash {SCRIPT}", timeout=300, check=False)
        first, _, later = res.out.partition("== later step")
        want = [(0, "node1", 3), (1, "node2", 3)]
        assert allreduced(first) == want, res
        assert allreduced(later) == want, res
        assert "cannot bind" not in res.out + res.err, res
        # PMIX_SERVER_TMPDIR mounted once at its own path; SlurmdSpoolDir not at all.
        assert re.findall(r"^mounts (\d+) (\d+)$", res.out, re.M) == [("1", "0")] * 2, res
        assert res.rc == 0, res
    finally:
        for n in nodes:
            cluster.run("mv /etc/slurm/slurm.conf.before-tmpfs /etc/slurm/slurm.conf",
                        node=n, user="root")
        cluster.run("scontrol reconfigure", user="root")
