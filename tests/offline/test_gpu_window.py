"""A device's timeline rebuilt from a window of its latest samples and what was kept of the rest answers every
query a look asks (integrals, memory peaks, idle stretches, the whole device) as the whole timeline does,
bit for bit; a query it cannot answer says so (the look joins cold)."""

from __future__ import annotations

import numpy as np
import pytest

from lens_rl.offline.read.gpu_join import timeline
from lens_rl.offline.read.gpu_window import ColdError, WindowLine, before_at

S = 10**9


def _samples(n: int, seed: int, gpm: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` samples about 0.5 s apart with jitter and two stops, utilisation often 0, some nulls."""
    rng = np.random.default_rng(seed)
    gaps = rng.integers(S // 2 - S // 20, S // 2 + S // 20, n)
    gaps[n // 3] = 7 * S  # (a sampler stopped: a hole)
    t = np.cumsum(gaps).astype(np.int64)
    v = np.full((n, 8), np.nan, np.float32)
    util = rng.integers(0, 101, n).astype(np.float32)
    util[rng.random(n) < 0.3] = 0
    util[rng.random(n) < 0.05] = np.nan
    v[:, 0] = util
    v[:, 2] = rng.integers(1, 80, n) * 2.0**30
    if gpm:
        v[n // 2 :, 5] = rng.integers(0, 101, n - n // 2)  # (SM activity read from half way only)
    return t, v, np.full(n, S // 2, np.int64)


def _window(t: np.ndarray, v: np.ndarray, h: np.ndarray, j: int, opens: np.ndarray) -> WindowLine:
    """The window of segments from ``j`` on, what came before it kept at ``j`` (two steps: a whole timeline's
    window, then that window's own window further on, as two looks keep them)."""
    whole = timeline(t, v, h)
    read = [c for c in (0, 5, 7) if not np.isnan(v[:j, c]).all()]
    first = before_at(whole, None, j // 2, opens, [c for c in (0, 5, 7) if not np.isnan(v[: j // 2, c]).all()])
    mid = WindowLine(
        timeline(t[j // 2 - 1 :], v[j // 2 - 1 :], h[j // 2 - 1 :], keep=first.seen).window(first.cum), first
    )
    before = before_at(mid.line, first, j - j // 2, opens, read)
    line = timeline(t[j - 1 :], v[j - 1 :], h[j - 1 :], keep=before.seen).window(before.cum)
    return WindowLine(line, before)


@pytest.mark.parametrize("gpm", [False, True])
def test_a_window_answers_as_the_whole_timeline_bit_for_bit(gpm: bool) -> None:
    """Intervals starting in the window or at an anchor, the idle stretches, the device's whole and its memory
    peak: the same numbers as the whole day's timeline, to the last bit."""
    t, v, h = _samples(3000, 1, gpm)
    whole = timeline(t, v, h)
    j = 2400
    opens = np.array([t[10], t[700] + 3, t[2000] - 1, t[2300]])
    window = _window(t, v, h, j, opens)
    rng = np.random.default_rng(2)
    lo = np.concatenate([rng.integers(whole.a[j], t[-1], 300), opens])
    hi = np.concatenate([lo[:300] + rng.integers(0, 40 * S, 300), rng.integers(whole.a[j], t[-1] + S, opens.size)])
    got, peaks = window.joined(lo, hi)
    want, want_peaks = whole.joined(lo, hi)
    assert got.tobytes() == want.tobytes()
    assert np.array_equal(peaks, want_peaks, equal_nan=True)
    assert window.joined(lo, hi, False)[0].tobytes() == want.tobytes()
    assert window.idle_intervals().tobytes() == whole.idle_intervals().tobytes()
    assert window.whole().tobytes() == whole.whole().tobytes() and window.mem_max() == whole.mem_max()
    assert (window.measured == whole.measured).all()


def test_a_query_before_the_window_at_no_anchor_is_cold() -> None:
    """An interval starting before the window where nothing was kept, or ending before it, cannot be answered."""
    t, v, h = _samples(1000, 3)
    window = _window(t, v, h, 800, np.array([t[5]]))
    with pytest.raises(ColdError):
        window.joined(np.array([t[6]]), np.array([t[-1]]))
    with pytest.raises(ColdError):
        window.joined(np.array([t[5]]), np.array([t[6]]))
    assert window.joined(np.array([t[5]]), np.array([t[-1]]))[0].shape == (1, 7)
