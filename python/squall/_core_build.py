"""cffi builder for ``squall._core``: the SPANK plugin's pure C core, compiled for Python.

Every ``spank/core/*.c`` file is compiled in, every ``*.h`` is included and every
``*.cdef`` (plain declarations cffi can parse) is declared, so a core module is added
by dropping its three files in ``spank/core/`` -- nothing here changes.
"""

from pathlib import Path

import cffi

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "spank" / "core"

ffibuilder = cffi.FFI()
ffibuilder.cdef("\n".join(p.read_text() for p in sorted(CORE.glob("*.cdef"))))
ffibuilder.set_source(
    "squall._core",
    "".join(f'#include "{h.name}"\n' for h in sorted(CORE.glob("*.h"))),
    sources=[str(p.relative_to(ROOT)) for p in sorted(CORE.glob("*.c"))],
    include_dirs=[str(CORE)],
    extra_compile_args=["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O2",
                        "-D_FORTIFY_SOURCE=2", "-fstack-protector-strong"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
