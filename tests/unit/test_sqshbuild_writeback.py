"""Early writeback of the image being written: starts, keeps up with a file that appears
late, and stops with its context."""

from __future__ import annotations

import os
import threading
import time

from squall.sqshbuild import writeback


def test_start_writeback_on_a_file(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x" * (1 << 20))
    fd = os.open(p, os.O_RDONLY)
    try:
        assert writeback.start_writeback(fd) is True
    finally:
        os.close(fd)
    assert writeback.start_writeback(-1) is False  # EBADF is reported, not raised


def test_early_writeback_follows_a_late_file_and_stops(tmp_path, monkeypatch):
    calls: list[int] = []
    real = writeback.start_writeback
    monkeypatch.setattr(writeback, "start_writeback", lambda fd: calls.append(fd) or real(fd))
    p = tmp_path / "late"
    with writeback.EarlyWriteback(p, interval=0.01) as wb:
        time.sleep(0.05)
        assert calls == []  # nothing to open yet
        with open(p, "wb") as f:
            f.write(b"y" * 4096)
            deadline = time.monotonic() + 5
            while not calls and time.monotonic() < deadline:
                time.sleep(0.01)
        assert calls
    assert not wb._thread.is_alive()
    assert "writeback" not in {t.name for t in threading.enumerate()}
