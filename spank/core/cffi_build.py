"""cffi builder for ``squall._core``: the SPANK plugin's pure C core, compiled for Python.

Every ``spank/core/*.c`` file is compiled in, every ``*.h`` is included and every
``*.cdef`` (plain declarations cffi can parse) is declared, so a core module is added
by dropping its three files in ``spank/core/`` -- nothing here changes. setup.py names
this file (``cffi_modules``); it lives here, beside the sources, so that it is part of
the source distribution but never installed with the package.

Warnings are errors only when ``SQUALL_WERROR=1`` (``make core``, CI, ``make lint``):
a site installing squall with a newer compiler gets warnings, not a failed install.
"""

from __future__ import annotations

import os
from pathlib import Path

import cffi

CORE = Path(__file__).resolve().parent
ROOT = CORE.parents[1]
WERROR = ["-Werror"] if os.environ.get("SQUALL_WERROR") == "1" else []

ffibuilder = cffi.FFI()
ffibuilder.cdef("\n".join(p.read_text() for p in sorted(CORE.glob("*.cdef"))))
ffibuilder.set_source(
    "squall._core",
    "".join(f'#include "{h.name}"\n' for h in sorted(CORE.glob("*.h"))),
    sources=[str(p.relative_to(ROOT)) for p in sorted(CORE.glob("*.c"))],
    include_dirs=[str(CORE)],
    extra_compile_args=["-std=gnu11", "-Wall", "-Wextra", *WERROR, "-O2",
                        "-D_FORTIFY_SOURCE=2", "-fstack-protector-strong"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
