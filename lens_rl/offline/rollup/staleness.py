"""Staleness of the trajectories a training phase consumed: policy version - trajectory version, token-weighted.

A training phase says the policy version it trains (``rl.policy_version``, default its step) and the versions of
the trajectories it consumes (``rl.trajectory_versions``, with ``rl.trajectory_counts`` the trajectories of each
and ``rl.trajectory_tokens`` their tokens: a histogram, :mod:`lens_rl.record.consumed`; a store written before
holds one item per trajectory). Per step and per job: the token-weighted mean, p90 (nearest rank by weight) and
max, and ``beyond``, the share of trajectories older than their bound (``rl.max_staleness`` on the phase, else
the driver's resource) where one is set.

The rule itself lives in :func:`lens_rl.buckets.staleness` (one function: the live ``step_metrics()`` keys
use it too); this module is its name on the rollup's floor, with :func:`placed`: a phase of no step (a worker
loop outside the driver's step context) counts in the step whose window holds its end, the rule by time every
other span of no step follows in the pipeline (busy time and weight syncs are read over the steps' windows).

Example::

    staleness([(1, 3, [1, 2], [10, 30], None)], bound=1)
    # {"mean": 1.25, "p90": 2, "max": 2, "beyond": 0.5, "bound": 1, "trajectories": 2, "tokens": 40.0}
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from itertools import accumulate
from typing import Any

from lens_rl.buckets import staleness, weighted

__all__ = ["placed", "staleness", "weighted"]


def placed(consumed: list[tuple[Any, ...]], windows: Mapping[Any, Sequence[tuple[int, int]]]) -> list[tuple[Any, ...]]:
    """``consumed`` (pipe entries: step, policy version, ..., the phase's end ns last) with each entry of no step
    given the step whose window (``windows``: step -> its intervals) holds its end (lo < end <= hi; of several,
    the one that started last), its policy version defaulting to that step; an entry in no window stays as it
    is (a job without steps counts it; one with steps reads only their windows, as for every span)."""
    if not windows or all(c[0] is not None for c in consumed):
        return consumed
    spans = sorted((lo, hi, step) for step, each in windows.items() for lo, hi in each if hi > lo)
    starts = [lo for lo, _, _ in spans]
    reach = list(accumulate((hi for _, hi, _ in spans), max))  # the latest end of the windows up to each
    out = []
    for entry in consumed:
        end = entry[-1]
        if entry[0] is None and len(entry) > 6 and isinstance(end, int):
            k = bisect_left(starts, end) - 1  # the windows starting before it, the latest first
            while k >= 0 and spans[k][1] < end:
                k = k - 1 if reach[k] >= end else -1  # (none before it reaches the end: stop)
            if k >= 0:
                step = spans[k][2]
                entry = (step, step if entry[1] is None else entry[1], *entry[2:])
        out.append(entry)
    return out
