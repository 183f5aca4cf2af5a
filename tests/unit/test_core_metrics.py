"""The node's metrics record and its text (spank/core/metrics.c), driven through cffi."""

import re
from pathlib import Path

from squall._core import ffi, lib

ROOT = Path(__file__).resolve().parents[2]


def _record():
    r = ffi.new("struct sq_metrics_record *")
    lib.sq_metrics_init(r)
    return r


def _step(**kw):
    s = ffi.new("struct sq_metrics_step *")
    lib.sq_metrics_step_init(s)
    for k, v in kw.items():
        if k == "phase":
            for i, sec in v.items():
                s.phase_s[i] = sec
        else:
            setattr(s, k, v)
    return s


def _render(r, now=1700000000) -> str:
    out = ffi.new(f"char[{lib.SQ_METRICS_TEXT_MAX}]")
    n = lib.sq_metrics_render(r, now, out, lib.SQ_METRICS_TEXT_MAX)
    assert n > 0
    text = ffi.string(out).decode()
    assert len(text) == n
    return text


def _samples(text: str) -> dict[str, float]:
    """name{labels} -> value, every sample line; each line parses as the text format."""
    got = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.fullmatch(r"# (HELP|TYPE) squall_[a-z_]+ .+", line), line
            continue
        m = re.fullmatch(r'(squall_[a-z_]+(?:\{[a-z_]+="[^"]*"(?:,[a-z_]+="[^"]*")*\})?) '
                         r"([0-9.]+)", line)
        assert m, line
        got[m.group(1)] = float(m.group(2))
    return got


def test_an_empty_record_renders_every_series_at_zero():
    s = _samples(_render(_record()))
    assert s['squall_container_starts_total{source="image"}'] == 0
    assert s['squall_container_starts_total{source="local_copy"}'] == 0
    assert s['squall_container_starts_total{source="kept"}'] == 0
    assert s['squall_phase_seconds_count{phase="join"}'] == 0
    assert s['squall_failures_total{reason="policy"}'] == 0
    assert s["squall_policy_refusals_total"] == 0
    assert s["squall_metrics_updated_timestamp_seconds"] == 1700000000


def test_a_step_moves_its_source_phases_and_copy_lookup():
    r = _record()
    lib.sq_metrics_add(r, _step(source=lib.SQ_MSRC_LOCAL_COPY, local_copy=1,
                                phase={lib.SQ_MPH_RESOLVE: 0.003, lib.SQ_MPH_START: 0.7,
                                       lib.SQ_MPH_JOIN: 0.02}))
    lib.sq_metrics_add(r, _step(source=lib.SQ_MSRC_IMAGE, local_copy=0, image_bytes=4096,
                                phase={lib.SQ_MPH_START: 2.0}))
    s = _samples(_render(r))
    assert s['squall_steps_total{result="ok"}'] == 2
    assert s['squall_container_starts_total{source="local_copy"}'] == 1
    assert s['squall_container_starts_total{source="image"}'] == 1
    assert s['squall_local_copy_lookups_total{result="hit"}'] == 1
    assert s['squall_local_copy_lookups_total{result="miss"}'] == 1
    assert s["squall_shared_image_bytes_total"] == 4096
    # cumulative buckets, +Inf equal to the count, the sum in seconds
    assert s['squall_phase_seconds_bucket{phase="start",le="0.5"}'] == 0
    assert s['squall_phase_seconds_bucket{phase="start",le="1"}'] == 1
    assert s['squall_phase_seconds_bucket{phase="start",le="2.5"}'] == 2
    assert s['squall_phase_seconds_bucket{phase="start",le="+Inf"}'] == 2
    assert s['squall_phase_seconds_count{phase="start"}'] == 2
    assert abs(s['squall_phase_seconds_sum{phase="start"}'] - 2.7) < 1e-6
    assert s['squall_phase_seconds_count{phase="resolve"}'] == 1
    assert s['squall_phase_seconds_bucket{phase="resolve",le="0.005"}'] == 1
    assert s['squall_phase_seconds_count{phase="prepare"}'] == 0   # not measured


