"""Shim for the one thing setup.cfg cannot declare: the optional C accelerators.

All metadata lives in setup.cfg. ``lens_rl.record._speedups`` (the hot path's entry point) and
``lens_rl.offline.read._gpuscan`` (the GPU sample lines' scanner) are optional: without a compiler the build
skips them and lens_rl runs its pure-Python paths.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("lens_rl.record._speedups", ["lens_rl/record/_speedups.c"], optional=True),
        Extension("lens_rl.offline.read._gpuscan", ["lens_rl/offline/read/_gpuscan.c"], optional=True),
    ]
)
