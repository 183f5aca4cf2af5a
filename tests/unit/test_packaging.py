"""The packaging agrees with itself: one version everywhere, the build dependencies are
installed where the packages are built, the packaged plugstack snippet is a line the
plugin accepts, and the Slurm dependency is computed from the headers compiled against.
(The packages themselves are built by `make packages` and installed in the node images:
tests/integration/test_packages.py.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import squall
from squall.core import parse_plugstack_args

REPO = Path(__file__).resolve().parents[2]


def package_list(path: Path) -> set[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {line for line in lines if line}


def build_depends() -> set[str]:
    control = (REPO / "debian" / "control").read_text()
    field = re.search(r"^Build-Depends:(.*?)^\S", control, re.M | re.S)
    assert field is not None
    names = {re.split(r"[\s(]", dep.strip())[0] for dep in field.group(1).split(",")}
    # dpkg-buildpackage also needs build-essential, which Build-Depends never lists
    return {"debhelper" if n == "debhelper-compat" else n for n in names if n} | {
        "build-essential"}


def test_one_version_everywhere():
    changelog = (REPO / "debian" / "changelog").read_text().splitlines()[0]
    m = re.match(r"squall \(([^)-]+)-\d+\)", changelog)
    assert m and m.group(1) == squall.__version__
    spec = (REPO / "packaging" / "squall.spec").read_text()
    assert re.search(r"^Version:\s+(\S+)$", spec, re.M).group(1) == squall.__version__
    assert 'dynamic = ["version"]' in (REPO / "pyproject.toml").read_text()


@pytest.mark.parametrize("where", [".ci/apt-packages.txt", "docker/node-packages.txt"])
def test_build_depends_are_installed_where_packages_are_built(where):
    missing = build_depends() - package_list(REPO / where)
    assert not missing, f"{where} lacks Build-Depends {sorted(missing)}"


def test_no_pip_into_debians_python_in_the_node_image():
    dockerfile = (REPO / "docker" / "node.Dockerfile").read_text()
    assert "--break-system-packages" not in dockerfile and "pip install" not in dockerfile
    assert "packaging/build-debs.sh" in dockerfile and "dpkg -i" in dockerfile


@pytest.mark.parametrize("plugin,bindir", [
    ("/usr/lib/x86_64-linux-gnu/slurm-wlm/spank_squall.so", "/usr/bin"),
    ("/usr/lib64/slurm/spank_squall.so", "/usr/bin"),
])
def test_snippet_is_a_line_the_plugin_accepts(plugin, bindir):
    text = (REPO / "packaging" / "squall.conf.in").read_text()
    text = text.replace("@PLUGIN@", plugin).replace("@BINDIR@", bindir)
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert len(lines) == 1, "one plugstack line, everything else comments"
    kind, path, *args = lines[0].split()
    assert (kind, path) == ("required", plugin)
    assert parse_plugstack_args(args)["sqshbuild"] == f"{bindir}/sqshbuild"


def slurm_version(tmp_path: Path, number: str | None) -> subprocess.CompletedProcess[str]:
    if number is not None:
        (tmp_path / "slurm").mkdir()
        (tmp_path / "slurm" / "slurm_version.h").write_text(
            f"#ifndef _SLURM_VERSION_H_\n#define SLURM_VERSION_NUMBER {number}\n")
    return subprocess.run(["bash", str(REPO / "packaging" / "slurm-version.sh"),
                           str(tmp_path)], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("number,expect", [("0x160508", "22.05 22.06"),
                                           ("0x180b05", "24.11 24.12"),
                                           ("0x1a0500", "26.05 26.06")])
def test_slurm_dependency_from_the_headers(tmp_path, number, expect):
    proc = slurm_version(tmp_path, number)
    assert (proc.returncode, proc.stdout.strip()) == (0, expect)


def test_slurm_dependency_without_headers_is_one_line(tmp_path):
    proc = slurm_version(tmp_path, None)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "install the Slurm headers" in proc.stderr
