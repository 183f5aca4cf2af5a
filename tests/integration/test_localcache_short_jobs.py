"""The node-local copy finishes under short jobs, and ended jobs' copies go (issue 40).

An extraction cut by a job's end is resumed by the next job from where it stopped, at the
cost of what is left to do: 17 one-second jobs in a row left `KEY.part` and never a copy
(each resume listed the whole image again, planned against every file on disk and walked
the tree before extracting, the governor starting slow). Twelve one-second jobs on a node
now end with a finished copy that has the image's modes and sizes (docs/plugin.md, "Small
files: the node-local cache of extracted images").

The image a step sends to its nodes (`copy-JOB.STEP.in` in the node's cache directory)
stayed for a day when slurmd wrote the job's late sbcast blocks after the job's epilog
had removed it. A later job's epilog removes a copy that slurmd no longer writes (a
minute) and that no keeper holds (`copy-JOB.STEP.lock`).

A node that joined a job's later step whose first node's kept container started in an
earlier step waited for the step's copy for the job's whole life (nobody sends for that
step) and never extracted: the wait is bounded, then the node reads the image itself.
"""

from __future__ import annotations

import re
import shlex
import time

from .cluster import Cluster
from .images import IMAGE_DIR, IMAGE_ENV, MKIMAGE, build_image
from .leftovers import leftovers, wait_clean
from .pyxis_helpers import current_args, plugstack_args

NODE = "node3"
CACHE = "/var/lib/squall/cache/1000"
JOBS = 12

# The test image plus many small files (12 MB in 6,000 files, incompressible), in
# directories of several modes (one 0555, one 0700) and files of several modes (set-uid,
# set-gid, 0600, 0444): more than one 1 s job extracts beside a step.
MANY_FILES = r"""
big=$tmp/random
head -c $(( 12 * 1048576 )) /dev/urandom >"$big"
mkdir -p "$root/many"
for d in $(seq -w 0 29); do
    mkdir -p "$root/many/d$d"
    dd if="$big" bs=409600 skip=$((10#$d)) count=1 status=none |
        split -b 2048 -a 3 - "$root/many/d$d/f"
done
chmod 0600 "$root"/many/d00/*
chmod 0444 "$root"/many/d01/*
chmod 4755 "$root/many/d02/faaa"
chmod 2755 "$root/many/d02/faab"
chmod 0700 "$root/many/d03"
chmod 0555 "$root/many/d04"
rm -f "$big"
"""
SCRIPT = (f"{IMAGE_DIR}/mkimage-many.sh",
          MKIMAGE.replace('mkdir -p "$(dirname "$out")"',
                          MANY_FILES + 'mkdir -p "$(dirname "$out")"'))


def entries(cluster: Cluster) -> list[str]:
    return cluster.run(f"ls {CACHE} 2>/dev/null || true", node=NODE, user="root").out.split()


def complete(cluster: Cluster) -> list[str]:
    return [e for e in entries(cluster) if re.fullmatch(r"[0-9a-f]{32}", e)]


def listing(text: str) -> dict[str, tuple[str, str]]:
    """name -> (mode string, size of a regular file) from `unsquashfs -lln` or the find
    below (the same columns: MODE OWNER SIZE DATE TIME squashfs-root/NAME)."""
    out: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        f = line.split(None, 5)
        if len(f) < 6 or not f[5].startswith("squashfs-root"):
            continue
        name = f[5].split(" -> ")[0]
        out[name] = (f[0], f[2] if f[0].startswith("-") else "")
    return out


def test_twelve_one_second_jobs_finish_the_copy_with_the_image_modes(
        cluster: Cluster) -> None:
    image = build_image(cluster, f"{IMAGE_DIR}/localcache-many.sqsh", "cache-many",
                        env=IMAGE_ENV, script=SCRIPT)
    cluster.run(f"rm -rf {CACHE}/*", node=NODE, user="root")
    done_after = 0
    for i in range(1, JOBS + 1):
        res = cluster.run(f"srun -N1 -w {NODE} --container-image={image} "
                          "--container-log=verbose sleep 1", timeout=300)
        assert wait_clean(cluster, node=NODE) == "", leftovers(cluster, node=NODE)
        if i == 1:
            assert "extracting it on this node in the background" in res.err, res.err
            # The image is more than one short job extracts: the test means something.
            assert not complete(cluster), entries(cluster)
        if complete(cluster):
            done_after = i
            break
    print(f"copy finished after {done_after} one-second jobs")
    assert done_after, f"no copy after {JOBS} one-second jobs: {entries(cluster)}"
    key = complete(cluster)[0]
    assert not [e for e in entries(cluster) if e.endswith(".part") or "copy-" in e], \
        entries(cluster)
    # The published tree: nothing but the image (no records left in it), with its modes.
    assert cluster.run(f"ls -A {CACHE}/{key}", node=NODE, user="root").out.split() == \
        ["rootfs"]
    want = listing(cluster.run(f"unsquashfs -lln {image}", node=NODE, user="root",
                               timeout=120).out)
    have = listing(cluster.run(
        f"cd {CACHE}/{key}/rootfs && find . -printf '%M 0/0 %s d t squashfs-root/%P\\n' "
        "| sed 's#squashfs-root/$#squashfs-root#'", node=NODE, user="root",
        timeout=120).out)
    assert len(want) > 6000, len(want)
    assert have == want, sorted(set(have.items()) ^ set(want.items()))[:20]
    # A later job starts from it.
    later = cluster.run(f"srun -N1 -w {NODE} --container-image={image} "
                        "--container-log=verbose cat /etc/squall-image-id", timeout=300)
    assert later.out.strip() == "cache-many" and "extracted cache hit" in later.err, later


