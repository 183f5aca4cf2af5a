"""Directories that sixteen nodes make at once on a shared file system (safefs.mkdir_open).

On GlusterFS (the scale cluster's /fsx) a client may see another client's mkdir of the same
name half done: mkdir, open and fchmod answer ENOENT, ENODATA or EPERM for a moment. CI saw
a fresh cache's first job fail on two of sixteen nodes that way. Those answers are waited
out for a few seconds; any other answer is raised at once, and one that lasts is raised
naming the directory.
"""

from __future__ import annotations

import errno
import os
import stat

import pytest

from squall.errors import SquallError
from squall.sqshbuild import safefs
from squall.sqshbuild.cache.image_cache import open_shared


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(safefs.time, "sleep", lambda _s: None)


def failing(monkeypatch: pytest.MonkeyPatch, name: str, code: int, times: int,
            only: str | None = None) -> list[int]:
    """Make os.<name> fail with ``code`` its first ``times`` calls (on ``only``, when
    given); the returned list counts the calls."""
    real = getattr(os, name)
    calls: list[int] = []

    def fake(*args, **kw):
        if only is None or (args and args[0] == only):
            calls.append(1)
            if len(calls) <= times:
                raise OSError(code, os.strerror(code), args[0] if args else None)
        return real(*args, **kw)

    monkeypatch.setattr(os, name, fake)
    return calls


def make_d(parent) -> bool:
    """safefs.mkdir_open of ``parent``/d, its descriptors closed: whether it made it."""
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd, created = safefs.mkdir_open(pfd, "d")
        os.close(fd)
    finally:
        os.close(pfd)
    return created


@pytest.mark.parametrize("code", [errno.ENODATA, errno.EPERM, errno.ENOENT, errno.ESTALE])
def test_mkdir_that_settles_is_made(tmp_path, monkeypatch, code):
    calls = failing(monkeypatch, "mkdir", code, 2, only="d")
    created = make_d(tmp_path)
    assert created and (tmp_path / "d").is_dir() and len(calls) == 3


def test_another_clients_half_made_directory_is_opened(tmp_path, monkeypatch):
    """mkdir says it exists, open says it does not: the other client's mkdir settles."""
    (tmp_path / "d").mkdir()
    calls = failing(monkeypatch, "open", errno.ENOENT, 1, only="d")
    created = make_d(tmp_path)
    assert not created and len(calls) == 2


def test_an_answer_that_lasts_is_raised_after_a_bounded_wait(tmp_path, monkeypatch):
    calls = failing(monkeypatch, "mkdir", errno.ENODATA, 10_000, only="d")
    with pytest.raises(OSError) as info:
        make_d(tmp_path)
    assert info.value.errno == errno.ENODATA
    assert len(calls) == len(safefs._SETTLE_WAITS) + 1


def test_other_answers_are_not_waited_for(tmp_path, monkeypatch):
    calls = failing(monkeypatch, "mkdir", errno.EACCES, 10_000, only="d")
    with pytest.raises(PermissionError):
        make_d(tmp_path)
    assert len(calls) == 1


def test_a_new_directory_gets_its_mode_after_a_moments_eperm(tmp_path, monkeypatch):
    (tmp_path / "d").mkdir(mode=0o700)
    fd = os.open(tmp_path / "d", os.O_RDONLY | os.O_DIRECTORY)
    calls = failing(monkeypatch, "fchmod", errno.EPERM, 1)
    try:
        safefs.set_new_dir(fd, 0o755, None)
    finally:
        os.close(fd)
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o755 and len(calls) == 2


def test_the_shared_cache_is_made_though_its_subdirectories_settle_slowly(tmp_path,
                                                                          monkeypatch):
    calls = failing(monkeypatch, "mkdir", errno.ENODATA, 3, only="layers")
    cache = open_shared(tmp_path / "cache")
    assert cache.layer_root.is_dir() and len(calls) == 4


def test_a_subdirectory_that_never_settles_is_named(tmp_path, monkeypatch):
    failing(monkeypatch, "mkdir", errno.ENODATA, 10_000, only="layers")
    with pytest.raises(SquallError) as info:
        open_shared(tmp_path / "cache")
    text = str(info.value)
    assert f"{tmp_path / 'cache' / 'layers'}" in text and "No data available" in text
    assert "\n" not in text
