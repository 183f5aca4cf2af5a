"""A build waiting for another's download of a layer (issue 39): when it stops waiting
(layerwait.HolderWatch), what its progress lines say, and that the first verified copy of
a layer is never replaced (noreplace.place_new, layerfiles.LayerTar.publish)."""

from __future__ import annotations

import ctypes
import errno
import gzip
import hashlib
import os
import socket
import subprocess

import pytest

from squall.sqshbuild import noreplace
from squall.sqshbuild.cache.leftovers import remove_dead_temps
from squall.sqshbuild.layerfiles import LayerTar
from squall.sqshbuild.layerwait import FLOOR, HolderWatch, status
from squall.sqshbuild.progress import ProgressLines, Reporter, describe

DIGEST = "sha256:" + "ab" * 32


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def holder(pulled: int, size: int = 0, **more: object) -> dict[str, object]:
    return {"host": "node1", "pid": 123, "since": 1.0, "user": "squall-builder",
            "state": "pulls", "pulled": pulled, "size": size, **more}


def watch(size: int = 0, window: float = 30.0) -> tuple[HolderWatch, Clock]:
    clock = Clock()
    return HolderWatch(DIGEST, size, window, clock=clock), clock


def test_a_trickle_is_given_up_on_after_one_window_and_not_before():
    w, clock = watch()
    for second in range(30):
        w.see(holder(4096 * second))
        assert w.why == "", second
        clock.now += 1
    w.see(holder(4096 * 30))
    assert "brought 120.0 KiB in 30 s" in w.why and "64.0 KiB/s" in w.why, w.why


def test_a_holder_that_keeps_the_floor_is_waited_for():
    w, clock = watch()
    for second in range(200):
        w.see(holder(FLOOR * second))
        clock.now += 1
    assert w.why == ""


def test_a_holder_making_its_layer_durable_or_saying_nothing_is_waited_for():
    w, clock = watch()
    for _ in range(100):
        w.see(holder(0, state="syncs"))
        w.see({"host": "node1", "pid": 123, "since": 1.0})   # an older sqshbuild
        w.see(None)
        clock.now += 1
    assert w.why == ""


def test_a_new_holder_is_watched_afresh():
    w, clock = watch()
    for _ in range(20):
        w.see(holder(0))
        clock.now += 1
    for _ in range(20):
        w.see(holder(0, pid=456))
        clock.now += 1
    assert w.why == ""


def test_a_blob_that_cannot_be_this_layer_is_given_up_on_at_once():
    w, _ = watch(size=1000)
    w.see(holder(1001))
    assert "for a layer this build's manifest gives 1000 bytes" in w.why
    w, _ = watch(size=1000)
    w.see(holder(10, size=999))
    assert "a blob of 999 bytes" in w.why


def test_the_line_names_the_holder_whom_it_serves_and_how_fast_it_goes():
    w, clock = watch()
    w.see(holder(0, **{"for": "alice"}))
    assert w.text() == ("layer sha256:abababababab, pulled by squall-builder on node1 "
                        "(pid 123) for alice: 0 B of ?")
    clock.now += 3
    w.see(holder(12288, size=49152, **{"for": "alice"}))
    assert w.text().endswith(": 12.0 KiB of 48.0 KiB, 4.0 KiB/s"), w.text()
    w.see(holder(0, state="syncs"))
    assert w.text().endswith("(pid 123): all there, being written to disk"), w.text()


def test_the_holders_status_says_who_it_is_and_whom_it_serves():
    assert status(DIGEST, 5, 10, "alice") | {"user": "x"} == {
        "layer": DIGEST, "user": "x", "for": "alice", "state": "pulls", "pulled": 5,
        "size": 10}
    assert status(DIGEST, None, 0, "")["state"] == "syncs"


def test_a_waiting_builds_lines_name_whom_it_waits_for(capsys):
    lines = ProgressLines(Reporter(), 5, "reg/app:v1")
    lines.host = "node2"
    lines.download_start(3 << 20)
    lines.close()
    lines.layer_wait(DIGEST, "layer sha256:abababababab, pulled by root on node1 (pid 1)")
    assert lines.lines(0.0, moved=False) == [
        "node2 waits for layer sha256:abababababab, pulled by root on node1 (pid 1)"]
    said = lines.lines(1024.0, moved=True)
    assert said[0].startswith("node2 pulls reg/app:v1: 0 B of 3.0 MiB, 1.0 KiB/s"), said
    assert said[1].startswith("node2 waits for layer"), said
    # the builds waiting for this one's image read it from its lock
    assert describe(lines.fields(), None).endswith(
        "; waits for layer sha256:abababababab, pulled by root on node1 (pid 1)")
    lines.layer_wait(DIGEST, None)
    assert "waiting" not in lines.fields() and len(lines.lines(0.0, moved=False)) == 1


