"""Seeded random inputs through every core parser: each call either succeeds with a
well-formed result or raises SquallError with one line naming the option -- never a crash,
a traceback of another type, or a result that would break an fstab line."""

import random

import pytest

from squall.core import (
    check_container_option,
    container_flags,
    parse_image_ref,
    parse_mounts,
    parse_plugstack_args,
)
from squall.errors import SquallError

ALPHABET = ["a", "b", "z", "0", "9", "A", "/", ".", "..", ":", ",", "+", "@", "#", "-", "_",
            "=", "$", "'", " ", "\n", "\t", "tmpfs", "umount", "ro", "rw", "rbind", "sha256:",
            "docker://", "ü", "\udcff", "\x7f", "size=1G", "localhost", "nvcr.io", "x" * 70]
HEX = "0123456789abcdef" * 4


def inputs(seed: int, count: int):
    rng = random.Random(seed)
    for _ in range(count):
        yield "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12)))


def one_line(exc: SquallError, prefix: str) -> None:
    msg = str(exc)
    assert msg.startswith(prefix), msg
    assert "\n" not in msg and "\r" not in msg and len(msg) < 1024, msg


def test_image_refs_random():
    ok = 0
    for text in inputs(1, 4000):
        try:
            ref = parse_image_ref(text)
        except SquallError as exc:
            one_line(exc, "--container-image")
            continue
        ok += 1
        if ref.kind != "file":
            # The canonical form is a fixed point: it parses back to itself.
            assert parse_image_ref(ref.canonical).canonical == ref.canonical, text
            assert all(c.isprintable() and c != " " for c in ref.canonical), text
    assert ok > 100  # the generator reaches valid forms too, so both paths are exercised


@pytest.mark.parametrize("text", ["ubuntu", "a/b/c:t", f"r.io:5/x@sha256:{HEX}",
                                  "dockerd://x:y", "docker.io/library/x", "myreg#team/img"])
def test_canonical_fixed_point(text):
    canonical = parse_image_ref(text).canonical
    assert parse_image_ref(canonical).canonical == canonical


def test_mounts_random():
    ok = 0
    for text in inputs(2, 4000):
        try:
            mounts = parse_mounts(text, cwd="/home/user")
        except SquallError as exc:
            one_line(exc, "--container-mounts")
            continue
        ok += 1
        for m in mounts:
            fields = m.fstab.split(" ")
            assert len(fields) == 4 and all(fields), m.fstab
            assert all(c.isprintable() for c in m.fstab), m.fstab
            assert "$" not in m.fstab and "/../" not in m.fstab + "/"
            assert fields[1].startswith("/") and fields[1] != "/"
    assert ok > 30


def test_every_flag_random():
    for flag in container_flags():
        for text in inputs(3 + flag.id, 300):
            try:
                check_container_option(flag.name, text)
            except SquallError as exc:
                one_line(exc, f"--{flag.name}")


def test_plugstack_random():
    keys = ["runtime_path", "enroot", "efa", "log", "container_scope", "sbatch_support"]
    rng = random.Random(4)
    for text in inputs(4, 1500):
        arg = f"{rng.choice(keys)}={text}" if rng.random() < 0.8 else text
        try:
            parse_plugstack_args([arg])
        except SquallError as exc:
            one_line(exc, "plugstack.conf")
