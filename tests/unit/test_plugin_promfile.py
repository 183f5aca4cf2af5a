"""The node's metrics files (spank/plugin/promfile.c, through
spank/plugin/tests/promfile_probe.c): counts never lost when steps end together, the text
written whole, and neither a bad record nor a hostile directory breaking a step's end."""

import os
import re
import subprocess
from pathlib import Path

import pytest
from plugin_probe import build_probe


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    return build_probe(tmp_path_factory.mktemp("promfile") / "promfile_probe",
                       "promfile_probe.c", "promfile.c")


def _run(probe, *args) -> dict[str, str]:
    out = subprocess.run([str(probe), *map(str, args)], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def _value(text: str, series: str) -> float:
    m = re.search("^" + re.escape(series) + r" ([0-9.]+)$", text, re.M)
    assert m, series
    return float(m.group(1))


def test_an_update_makes_the_state_and_the_text(probe, tmp_path):
    state, text = tmp_path / "squall" / "metrics", tmp_path / "textfile"
    text.mkdir()
    got = _run(probe, "update", state, text, 3)
    assert got["rc"] == "0", got
    assert (state.stat().st_mode & 0o777) == 0o700
    assert ((state / "record").stat().st_mode & 0o777) == 0o600
    prom = (text / "squall.prom").read_text()
    assert ((text / "squall.prom").stat().st_mode & 0o777) == 0o644
    assert _value(prom, 'squall_container_starts_total{source="image"}') == 3
    assert _value(prom, 'squall_phase_seconds_count{phase="start"}') == 3
    assert _value(prom, "squall_shared_image_bytes_total") == 3 << 20
    assert sorted(p.name for p in text.iterdir()) == ["squall.prom"]   # no temporary left


def test_steps_that_end_together_lose_no_count(probe, tmp_path):
    state, text = tmp_path / "var" / "metrics", tmp_path / "textfile"
    text.mkdir()
    procs = [subprocess.Popen([str(probe), "update", str(state), str(text), "100",
                               "1" if i % 2 else "0"], stdout=subprocess.PIPE, text=True)
             for i in range(8)]
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert "rc=0" in out, out
    prom = (text / "squall.prom").read_text()
    assert _value(prom, 'squall_steps_total{result="ok"}') == 400
    assert _value(prom, 'squall_steps_total{result="failed"}') == 400
    assert _value(prom, 'squall_failures_total{reason="resolve"}') == 400
    assert sorted(p.name for p in text.iterdir()) == ["squall.prom"]


def test_a_broken_record_starts_again_counted(probe, tmp_path):
    state, text = tmp_path / "v" / "metrics", tmp_path / "t"
    text.mkdir()
    _run(probe, "update", state, text, 2)
    (state / "record").write_bytes(b"garbage" * 10)
    assert _run(probe, "update", state, text, 1)["rc"] == "0"
    prom = (text / "squall.prom").read_text()
    assert _value(prom, "squall_metrics_resets_total") == 1
    assert _value(prom, 'squall_steps_total{result="ok"}') == 1


def test_a_world_writable_or_missing_textfile_directory_still_counts(probe, tmp_path):
    state, text = tmp_path / "v" / "metrics", tmp_path / "t"
    got = _run(probe, "update", state, text, 1)
    assert got["rc"] == "1" and "metrics_dir" in got["err"] and "metrics_dir=none" in got["err"]
    text.mkdir()
    os.chmod(text, 0o777)
    got = _run(probe, "update", state, text, 1)
    assert got["rc"] == "1" and "writable by every user" in got["err"], got
    assert not (text / "squall.prom").exists()
    os.chmod(text, 0o755)
    assert _run(probe, "update", state, text, 1)["rc"] == "0"
    assert _value((text / "squall.prom").read_text(), 'squall_steps_total{result="ok"}') == 3


def test_links_are_never_followed(probe, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    state, text = tmp_path / "v" / "metrics", tmp_path / "t"
    text.mkdir()
    (text / "squall.prom").symlink_to(victim)
    assert _run(probe, "update", state, text, 1)["rc"] == "0"
    assert victim.read_text() == "keep" and not (text / "squall.prom").is_symlink()
    # a state directory that is a link, or a record that is one, is refused
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "metrics").symlink_to(other)
    got = _run(probe, "update", tmp_path / "w" / "metrics", "-", 1)
    assert got["rc"] == "-1" and not list(other.iterdir())
    (state / "record").unlink()
    (state / "record").symlink_to(victim)
    got = _run(probe, "update", state, "-", 1)
    assert got["rc"] == "-1" and victim.read_text() == "keep"


def test_the_join_time_crosses_from_the_task(probe):
    got = _run(probe, "join")
    assert got == {"empty": "0", "got": "1", "ok": "1", "seconds": "0.25"}


def test_the_text_stays_small(probe, tmp_path):
    state, text = tmp_path / "v" / "metrics", tmp_path / "t"
    text.mkdir()
    _run(probe, "update", state, text, 1)
    assert (text / "squall.prom").stat().st_size < 16384
    assert Path(state / "record").stat().st_size < 4096