def test_failures_by_reason_and_policy_refusals():
    r = _record()
    lib.sq_metrics_add(r, _step(reason=lib.SQ_MREASON_POLICY, build=0, build_s=1.5))
    lib.sq_metrics_add(r, _step(reason=lib.SQ_MREASON_RESOLVE))
    lib.sq_metrics_add(r, _step(reason=999))           # out of range: counted as other
    s = _samples(_render(r))
    assert s['squall_steps_total{result="failed"}'] == 3
    assert s['squall_failures_total{reason="policy"}'] == 1
    assert s['squall_failures_total{reason="resolve"}'] == 1
    assert s['squall_failures_total{reason="other"}'] == 1
    assert s["squall_policy_refusals_total"] == 1
    assert s['squall_image_builds_total{result="failed"}'] == 1
    assert s["squall_image_build_seconds_count"] == 1
    assert s['squall_image_build_seconds_bucket{le="1"}'] == 0
    assert s['squall_image_build_seconds_bucket{le="2.5"}'] == 1


def test_hostile_values_are_clamped_not_trusted():
    r = _record()
    lib.sq_metrics_add(r, _step(source=77, local_copy=5,
                                phase={lib.SQ_MPH_START: float("nan"),
                                       lib.SQ_MPH_JOIN: 1e300, lib.SQ_MPH_RESOLVE: -3.0}))
    s = _samples(_render(r))
    assert sum(v for k, v in s.items() if k.startswith("squall_container_starts_total")) == 0
    assert s['squall_phase_seconds_count{phase="start"}'] == 0
    assert s['squall_phase_seconds_count{phase="resolve"}'] == 0
    assert s['squall_phase_seconds_count{phase="join"}'] == 1
    assert s['squall_phase_seconds_sum{phase="join"}'] == 86400    # a day at most
    assert s['squall_local_copy_lookups_total{result="hit"}'] == 0


def test_the_record_round_trips_and_a_bad_one_restarts_counted():
    r = _record()
    lib.sq_metrics_add(r, _step(source=lib.SQ_MSRC_KEPT))
    raw = bytes(ffi.buffer(r))
    back = ffi.new("struct sq_metrics_record *")
    assert lib.sq_metrics_load(back, raw, len(raw)) == 0
    assert back.starts[lib.SQ_MSRC_KEPT] == 1 and back.resets == 0
    assert lib.sq_metrics_load(back, ffi.NULL, 0) == 0           # a new, empty file
    assert back.starts[lib.SQ_MSRC_KEPT] == 0 and back.resets == 0
    for bad in (raw[:-1], b"x" * len(raw), raw[:4] + b"\x09" + raw[5:]):
        assert lib.sq_metrics_load(back, bad, len(bad)) == -1
        assert back.resets == 1 and back.starts[lib.SQ_MSRC_KEPT] == 0
        assert back.magic == lib.SQ_METRICS_MAGIC


def test_the_text_is_bounded_even_with_every_counter_at_its_largest():
    r = _record()
    raw = bytearray(ffi.buffer(r))
    head = bytes(raw[:16])
    full = head + b"\xff" * (len(raw) - 16)
    assert lib.sq_metrics_load(r, full, len(full)) == 0
    text = _render(r)
    assert len(text) < lib.SQ_METRICS_TEXT_MAX
    small = ffi.new("char[]", 100)
    assert lib.sq_metrics_render(r, 0, small, 100) == -1
    assert ffi.string(small) == b""


def test_phase_names_of_the_verbose_log():
    assert lib.sq_metrics_phase_of(b"resolve image") == lib.SQ_MPH_RESOLVE
    assert lib.sq_metrics_phase_of(b"prepare") == lib.SQ_MPH_PREPARE
    for name in (b"start container", b"start container (kept for the job)",
                 b"kept container reused", b"fresh layer", b"join running container"):
        assert lib.sq_metrics_phase_of(name) == lib.SQ_MPH_START, name
    assert lib.sq_metrics_phase_of(b"join") == lib.SQ_MPH_JOIN
    assert lib.sq_metrics_phase_of(b"something else") == -1
    assert lib.sq_metrics_phase_of(ffi.NULL) == -1


