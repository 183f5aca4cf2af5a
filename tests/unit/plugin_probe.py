"""Build a test probe (spank/plugin/tests/*.c, spank/keeper/tests/*.c) with the plugin or
keeper sources it exercises and the whole core, as spank/Makefile builds them; `make asan`
sets SQUALL_TEST_CFLAGS to sanitize it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "spank/plugin"
KEEPER = ROOT / "spank/keeper"


def build_probe(out: Path, probe: str, *plugin_sources: str,
                cflags: tuple[str, ...] = (), where: Path = PLUGIN) -> Path:
    """Compile WHERE/tests/probe with WHERE/plugin_sources and spank/core/*.c into out
    (cflags: more compiler flags, such as a test-only -D)."""
    core = sorted(str(p) for p in (ROOT / "spank/core").glob("*.c"))
    subprocess.run(["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O2",
                    *os.environ.get("SQUALL_TEST_CFLAGS", "").split(), *cflags,
                    f"-I{ROOT}/spank/core", f"-I{PLUGIN}", f"-I{KEEPER}", "-o", str(out),
                    str(where / "tests" / probe), *(str(where / s) for s in plugin_sources),
                    *core], check=True, timeout=300)
    return out


def build_cache_probe(out: Path, cflags: tuple[str, ...] = ()) -> Path:
    """The node-local cache's probe (spank/keeper/tests/cache_probe.c) with the keeper's
    cache sources."""
    return build_probe(out, "cache_probe.c", "extracted.c", "governor.c", "resume.c",
                       cflags=cflags, where=KEEPER)