def test_copies_of_ended_jobs_are_removed_by_a_later_job(cluster: Cluster) -> None:
    cluster.run(f"install -d -o 1000 -g 1000 -m 0700 {CACHE}", node=NODE, user="root")
    ended = cluster.run(f"srun -N1 -w {NODE} printenv SLURM_JOB_ID").out.strip()
    # What slurmd's late blocks of that job's broadcast leave after its epilog ran.
    late = [f"{CACHE}/copy-{ended}.0.in", f"{CACHE}/copy-{ended}.0.sum"]
    cluster.run(f"head -c 4194304 /dev/zero > {late[0]} && echo none > {late[1]} && "
                f"touch -d '-2 min' {' '.join(late)}", node=NODE)
    # A running job whose keeper waits for its copy (it holds the step's lock).
    flag = f"/fsx/home/squall/jobs/copy-held-{ended}"
    script = (f"#!/bin/bash\ncd {CACHE} && head -c 4194304 /dev/zero > "
              "copy-$SLURM_JOB_ID.0.in && touch -d '-2 min' copy-$SLURM_JOB_ID.0.in && "
              f"flock copy-$SLURM_JOB_ID.0.lock bash -c 'touch {flag}; sleep 120'\n")
    running = cluster.sbatch(script, f"-N1 -w {NODE} -o /dev/null")
    try:
        deadline = time.monotonic() + 60
        while not (cluster.fsx_host / flag[len("/fsx/"):]).exists():
            assert time.monotonic() < deadline, "the running job never took its lock"
            time.sleep(0.5)
        held = f"{CACHE}/copy-{running}.0.in"
        cluster.run(f"srun -N1 -w {NODE} true")       # a later job: its epilog sweeps
        deadline = time.monotonic() + 30
        while any(cluster.run(f"test -e {p}", node=NODE, user="root", check=False).rc == 0
                  for p in late):
            assert time.monotonic() < deadline, f"an ended job's copy stayed: {entries(cluster)}"
            time.sleep(1)
        assert cluster.run(f"test -e {held}", node=NODE, user="root", check=False).rc == 0, \
            f"a copy a keeper holds was removed: {entries(cluster)}"
    finally:
        cluster.run(f"scancel {running}", user="root", check=False)
        cluster.run(f"rm -f {flag}", check=False)
    # Its job ended, that one goes too (its own epilog).
    cluster.wait_job(running, {"CANCELLED", "COMPLETED", "FAILED"}, timeout=60)
    assert wait_clean(cluster, node=NODE) == "", leftovers(cluster, node=NODE)
    assert not [e for e in entries(cluster) if e.startswith(f"copy-{running}.")], \
        entries(cluster)


def test_a_node_nobody_sends_to_waits_a_bounded_time_then_extracts(cluster: Cluster) -> None:
    image = build_image(cluster, f"{IMAGE_DIR}/localcache-wait.sqsh", "cache-wait",
                        env=IMAGE_ENV)
    for n in ("node2", NODE):
        cluster.run(f"rm -rf {CACHE}/*", node=n, user="root")
    # node2's kept container starts in a one-node step; the two-node step after it reuses
    # it there (nothing sent), and node3's keeper waits for a copy that never comes: for
    # the site's local_cache_copy_wait, then it reads the image itself. The job ends long
    # before the default 90 s wait would, so only the key lets node3 finish its copy.
    flags = f"--container-image={image} --container-log=verbose"
    script = (f"srun -N1 -w node2 {flags} true; "
              f"srun -N2 -w node2,{NODE} {flags} sleep 40")
    with plugstack_args(cluster, f"{current_args(cluster, NODE)} local_cache_copy_wait=8",
                        nodes=(NODE,)):
        res = cluster.run(f"salloc -N2 -w node2,{NODE} bash -c {shlex.quote(script)}",
                          timeout=300)
    timings = [line for line in res.err.splitlines() if "timings on" in line]
    assert len(timings) == 3, res.err
    assert "kept container of the job reused" in [t for t in timings if "node2" in t][1]
    assert "extracting it on this node in the background" in \
        [t for t in timings if NODE in t][0], res.err
    assert wait_clean(cluster, node=NODE) == "", leftovers(cluster, node=NODE)
    assert complete(cluster), f"node3 never extracted: {entries(cluster)}"
