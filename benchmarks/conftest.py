"""Benchmarks share the tests' isolation: no telemetry env leaks in."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import clean_environment

clean_environment()
