"""A dead build's temporary file in the shared cache is told by the pid in its name; after
a node's reboot that pid may name a new, unrelated process (a killed node's leftover was
kept by make test's test_node_faults: pid 109 alive again on the rebooted node3). A
process that started after the file was last written cannot be the one writing it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from squall.sqshbuild.cache.leftovers import remove_dead_temps


def temp_of(tmp_path: Path, pid: int, age_s: float) -> Path:
    p = tmp_path / f".building-sha256-ab.{socket.gethostname()}.{pid}~x1"
    p.write_bytes(b"half an image")
    then = time.time() - age_s
    os.utime(p, (then, then))
    return p


def test_a_pid_reused_after_the_file_was_written_is_not_its_writer(tmp_path: Path) -> None:
    # a live process of this host, started just now, under the name of a file last
    # written an hour ago: the file's writer is gone
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.2)
        old = temp_of(tmp_path, proc.pid, 3600)
        gone = remove_dead_temps(tmp_path, ".building-*", any_host=True)
        assert [p for p, _ in gone] == [old]
    finally:
        proc.kill()
        proc.wait()


def test_a_live_writer_keeps_its_file(tmp_path: Path) -> None:
    # the process started before the file was written: it may be writing it
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.2)
        fresh = temp_of(tmp_path, proc.pid, 0)
        assert remove_dead_temps(tmp_path, ".building-*", any_host=True) == []
        assert fresh.exists()
    finally:
        proc.kill()
        proc.wait()