# -- the first verified copy wins --------------------------------------------------------------
def test_place_new_never_replaces(tmp_path):
    (tmp_path / "a").write_text("first")
    (tmp_path / "b").write_text("second")
    assert noreplace.place_new(tmp_path / "b", tmp_path / "a") is False
    assert (tmp_path / "a").read_text() == "first" and (tmp_path / "b").read_text() == "second"
    assert noreplace.place_new(tmp_path / "b", tmp_path / "c") is True
    assert not (tmp_path / "b").exists() and (tmp_path / "c").read_text() == "second"


@pytest.mark.parametrize("err", [errno.EINVAL, errno.ENOSYS])
def test_place_new_without_renameat2_links(tmp_path, monkeypatch, err):
    """NFS has no RENAME_NOREPLACE: a hard link fails on an existing name just the same."""
    def unsupported(*_a: object) -> int:
        ctypes.set_errno(err)
        return -1

    monkeypatch.setattr(noreplace, "_RENAMEAT2", unsupported)
    (tmp_path / "a").write_text("first")
    (tmp_path / "b").write_text("second")
    assert noreplace.place_new(tmp_path / "b", tmp_path / "a") is False
    assert (tmp_path / "a").read_text() == "first"
    assert noreplace.place_new(tmp_path / "b", tmp_path / "c") is True
    assert os.stat(tmp_path / "c").st_nlink == 1 and not (tmp_path / "b").exists()


@pytest.mark.parametrize("plain", [True, False])
def test_a_download_that_finishes_second_keeps_the_copy_placed_first(tmp_path, plain):
    """The holder that trickled finishes after a waiter placed the layer: the waiter's
    file stays (the same bytes: content addressed), the holder's goes."""
    data = b"layer tar bytes " * 100
    blob = data if plain else gzip.compress(data)
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    final = tmp_path / "l.tar"
    final.write_bytes(data)
    placed = final.stat().st_ino
    partial = tmp_path / "l.partial"
    partial.write_bytes(blob)
    tar = LayerTar(tmp_path / "l.tar.tmp", digest, None, partial)
    tar.start()
    tar.feed(blob)
    tar.publish(final, "test")
    tar.close()
    assert final.stat().st_ino == placed and final.read_bytes() == data
    # the inflated tar goes; the blob goes too (a plain one here, else _download_once)
    left = ["l.tar"] if plain else ["l.partial", "l.tar"]
    assert sorted(p.name for p in tmp_path.iterdir()) == left


def test_bytes_are_counted_as_they_come_and_never_twice(tmp_path):
    seen: list[int] = []
    blob = b"x" * 5000
    tar = LayerTar(tmp_path / "l.tar.tmp", "sha256:" + hashlib.sha256(blob).hexdigest(),
                    seen.append)
    tar.start()
    for _ in range(10):
        tar.arrived(100)   # a trickle: no whole chunk yet
    assert sum(seen) == 1000 and tar.wire == 1000
    tar.start()            # cut, and the registry could not resume
    tar.arrived(3000)
    tar.feed(blob[:3000])
    assert sum(seen) == 3000
    tar.arrived(2000)
    tar.feed(blob[3000:])
    assert sum(seen) == 5000
    tar.close()


def test_a_waiters_names_are_cleaned_when_its_build_died(tmp_path):
    proc = subprocess.Popen(["true"])
    proc.wait()
    host = socket.gethostname()
    dead = [f"{'ab' * 32}.tar.own-{host}.{proc.pid}~0123abcd",
            f"{'ab' * 32}.tar.own-{host}.{proc.pid}~0123abcd.tmp",
            f"{'ab' * 32}.partial.own-{host}.{proc.pid}~0123abcd"]
    alive = f"{'ab' * 32}.tar.own-{host}.{os.getpid()}~0123abcd"
    for name in [*dead, alive]:
        (tmp_path / name).write_bytes(b"x")
    removed = remove_dead_temps(tmp_path, "*.own-*")
    assert sorted(p.name for p, _ in removed) == sorted(dead)
    assert [p.name for p in tmp_path.iterdir()] == [alive]
