"""A sampled run's goodput: the one estimator the job's and each attempt's figure use.

``sample_rate`` keeps every top-level phase, with its whole subtree, with that probability; productive time only
comes from such phases (``rl.job`` and ``launch``, always kept, are unbucketed and overhead), while the wall
(``rl.job``, a process's lifetime) is measured in full whatever the rate. So a process's kept productive time
over its ``sample_rate`` is an unbiased (Horvitz-Thompson) estimate of its productive time, and that over the
wall an unbiased estimate of the unsampled goodput (clipped at 1, which a rare draw could pass). Its spread
shrinks as the kept phases grow in number: relative standard error about ``sqrt((1 - rate) / (rate * n))``
for ``n`` like top-level phases (steps). Seconds stay those of the kept phases.

Example::

    estimated_goodput(parts, ratio, wall_ns)   # ratio itself unless a part was sampled
"""

from __future__ import annotations

from collections.abc import Sequence

from lens_rl.offline.read.parts import ProcessPart

__all__ = ["estimated_goodput", "estimated_productive_ns"]


def estimated_productive_ns(parts: Sequence[ProcessPart]) -> float:
    """The productive ns of ``parts``, each its kept productive time over its ``sample_rate``."""
    return sum(p.bucket_ns["productive"] / p.sample_rate for p in parts)


def estimated_goodput(parts: Sequence[ProcessPart], ratio: float | None, over_ns: float | None) -> float | None:
    """``ratio`` (productive over ``over_ns``, the view's wall) when no part was sampled or there is none;
    else the estimated productive time over ``over_ns``, clipped at 1."""
    if ratio is None or not over_ns or not any(p.sampled for p in parts):
        return ratio
    return min(estimated_productive_ns(parts) / over_ns, 1.0)
