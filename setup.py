"""Shim for the one thing setup.cfg cannot declare: the optional C accelerator.

All metadata lives in setup.cfg. ``lens_rl.record._speedups`` is optional: without a
compiler the build skips it and lens_rl runs its pure-Python path.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("lens_rl.record._speedups", ["lens_rl/record/_speedups.c"], optional=True)])
