"""The job epilog removes what a killed slurmstepd left, and nothing planted blocks it (issue 19).

A killed slurmstepd never forgets its `running-pyxis_JOBID.STEPID` record: the job epilog
removes the job's records from the user's runtime directory, only this job's, only regular
files, through a descriptor of the checked directory (spank/plugin/running.c). The epilog
runs as root in slurmd and reads records the user can write: a FIFO planted as
`keeper-JOBID.STEPID` used to block it for good (spank/plugin/keeper.c). The plugin's own
code runs through a probe (spank/plugin/tests/records_probe.c), under a timeout.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from plugin_probe import build_probe


@pytest.fixture(scope="module")
def records_probe(tmp_path_factory) -> Path:
    return build_probe(tmp_path_factory.mktemp("records") / "records_probe", "records_probe.c",
                       "keeper.c", "running.c", "pidfd.c", "runcmd.c")


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


