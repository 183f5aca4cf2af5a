# The compiled C core (spank/core, built by spank/core/cffi_build.py). cffi objects carry no
# types: squall.core, the only module that imports this one, gives typed functions.
from typing import Any

ffi: Any
lib: Any
