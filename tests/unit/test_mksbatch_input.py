"""Hostile recipe files: control characters, huge files, /dev/zero, deep nesting, odd YAML.

Each gets one line naming the file (and line) and the fix, with bounded memory and time,
never a traceback (issue 14).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from squall.errors import SquallError
from squall.mksbatch import load_recipe

MAIN = "from squall.mksbatch.cli import main; main()"
BASE = "name: t\nnodes: 2\nlog_dir: /fsx/logs\nlauncher: srun\ncommand: [python3, x.py]\n"
MAX = 1 << 20


def _limit_memory() -> None:  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def mksbatch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a child limited to 1 GiB of address space and 60 s."""
    return subprocess.run([sys.executable, "-c", MAIN, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, preexec_fn=_limit_memory,
                          env=dict(os.environ))


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("mksbatch: error: ")
    return lines[0][len("mksbatch: error: "):]


def load_error(tmp_path: Path, data: bytes | str) -> str:
    path = tmp_path / "r.yaml"
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    with pytest.raises(SquallError) as info:
        load_recipe(path, display_path="r.yaml")
    message = str(info.value)
    assert "\n" not in message
    return message


CONTROL = [
    ("soh in a value", BASE.replace("name: t", "name: a\x01b"),
     "r.yaml:1: recipe: control character U+0001 at column 8: remove it (inside a "
     "double-quoted string write it as an escape, e.g. \"\\u0001\")"),
    ("nul in a comment", BASE + "# \x00\n",
     "r.yaml:6: recipe: control character U+0000 at column 3: remove it (inside a "
     "double-quoted string write it as an escape, e.g. \"\\u0000\")"),
    ("escape sequence", BASE + "environment:\n  A: \x1b[31mred\n",
     "r.yaml:7: recipe: control character U+001B at column 6: remove it (inside a "
     "double-quoted string write it as an escape, e.g. \"\\u001b\")"),
    ("delete", BASE + "partition: a\x7f\n",
     "r.yaml:6: recipe: control character U+007F at column 13: remove it (inside a "
     "double-quoted string write it as an escape, e.g. \"\\u007f\")"),
    ("c1 control", BASE + "qos: \u0090\n",
     "r.yaml:6: recipe: control character U+0090 at column 6: remove it (inside a "
     "double-quoted string write it as an escape, e.g. \"\\u0090\")"),
]


@pytest.mark.parametrize("text,message", [c[1:] for c in CONTROL], ids=[c[0] for c in CONTROL])
def test_control_characters_are_one_line(text: str, message: str, tmp_path: Path) -> None:
    assert load_error(tmp_path, text) == message


def test_control_character_through_the_cli(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(BASE + "account: \x02\n")
    assert one_line_error(mksbatch("r.yaml", cwd=tmp_path)).startswith(
        "r.yaml:6: recipe: control character U+0002 at column 10")


def test_escaped_control_characters_in_double_quotes_are_values(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(BASE + 'environment:\n  A: "tab\\there \\u0001"\n')
    assert load_recipe(path).environment == (("A", "tab\there \x01"),)


def test_a_file_over_the_size_limit(tmp_path: Path) -> None:
    assert load_error(tmp_path, BASE + "#" * MAX) == (
        "cannot read recipe r.yaml: it is larger than 1 MiB, and a recipe is a small YAML "
        "file: check the path")


def test_dev_zero_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    assert one_line_error(mksbatch("/dev/zero", cwd=tmp_path)) == (
        "cannot read recipe /dev/zero: it is larger than 1 MiB, and a recipe is a small "
        "YAML file: check the path")


def test_a_huge_file_through_the_cli(tmp_path: Path) -> None:
    with open(tmp_path / "big.yaml", "wb") as fh:
        fh.truncate(4 << 30)  # 4 GiB, sparse: more than the child may allocate
    assert one_line_error(mksbatch("big.yaml", cwd=tmp_path)).startswith(
        "cannot read recipe big.yaml: it is larger than 1 MiB")


@pytest.mark.parametrize("text,line", [
    ("command: " + "[" * 100_000 + "]" * 100_000 + "\n", 1),
    ("name: t\nenvironment:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, 400)), 33),
    ("command: " + "{a: " * 5000 + "b" + "}" * 5000 + "\n", 1),
], ids=["flow lists", "block mappings", "flow mappings"])
def test_deep_nesting_is_one_line(text: str, line: int, tmp_path: Path) -> None:
    assert load_error(tmp_path, text) == (
        f"r.yaml:{line}: recipe: nested more than 32 levels deep (a recipe needs 4): check "
        "the brackets and the indentation")


def test_deep_nesting_through_the_cli(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text("a: " + "[" * 50_000 + "]" * 50_000 + "\n")
    assert one_line_error(mksbatch("r.yaml", cwd=tmp_path)).startswith(
        "r.yaml:1: recipe: nested more than 32 levels deep")


def test_alias_bomb_is_cheap(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 12)]
    text = "\n".join(lines) + "\n" + BASE
    assert load_error(tmp_path, text).startswith("r.yaml:1: a0: unknown field")
    (tmp_path / "r.yaml").write_text(BASE.replace("command: [python3, x.py]", "command: *a11")
                                     + "\n".join(lines) + "\n")
    assert one_line_error(mksbatch("r.yaml", cwd=tmp_path)).startswith("r.yaml:")


ODD = [
    ("bad date key", BASE + "2024-13-45: x\n",
     "r.yaml:6: 2024-13-45: unknown field; known fields here: "),
    ("long integer key", BASE + "1" + "0" * 1000 + ": x\n",
     "r.yaml:6: 1" + "0" * 1000 + ": unknown field; known fields here: "),
    ("merge key", BASE + "base: &b {nodes: 2}\n<<: *b\n",
     "r.yaml:7: <<: YAML merge keys are not supported: write the fields out"),
    ("merge key only", "<<: {nodes: 2}\n" + BASE.replace("nodes: 2\n", ""),
     "r.yaml:1: <<: YAML merge keys are not supported: write the fields out"),
    ("tagged key", BASE + "!!python/name:os.system x: 1\n",
     "r.yaml:6: recipe: unsupported YAML tag tag:yaml.org,2002:python/name:os.system: write "
     "a plain value without a '!!' tag"),
    ("two documents", BASE + "---\nname: u\n",
     "r.yaml:6: YAML syntax: expected a single document in the stream, but found another "
     "document: fix the YAML at this line"),
    ("tab indentation", "name: t\n\tnodes: 2\n",
     "r.yaml:2: YAML syntax: found character '\\t' that cannot start any token: fix the "
     "YAML at this line"),
]


@pytest.mark.parametrize("text,start", [c[1:] for c in ODD], ids=[c[0] for c in ODD])
def test_odd_yaml_is_one_line(text: str, start: str, tmp_path: Path) -> None:
    assert load_error(tmp_path, text).startswith(start)
