"""Which of a container's mounts a step gets fresh (spank/core/mountinfo.c), via cffi."""

from squall._core import ffi, lib

HOST = """\
22 1 0:21 / /proc rw,nosuid - proc proc rw
25 1 0:23 / /dev/shm rw,nosuid,nodev - tmpfs shm rw,size=65536k
26 1 0:24 / /tmp rw - tmpfs tmpfs rw
"""
CONTAINER = """\
300 299 0:50 / / ro,nosuid,nodev - overlay overlay rw,lowerdir=/x
301 300 0:21 / /proc rw,nosuid - proc proc rw
302 300 0:23 / /dev/shm rw,nosuid,nodev - tmpfs shm rw,size=65536k
303 300 0:51 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw,mode=755
304 300 0:52 / /mnt/with\\040space rw - tmpfs tmpfs rw
305 300 0:24 /sub /scratch rw - tmpfs tmpfs rw
306 300 0:51 /a /tmp/again rw - tmpfs tmpfs rw
307 300 8:1 /data /data rw - ext4 /dev/vda rw
"""


def fresh(container: str, host: str | None, size: int = 256) -> tuple[int, str]:
    out = ffi.new("char[]", size)
    rc = lib.sq_mountinfo_fresh_tmpfs(container.encode(), host.encode() if host else ffi.NULL,
                                      out, size)
    return rc, ffi.string(out).decode()


def test_tmpfs_of_the_container_only_each_once():
    assert fresh(CONTAINER, HOST) == (0, "0:51 0:52")


def test_without_the_host_every_tmpfs_counts():
    assert fresh(CONTAINER, None) == (0, "0:23 0:51 0:52 0:24")


def test_malformed_lines_are_skipped_and_a_short_buffer_says_so():
    assert fresh("garbage\n\n1 2\n" + CONTAINER, HOST) == (0, "0:51 0:52")
    rc, text = fresh(CONTAINER, HOST, size=6)
    assert rc == -1 and text == "0:51"
