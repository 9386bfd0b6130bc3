"""Build of the one compiled module: the pipeline timeline's loop (oracle/performance/timeline.py, Cython's
pure-Python mode). Everything else is in pyproject.toml. `optional`: without a C compiler the install goes on
and the module runs interpreted (`timeline.compiled` is then False)."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(ext_modules=cythonize([Extension("paratune.oracle.performance.timeline", ["oracle/performance/timeline.py"],
                                       optional=True)], language_level=3))
