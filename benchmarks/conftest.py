"""Benchmarks share the tests' isolation: no telemetry env leaks in."""

import os

for _key in [k for k in os.environ if k.startswith(("LENS_RL_", "OTEL_"))]:
    del os.environ[_key]
