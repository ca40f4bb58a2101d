"""The export retry policy: what a failed export is worth, and the waits between retries."""

from __future__ import annotations

import itertools

import pytest

from lens_rl.export.retry import RETRYABLE_STATUS, UNSENT, backoff, verdict


@pytest.mark.parametrize(("status", "size", "expected"), [
    (None, 10, "retry"), (408, 10, "retry"), (429, 1, "retry"), (503, 10, "retry"),
    (413, 10, "split"), (UNSENT, 10, "split"), (413, 1, "drop"), (UNSENT, 1, "drop"),
    (400, 10, "drop"), (401, 10, "drop"), (404, 1, "drop"),
])  # fmt: skip
def test_only_what_can_succeed_is_retried(status: object, size: int, expected: str) -> None:
    """No answer, 408, 429 and 5xx are retried; a batch too large is split while it has more than one span;
    any other rejection is dropped for good."""
    assert verdict(status, size) == expected
    assert {408, 429, 500, 502, 503, 504} == RETRYABLE_STATUS


def test_backoff_doubles_up_to_its_cap() -> None:
    """0.25 s, doubling, never past 5 s."""
    assert list(itertools.islice(backoff(), 7)) == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
