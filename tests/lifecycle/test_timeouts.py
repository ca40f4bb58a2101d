"""Every public flush and shutdown reads its timeout the same way, on and off: never a raise into the caller."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import lens_rl
from lens_rl.export.bounded import DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS, budget_ms

_ODD = [math.inf, -math.inf, math.nan, None, "abc", -5, 1e300, [1], 10**400]


def test_an_odd_timeout_is_a_bounded_budget() -> None:
    """Infinity is the longest budget, negative is zero, and NaN, None or a non-number is the 5 s default."""
    assert budget_ms(math.inf) == budget_ms(1e300) == budget_ms(10**400) == MAX_TIMEOUT_MS
    assert budget_ms(-5) == budget_ms(-math.inf) == 0
    assert budget_ms(math.nan) == budget_ms(None) == budget_ms("abc") == budget_ms([1]) == DEFAULT_TIMEOUT_MS
    assert budget_ms(1500.7) == 1500


@pytest.mark.parametrize("timeout", _ODD, ids=repr)
def test_off_flush_and_shutdown_accept_any_timeout(timeout: object) -> None:
    """With telemetry off, flush and shutdown with any timeout return True."""
    assert lens_rl.flush_telemetry(timeout) is True  # type: ignore[arg-type]
    assert lens_rl.shutdown_telemetry(timeout) is True  # type: ignore[arg-type]


def test_on_flush_and_shutdown_accept_any_timeout(tmp_path: Path) -> None:
    """With telemetry on, flush, shutdown and the handle's own methods never raise whatever the timeout."""
    handle = lens_rl.init_telemetry_driver(
        {"telemetry": {"enabled": True, "trace_dir": str(tmp_path / "t"), "run_id": "odd"}}, "grpo"
    )
    assert handle is not None
    with lens_rl.traced_phase("generation", step=0):
        pass
    for timeout in _ODD:
        if timeout in (math.inf, 1e300, 10**400, None, "abc", [1]) or timeout != timeout:
            assert lens_rl.flush_telemetry(timeout) is True  # type: ignore[arg-type]
            assert handle.force_flush(timeout) is True  # type: ignore[arg-type]
        else:  # no budget: an answer at once, never a raise
            assert isinstance(lens_rl.flush_telemetry(timeout), bool)  # type: ignore[arg-type]
            assert isinstance(handle.force_flush(timeout), bool)  # type: ignore[arg-type]
    assert lens_rl.shutdown_telemetry(math.inf) is True
    assert handle.shutdown(math.nan) is True  # type: ignore[arg-type]
