"""The node-local cache of extracted images: key and eviction (spank/core/nodecache.c)."""

from squall._core import ffi, lib

SB = bytes(range(96))


def key(identity: str, superblock: bytes = SB) -> str:
    out = ffi.new("char[33]")
    assert lib.sq_cache_key(identity.encode(), superblock, len(superblock), out) == 0
    return ffi.string(out).decode()


def test_key_changes_with_the_identity_and_the_superblock():
    k = key("0123456789abcdef")
    assert len(k) == 32 and key("0123456789abcdef") == k
    assert key("0123456789abcdee") != k
    rewritten = bytearray(SB)
    rewritten[8] ^= 1                      # mkfs_time of a rewritten image
    assert key("0123456789abcdef", bytes(rewritten)) != k
    assert key("0123456789abcdef", SB + b"more") == k   # only the superblock counts


def plan(entries, max_bytes, max_age=1000, now=10_000):
    arr = ffi.new("struct sq_cache_entry[]", [
        {"bytes": b, "last_use": t, "in_use": u} for b, t, u in entries])
    mark = ffi.new("int[]", max(len(entries), 1))
    n = lib.sq_cache_evict_plan(arr, len(entries), max_bytes, max_age, now, mark)
    marked = [i for i in range(len(entries)) if mark[i]]
    assert n == len(marked)
    return marked


def test_nothing_to_evict_under_the_limits():
    assert plan([(10, 9500, 0), (20, 9900, 0)], max_bytes=100) == []


def test_least_recently_used_first_until_under_the_size_limit():
    entries = [(40, 9600, 0), (40, 9300, 0), (40, 9900, 0)]
    assert plan(entries, max_bytes=80) == [1]
    assert plan(entries, max_bytes=40) == [0, 1]


def test_too_old_goes_whatever_the_size():
    assert plan([(1, 8000, 0), (1, 9990, 0)], max_bytes=10**9) == [0]


def test_an_entry_in_use_is_never_evicted():
    entries = [(100, 1, 1), (100, 9999, 0)]
    assert plan(entries, max_bytes=50) == [1]
    assert plan([(100, 1, 1)], max_bytes=0) == []


# --- yielding to the step (issue 22): the duty cycle's decision ---------------------------

def duty_after(duty: int, window_us: int = 200_000, busy_us: int = 0, own_us: int = 0,
               io_stall_us: int = -1) -> int:
    obs = ffi.new("struct sq_yield_obs *", {"window_us": window_us, "busy_us": busy_us,
                                           "own_us": own_us, "io_stall_us": io_stall_us})
    return int(lib.sq_yield_next(duty, obs))


def test_alone_on_the_node_the_extraction_runs_at_full_speed():
    # Its own CPU use (two threads busy) is not work beside it.
    assert duty_after(lib.SQ_YIELD_FULL, busy_us=400_000, own_us=390_000) == lib.SQ_YIELD_FULL
    assert duty_after(lib.SQ_YIELD_FULL, busy_us=0, own_us=0, io_stall_us=0) == lib.SQ_YIELD_FULL


def test_a_step_beside_it_drops_it_to_the_floor_at_once():
    # One task busy on one CPU besides the extractor's own time.
    assert duty_after(lib.SQ_YIELD_FULL, busy_us=390_000, own_us=190_000) == lib.SQ_YIELD_FLOOR
    # Just above a quarter of one CPU is work; just below is noise (slurmd, kworkers).
    assert duty_after(lib.SQ_YIELD_FULL, busy_us=51_000) == lib.SQ_YIELD_FLOOR
    assert duty_after(lib.SQ_YIELD_FULL, busy_us=49_000) == lib.SQ_YIELD_FULL
    # Stays there while the work goes on, whatever the extractor did.
    assert duty_after(lib.SQ_YIELD_FLOOR, busy_us=200_000, own_us=20_000) == lib.SQ_YIELD_FLOOR


def test_io_stalls_beyond_its_own_share_count_as_work():
    # At the floor it runs a tenth of the period: stalls over that plus a fifth are others'.
    assert duty_after(lib.SQ_YIELD_FLOOR, io_stall_us=100_000) == lib.SQ_YIELD_FLOOR
    assert duty_after(lib.SQ_YIELD_FLOOR, io_stall_us=50_000) == 2 * lib.SQ_YIELD_FLOOR
    # At full speed all the stalls may be its own: not taken for work.
    assert duty_after(lib.SQ_YIELD_FULL, io_stall_us=200_000) == lib.SQ_YIELD_FULL


