"""Bounded calls: work on a pre-started helper, the caller waiting at most its budget."""

from __future__ import annotations

import threading
import time

import pytest

from lens_rl.export.bounded import run_bounded, start_helpers, submit


def test_a_call_past_its_budget_returns_false_at_once_and_the_work_goes_on() -> None:
    """A blocked call answers (False, None) within its budget; a quick one returns its result; a busy pool
    grows for the next call."""
    start_helpers()
    release = threading.Event()
    t0 = time.monotonic()
    assert run_bounded(lambda: release.wait(10), 0.2) == (False, None)
    assert time.monotonic() - t0 < 2.0
    assert run_bounded(lambda: 41 + 1, 2.0) == (True, 42)  # another helper serves while one is blocked
    release.set()


@pytest.mark.expects_internal_error
def test_a_failing_call_is_no_result_and_never_raises() -> None:
    """The helper logs telemetry's own fault; the caller gets (False, None)."""
    start_helpers()

    def boom() -> None:
        raise RuntimeError("exporter bug")

    job = submit(boom)
    assert job.wait(2.0) == (False, None) and job.finished()
