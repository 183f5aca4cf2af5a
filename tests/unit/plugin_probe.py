"""Build a test probe (spank/plugin/tests/*.c) with the plugin sources it exercises and the
whole core, as the plugin is built; `make asan` sets SQUALL_TEST_CFLAGS to sanitize it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "spank/plugin"


def build_probe(out: Path, probe: str, *plugin_sources: str,
                cflags: tuple[str, ...] = ()) -> Path:
    """Compile PLUGIN/tests/probe with PLUGIN/plugin_sources and spank/core/*.c into out
    (cflags: more compiler flags, such as a test-only -D)."""
    core = sorted(str(p) for p in (ROOT / "spank/core").glob("*.c"))
    subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O2",
                    *os.environ.get("SQUALL_TEST_CFLAGS", "").split(), *cflags,
                    f"-I{ROOT}/spank/core", f"-I{PLUGIN}", "-o", str(out),
                    str(PLUGIN / "tests" / probe), *(str(PLUGIN / s) for s in plugin_sources),
                    *core], check=True, timeout=300)
    return out