def test_back_to_full_speed_by_doubling_once_the_node_is_idle():
    duty, seen = lib.SQ_YIELD_FLOOR, []
    while duty < lib.SQ_YIELD_FULL:
        duty = duty_after(duty)
        seen.append(duty)
    assert seen == [200, 400, 800, 1000]


def test_an_odd_observation_never_stops_it_for_good():
    assert duty_after(0) == lib.SQ_YIELD_FLOOR * 2
    assert duty_after(5000) == lib.SQ_YIELD_FULL
    assert duty_after(lib.SQ_YIELD_FULL, window_us=0, busy_us=10**9) == lib.SQ_YIELD_FLOOR
    assert duty_after(lib.SQ_YIELD_FULL, busy_us=0, own_us=10**9) == lib.SQ_YIELD_FULL
    assert lib.sq_yield_next(lib.SQ_YIELD_FULL, ffi.NULL) == lib.SQ_YIELD_FLOOR


# --- resuming an extraction: the image's listing and what is already complete -------------

def parse(line: str) -> dict[str, object] | None:
    raw = line.encode()
    buf = ffi.new("char[]", raw)
    e = ffi.new("struct sq_list_entry *")
    if lib.sq_cache_list_parse(buf, len(raw), e) != 0:
        return None
    return {"type": e.type.decode(), "mode": e.mode, "size": e.size, "mtime": e.mtime,
            "uid": e.uid, "gid": e.gid,
            "name": raw[e.name_off:e.name_off + e.name_len].decode(),
            "target": raw[e.target_off:e.target_off + e.target_len].decode()}


def test_listing_lines_of_every_kind():
    assert parse("drwxr-xr-x 0/0                     913 2026-12-02 00:46 squashfs-root") == {
        "type": "d", "mode": 0o755, "size": 913, "mtime": 1796172360, "uid": 0, "gid": 0,
        "name": "", "target": ""}
    f = parse("-rwsr-x--T 1000/100              12901 2020-09-13 12:26 squashfs-root/d0/a b")
    assert f is not None
    assert (f["type"], f["mode"], f["size"], f["mtime"], f["uid"], f["gid"], f["name"]) == (
        "-", 0o5750, 12901, 1600000000 - 40, 1000, 100, "d0/a b")
    ln = parse("lrwxrwxrwx 0/0          4 2026-12-02 00:44 squashfs-root/lnk -> a/f1")
    assert ln is not None and (ln["type"], ln["name"], ln["target"]) == ("l", "lnk", "a/f1")
    dev = parse("crw-r--r-- 0/0            1,  3 2020-09-13 12:26 squashfs-root/dev/null")
    assert dev is not None and (dev["type"], dev["size"], dev["name"]) == ("c", 0, "dev/null")
    sgid = parse("drwxrwsrwt 0/0 3 2020-09-13 12:26 squashfs-root/tmp")
    assert sgid is not None and sgid["mode"] == 0o3777


def test_lines_that_cannot_be_trusted_are_refused():
    for line in ["nl",                                   # the rest of a name with a newline
                 "",
                 "-rw-r--r-- 0/0 3 2020-09-13 12:26 elsewhere/f",
                 "-rw-r--r-- 0/0 3 2020-09-13 12:26 squashfs-rootf",
                 "-rw-r--r-- 0/0 x3 2020-09-13 12:26 squashfs-root/f",
                 "-rw-r--r-- 0/0 3 2020-13-13 12:26 squashfs-root/f",
                 "-rw-r--r-- 0/0 3 2020-09-13 12:26",
                 "?rw-r--r-- 0/0 3 2020-09-13 12:26 squashfs-root/f",
                 "lrwxrwxrwx 0/0 4 2020-09-13 12:26 squashfs-root/a -> b -> c"]:
        assert parse(line) is None, line


def listable(name: str) -> bool:
    raw = name.encode()
    return bool(lib.sq_cache_name_listable(raw, len(raw)))


def test_names_an_exclude_file_cannot_express_are_not_kept():
    for name in ["usr/lib/x.so", "a b/c", "a*", "b[1]", "é/ü", "not/#first"]:
        assert listable(name), name
    for name in ["#hash", " lead", "trail ", "back\\slash", "tab\tx", "nl\nx", "del\x7f", ""]:
        assert not listable(name), name


def complete(st_mode: int, size: int, mtime: int, first_start: int = 1_700_000_000,
             line: str = "-rw-r--r-- 0/0 5000 2020-09-13 12:26 squashfs-root/a/f2") -> bool:
    raw = line.encode()
    e = ffi.new("struct sq_list_entry *")
    assert lib.sq_cache_list_parse(ffi.new("char[]", raw), len(raw), e) == 0
    return bool(lib.sq_cache_file_complete(e, st_mode, size, mtime, first_start))


