"""pytest-benchmark versions of benchmarks/overhead.py: bare / disabled / enabled / raw OpenTelemetry.

Run on demand: ``pytest benchmarks`` (outside the default test run).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _common import null_pipeline

from lens_rl import testing, traced_phase


class _Noop:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


NOOP = _Noop()


def bare(x: int) -> int:
    return x


traced = traced_phase("generation")(bare)


@pytest.fixture
def disabled() -> Iterator[None]:
    testing.reset()
    traced(1)  # resolve: off
    yield
    testing.reset()


@pytest.fixture
def enabled() -> Iterator[Any]:
    with null_pipeline() as rec:
        yield rec.handle.tracer


@pytest.mark.benchmark(group="function call")
def test_bare_call(benchmark: Any) -> None:
    benchmark(bare, 1)


@pytest.mark.benchmark(group="function call")
def test_disabled_traced_call(benchmark: Any, disabled: None) -> None:
    benchmark(traced, 1)


@pytest.mark.benchmark(group="with")
def test_noop_with(benchmark: Any) -> None:
    def run() -> None:
        with NOOP:
            pass

    benchmark(run)


@pytest.mark.benchmark(group="with")
def test_disabled_with(benchmark: Any, disabled: None) -> None:
    def run() -> None:
        with traced_phase("x"):
            pass

    benchmark(run)


@pytest.mark.benchmark(group="enabled")
def test_enabled_with(benchmark: Any, enabled: Any) -> None:
    def run() -> None:
        with traced_phase("x"):
            pass

    benchmark(run)


@pytest.mark.benchmark(group="enabled")
def test_raw_otel_with(benchmark: Any, enabled: Any) -> None:
    def run() -> None:
        with enabled.start_as_current_span("x"):
            pass

    benchmark(run)
