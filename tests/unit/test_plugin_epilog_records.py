"""The job epilog removes what a killed slurmstepd left, and nothing planted blocks it (issue 19).

A killed slurmstepd never forgets its `running-pyxis_JOBID.STEPID` record: the job epilog
removes the job's records from the user's runtime directory, only this job's, only regular
files, through a descriptor of the checked directory (spank/plugin/running.c). The epilog
runs as root in slurmd and reads records the user can write: a FIFO planted as
`keeper-JOBID.STEPID` used to block it for good (spank/plugin/records.c). The plugin's own
code runs through a probe (spank/plugin/tests/records_probe.c), under a timeout.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from mntns import NextContainers, alive, moved_in, ns_id
from plugin_probe import build_probe


@pytest.fixture(scope="module")
def records_probe(tmp_path_factory) -> Path:
    return build_probe(tmp_path_factory.mktemp("records") / "records_probe", "records_probe.c",
                       "records.c", "layer_record.c", "running.c", "runcmd.c")


def run(*argv: str | Path) -> dict[str, str]:
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=20,
                         check=True)
    return dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)


RECORD = "squall-running 1 {pid} 12345\n"


def test_the_epilog_removes_only_this_jobs_records(records_probe, tmp_path):
    rt = tmp_path / "1000"
    rt.mkdir(mode=0o700)
    gone = 2**22 + 4321                          # above pid_max: no such process
    mine = ["running-pyxis_12.0", "running-pyxis_12.4294967291", "running-pyxis_12.3.tmp.77"]
    others = ["running-pyxis_123.0", "running-pyxis_1.0", "running-pyxis_12_dev",
              "running-pyxis_dev", "running-pyxis_12.x", "image-pyxis_12.0"]
    for name in mine + others:
        (rt / name).write_text(RECORD.format(pid=gone))
    outside = tmp_path / "outside"
    outside.write_text("root's file")
    (rt / "running-pyxis_12.1").symlink_to(outside)  # not a regular file: left alone
    (rt / "running-pyxis_12.2").mkdir()
    out = run(records_probe, rt, 12, os.geteuid(), 0)
    assert out == {"ended": "0", "removed": "3"}, out
    left = sorted(p.name for p in rt.iterdir())
    assert left == sorted(others + ["running-pyxis_12.1", "running-pyxis_12.2"]), left
    assert outside.read_text() == "root's file"
    # container_scope=job: the job's named containers' records go too.
    out = run(records_probe, rt, 12, os.geteuid(), 1)
    assert out["removed"] == "1" and not (rt / "running-pyxis_12_dev").exists(), out
    assert (rt / "running-pyxis_123.0").exists() and (rt / "running-pyxis_dev").exists()


def test_a_fifo_planted_as_a_record_never_blocks_the_epilog(records_probe, tmp_path):
    rt = tmp_path / "1000"
    rt.mkdir(mode=0o700)
    for name in ("keeper-12.0", "layer-12.0", "running-pyxis_12.0"):
        os.mkfifo(rt / name)
    (rt / "keeper-12.1").write_text(RECORD.format(pid=2**22 + 1))
    out = run(records_probe, rt, 12, os.geteuid(), 0)
    assert out == {"ended": "0", "removed": "0"}, out
    assert not (rt / "keeper-12.1").exists()


def test_a_runtime_directory_others_may_write_is_refused(records_probe, tmp_path):
    rt = tmp_path / "1000"
    rt.mkdir()
    rt.chmod(0o777)
    (rt / "running-pyxis_12.0").write_text(RECORD.format(pid=2**22 + 1))
    out = run(records_probe, rt, 12, os.geteuid(), 0)
    assert out == {"err": f"{rt} is writable by other users (mode 0777) and not sticky: "
                          f"chmod go-w {rt} (or +t)"}, out
    assert (rt / "running-pyxis_12.0").exists()
    link = tmp_path / "link"
    link.symlink_to(rt)
    out = run(records_probe, link, 12, os.geteuid(), 0)
    assert out["err"].startswith(f"{link} is a symbolic link, not a directory"), out




# --- issue 30: the epilog kills nothing it did not start -------------------------------
#
# The kernel gives a freed mount namespace's inode number to the next namespace made, at
# once. An epilog that remembers a container's namespaces by (device, inode) and reaps by
# that number after the namespace died kills whatever got the number: back to back, the
# same user's next `enroot start`. These run the epilog's sweep against a user's next
# "container" (`unshare --mount sleep`, root's like the records) made while it runs.

needs_root = pytest.mark.needs_root("mount namespaces")


def starttime(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def keeper_and_runtime(tmp_path: Path, unshare: str) -> tuple[subprocess.Popen, int]:
    """A keeper (its session's leader) and the pid of its runtime, started with `unshare`
    (a mount namespace of its own, and a user namespace when asked), once it is in it."""
    keeper = subprocess.Popen(["sh", "-c", f"{unshare} sleep 300 & echo $! >rt; "
                               "exec sleep 300"], cwd=tmp_path, start_new_session=True)
    deadline = time.monotonic() + 5
    while not (tmp_path / "rt").exists() or not (tmp_path / "rt").read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    runtime = int((tmp_path / "rt").read_text())
    while ns_id(runtime) == ns_id(os.getpid()):
        assert time.monotonic() < deadline
        time.sleep(0.005)
    return keeper, runtime


def gone(proc: subprocess.Popen, timeout: float = 10.0) -> bool:
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def reuse_number(number: tuple[int, int], tries: int = 200) -> tuple[subprocess.Popen, int]:
    """The user's next container: new mount namespaces until one has `number` (the kernel
    reuses a freed one's at once). Returns it and the tries it took."""
    for n in range(1, tries + 1):
        p = moved_in(subprocess.Popen(["unshare", "--mount", "sleep", "300"]))
        if ns_id(p.pid) == number:
            return p, n
        stop(p)
    pytest.fail(f"no new mount namespace got the number {number} in {tries} tries")


@needs_root
def test_a_layer_record_whose_namespace_died_kills_nothing(records_probe, tmp_path):
    """A dead step's layer record names its namespace by number: once the namespace is gone
    the number may be the user's next container's, and the epilog must leave that alone."""
    rt = tmp_path / "1000"
    rt.mkdir(mode=0o700)
    task = moved_in(subprocess.Popen(["unshare", "--mount", "sleep", "300"]))
    number = ns_id(task.pid)
    (rt / "layer-12.0").write_text(f"{number[0]} {number[1]}\n")
    stop(task)                                   # the layer's last task: the namespace dies
    nxt, tries = reuse_number(number)
    print(f"the namespace number {number} was reused after {tries} tries")
    try:
        out = run(records_probe, rt, 12, os.geteuid(), 0)
        assert out == {"ended": "0", "removed": "0"}, out
        assert nxt.poll() is None, "the epilog killed the user's next container"
        assert not (rt / "layer-12.0").exists()
    finally:
        stop(nxt)


@needs_root
def test_the_users_next_container_started_while_the_epilog_runs_survives(records_probe,
                                                                         tmp_path):
    """The issue's trace: the epilog ends the keeper, its runtime goes and frees the
    container's namespace, and the next job's `enroot start` (namespaces made one after
    another here, as fast as unshare runs) gets the number while the epilog is still
    reaping by it."""
    rt = tmp_path / "1000"
    rt.mkdir(mode=0o700)
    # A keeper (its session's leader) and its runtime in a mount namespace of its own.
    keeper, runtime = keeper_and_runtime(tmp_path, "unshare --mount")
    number = ns_id(runtime)
    (rt / "keeper-12.kept-abc").write_text(f"squall-running 1 {keeper.pid} "
                                           f"{starttime(keeper.pid)}\n")
    # The next job's containers, started one after another for as long as the epilog runs.
    nxt = NextContainers(tmp_path / "made")
    try:
        out = run(records_probe, rt, 12, os.geteuid(), 0)
        assert out["ended"] == "1", out
        assert gone(keeper)
        dead = nxt.killed(number, "during the epilog")
        assert not dead, f"the epilog killed the next job's processes {dead}"
    finally:
        nxt.end()
        stop(keeper)


@needs_root
def test_the_epilog_still_ends_the_container_its_tasks_and_its_layers(records_probe,
                                                                      tmp_path):
    """What is the container's goes: the keeper, its session, a task that joined the
    container's mount namespace, and a dead step's task in its layer (a mount namespace
    owned by the container's user namespace, as squall-layer makes it); a bystander of the
    same user in a namespace of its own stays."""
    rt = tmp_path / "1000"
    rt.mkdir(mode=0o700)
    keeper, runtime = keeper_and_runtime(tmp_path, "unshare --user --map-root-user --mount")
    joined = moved_in(subprocess.Popen(["nsenter", f"--target={runtime}", "--mount",
                                        "sleep", "300"]))
    layer = moved_in(subprocess.Popen(["nsenter", f"--target={runtime}", "--user",
                                       "unshare", "--mount", "sleep", "300"]))
    deadline = time.monotonic() + 5
    while ns_id(layer.pid) == ns_id(runtime) or \
            os.readlink(f"/proc/{layer.pid}/ns/user") == os.readlink("/proc/self/ns/user"):
        assert time.monotonic() < deadline
        time.sleep(0.005)
    bystander = moved_in(subprocess.Popen(["unshare", "--mount", "sleep", "300"]))
    lid = ns_id(layer.pid)
    (rt / "layer-12.3").write_text(f"{lid[0]} {lid[1]}\n")
    (rt / "keeper-12.kept-abc").write_text(f"squall-running 1 {keeper.pid} "
                                           f"{starttime(keeper.pid)}\n")
    try:
        out = run(records_probe, rt, 12, os.geteuid(), 0)
        assert out["ended"] == "1", out
        assert gone(keeper) and gone(joined) and gone(layer)
        assert not alive(runtime)
        assert bystander.poll() is None
        assert sorted(p.name for p in rt.iterdir()) == []
    finally:
        stop(keeper, joined, layer, bystander)
