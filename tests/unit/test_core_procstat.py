"""Running-container records and /proc/PID/stat parsing (spank/core/procstat.c), via cffi.

The plugin joins a running named container only when both the PID and the start time in
its record still match a live process: these parsers decide what "match" reads."""

import os

import pytest

from squall._core import ffi, lib


def procstat(text: bytes) -> tuple[str, int] | None:
    state = ffi.new("char *")
    start = ffi.new("unsigned long long *")
    buf = ffi.from_buffer(text)
    if lib.sq_procstat_parse(buf, len(text), state, start) != 0:
        return None
    return state[0].decode(), start[0]


def record_parse(text: bytes) -> tuple[int, int] | None:
    pid = ffi.new("long *")
    start = ffi.new("unsigned long long *")
    if lib.sq_running_parse(ffi.from_buffer(text), len(text), pid, start) != 0:
        return None
    return pid[0], start[0]


def record_format(pid: int, start: int, size: int = 64) -> bytes | None:
    out = ffi.new("char[]", size)
    if lib.sq_running_format(pid, start, out, size) != 0:
        return None
    return ffi.string(out)


def stat_line(comm: bytes, state: bytes = b"T", start: int = 987654) -> bytes:
    # Fields 4..21 then starttime (22) and a few more, as the kernel writes them.
    rest = b" ".join([b"1", b"4242", b"4242", b"0", b"-1", b"4194560"] + [b"0"] * 10 +
                     [b"1", b"0"])
    return b"4242 (" + comm + b") " + state + b" " + rest + b" " + str(start).encode() + \
        b" 5 6 7\n"


def test_stat_line_of_this_process_parses_and_start_time_is_stable():
    text = open(f"/proc/{os.getpid()}/stat", "rb").read()
    first = procstat(text)
    assert first is not None and first[0] in "RS"
    assert procstat(open(f"/proc/{os.getpid()}/stat", "rb").read()) == first
    # The parent started earlier (or in the same tick), never later.
    parent = procstat(open(f"/proc/{os.getppid()}/stat", "rb").read())
    assert parent is not None and parent[1] <= first[1]


def test_read_gives_what_parse_gives_and_nothing_for_a_gone_process():
    state = ffi.new("char *")
    start = ffi.new("unsigned long long *")
    assert lib.sq_procstat_read(os.getpid(), state, start) == 0
    assert start[0] == procstat(open(f"/proc/{os.getpid()}/stat", "rb").read())[1]
    assert lib.sq_procstat_read(2**22 + 12345, state, start) == -1  # above pid_max
    assert lib.sq_procstat_read(-1, state, start) == -1


@pytest.mark.parametrize("comm", [b"sh", b"a) T 1 2", b"))", b"(", b"x y z", b""])
def test_command_names_with_parentheses_and_spaces_do_not_shift_fields(comm):
    assert procstat(stat_line(comm)) == ("T", 987654)


@pytest.mark.parametrize("text", [
    b"", b"4242", b"4242 (sh)", b"4242 (sh) ", b"4242 (sh) T", b"4242 (sh)T 1 2",
    b"4242 (sh) T 1 2 3",                               # too few fields
    stat_line(b"sh").replace(b" 987654 ", b" x987654 "),  # start time not a number
    b"4242 (sh) T " + b"1 " * 18 + b"99999999999999999999999",  # overflows 64 bits
])
def test_malformed_stat_lines_are_refused(text):
    assert procstat(text) is None


def test_record_round_trip():
    text = record_format(4242, 987654)
    assert text == b"squall-running 1 4242 987654\n"
    assert record_parse(text) == (4242, 987654)
    assert record_parse(text.rstrip(b"\n")) == (4242, 987654)


def test_record_format_refuses_a_short_buffer():
    assert record_format(4242, 987654, size=10) is None


@pytest.mark.parametrize("text", [
    b"", b"squall-running 1 ", b"squall-running 1 4242", b"squall-running 1 4242 ",
    b"squall-running 2 4242 5\n", b"squall-running 1 0 5\n", b"squall-running 1 -4 5\n",
    b"squall-running 1 2147483648 5\n", b"squall-running 1 42 5\n\n",
    b"squall-running 1 42 5 6\n", b"squall-running 1 42  5\n", b"squall-running 1 4\xff2 5\n",
    b"squall-running 1 42 5\x00",
])
def test_malformed_records_are_refused(text):
    assert record_parse(text) is None


# --- records of containers with namespaces of their own (--container-unshare) ----------------

def record_parse_ns(text: bytes) -> tuple[int, int, int, int] | None:
    pid = ffi.new("long *")
    start = ffi.new("unsigned long long *")
    nspid = ffi.new("long *")
    nsstart = ffi.new("unsigned long long *")
    if lib.sq_running_parse_ns(ffi.from_buffer(text), len(text), pid, start, nspid,
                               nsstart) != 0:
        return None
    return pid[0], start[0], nspid[0], nsstart[0]


def test_record_with_namespace_holder_round_trip():
    out = ffi.new("char[]", 96)
    assert lib.sq_running_format_ns(4242, 987654, 4250, 987700, out, 96) == 0
    text = ffi.string(out)
    assert text == b"squall-running 1 4242 987654 4250 987700\n"
    assert record_parse_ns(text) == (4242, 987654, 4250, 987700)
    assert record_parse(text) is None      # the plain reader refuses it: no silent half-join
    # A record without a holder reads with the holder as 0.
    assert record_parse_ns(b"squall-running 1 4242 987654\n") == (4242, 987654, 0, 0)
    assert lib.sq_running_format_ns(4242, 987654, 0, 0, out, 96) == 0
    assert ffi.string(out) == b"squall-running 1 4242 987654\n"


@pytest.mark.parametrize("text", [
    b"squall-running 1 42 5 6\n", b"squall-running 1 42 5 6 \n", b"squall-running 1 42 5 0 7\n",
    b"squall-running 1 42 5 2147483648 7\n", b"squall-running 1 42 5 6 7 8\n",
    b"squall-running 1 42 5 6 x\n",
])
def test_malformed_records_with_holder_are_refused(text):
    assert record_parse_ns(text) is None
