"""Overrides (issue 14): `mksbatch --set KEY=VALUE` (dotted keys, repeatable) and the Python
API's overrides, validated exactly like the file, with messages naming the override."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from squall.errors import SquallError
from squall.mksbatch import load_recipe, override, parse_recipe, recipe_from_dict, render

MAIN = "from squall.mksbatch.cli import main; main()"
BASE = "name: t\nnodes: 2\nlog_dir: /fsx/logs\nlauncher: srun\ncommand: [prog]\n"


def mksbatch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", MAIN, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env=dict(os.environ))


def write(tmp_path: Path, text: str = BASE) -> Path:
    (tmp_path / "r.yaml").write_text(text)
    return tmp_path / "r.yaml"


def test_set_overrides_fields_with_values_as_written(tmp_path: Path) -> None:
    write(tmp_path)
    proc = mksbatch("r.yaml", "--set", "nodes=4", "--set", "environment.LR=3e-4",
                    "--set", "environment.PYTHON_VERSION=3.10", "--set",
                    "container.image=/fsx/i.sqsh", "--set", "srun=[--cpu-bind=cores, -l]",
                    "--set", "sbatch.mail-type=END", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout
    assert "#SBATCH --nodes=4-4" in script and "#SBATCH --mail-type=END" in script
    assert "export LR='3e-4'" in script and "export PYTHON_VERSION='3.10'" in script
    assert ("srun_args=('--kill-on-bad-exit=1' '--cpu-bind=cores' '-l')" in script)
    assert "'--container-image=/fsx/i.sqsh'" in script
    assert script.splitlines()[3:9] == [
        "# Override: --set nodes=4",
        "# Override: --set environment.LR=3e-4",
        "# Override: --set environment.PYTHON_VERSION=3.10",
        "# Override: --set container.image=/fsx/i.sqsh",
        "# Override: --set srun=[--cpu-bind=cores, -l]",
        "# Override: --set sbatch.mail-type=END",
    ]


def test_the_last_set_wins(tmp_path: Path) -> None:
    write(tmp_path)
    proc = mksbatch("r.yaml", "--set", "nodes=4", "--set", "nodes=6", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --nodes=6-6" in proc.stdout


@pytest.mark.parametrize("arg,message", [
    ("nodes=010", "--set nodes=010: nodes: '010' has a leading zero, which YAML 1.1 reads "
     "as octal (8): write the number in decimal without it"),
    ("nodes=", "--set nodes=: nodes: is empty: give a whole number or remove the field"),
    ("nodse=4", "--set nodse=4: nodse: unknown field (did you mean 'nodes'?); known fields "
     "here: "),
    ("command.0=x", "--set command.0=x: command: is not a mapping in the recipe, so "
     "command.0 cannot be set: set command as a whole"),
    ("environment.A=yes", "--set environment.A=yes: environment.A: 'yes' is read as a YAML "
     "boolean: quote it, e.g. \"yes\""),
    ("exclusive=[", "--set exclusive=[: YAML syntax: expected the node content, but found "
     "'<stream end>': fix the YAML"),
    ("container={image: /i.sqsh, name: 'a:bad'}", "--set container={image: /i.sqsh, name: "
     "'a:bad'}: container.name: --container-name: 'a:bad': unknown flag 'bad'"),
    ("sbatch.nodes=3", "--set sbatch.nodes=3: sbatch.nodes: is set by mksbatch from nodes"),
    ("environment.A=\x01", "--set environment.A=?: recipe: control character U+0001 at "
     "column 1: remove it"),
    ("command=" + "[" * 100 + "]" * 100, ("--set command=" + "[" * 100)[:77]
     + "...: recipe: nested more than 32 levels deep"),
])
def test_set_errors_are_one_line_naming_the_override(arg: str, message: str,
                                                      tmp_path: Path) -> None:
    write(tmp_path)
    proc = mksbatch("r.yaml", "--set", arg, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("mksbatch: error: " + message), proc.stderr


@pytest.mark.parametrize("arg", ["nodes", "=4", ".x=1", "a..b=1", "a b=1"])
def test_set_needs_key_equals_value(arg: str, tmp_path: Path) -> None:
    write(tmp_path)
    proc = mksbatch("r.yaml", "--set", arg, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "give KEY=VALUE with a dotted KEY, e.g. --set nodes=4" in proc.stderr


def test_file_errors_keep_their_lines_under_overrides(tmp_path: Path) -> None:
    write(tmp_path, BASE + "partition: 'a b'\n")
    proc = mksbatch("r.yaml", "--set", "nodes=3", cwd=tmp_path)
    assert proc.stderr.startswith("mksbatch: error: r.yaml:6: partition: 'a b' is written")


def test_an_alias_is_not_changed_through_its_other_use(tmp_path: Path) -> None:
    text = BASE + "environment: &env {A: '1'}\nsbatch: {comment: x}\n"
    r = load_recipe(write(tmp_path, text), overrides={"environment.B": "2"})
    assert r.environment == (("A", "1"), ("B", "2"))


# --- the Python API -------------------------------------------------------------------

def test_python_overrides_take_python_values(tmp_path: Path) -> None:
    r = load_recipe(write(tmp_path), overrides={
        "nodes": 8, "environment.LR": "3e-4", "environment.V": "3.10", "exclusive": True,
        "container": {"image": "/fsx/i.sqsh", "mounts": ["/fsx:/fsx"]},
        "command": ("python", "train.py", "--lr", 1.5), "log_dir": Path("/fsx/l"),
        "environment.S": "tab\tand \x85 and \u2028 and \U0001f600",
    })
    assert r.nodes == 8 and r.exclusive and r.log_dir == "/fsx/l"
    assert r.environment == (("LR", "3e-4"), ("V", "3.10"),
                             ("S", "tab\tand \x85 and \u2028 and \U0001f600"))
    assert r.command == ("python", "train.py", "--lr", "1.5")
    assert r.container is not None and r.container.mounts == ("/fsx:/fsx",)
    assert "# Override: nodes=8" in render(r)


def test_override_revalidates_a_loaded_recipe(tmp_path: Path) -> None:
    r = load_recipe(write(tmp_path))
    bigger = override(r, {"nodes": 16})
    assert (r.nodes, bigger.nodes) == (2, 16)
    assert bigger.sha256 == r.sha256 and bigger.path == r.path
    again = override(bigger, {"gpus_per_node": 8})
    assert (again.nodes, again.gpus_per_node) == (16, 8)
    with pytest.raises(SquallError) as info:
        override(r, {"nodes": 0})
    assert str(info.value) == "override nodes: nodes: must be at least 1, got 0"
    with pytest.raises(SquallError) as info:
        override(r, {"launcher": "mpirun", "container.image": "/i.sqsh"})
    assert str(info.value).startswith("override container.image: container: launcher: mpirun")


def test_override_refuses_values_it_cannot_write(tmp_path: Path) -> None:
    r = load_recipe(write(tmp_path))
    with pytest.raises(SquallError) as info:
        override(r, {"nodes": object()})
    assert str(info.value).startswith("override nodes: a value of type object cannot be "
                                      "used: give a str, int, float, bool, list or dict")
    with pytest.raises(SquallError) as info:
        override(r, {"no such": 1})
    assert str(info.value).startswith("override 'no such': give KEY=VALUE with a dotted KEY")


def test_recipe_from_dict(tmp_path: Path) -> None:
    data = {"name": "t", "nodes": 2, "log_dir": "/fsx/logs", "launcher": "srun",
            "command": ["prog", "--version", "3.10"], "environment": {"PY": "3.10"}}
    r = recipe_from_dict(data)
    assert r.path == "<dict>" and r.command == ("prog", "--version", "3.10")
    assert render(r).splitlines()[1] == "# Generated by mksbatch (squall) from recipe: <dict>"
    with pytest.raises(SquallError) as info:
        recipe_from_dict({**data, "nodes": "2"})
    assert str(info.value) == ("<dict>: nodes: '2' is quoted, so YAML reads it as text: "
                               "write the number without quotes")
    assert parse_recipe(BASE, "x.yaml").nodes == 2
