"""Early writeback of the image being written: starts, keeps up with a file that appears
late, and stops with its context."""

from __future__ import annotations

import os
import threading

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
    p = tmp_path / "late"
    calls: list[int] = []
    called = threading.Event()
    real = writeback.start_writeback

    def counting_writeback(fd: int) -> bool:
        calls.append(fd)
        called.set()
        return real(fd)

    misses: list[str] = []
    looked = threading.Event()   # the thread has looked for the missing file three times
    real_open = os.open

    def counting_open(path, flags, *args, **kwargs):
        try:
            return real_open(path, flags, *args, **kwargs)
        except FileNotFoundError:
            if os.fspath(path) == str(p):
                misses.append(str(path))
                if len(misses) >= 3:
                    looked.set()
            raise

    monkeypatch.setattr(writeback, "start_writeback", counting_writeback)
    monkeypatch.setattr(os, "open", counting_open)
    with writeback.EarlyWriteback(p, interval=0.01) as wb:
        assert looked.wait(5), misses
        assert calls == []  # nothing to open yet, so nothing written back
        with open(p, "wb") as f:
            f.write(b"y" * 4096)
            assert called.wait(5), "the file appeared but was never written back"
        assert calls
    assert not wb._thread.is_alive()
    assert "writeback" not in {t.name for t in threading.enumerate()}
