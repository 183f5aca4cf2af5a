# setuptools needs setup.py for cffi_modules: it compiles spank/core into squall._core.
from setuptools import setup

setup(cffi_modules=["python/squall/_core_build.py:ffibuilder"])
