"""The node-local cache of extracted images (issue 12): reads near local-disk speed.

The first kept container of an image on a node starts from the squashfs file and its
keeper extracts the image in the background (as the job user, niced); once complete,
later containers of that user and image start from the extracted tree (the verbose log
says "extracted cache hit"). A changed image is never served from the old tree, an
extraction cut short by the job's end is never used, and no process outlives the job:
only the cache, in /var/lib/squall/cache/UID on the node (docs/plugin.md).
"""

from __future__ import annotations

import shlex
import time

import pytest

from .cluster import Cluster
from .images import IMAGE_DIR, IMAGE_ENV, build_image
from .leftovers import leftovers, wait_clean

NODE = "node3"
CACHE = "/var/lib/squall/cache/1000"
# A complete tree: KEY/rootfs, KEY 32 hex digits (KEY.part/rootfs is one being made).
KEY_GLOB = "????????????????????????????????"


def cache_entries(cluster: Cluster) -> list[str]:
    return cluster.run(f"ls {CACHE} 2>/dev/null || true", node=NODE, user="root").out.split()


def wait_complete(cluster: Cluster, before: set[str], timeout: float = 120) -> str:
    """A new complete entry (a 32-hex directory) in the cache."""
    deadline = time.monotonic() + timeout
    while True:
        new = [e for e in cache_entries(cluster)
               if len(e) == 32 and e not in before]
        if new:
            return new[0]
        assert time.monotonic() < deadline, f"no complete extraction: {cache_entries(cluster)}"
        time.sleep(1)


def step(cluster: Cluster, image: str, cmd: str, extra: str = ""):
    return cluster.run(f"srun -N1 -w {NODE} --container-image={image} --container-log=verbose "
                       f"{extra} bash -c '{cmd}'", timeout=300)


@pytest.fixture()
def image(cluster: Cluster) -> str:
    path = f"{IMAGE_DIR}/localcache-{time.time_ns()}.sqsh"
    yield build_image(cluster, path, "cache-v1", env=IMAGE_ENV)
    cluster.run(f"rm -f {path}", user="root")


def test_later_jobs_start_from_the_extracted_copy(cluster: Cluster, image: str) -> None:
    before = set(cache_entries(cluster))
    # A job long enough for the background extraction to finish.
    first = step(cluster, image, "cat /etc/squall-image-id; sleep 15")
    assert first.out.strip() == "cache-v1"
    assert "extracting it on this node in the background" in first.err, first.err
    key = wait_complete(cluster, before)
    assert cluster.run(f"cat {CACHE}/{key}/rootfs/etc/squall-image-id", node=NODE,
                       user="root").out.strip() == "cache-v1"
    second = step(cluster, image, "cat /etc/squall-image-id; touch /etc/x 2>&1 | grep -c Read")
    assert second.out.split() == ["cache-v1", "1"], second     # read-only, as from the file
    assert "extracted cache hit" in second.err, second.err
    assert wait_clean(cluster, node=NODE) == "", leftovers(cluster, node=NODE)
    # Writes of a writable container never reach the cached tree.
    step(cluster, image, "echo dirty > /etc/squall-image-id", extra="--container-writable")
    assert cluster.run(f"cat {CACHE}/{key}/rootfs/etc/squall-image-id", node=NODE,
                       user="root").out.strip() == "cache-v1"


def test_a_changed_image_is_never_served_from_the_old_copy(cluster: Cluster,
                                                           image: str) -> None:
    before = set(cache_entries(cluster))
    step(cluster, image, "sleep 15")
    wait_complete(cluster, before)
    assert "extracted cache hit" in step(cluster, image, "true").err
    build_image(cluster, image, "cache-v2", env=IMAGE_ENV, rebuild=True)
    changed = step(cluster, image, "cat /etc/squall-image-id")
    assert changed.out.strip() == "cache-v2", changed
    assert "extracted cache hit" not in changed.err, changed.err


