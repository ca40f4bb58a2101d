"""Staleness of the trajectories a training phase consumed: policy version - trajectory version, token-weighted.

A training phase says the policy version it trains (``rl.policy_version``, default its step) and the versions of
the trajectories it consumes (``rl.trajectory_versions``, a list, with ``rl.trajectory_tokens`` to weight
them, else each counts once). Per step and per job: the token-weighted mean, p90 (nearest rank by weight) and
max, and the share of tokens older than the bound (``rl.max_staleness`` on the phase, else the driver's
resource) where one is set.

The rule itself lives in :func:`lens_rl.buckets.staleness` (one function: the live ``step_metrics()`` keys
use it too); this module is its name on the rollup's floor.

Example::

    staleness([(1, 3, [1, 2], [10, 30], None)], bound=1)
    # {"mean": 1.25, "p90": 2, "max": 2, "beyond": 0.25, "bound": 1, "trajectories": 2, "tokens": 40.0}
"""

from __future__ import annotations

from lens_rl.buckets import staleness, weighted

__all__ = ["staleness", "weighted"]
