"""Staleness of the trajectories a training phase consumed: policy version - trajectory version, token-weighted.

A training phase says the policy version it trains (``rl.policy_version``, default its step) and the versions of
the trajectories it consumes (``rl.trajectory_versions``, a list, with ``rl.trajectory_tokens`` to weight
them, else each counts once). Per step and per job: the token-weighted mean, p90 (nearest rank by weight) and
max, and the share of tokens older than the bound (``rl.max_staleness`` on the phase, else the driver's
resource) where one is set.

Example::

    staleness([(1, 3, [1, 2], [10, 30], None)], bound=1)
    # {"mean": 1.25, "p90": 2, "max": 2, "beyond": 0.25, "bound": 1, "trajectories": 2, "tokens": 40.0}
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["staleness", "weighted"]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def weighted(consumed: Iterable[tuple[Any, Any, Any, Any, Any]]) -> tuple[list[tuple[float, float]], Any, int]:
    """``(staleness, weight)`` pairs of the consumed entries (step, policy version, versions, tokens, bound),
    the first bound they carry, and how many entries were unreadable (left out)."""
    pairs: list[tuple[float, float]] = []
    bound = None
    bad = 0
    for _step, policy, versions, tokens, own_bound in consumed:
        if not _number(policy) or not isinstance(versions, (list, tuple)) or not all(map(_number, versions)):
            bad += 1
            continue
        if isinstance(tokens, (list, tuple)) and len(tokens) == len(versions) and all(map(_number, tokens)):
            weights = [float(t) for t in tokens]
        else:
            weights = [1.0] * len(versions)
        pairs.extend((policy - v, w) for v, w in zip(versions, weights, strict=True) if w > 0)
        if bound is None and _number(own_bound):
            bound = own_bound
    return pairs, bound, bad


def staleness(consumed: Iterable[tuple[Any, Any, Any, Any, Any]], bound: Any = None) -> dict[str, Any] | None:
    """The token-weighted staleness of ``consumed`` (see the module docstring); None without a readable entry.
    ``bound``: the job's (the driver's ``rl.max_staleness``); a phase's own wins."""
    pairs, own, _ = weighted(consumed)
    if not pairs:
        return None
    bound = own if own is not None else (bound if _number(bound) else None)
    total = sum(w for _, w in pairs)
    ordered = sorted(pairs)
    mean = sum(s * w for s, w in pairs) / total
    at, p90 = 0.0, ordered[-1][0]
    for value, weight in ordered:
        at += weight
        if at >= 0.9 * total - 1e-9 * total:
            p90 = value
            break
    return {
        "mean": round(mean, 6),
        "p90": _plain(p90),
        "max": _plain(ordered[-1][0]),
        "beyond": None if bound is None else round(sum(w for s, w in pairs if s > bound) / total, 6),
        "bound": bound,
        "trajectories": len(pairs),
        "tokens": round(total, 6),
    }


def _plain(value: float) -> float | int:
    """A whole number as an int (versions are integers: their differences read as such)."""
    return int(value) if float(value).is_integer() else round(value, 6)