def test_an_extraction_cut_short_is_never_used(cluster: Cluster) -> None:
    big = build_image(cluster, f"{IMAGE_DIR}/localcache-big.sqsh", "cache-big", extra_mb=300,
                      env=IMAGE_ENV)
    cluster.run(f"rm -rf {CACHE}/*", node=NODE, user="root")
    # The job ends at once: its keeper, and the extraction with it, are ended by the epilog.
    short = step(cluster, big, "true")
    assert "extracting it on this node in the background" in short.err, short.err
    assert wait_clean(cluster, node=NODE) == "", leftovers(cluster, node=NODE)
    left = cache_entries(cluster)
    assert not [e for e in left if len(e) == 32], left      # nothing complete
    again = step(cluster, big, "cat /etc/squall-image-id; sleep 20")
    assert again.out.strip() == "cache-big" and "extracted cache hit" not in again.err
    wait_complete(cluster, set(left))
    # That extraction cleared what the cut-short one left.
    assert not [e for e in cache_entries(cluster) if ".tmp-" in e], cache_entries(cluster)


def test_a_job_on_more_nodes_than_local_cache_max_nodes_extracts_nothing(cluster: Cluster,
                                                                       image: str) -> None:
    """Each node of a large job would read the whole image from /fsx: with
    local_cache_max_nodes=1 a 2-node job reads through squashfuse only, and a 1-node job
    still fills the cache."""
    from .pyxis_helpers import current_args, plugstack_args
    nodes = ("node2", NODE)
    args = current_args(cluster, node=NODE)
    with plugstack_args(cluster, f"{args} local_cache_max_nodes=1", nodes=nodes):
        before = set(cache_entries(cluster))
        wide = cluster.run(f"srun -N2 -w node2,{NODE} --container-image={image} "
                           "--container-log=verbose true", timeout=300)
        assert wide.err.count("timings on") == 2, wide.err
        assert "extracting it on this node" not in wide.err, wide.err
        assert wait_clean(cluster, node=NODE) == ""
        assert set(cache_entries(cluster)) == before, cache_entries(cluster)
        narrow = step(cluster, image, "true")
        assert "extracting it on this node in the background" in narrow.err, narrow.err


def node_cache(cluster: Cluster, node: str) -> list[str]:
    return cluster.run(f"ls {CACHE} 2>/dev/null || true", node=node, user="root").out.split()