def _source(served, joined=0, cache_on=1):
    lc = ffi.new("int *")
    src = lib.sq_metrics_source_of(ffi.NULL if served is None else served.encode(), joined,
                                   cache_on, lc)
    return ffi.string(lib.sq_metrics_source_name(src)).decode(), lc[0]


def test_every_served_text_of_kept_c_has_a_source():
    """kept.c's texts are what the source is told by: a new one must be placed here."""
    text = (ROOT / "spank/plugin/kept.c").read_text()
    # started_how() words the starts (a prolog's marker says them too): its returns count.
    how = re.search(r"\nstatic const char \*started_how\(.*?\n}\n", text, re.S)
    assert how, "kept.c: started_how() not found"
    stmts = re.findall(r'\*served = ((?:"(?:[^"\\]|\\.)*"|[^;"])*);', text)
    stmts += re.findall(r'return ((?:"(?:[^"\\]|\\.)*"|[^;"])*);', how.group(0))
    seen = set()
    for stmt in stmts:
        for group in re.findall(r'"(?:[^"\\]|\\.)*"(?:\s*"(?:[^"\\]|\\.)*")*', stmt):
            literal = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', group))
            if " " in literal:      # not the ternary's "rootfs"
                seen.add(literal)
    want = {
        "started for the step (the kept container's key could not be read)": ("image", -1),
        "started from the node's extracted copy (extracted cache hit), kept for the job":
            ("local_copy", 1),
        "started from the image, kept for the job; extracting it on this node in the "
        "background": ("image", 0),
        "started from the image, kept for the job": ("image", 0),
        "kept container of the job reused (no runtime start; extracted copy)": ("kept", -1),
        "kept container of the job reused (no runtime start)": ("kept", -1),
        "no fresh layer on this node (the kernel refused it)": ("image", -1),
    }
    assert seen == set(want), seen ^ set(want)
    for text_, expect in want.items():
        assert _source(text_) == expect, text_


def test_sources_of_other_steps():
    assert _source(None) == ("image", -1)                  # a container of the step's own
    assert _source("started from the image, kept for the job", cache_on=0) == ("image", -1)
    assert _source(None, joined=1) == ("joined", -1)


def _reason(stage, error):
    return ffi.string(lib.sq_metrics_reason_name(lib.sq_metrics_reason_of(stage, error))).decode()


def test_failure_reasons():
    assert _reason(lib.SQ_MSTAGE_OPTIONS, b"--container-mounts: bad") == "options"
    assert _reason(lib.SQ_MSTAGE_PREPARE, b"/usr/libexec/squall-keeper ...") == "setup"
    assert _reason(lib.SQ_MSTAGE_RESOLVE, b"--container-image=/x.sqsh: no such file") == \
        "resolve"
    assert _reason(lib.SQ_MSTAGE_RESOLVE, b"failed to import docker image: r/x: sqshbuild "
                   b"failed (exit status 1): sqshbuild: error: no such tag") == "build"
    assert _reason(lib.SQ_MSTAGE_RESOLVE, b"failed to import docker image: r/x: sqshbuild "
                   b"failed (exit status 1): sqshbuild: error: the site policy "
                   b"/etc/containers/policy.json refuses r/x: unsigned") == "policy"
    assert _reason(lib.SQ_MSTAGE_CONFIGURE, b"mount") == "configure"
    assert _reason(lib.SQ_MSTAGE_START, b"enroot start failed") == "start"
    assert _reason(lib.SQ_MSTAGE_JOIN, ffi.NULL) == "join"
    assert _reason(42, b"?") == "other"
    assert ffi.string(lib.sq_metrics_reason_name(-1)) == b""
