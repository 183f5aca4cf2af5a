# setuptools needs setup.py for cffi_modules: it compiles spank/core into squall._core
# (the builder, spank/core/cffi_build.py, is part of the sdist and never installed).
# cffi builds the module against the stable ABI, so one wheel serves CPython 3.11 and later.
from setuptools import setup

setup(cffi_modules=["spank/core/cffi_build.py:ffibuilder"],
      options={"bdist_wheel": {"py_limited_api": "cp311"}})
