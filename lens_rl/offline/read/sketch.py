"""A log-scale sketch of durations: what a phase keeps of its durations past
:data:`~lens_rl.offline.read.parts.EXACT_DURATIONS`, so memory stays bounded however long the run.

A duration (ns) falls in bucket ``ceil(log(seconds) / log(1.01))`` (0 in a bucket of its own); a quantile
read from the buckets is within 0.5 % of the exact one. Sketches merge exactly (their counts add).

Example::

    sketch = folded({}, durations)
    quantile_s(sketch, 0.95)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

__all__ = ["folded", "quantile_s"]

#: The bucket ratio: a quantile read from a sketch is within 0.5 % of the exact one.
_GAMMA = 1.01
_LOG_GAMMA = math.log(_GAMMA)
_ZERO = -(2**31)  # the bucket of durations of 0


def folded(sketch: dict[int, int], durations: Iterable[int]) -> dict[int, int]:
    """``sketch`` (in place) with ``durations`` (ns) counted in."""
    for value in durations:
        k = math.ceil(math.log(value / 1e9) / _LOG_GAMMA) if value > 0 else _ZERO
        sketch[k] = sketch.get(k, 0) + 1
    return sketch


def quantile_s(sketch: Mapping[int, int], q: float) -> float | None:
    """The nearest-rank quantile ``q`` of a sketch's durations, in seconds (None: an empty sketch)."""
    total = sum(sketch.values())
    rank = max(math.ceil(q * total), 1)
    seen = 0
    for k in sorted(sketch):
        seen += sketch[k]
        if seen >= rank:
            return 0.0 if k == _ZERO else 2 * _GAMMA**k / (_GAMMA + 1)
    return None  # (an empty sketch: rank <= total elsewhere)
