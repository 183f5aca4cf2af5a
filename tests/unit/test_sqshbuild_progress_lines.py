"""The words of a build's progress lines (python/squall/sqshbuild/progress.py), which the
plugin passes on to srun: what a user reads while a step waits for its image."""

from __future__ import annotations

from squall.sqshbuild.progress import PullCount, Reporter, describe, human


def test_a_pull_says_how_much_of_what_and_how_fast() -> None:
    fields = {"ref": "reg/img:v1", "total": 2 << 30, "pulled": 312 << 20, "written": 0}
    assert describe(fields, 45.2 * (1 << 20)) == \
        "pulls reg/img:v1: 312.0 MiB of 2.0 GiB, 45.2 MiB/s"
    assert describe(fields, None) == "pulls reg/img:v1: 312.0 MiB of 2.0 GiB"


def test_once_every_byte_is_there_it_squashes() -> None:
    fields = {"ref": "reg/img:v1", "total": 10, "pulled": 10, "written": 3 << 20}
    assert describe(fields, 0.0) == "squashes reg/img:v1: 3.0 MiB written"


def test_a_lock_file_that_says_little_or_lies_is_still_a_line() -> None:
    # Another user's tool, or an older squall, may write anything there: never a traceback.
    assert describe({}, None) == "pulls this image: 0 B of 0 B"
    assert describe({"ref": "x", "pulled": "a lot", "total": None}, None) == "pulls x: 0 B of 0 B"


def test_the_count_is_what_the_download_threads_and_the_squash_reported() -> None:
    count = PullCount(Reporter(), "reg/img:v1")
    count.download_start(100)
    count.download_advance(30)
    count.download_advance(20)
    count.squash_advance(7)
    assert count.fields() == {"ref": "reg/img:v1", "total": 100, "pulled": 50, "written": 7}


def test_sizes_read_as_people_write_them() -> None:
    assert [human(n) for n in (0, 1023, 1024, 5 << 20, 3 << 40)] == \
        ["0 B", "1023 B", "1.0 KiB", "5.0 MiB", "3.0 TiB"]
