"""The script's bash lives in a template file that ships in the package (issue 14)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from mksbatch_helpers import REPO

from squall.mksbatch.template import TEMPLATE, Template, load_template, parse_template

MKSBATCH = REPO / "python" / "squall" / "mksbatch"


def test_template_sections_hold_the_bash() -> None:
    t = load_template()
    assert {"script", "newest-checkpoint", "resume", "launch-torchrun"} <= set(t.sections)
    script = "\n".join(t.sections["script"])
    assert script.startswith("#!/bin/bash\n")
    assert 'scontrol requeue "${SLURM_JOB_ID}"' in script


def test_no_bash_left_in_python() -> None:
    """The renderer holds no bash statements: only values and the choice of sections."""
    tree = ast.parse((MKSBATCH / "render.py").read_text())
    texts = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
             and isinstance(n.value, str)]
    for needle in ("scontrol", "shopt", "trap ", "wait ", "exit ", "restart_count"):
        assert not [s for s in texts if needle in s], needle


def test_values_and_blocks_are_filled_once() -> None:
    t = parse_template("comment\n#@ a\nx=@@{v} $HOME ${y[@]}\n@@{b}\nend\n#@ c\n\n")
    assert t.fill("a", {"v": "@@{v}"}, {"b": ["1", "2"]}) == [
        "x=@@{v} $HOME ${y[@]}", "1", "2", "end"]
    assert t.fill("a", {"v": "v"}, {"b": []}) == ["x=v $HOME ${y[@]}", "end"]
    assert t.sections["c"] == ("",)
    assert isinstance(t, Template)
    with pytest.raises(KeyError):
        t.fill("a", {}, {"b": []})


def test_template_is_package_data(tmp_path: Path) -> None:
    """An installed wheel must find the template: build_py copies exactly what ships."""
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib",
                    str(tmp_path)], cwd=REPO, check=True, capture_output=True)
    shipped = tmp_path / "squall" / "mksbatch" / TEMPLATE
    assert shipped.is_file(), "add the template to [tool.setuptools.package-data]"
    assert shipped.read_text() == (MKSBATCH / TEMPLATE).read_text()
