"""The one staleness rule, live (``step_metrics()``) and offline (the pipeline rollup): what a training phase
consumed (a histogram of trajectory versions, their tokens and counts) read as policy version - trajectory
version, token-weighted. Of the vocabulary floor (imports nothing of lens_rl); :mod:`lens_rl.buckets`
re-exports it.

Example::

    staleness([(1, 3, [1, 2], [10, 30], None)], bound=1)   # mean 1.25, p90 2, max 2, beyond 0.5
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

__all__ = ["staleness", "weighted"]


def _number(value: Any) -> bool:
    """A finite number a store can hold (an int within int64, a finite float): a count, tokens, a bound."""
    if value.__class__ is int:
        return -(2**63) <= value < 2**63  # type: ignore[no-any-return]
    return value.__class__ is float and math.isfinite(value)


def _version(value: Any) -> bool:
    """A version: an int within int64 (a whole float within it too, as a store may hold one)."""
    if value.__class__ is float:
        return value.is_integer() and -(2.0**63) <= value < 2.0**63  # type: ignore[no-any-return]
    return _number(value)


def _count(value: Any) -> bool:
    """A count of trajectories: an int, or a whole float, in [1, 2**63) (a store's bigger one is hostile)."""
    if value.__class__ is float:
        return value.is_integer() and 1.0 <= value < 2.0**63  # type: ignore[no-any-return]
    return value.__class__ is int and 1 <= value < 2**63  # type: ignore[no-any-return]


def weighted(consumed: Iterable[tuple[Any, ...]]) -> tuple[list[tuple[float, float, float, Any]], int]:
    """``(staleness, weight, trajectories, bound)`` of each readable item of the consumed entries (step, policy
    version, versions, tokens, the phase's bound[, trajectories per version]: a histogram's, else one each), and
    how many entries were unreadable (left out). An item whose version is no int within int64, whose count is no
    whole number in [1, 2**63) or whose tokens no number in [0, 2**63) (a hostile store) is left out, so every
    sum stays finite; a weight is its tokens, else its trajectories (a trajectory of 0 tokens, an empty or
    aborted generation, weighs nothing in the mean yet was consumed: it counts in the max and the share beyond)."""
    items: list[tuple[float, float, float, Any]] = []
    bad = 0
    for entry in consumed:
        policy, versions, tokens, own = entry[1], entry[2], entry[3], entry[4]
        counts = entry[5] if len(entry) > 5 else None
        if not _version(policy) or not isinstance(versions, (list, tuple)):
            bad += 1
            continue
        n = len(versions)
        if not (isinstance(counts, (list, tuple)) and len(counts) == n):
            counts = [1] * n
        if not (isinstance(tokens, (list, tuple)) and len(tokens) == n):
            tokens = None
        bound = own if _number(own) and own >= 0 else None
        for k in range(n):
            version, count = versions[k], counts[k]
            weight = count if tokens is None else tokens[k]
            fine = _version(version) and _count(count)
            if fine and (weight is count or (_number(weight) and 0 <= weight < 2**63)):
                items.append((policy - version, float(weight), float(count), bound))
    return items, bad


def staleness(consumed: Iterable[tuple[Any, ...]], bound: Any = None) -> dict[str, Any] | None:
    """The one staleness rule, live (``step_metrics()``) and offline (the pipeline rollup): per trajectory policy
    version - trajectory version; its mean, p90 (nearest rank by weight) and max weighted by tokens (else each
    trajectory counts once; a trajectory of 0 tokens weighs nothing in the mean and p90 yet counts in the max
    and ``beyond``, and where every one has 0 tokens each counts once), and ``beyond``: the share of trajectories older than their bound (a phase's own
    ``rl.max_staleness``, else ``bound``, the job's), where one is set. ``consumed``: (step, policy version,
    trajectory versions, trajectory tokens, the phase's bound[, trajectories per version]) entries (a
    histogram's, :mod:`lens_rl.record.consumed`, or one trajectory per version listed); None without a readable
    one. ``bound`` in the answer: the job's, else the phases' (a sorted list where they differ).

    Example::

        staleness([(1, 3, [1, 2], [10, 30], None)], bound=1)
        # {"mean": 1.25, "p90": 2, "max": 2, "beyond": 0.5, "bound": 1, "trajectories": 2, "tokens": 40.0}
    """
    items, _ = weighted(consumed)
    if not items:
        return None
    job = bound if _number(bound) and bound >= 0 else None
    total = weights = sum(w for _, w, _, _ in items)
    if total <= 0:  # (every trajectory of 0 tokens: each counts once, as where no tokens are given)
        items = [(lag, count, count, own) for lag, _, count, own in items]
        total = sum(w for _, w, _, _ in items)
    ordered = sorted((s, w) for s, w, _, _ in items)
    mean = sum(s * w for s, w, _, _ in items) / total
    if not math.isfinite(mean):  # (cannot happen with items of int64 figures: never an inf or NaN answer)
        return None
    at, p90 = 0.0, ordered[-1][0]
    for value, weight in ordered:
        at += weight
        if at >= 0.9 * total - 1e-9 * total:
            p90 = value
            break
    judged = beyond = 0.0
    for lag, _, count, own in items:
        limit = job if own is None else own
        if limit is not None:
            judged += count
            beyond += count if lag > limit else 0.0
    owns = sorted({own for _, _, _, own in items if own is not None})
    said = job if job is not None else owns[0] if len(owns) == 1 else owns or None
    return {
        "mean": round(mean, 6),
        "p90": _plain(p90),
        "max": _plain(ordered[-1][0]),
        "beyond": round(beyond / judged, 6) if judged else None,
        "bound": said,
        "trajectories": int(sum(c for _, _, c, _ in items)),
        "tokens": round(weights, 6),
    }


def _plain(value: float) -> float | int:
    """A whole number as an int (versions are integers: their differences read as such)."""
    return int(value) if float(value).is_integer() else round(value, 6)