def wait_trees(cluster: Cluster, nodes: tuple[str, ...], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not all(cluster.run(f"ls -d {CACHE}/{KEY_GLOB}/rootfs", node=n, user="root",
                              check=False).rc == 0 for n in nodes):
        assert time.monotonic() < deadline, {n: node_cache(cluster, n) for n in nodes}
        time.sleep(1)


def test_a_two_node_step_sends_its_image_once_and_both_nodes_extract_it(
        cluster: Cluster, image: str) -> None:
    """The step's first node sends the image with sbcast; the other extracts from its copy
    (the bytes each node reads from /fsx are measured on the scale cluster,
    test_scale_smoke.py). Then a step whose first node has its tree and whose other node
    does not: that node reads the image itself and gets its tree too. No copy is left."""
    nodes = ("node2", NODE)
    for n in nodes:
        cluster.run(f"rm -rf {CACHE}/*", node=n, user="root")
    both = cluster.run(f"srun -N2 -w node2,{NODE} --container-image={image} "
                       "--container-log=verbose bash -c 'cat /etc/squall-image-id; sleep 20'",
                       timeout=300)
    assert both.out.split() == ["cache-v1"] * 2, both
    assert both.err.count("extracting it on this node in the background") == 2, both.err
    wait_trees(cluster, nodes)
    assert wait_clean(cluster, node=NODE) == "", leftovers(cluster, node=NODE)
    for n in nodes:
        left = node_cache(cluster, n)
        assert not [e for e in left if "copy-" in e or ".sqsh" in e or ".part" in e], (n, left)
    # node2 keeps its tree, node3 loses its own: node2 says "none", node3 reads the image.
    cluster.run(f"rm -rf {CACHE}/*", node=NODE, user="root")
    mixed = cluster.run(f"srun -N2 -w node2,{NODE} --container-image={image} "
                        "--container-log=verbose bash -c 'sleep 20'", timeout=300)
    assert "extracted cache hit" in mixed.err, mixed.err
    assert "extracting it on this node in the background" in mixed.err, mixed.err
    wait_trees(cluster, nodes)
    assert not [e for e in node_cache(cluster, NODE) if "copy-" in e or ".sqsh" in e], \
        node_cache(cluster, NODE)


def test_a_copy_no_extraction_takes_goes_with_the_job(cluster: Cluster, image: str) -> None:
    """node3's kept container starts in the job's first step; the second step's first node,
    node2, sends the image to both, and node3 (its kept container reused: no extraction
    waits for it) keeps the copy until the job epilog removes it."""
    for n in ("node2", NODE):
        cluster.run(f"rm -rf {CACHE}/*", node=n, user="root")
    script = (f"srun -N1 -w {NODE} --container-image={image} true; "
              f"srun -N2 -w node2,{NODE} --container-image={image} sleep 8; "
              f"srun -N1 -w {NODE} ls {CACHE}")
    res = cluster.run(f"salloc -N2 -w node2,{NODE} bash -c {shlex.quote(script)}",
                      timeout=300)
    assert [e for e in res.out.split() if e.startswith("copy-")], res   # it came
    assert wait_clean(cluster, node=NODE) == "", leftovers(cluster, node=NODE)
    assert not [e for e in node_cache(cluster, NODE) if e.startswith("copy-")], \
        node_cache(cluster, NODE)


def test_a_step_that_ends_while_its_image_is_sent_leaves_slurmctld_answering(
        cluster: Cluster, image: str) -> None:
    """A short step ends while its first node still sends the image (the record comes after
    the digest). Asked for the credential of a step that had ended, Slurm 24.11's slurmctld
    kept a lock: the next request that writes hung and slurmctld aborted
    ("lock_slurmctld: pthread_rwlock_rdlock(): Resource temporarily unavailable"). The
    broadcast goes to the job, never to a step."""
    for n in ("node2", NODE):
        cluster.run(f"rm -rf {CACHE}/*", node=n, user="root")
    out = f"/fsx/home/squall/short-step-{time.time_ns()}.out"
    jobid = cluster.sbatch(f"#!/bin/bash\nsrun -N2 --container-image={image} true\n"
                           "sleep 60\n", f"-N2 -w node2,{NODE} -o {out}")
    try:
        wait_trees(cluster, ("node2", NODE))
        # The second request that writes, once every node is done with the broadcast.
        for _ in range(2):
            res = cluster.run(f"scontrol update jobid={jobid} comment=still-answering",
                              user="root", timeout=30, check=False)
            assert res.rc == 0, f"slurmctld no longer takes a write: {res}"
        assert "still-answering" in cluster.run(f"scontrol show job {jobid}", user="root").out
    finally:
        cluster.run(f"scancel {jobid}", user="root", check=False, timeout=30)


def test_a_copy_finished_during_a_job_is_for_the_next_job(cluster: Cluster, image: str) -> None:
    """Issue 40: when the node-local copy finished mid-job, the next step of that job
    started a second container from it (1.5 s) instead of joining the kept one."""
    before = set(cache_entries(cluster))
    flag = f"/fsx/home/squall/jobs/copy-done-{time.time_ns()}"
    later = (f"srun -N1 -w {NODE} --container-image={image} --container-log=verbose "
             "cat /etc/squall-image-id")
    script = (f"{later}\nwhile [ ! -e {flag} ]; do sleep 0.2; done\n{later}\n")
    jobid = cluster.sbatch(f"#!/bin/sh\n{script}",
                           f"-N1 -w {NODE} -o /fsx/home/squall/jobs/copy-done-%j.out")
    wait_complete(cluster, before)
    cluster.put(flag, "")
    cluster.wait_job(jobid, {"COMPLETED"}, timeout=120)
    text = (cluster.fsx_host / f"home/squall/jobs/copy-done-{jobid}.out").read_text()
    assert text.split().count("cache-v1") == 2, text
    timings = [line for line in text.splitlines() if "timings on" in line]
    assert len(timings) == 2, text
    assert "extracting it on this node in the background" in timings[0], text
    assert "kept container of the job reused" in timings[1], text
    assert "extracted cache hit" not in timings[1], text
    assert "start container" not in timings[1], text
    # the next job starts from the copy
    assert "extracted cache hit" in step(cluster, image, "true").err