def test_a_file_is_complete_only_as_listed_and_written_before_the_extraction():
    assert complete(0o100644, 5000, 1600000000)
    assert complete(0o100644, 5000, 1600000000 - 40)       # the listed minute's first second
    assert not complete(0o100644, 4096, 1600000000)        # cut short while written
    assert not complete(0o100600, 5000, 1600000000)        # not yet given its mode
    assert not complete(0o100644, 5000, 1700000100)        # not yet given its times
    assert not complete(0o100644, 5000, 1600000000 + 60)   # another minute
    assert not complete(0o120777, 5000, 1600000000)        # not a regular file
    # A file whose listed time is after the extraction began cannot be told: again.
    assert not complete(0o100644, 5000, 1600000000, first_start=1599999999)
    assert not complete(0o40755, 5000, 1600000000,
                        line="drwxr-xr-x 0/0 5000 2020-09-13 12:26 squashfs-root/a")


# --- which jobs start an extraction (local_cache_max_nodes) -------------------------------

def may_fill(nodes: str | None, max_nodes: int) -> bool:
    return bool(lib.sq_cache_may_fill(nodes.encode() if nodes is not None else ffi.NULL,
                                      max_nodes))


def test_jobs_on_more_nodes_than_the_bound_do_not_start_extractions():
    assert may_fill("16", 16) and may_fill("1", 16)
    assert not may_fill("17", 16) and not may_fill("1000", 16)
    assert may_fill("1000", 0)                              # 0: any number of nodes
    assert may_fill(None, 1) and may_fill("", 1)             # no count: this node alone
    assert not may_fill("99999999999999999999", 16)          # too many to count: many
    assert may_fill("x", 1) and may_fill("-3", 1)


def test_any_line_parses_within_its_bounds_or_is_refused():
    """The listing is the user's own image's: mangled lines never read past their end."""
    import random
    rnd = random.Random(22)
    seeds = [b"-rw-r--r-- 0/0 5000 2020-09-13 12:26 squashfs-root/a/f2",
             b"lrwxrwxrwx 0/0 4 2026-12-02 00:44 squashfs-root/lnk -> a/f1",
             b"crw-r--r-- 0/0 1,  3 2020-09-13 12:26 squashfs-root/dev/null"]
    e = ffi.new("struct sq_list_entry *")
    for _ in range(20_000):
        line = bytearray(rnd.choice(seeds))
        for _ in range(rnd.randint(1, 4)):
            op, i = rnd.randrange(3), rnd.randrange(len(line) + 1)
            if op == 0:
                line[i:i] = bytes([rnd.randrange(256)])
            elif op == 1 and i < len(line):
                del line[i]
            elif i < len(line):
                line[i] = rnd.choice(b" /->:,0123456789-lrwxdst")
        n = rnd.randint(0, len(line))            # also a length shorter than the buffer
        if lib.sq_cache_list_parse(ffi.new("char[]", bytes(line)), n, e) == 0:
            assert e.name_off + e.name_len <= n
            assert e.target_off + e.target_len <= n
            assert e.type in b"-dlcbps" and e.mode <= 0o7777


def test_an_extraction_starts_yielding_and_reaches_full_speed_within_a_second_if_idle():
    # It starts as a step starts (issue 30): its first period is the floor's, not full.
    assert lib.SQ_YIELD_START == lib.SQ_YIELD_FLOOR < lib.SQ_YIELD_FULL
    duty, periods = lib.SQ_YIELD_START, 0
    while duty < lib.SQ_YIELD_FULL:
        duty, periods = duty_after(duty), periods + 1
    assert periods * lib.SQ_YIELD_PERIOD_MS <= 1000


# --- the job prolog's node count (SLURM_NODELIST, for --container-prestart) ---------------

def hostlist_count(text: str | None) -> int:
    return int(lib.sq_hostlist_count(text.encode() if text is not None else ffi.NULL))


def test_a_host_list_counts_its_hosts_as_slurm_expands_it():
    assert hostlist_count("node1") == 1
    assert hostlist_count("node[1-3]") == 3
    assert hostlist_count("node[1-3,7],login") == 5
    assert hostlist_count("s[001-128]") == 128
    assert hostlist_count("r[1-2]n[01-04]") == 8                # ranges multiply
    assert hostlist_count("a,b,c") == 3
    assert hostlist_count("node[5]") == 1


def test_what_is_not_a_host_list_counts_as_none():
    for bad in [None, "", "node[", "node[3-1]", "node[1-]", "node]1[", "a,,b", "node[x]",
                "node[1-2", ",", "n[1-1000001]", "a[1-1000]b[1-1001]"]:
        assert hostlist_count(bad) == -1, bad
