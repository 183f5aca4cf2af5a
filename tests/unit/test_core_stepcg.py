"""core/stepcg.c: the step's freezer cgroup.procs, which the image builder joins so that
scancel ends it with the step (issue 39: the build went on, the node stayed COMPLETING).
The texts are what a mini cluster node showed (/proc/PID/cgroup of slurmstepd in user_init
and the node's /proc/self/mountinfo), and the same on a host that mounts the whole
hierarchy."""

from __future__ import annotations

import pytest

from squall._core import ffi, lib

DOCKER = "/docker/127dac1da887"
MOUNTINFO_NODE = (
    "119 118 0:33 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
    f"126 119 0:34 {DOCKER} /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime - "
    "cgroup cgroup rw,freezer\n"
    f"127 119 0:35 {DOCKER} /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
STEPD_NODE = (f"8:pids:{DOCKER}\n6:freezer:{DOCKER}/slurm_node3/uid_1001/job_3\n"
              f"4:memory:{DOCKER}\n0::{DOCKER}\n")
MOUNTINFO_HOST = ("30 25 0:26 / /sys/fs/cgroup/freezer rw,relatime shared:11 - cgroup cgroup "
                  "rw,freezer\n")


def procs(cgroup: str, mountinfo: str, step: str = "step_0") -> str:
    out = ffi.new("char[]", 4096)
    assert lib.sq_stepcg_procs(cgroup.encode(), mountinfo.encode(), step.encode(), out,
                               4096) == 0
    return ffi.string(out).decode()


def test_a_stepd_in_its_jobs_freezer_cgroup_gets_the_steps():
    assert procs(STEPD_NODE, MOUNTINFO_NODE) == \
        "/sys/fs/cgroup/freezer/slurm_node3/uid_1001/job_3/step_0/cgroup.procs"
    assert procs("4:freezer:/slurm/uid_5/job_77\n", MOUNTINFO_HOST, "step_batch") == \
        "/sys/fs/cgroup/freezer/slurm/uid_5/job_77/step_batch/cgroup.procs"


@pytest.mark.parametrize("cgroup,mountinfo", [
    ("0::/system.slice/slurmstepd.scope/job_3/step_0/slurm\n", MOUNTINFO_HOST),  # v2
    (STEPD_NODE, "1 0 0:1 / / rw - ext4 /dev/vda rw\n"),  # no freezer hierarchy
    (f"6:freezer:{DOCKER}/slurm_node3/uid_1001/job_3/step_0\n", MOUNTINFO_NODE),  # a task's
    (f"6:freezer:{DOCKER}/slurm_node3/uid_1001/job_x\n", MOUNTINFO_NODE),
    ("6:freezer:/elsewhere/job_3\n", MOUNTINFO_NODE),  # not below the mount's root
    ("", ""),
], ids=["v2", "no-freezer", "task", "not-a-job", "outside-the-mount", "empty"])
def test_nothing_to_join_is_an_empty_path(cgroup, mountinfo):
    assert procs(cgroup, mountinfo) == ""


def test_a_step_name_with_a_slash_joins_nothing_and_a_small_buffer_fails():
    assert procs(STEPD_NODE, MOUNTINFO_NODE, "../../x") == ""
    out = ffi.new("char[]", 16)
    assert lib.sq_stepcg_procs(STEPD_NODE.encode(), MOUNTINFO_NODE.encode(), b"step_0",
                               out, 16) == -1
    assert ffi.string(out) == b""
