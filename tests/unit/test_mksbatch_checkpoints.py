"""Which checkpoint a job resumes from (issue 14): numeric order by default.

Hugging Face writes checkpoint-500 ... checkpoint-1000; by byte order checkpoint-500 is the
newest and the job redoes 500 steps; step_99 beats step_100. Numeric order compares the
numbers inside names as numbers (ties by name). The generated script (bash, run here with
the test stubs for srun/scontrol) and the Python API must pick the same checkpoint.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mksbatch_helpers import calls, run_script, script_for

from squall.mksbatch import load_recipe, newest_checkpoint
from squall.mksbatch.checkpoints import numeric_key

RECIPE = textwrap.dedent("""
    name: t
    nodes: 2
    log_dir: /fsx/logs
    launcher: srun
    command: [python3, train.py]
    checkpoint:
      dir: {ckdir}
      pattern: "{pattern}"
      complete_marker: COMPLETE
      resume: --resume {{checkpoint}}
""")


def make(ck: Path, complete: list[str], incomplete: list[str] | None = None) -> None:
    for name in [*complete, *(incomplete or [])]:
        (ck / name).mkdir(parents=True, exist_ok=True)
    for name in complete:
        (ck / name / "COMPLETE").write_text("")


def resumed(tmp: Path, ck: Path, pattern: str = "*", extra: str = "", **env: str) -> str | None:
    """Run the generated script with the stubs; the checkpoint srun was given, if any."""
    for name in ("calls.jsonl", "step.pid"):
        (tmp / name).unlink(missing_ok=True)
    script = script_for(tmp, RECIPE.format(ckdir=ck, pattern=pattern) + extra)
    proc = run_script(tmp, script, **env)
    assert proc.returncode == 0, proc.stderr
    [argv] = [c["argv"] for c in calls(tmp) if c["cmd"] == "srun"]
    if argv[-2] == "--resume":
        return str(Path(argv[-1]).relative_to(ck))
    return None


def python_pick(tmp: Path, ck: Path, pattern: str = "*", extra: str = "") -> str | None:
    (tmp / "r.yaml").write_text(RECIPE.format(ckdir=ck, pattern=pattern) + extra)
    picked = newest_checkpoint(load_recipe(tmp / "r.yaml"))
    return None if picked is None else str(Path(picked).relative_to(ck))


CASES = [
    ("hugging face", ["checkpoint-500", "checkpoint-1000"], ["checkpoint-1500"],
     "checkpoint-1000"),
    ("step_99 vs step_100", ["step_99", "step_100"], [], "step_100"),
    ("zero padded", ["ckpt-000005", "ckpt-000010"], ["ckpt-000015"], "ckpt-000010"),
    ("epoch then step", ["epoch2-step900", "epoch10-step1", "epoch9-step99999"], [],
     "epoch10-step1"),
    ("leading zeros tie by name", ["ckpt-10", "ckpt-010", "ckpt-0010"], [], "ckpt-10"),
    ("no numbers", ["latest", "best", "final"], [], "latest"),
    ("numbers beat letters as bytes", ["step-a", "step-1"], [], "step-a"),
    ("longer prefix", ["step1", "step1a", "step1-2"], [], "step1a"),
    ("only incomplete", [], ["checkpoint-1", "checkpoint-2"], None),
    ("huge numbers", ["c-99999999999999999999999", "c-100000000000000000000000"], [],
     "c-100000000000000000000000"),
    ("zero", ["s-0", "s-00"], [], "s-00"),
]


@pytest.mark.parametrize("complete,incomplete,expected", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_script_resumes_from_the_numerically_newest(complete: list[str],
                                                    incomplete: list[str],
                                                    expected: str | None,
                                                    tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    ck.mkdir()
    make(ck, complete, incomplete)
    assert resumed(tmp_path, ck) == expected
    assert python_pick(tmp_path, ck) == expected


def test_numeric_is_the_default(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(RECIPE.format(ckdir="/ck", pattern="*"))
    checkpoint = load_recipe(tmp_path / "r.yaml").checkpoint
    assert checkpoint is not None and checkpoint.newest_by == "numeric"


def test_name_and_mtime_are_still_available(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    make(ck, ["checkpoint-500", "checkpoint-1000", "checkpoint-200"])
    by_name = "  newest_by: name\n"
    assert resumed(tmp_path, ck, extra=by_name) == "checkpoint-500"
    assert python_pick(tmp_path, ck, extra=by_name) == "checkpoint-500"
    for i, name in enumerate(("checkpoint-1000", "checkpoint-500", "checkpoint-200")):
        os.utime(ck / name, (1000 + i, 1000 + i))
    by_mtime = "  newest_by: mtime\n"
    assert resumed(tmp_path, ck, extra=by_mtime) == "checkpoint-200"
    assert python_pick(tmp_path, ck, extra=by_mtime) == "checkpoint-200"


def test_pattern_and_hidden_entries(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    make(ck, ["step_100", "step_20", "zzz_5000", "step_7.tmp"])
    assert resumed(tmp_path, ck, pattern="step_*") == "step_100"
    assert python_pick(tmp_path, ck, pattern="step_*") == "step_100"
    assert resumed(tmp_path, ck) == "zzz_5000"
    assert python_pick(tmp_path, ck) == "zzz_5000"
    hidden = tmp_path / "hidden"
    make(hidden, [".step_999"])
    assert resumed(tmp_path, hidden) is None
    assert python_pick(tmp_path, hidden) is None


def test_the_locale_does_not_change_the_order(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    make(ck, ["Step-2", "step-10", "\u00e9tape-3", "STEP-9"])
    expected = python_pick(tmp_path, ck)
    for lang in ("C.UTF-8", "en_US.UTF-8", "POSIX"):
        assert resumed(tmp_path, ck, LANG=lang, LC_ALL=lang) == expected


def test_a_missing_directory_means_no_checkpoint(tmp_path: Path) -> None:
    assert resumed(tmp_path, tmp_path / "none") is None
    assert python_pick(tmp_path, tmp_path / "none") is None


def test_numeric_key_orders_numbers_as_numbers() -> None:
    names = [b"ckpt-1000", b"ckpt-500", b"ckpt-99", b"ckpt-100", b"ckpt-0", b"ckpt-a"]
    assert sorted(names, key=lambda n: (numeric_key(n), n)) == [
        b"ckpt-0", b"ckpt-99", b"ckpt-100", b"ckpt-500", b"ckpt-1000", b"ckpt-a"]


NAME = st.text(alphabet="ab-_.09187", min_size=1, max_size=10).filter(
    lambda s: s not in (".", "..") and not s.startswith("."))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.tuples(NAME, st.booleans()), min_size=1, max_size=8,
                      unique_by=lambda t: t[0]))
def test_bash_and_python_pick_the_same(names: list[tuple[str, bool]], tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    shutil.rmtree(ck, ignore_errors=True)
    ck.mkdir()
    make(ck, [n for n, done in names if done], [n for n, done in names if not done])
    assert resumed(tmp_path, ck) == python_pick(tmp_path, ck)


def test_bash_key_equals_python_key(tmp_path: Path) -> None:
    """The key function itself, on names a filesystem may hold (any byte but / and NUL)."""
    script = script_for(tmp_path, RECIPE.format(ckdir="/ck", pattern="*"))
    body = script.split("numeric_key() {", 1)[1].split("\n}\n", 1)[0]
    names = [b"a1b22c333", b"0", b"x00000", b"9" * 40, b"\xff\xfe-12", b"line\n7", b"\t3 4"]
    harness = ("numeric_key() {" + body + "\n}\nLC_ALL=C\n"
               'for n in "$@"; do numeric_key "$n"; printf "%s\\0" "$key"; done\n')
    proc = subprocess.run(["bash", "-c", harness, "bash", *names], capture_output=True,
                          check=True)
    assert proc.stdout.split(b"\0")[:-1] == [numeric_key(n) for n in names]
