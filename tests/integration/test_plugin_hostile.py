"""The plugin against a hostile second user and what killed steps leave (issue 19).

alice (the mini cluster's second user) plants things where the test user `squall` points
--container-image: a FIFO on /fsx, a directory, a UNIX socket; and /dev/null is a device
every node has. slurmstepd used to block in open() on the FIFO: srun was killed with no
squall line and the job stayed COMPLETING. Each now gives one `squall: error:` line on
srun's stderr naming the path and what it is, the job ends COMPLETED or FAILED within
seconds, and the node is IDLE after.

Leftovers: the `running-pyxis_JOBID.STEPID` record of a killed slurmstepd is removed by the
job epilog, and a dead extraction `KEY.tmp-PID` of the node-local cache (its process a
zombie, or its PID reused by a process that holds no lock) is removed by the next one.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator

import pytest

from .cluster import Cluster
from .images import IMAGE_DIR, IMAGE_ENV, build_image
from .leftovers import leftovers, wait_clean
from .pyxis_helpers import current_args, plugstack_args

NODE = "node2"
RUNTIME_DIR = "/run/squall/1000"
CACHE = "/var/lib/squall/cache/1000"
FIX = "give the path of a .sqsh image (a file built by sqshbuild or mksquashfs)"


def wait_for(cluster: Cluster, cmd: str, what: str, timeout: float = 60,
             node: str = "login", user: str = "squall") -> str:
    deadline = time.monotonic() + timeout
    while True:
        res = cluster.run(cmd, node=node, user=user, check=False)
        if res.rc == 0 and res.out.strip():
            return res.out.strip()
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout} s ({cmd}: {res})")
        time.sleep(0.5)


def job_named(cluster: Cluster, name: str) -> str:
    """The id of the (possibly finished) job called name: slurmctld keeps it MinJobAge."""
    out = cluster.run("scontrol show job -o", user="root", check=False).out
    for line in out.splitlines():
        fields = dict(f.partition("=")[::2] for f in line.split())
        if fields.get("JobName") == name:
            return fields["JobId"]
    raise AssertionError(f"no job named {name}: {out}")


@pytest.fixture(scope="module")
def planted(cluster: Cluster) -> Iterator[dict[str, tuple[str, str]]]:
    """What alice leaves on /fsx where an image is expected: kind -> (path, how it reads)."""
    d = f"/fsx/home/alice/hostile-{time.time_ns()}"
    sock = ("python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "
            f"{d}/sock.sqsh")
    cluster.run(f"mkdir -m 0755 {d} && mkfifo -m 0644 {d}/fifo.sqsh && mkdir {d}/dir.sqsh && "
                f"{sock}", user="alice")
    yield {"fifo": (f"{d}/fifo.sqsh", "a FIFO (named pipe)"),
           "device": ("/dev/null", "a character device"),
           "directory": (f"{d}/dir.sqsh", "a directory"),
           "socket": (f"{d}/sock.sqsh", "a UNIX socket")}
    cluster.run(f"rm -rf {d}", user="alice", check=False)


@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "socket"])
def test_an_image_that_is_not_a_file_ends_the_job_at_once(cluster: Cluster, planted,
                                                          kind: str) -> None:
    path, what = planted[kind]
    name = f"hostile-{kind}-{time.time_ns()}"
    res = None
    try:
        res = cluster.run(f"srun -N1 -w {NODE} -J {name} --container-image={path} true",
                          check=False, timeout=30)
    finally:
        if res is None or res.rc in (124, 137):
            # srun blocked (a plugin that waits in open() for a writer): be the writer,
            # and end the job, so that a failing run leaves nothing for the next tests.
            if kind == "fifo":
                cluster.run(f"timeout 2 sh -c ': >{path}'", user="alice", check=False)
            cluster.run(f"scancel -n {name}", check=False)
    lines = [line for line in res.err.splitlines() if line.startswith("squall: ")]
    assert lines == [f"squall: error: --container-image={path}: {path} is {what}, not a "
                     f"regular file: {FIX}"], res
    assert res.rc != 0, res
    jobid = job_named(cluster, name)
    info = cluster.wait_job(jobid, {"COMPLETED", "FAILED"}, timeout=10)
    assert info["JobState"] in {"COMPLETED", "FAILED"}, info
    cluster.wait_node_state(NODE, {"IDLE"}, timeout=15)
    assert not cluster.run(f"pgrep -f 'slurmstepd: \\[{jobid}\\.'", node=NODE, user="root",
                           check=False).out.strip()


def test_the_epilog_removes_the_running_record_of_a_killed_slurmstepd(cluster: Cluster,
                                                                      image: str) -> None:
    node = "node1"
    name = f"hostile-stepd-{time.time_ns()}"
    cluster.run(f"setsid srun -N1 -w {node} -J {name} --container-image={image} sleep 300"
                " </dev/null >/dev/null 2>&1 &")
    jobid = wait_for(cluster, f"squeue -h -n {name} -o %i", f"job {name} queued")
    record = f"{RUNTIME_DIR}/running-pyxis_{jobid}.0"
    try:
        wait_for(cluster, f"test -f {record} && echo yes", "the step's running record", 60,
                 node=node, user="root")
        stepd = wait_for(cluster, f"pgrep -f 'slurmstepd: \\[{jobid}\\.0\\]'",
                         "slurmstepd of the step", 10, node=node, user="root")
        cluster.run(f"kill -KILL {stepd}", node=node, user="root")
        time.sleep(1)
        # Nobody is left to forget it but the job epilog.
        assert cluster.run(f"test -f {record}", node=node, user="root", check=False).rc == 0
    finally:
        cluster.run(f"scancel {jobid}", check=False)
    cluster.wait_job(jobid, {"CANCELLED", "COMPLETED", "FAILED"}, timeout=120)
    deadline = time.monotonic() + 30
    while cluster.run(f"test -e {record}", node=node, user="root", check=False).rc == 0:
        assert time.monotonic() < deadline, f"{record} is still there after the job epilog"
        time.sleep(0.5)
    assert wait_clean(cluster, node=node) == "", leftovers(cluster, node=node)
    cluster.wait_in_service(node, timeout=60)


def cache_entries(cluster: Cluster, node: str) -> list[str]:
    return cluster.run(f"ls {CACHE} 2>/dev/null || true", node=node, user="root").out.split()


def test_a_dead_extraction_is_removed_by_the_next_one(cluster: Cluster) -> None:
    node = "node3"
    image = build_image(cluster, f"{IMAGE_DIR}/hostile-{time.time_ns()}.sqsh", "hostile-v1",
                        env=IMAGE_ENV)
    cluster.run(f"install -d -o 1000 -g 1000 -m 0700 {CACHE} && chmod 0700 {CACHE}",
                node=node, user="root")
    # A zombie of the user's: `sleep 600` took the place of the shell that started the
    # short sleep, and never waits for it. kill(pid, 0) says a zombie is alive.
    seconds = f"600.{time.time_ns() % 10**6:06d}"       # names the parent for pgrep
    cluster.run(f"setsid sh -c 'sleep 0.1 & exec sleep {seconds}' </dev/null >/dev/null "
                "2>&1 &", node=node)
    parent = wait_for(cluster, f"pgrep -u squall -f '^[s]leep {seconds}$'",
                      "the zombie's parent", 10, node=node)
    try:
        zombie = wait_for(cluster, f"ps --ppid {parent} -o pid=,stat= | awk '$2 ~ /^Z/ "
                          "{print $1}'", "a zombie", 10, node=node)
        dead = f"{CACHE}/{'de' * 16}.tmp-{zombie}"
        # A live PID (the parent) whose extraction holds no lock: the number was reused.
        reused = f"{CACHE}/{'ad' * 16}.tmp-{parent}"
        cluster.run(f"mkdir -p {dead}/rootfs/etc {reused}/rootfs/etc", node=node)
        before = set(cache_entries(cluster, node))
        step = cluster.run(f"srun -N1 -w {node} --container-image={image} "
                           "--container-log=verbose bash -c 'sleep 15'", timeout=300)
        assert "extracting it on this node in the background" in step.err, step.err
        deadline = time.monotonic() + 120
        while not [e for e in cache_entries(cluster, node) if len(e) == 32 and e not in before]:
            assert time.monotonic() < deadline, cache_entries(cluster, node)
            time.sleep(1)
        left = cache_entries(cluster, node)
        assert f"{'de' * 16}.tmp-{zombie}" not in left, left
        assert f"{'ad' * 16}.tmp-{parent}" not in left, left
    finally:
        cluster.run(f"kill {parent}", node=node, check=False)
        cluster.run(f"rm -rf {shlex.quote(CACHE)}/{'de' * 16}.tmp-* {CACHE}/{'ad' * 16}.tmp-*",
                    node=node, user="root", check=False)
        cluster.run(f"rm -f {image}", user="root", check=False)
    assert wait_clean(cluster, node=node) == "", leftovers(cluster, node=node)


def test_fifos_planted_at_the_job_s_markers_never_hang_a_step_or_the_prolog(
        cluster: Cluster, image: str) -> None:
    """The user's runtime directory is the user's own: a FIFO where a step marks the job's
    named containers (``jobJOB.names``, container_scope=job) or the prolog's start writes
    its marker (``jobJOB.prestart``) must not block either; opened without blocking, it
    is passed over and nothing is left running on the node."""
    # Make the runtime directory, and learn the job ids to come (one user submits here).
    cluster.run(f"srun -N1 -w {NODE} --container-image={image} true", timeout=120)
    last = int(cluster.run("sbatch --parsable -N1 --wrap true").out.strip().split(";")[0])
    fifos = " ".join(f"{RUNTIME_DIR}/job{j}.{what}" for j in range(last + 1, last + 6)
                     for what in ("names", "prestart"))
    cluster.run(f"mkfifo {fifos}", node=NODE)
    step = (f"srun -N1 -w {NODE} --container-image={image} --container-name=fifo "
            "true && echo named-ok")
    args = f"{current_args(cluster, NODE)} container_scope=job"
    try:
        with plugstack_args(cluster, args, nodes=(NODE,)):
            res = cluster.run(f"salloc -N1 -w {NODE} --container-prestart={image} "
                              f"bash -c {shlex.quote(step)}", timeout=120, check=False)
        assert "named-ok" in res.out, res
        assert wait_clean(cluster, node=NODE) == "", leftovers(cluster, node=NODE)
    finally:
        cluster.run(f"rm -f {fifos}", node=NODE, check=False)
