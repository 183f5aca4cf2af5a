"""Values reach the program as written (issue 14).

YAML 1.1 reads plain ``3.10``, ``010``, ``1:30``, ``0x1F``, ``1_000`` as numbers; written back
they become ``3.1``, ``8``, ``90``, ``31``, ``1000``. A field meant as text takes the text
exactly as written; a numeric field takes a plain decimal number and refuses every other
spelling with file:line and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mksbatch_helpers import calls, run_script, script_for

from squall.errors import SquallError
from squall.mksbatch import load_recipe

BASE = "name: t\nnodes: 2\nlog_dir: /fsx/logs\nlauncher: srun\n"
TRICKY = ["3.10", "1.50", "010", "1:30", "0x1F", "1_000", "1e3", "0o17", "0b101", "+5",
          ".inf", "2024-01-01", "2024-13-45", "1" + "0" * 5000, "12:30:00", "-0"]


def recipe(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


def test_environment_values_are_text_as_written(tmp_path: Path) -> None:
    env = "".join(f"  V{i}: {value}\n" for i, value in enumerate(TRICKY))
    r = load_recipe(recipe(tmp_path, BASE + "command: [x]\nenvironment:\n" + env))
    assert r.environment == tuple((f"V{i}", value) for i, value in enumerate(TRICKY))


def test_command_words_are_text_as_written(tmp_path: Path) -> None:
    words = ", ".join(TRICKY)
    r = load_recipe(recipe(tmp_path, BASE + f"command: [train.py, {words}]\n"))
    assert r.command == ("train.py", *TRICKY)


def test_python_version_and_learning_rate_arrive_unchanged(tmp_path: Path) -> None:
    script = script_for(tmp_path, BASE + "command: [python, train.py, --lr, 1.50, --steps, "
                        "010, --every, 1:30]\nenvironment:\n  PYTHON_VERSION: 3.10\n"
                        "checkpoint:\n  dir: /ck\n  complete_marker: C\n"
                        "  resume: [--resume, '{checkpoint}', --seed, 0x1F]\n")
    assert "export PYTHON_VERSION='3.10'" in script
    proc = run_script(tmp_path, script, STUB_ENV_NAMES="PYTHON_VERSION")
    assert proc.returncode == 0, proc.stderr
    [srun] = [c for c in calls(tmp_path) if c["cmd"] == "srun"]
    assert srun["argv"][-8:] == ["python", "train.py", "--lr", "1.50", "--steps", "010",
                                 "--every", "1:30"]
    assert srun["env"] == {"PYTHON_VERSION": "3.10"}


def test_sbatch_words_and_names_are_text_as_written(tmp_path: Path) -> None:
    r = load_recipe(recipe(tmp_path, BASE.replace("name: t", "name: 010")
                           + "command: [x]\npartition: 010\naccount: 1_000\nqos: 0x1F\n"
                           "time: 1:30\n"))
    assert (r.name, r.partition, r.account, r.qos, r.time) == (
        "010", "010", "1_000", "0x1F", "1:30")
    assert "#SBATCH --partition=010" in script_for(tmp_path, BASE + "command: [x]\n"
                                                   "partition: 010\n")


@pytest.mark.parametrize("time", ["90", "010", "1:30", "10:00:00", "2-00:00:00", "1-12"])
def test_time_is_kept_as_written(time: str, tmp_path: Path) -> None:
    r = load_recipe(recipe(tmp_path, BASE + f"command: [x]\ntime: {time}\n"))
    assert r.time == time


def test_mapping_keys_are_text_as_written(tmp_path: Path) -> None:
    with pytest.raises(SquallError) as info:
        load_recipe(recipe(tmp_path, BASE + "command: [x]\nenvironment:\n  010: a\n"))
    assert str(info.value).startswith(f"{tmp_path}/r.yaml:7: environment.010: is not a "
                                      "valid variable name")


NUMBERS = [
    ("010", "'010' has a leading zero, which YAML 1.1 reads as octal (8): write the "
     "number in decimal without it"),
    ("08", "'08' has a leading zero: write the number in decimal without it"),
    ("0x1F", "'0x1F' is hexadecimal: write it in decimal (31)"),
    ("0o17", "'0o17' is octal: write it in decimal (15)"),
    ("0b101", "'0b101' is binary: write it in decimal (5)"),
    ("1:30", "'1:30' is read by YAML 1.1 as base 60 (90): write the number in decimal"),
    ("1_000", "'1_000' has '_' separators, which YAML 1.1 drops and YAML 1.2 keeps as "
     "text: write 1000"),
    ("2.0", "must be a whole number, got '2.0'"),
    ("1e3", "must be a whole number, got '1e3'"),
    (".inf", "must be a whole number, got '.inf'"),
    ("'4'", "'4' is quoted, so YAML reads it as text: write the number without quotes"),
    ('"4"', "'4' is quoted, so YAML reads it as text: write the number without quotes"),
    ("1" + "0" * 5000, "has 5001 digits: give a whole number of at most 18 digits"),
    ("", "is empty: give a whole number or remove the field"),
    ("2024-01-01", "must be a whole number, got '2024-01-01'"),
    ("yes", "must be a whole number, got 'yes'"),
    ("!!binary aGk=", "unsupported YAML tag tag:yaml.org,2002:binary: write a plain value "
     "without a '!!' tag"),
]


@pytest.mark.parametrize("written,message", NUMBERS, ids=[n[0][:12] or "empty" for n in NUMBERS])
def test_numeric_fields_take_plain_decimal_only(written: str, message: str,
                                               tmp_path: Path) -> None:
    with pytest.raises(SquallError) as info:
        load_recipe(recipe(tmp_path, BASE.replace("nodes: 2", f"nodes: {written}")
                           + "command: [x]\n"))
    assert str(info.value) == f"{tmp_path}/r.yaml:2: nodes: {message}"


@pytest.mark.parametrize("field,line", [
    ("gpus_per_node: 010", 6), ("tasks_per_node: 0x2", 6), ("cpus_per_task: 1_2", 6),
    ("requeue: {max_restarts: 010}", 6), ("signal: {lead_seconds: 1:30}", 6),
])
def test_every_numeric_field_is_strict(field: str, line: int, tmp_path: Path) -> None:
    with pytest.raises(SquallError) as info:
        load_recipe(recipe(tmp_path, BASE + "command: [x]\n" + field + "\n"))
    assert str(info.value).startswith(f"{tmp_path}/r.yaml:{line}: ")


@pytest.mark.parametrize("written,value", [("10", 10), ("+3", 3), ("0", 0)])
def test_plain_decimal_numbers(written: str, value: int, tmp_path: Path) -> None:
    r = load_recipe(recipe(tmp_path, BASE + f"command: [x]\ngpus_per_node: {written}\n"))
    assert r.gpus_per_node == value


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "true", "False"])
def test_booleans_in_text_fields_still_say_quote_it(word: str, tmp_path: Path) -> None:
    with pytest.raises(SquallError) as info:
        load_recipe(recipe(tmp_path, BASE + f"command: [x]\nenvironment:\n  A: {word}\n"))
    assert str(info.value) == (f"{tmp_path}/r.yaml:7: environment.A: {word!r} is read as a "
                               f"YAML boolean: quote it, e.g. \"{word}\"")


def test_quoted_and_plain_text_agree(tmp_path: Path) -> None:
    env = {f"V{i}": value for i, value in enumerate(TRICKY)}
    quoted = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in env.items())
    plain = "".join(f"  {k}: {v}\n" for k, v in env.items())
    a = load_recipe(recipe(tmp_path, BASE + "command: [x]\nenvironment:\n" + quoted))
    b = load_recipe(recipe(tmp_path, BASE + "command: [x]\nenvironment:\n" + plain))
    assert a.environment == b.environment
