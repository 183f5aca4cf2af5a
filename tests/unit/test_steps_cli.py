"""``squall steps JOBID`` on step files written as squall_steps writes them (steps_sim.py),
with --dir (the cluster test covers the lookup through scontrol)."""

from __future__ import annotations

import importlib.util
import json
import os
import stat

import pytest
from squall_cli import run_squall
from steps_sim import simulate, write_files

from gate import skip_unless


def need_matplotlib() -> None:
    skip_unless(importlib.util.find_spec("matplotlib"), "matplotlib (the plot extra)",
                "pip install -e '.[test]', or apt install python3-matplotlib")


def stub_scontrol(path, text: str, rc: int = 0):
    """TEST STUB, not Slurm: an scontrol that prints ``text`` (on stderr when rc != 0);
    the real one is asked on the mini cluster (tests/integration/test_steps_cluster.py)."""
    stream = " >&2" if rc else ""
    path.write_text(f"#!/bin/sh\n# TEST STUB, not Slurm\necho '{text}'{stream}\nexit {rc}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_table_and_the_verdict(monkeypatch, capsys, tmp_path):
    write_files(tmp_path, simulate(slow_data=(3, 8, 1.9)))
    rc, out, err = run_squall(monkeypatch, capsys, ["steps", "41", "--dir", str(tmp_path)])
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["rank", "node", "steps"]
    assert len(lines) == 1 + 6 + 1
    assert lines[-1] == ("data loading on rank 3 (node2): every 8th step waits 1.9 s for "
                         "its batch")


def test_json(monkeypatch, capsys, tmp_path):
    write_files(tmp_path, simulate(slow_node=(3, 1.7)))
    rc, out, _ = run_squall(monkeypatch, capsys, ["steps", "41", "--dir", str(tmp_path),
                                                  "--json"])
    data = json.loads(out)
    assert rc == 0 and data["verdict"]["kind"] == "straggler"
    assert data["verdict"]["node"] == "node3" and data["job"] == "41"
    assert "scontrol update nodename=node3 state=drain" in data["verdict"]["drain"]
    assert len(data["ranks"]) == 6


def test_the_plot_is_a_png_with_content(monkeypatch, capsys, tmp_path):
    need_matplotlib()
    from PIL import Image

    write_files(tmp_path, simulate(slow_data=(1, 5, 0.8)))
    png = tmp_path / "job.png"
    rc, out, err = run_squall(monkeypatch, capsys, ["steps", "41", "--dir", str(tmp_path),
                                                    "--plot", str(png), "--range", "20:30"])
    assert rc == 0, err
    assert f"wrote {png}" in out
    with Image.open(png) as im:
        assert im.size[0] >= 600 and im.size[1] >= 400
        colours = im.convert("RGB").getcolors(maxcolors=1 << 24)
        assert colours is not None and len(colours) > 50


def test_a_range_outside_the_steps_is_a_one_line_error(monkeypatch, capsys, tmp_path):
    need_matplotlib()
    write_files(tmp_path, simulate())
    rc, _, err = run_squall(monkeypatch, capsys, ["steps", "41", "--dir", str(tmp_path),
                                                  "--plot", str(tmp_path / "p.png"),
                                                  "--range", "500:600"])
    assert rc == 2 and "--range 500:600: no step there" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    (["steps", "abc"], "JOBID 'abc': give a Slurm job id"),
    (["steps", "41", "--range", "9-3"], "--range 9-3: give FIRST:LAST"),
    (["steps", "41", "--follow", "--json"], "--json cannot be used with --follow"),
])
def test_bad_input_is_one_line(monkeypatch, capsys, tmp_path, argv, message):
    rc, _, err = run_squall(monkeypatch, capsys, [*argv, "--dir", str(tmp_path)])
    assert rc == 2 and message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_no_files_says_how_to_time_the_program(monkeypatch, capsys, tmp_path):
    rc, _, err = run_squall(monkeypatch, capsys, ["steps", "41", "--dir", str(tmp_path)])
    assert rc == 1 and "no step files in" in err and "squall_steps" in err


def test_only_progress_files_give_step_boundaries(monkeypatch, capsys, tmp_path):
    for rank, count in ((0, 120), (1, 118)):
        (tmp_path / f"progress.{rank}").write_text(f"{count:>12}\n")
    rc, out, _ = run_squall(monkeypatch, capsys, ["steps", "41", "--dir", str(tmp_path)])
    assert rc == 0
    assert "only step boundaries" in out and "steps 118..120" in out and "rank 1" in out


def test_a_job_slurm_does_not_know_is_one_line(monkeypatch, capsys, tmp_path):
    scontrol = stub_scontrol(tmp_path / "scontrol",
                             "slurm_load_jobs error: Invalid job id specified", rc=1)
    rc, _, err = run_squall(monkeypatch, capsys, ["steps", "41", "--scontrol", str(scontrol)])
    assert rc == 1 and "job 41: slurm_load_jobs error: Invalid job id specified" in err
    assert "--dir" in err


def test_the_directory_is_found_next_to_the_jobs_log(monkeypatch, capsys, tmp_path):
    logs = tmp_path / "logs"
    (logs / ".squall-failover-41").mkdir(parents=True)
    write_files(logs / ".squall-failover-41", simulate())
    scontrol = stub_scontrol(tmp_path / "scontrol", f"JobId=41 JobState=COMPLETED "
                             f"StdOut={logs}/train-41.out WorkDir={tmp_path}")
    rc, out, err = run_squall(monkeypatch, capsys, ["steps", "41", "--scontrol",
                                                    str(scontrol), "--follow",
                                                    "--interval", "0.1"])
    assert rc == 0, err
    assert out.splitlines()[-1].startswith("balanced")
    assert os.path.exists(logs / ".squall-failover-41" / "steps.0")
