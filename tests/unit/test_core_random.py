"""Seeded random inputs through every core parser: each call either succeeds with a
well-formed result or raises SquallError with one line naming the option -- never a crash,
a traceback of another type, or a result that would break an fstab line."""

import random
from itertools import chain

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


# Values the plugin takes, per flag with an argument: near_valid() starts from these, so
# the random tests reach the accepting path as well as the refusing one.
FLAG_VALUES: dict[str, list[str | None]] = {
    "container-image": ["ubuntu", "nvcr.io#nvidia/pytorch:24.01-py3", "/tmp/x.sqsh",
                        "me@reg.io#a/b:t", f"r.io:5/x@sha256:{HEX}", "dockerd://x:y"],
    "container-prestart": ["ubuntu", "/fsx/x.sqsh", "nvcr.io#nvidia/pytorch:24.01-py3"],
    "container-mounts": ["/a:/b", "/a:/b:ro", "/a:/b:ro+rprivate,/c:/d", "/a", "tmpfs:/t"],
    "container-workdir": ["/work", "/a/b"],
    "container-name": ["n", "job:auto", "x:create", "x:exec", "x:no_exec"],
    "container-save": ["/tmp/out.sqsh", "out.sqsh"],
    "container-env": ["A", "A,B_1", "PATH"],
    "container-efa": ["auto", "require", "off"],
    "container-nccl-debug": [None, "", "VERSION", "WARN", "INFO", "TRACE"],
    "container-log": ["quiet", "verbose"],
    "container-unshare": ["net", "ipc", "uts", "net,ipc,uts"],
}
# A flag without an argument: given alone (None), or with a boolean as its environment
# variable would be.
BOOLEAN: list[str | None] = [None, "1", "0", "true", "false", "yes", "no", "y", "n", "on", "off"]
PLUGSTACK_VALUES = {
    "runtime_path": ["/run/squall", "/tmp/rt"], "enroot": ["/usr/bin/enroot"],
    "efa": ["auto", "require", "off"], "log": ["quiet", "verbose"],
    "container_scope": ["job", "global"], "sbatch_support": ["0", "1", "true", "false"],
}


def near_valid(values: list[str | None], seed: int, count: int):
    """Half valid values as they are, half with one token of ALPHABET put in or over a
    character (accepted or refused, whichever the parser decides)."""
    rng = random.Random(seed)
    for _ in range(count):
        v = rng.choice(values)
        if v is None or rng.random() < 0.5:
            yield v
            continue
        i = rng.randint(0, len(v))
        yield v[:i] + rng.choice(ALPHABET) + v[i + rng.randint(0, 1):]


def assert_both_paths(what: str, ok: int, refused: int) -> None:
    """A healthy share of the inputs accepted and some refused: a parser (or a generator)
    that refuses, or accepts, everything fails here."""
    total = ok + refused
    assert ok >= 0.2 * total and refused >= 0.1 * total, f"{what}: {ok} accepted, {refused} refused"


def test_every_flag_random():
    for flag in container_flags():
        assert flag.has_arg == 0 or flag.name in FLAG_VALUES, f"give --{flag.name} values"
        values = FLAG_VALUES.get(flag.name, BOOLEAN)
        ok = refused = 0
        for text in chain(inputs(3 + flag.id, 300), near_valid(values, 3 + flag.id, 300)):
            try:
                check_container_option(flag.name, text)
            except SquallError as exc:
                one_line(exc, f"--{flag.name}")
                refused += 1
                continue
            ok += 1
        for value in values:   # every listed value is taken as it is
            check_container_option(flag.name, value)
        assert_both_paths(f"--{flag.name}", ok, refused)


def test_plugstack_random():
    keys = ["runtime_path", "enroot", "efa", "log", "container_scope", "sbatch_support"]
    rng = random.Random(4)
    args = []
    for text in inputs(4, 1500):
        args.append(f"{rng.choice(keys)}={text}" if rng.random() < 0.8 else text)
    for key in keys:
        args += [f"{key}={v}" for v in near_valid(PLUGSTACK_VALUES[key], 5, 250)]
    ok = refused = 0
    for arg in args:
        try:
            conf = parse_plugstack_args([arg])
        except SquallError as exc:
            one_line(exc, "plugstack.conf")
            refused += 1
            continue
        ok += 1
        key, _, value = arg.partition("=")
        if key in ("runtime_path", "enroot", "efa", "log", "container_scope"):
            assert conf[key] == value, (arg, conf[key])
    assert_both_paths("plugstack.conf", ok, refused)
