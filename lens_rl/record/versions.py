"""The weight version a process generates with: :func:`lens_rl.set_weight_version`.

A process-wide value, set by the generating process after it loads weights (or by a woven framework):
every generation-family phase it records afterwards carries it as ``rl.weight_version``, and its heartbeat
says it. A training phase says what it consumed with ``traced_phase(..., trajectory_versions=[...],
trajectory_tokens=[...])`` (checked and recorded as a version histogram: :mod:`lens_rl.record.consumed`); the
offline pipeline rollup and ``step_metrics()`` compute staleness from it (:mod:`lens_rl.offline.rollup.staleness`).

Example::

    engine.load_weights(state_dict)
    lens_rl.set_weight_version(version)
"""

from __future__ import annotations

from lens_rl._runtime import RUNTIME
from lens_rl.record.consumed import int64_of

__all__ = ["set_weight_version"]


def set_weight_version(version: int | None) -> None:
    """Set the weight version this process generates with (None: forget it). A plain assignment, on or off.

    Raises ValueError for anything but an int within int64 (a numpy integer is one, kept as an int; a bool is
    not a version) or None."""
    if version is not None and (type(version) is not int or not -(2**63) <= version < 2**63):
        as_int = int64_of(version)
        if as_int is None:
            raise ValueError(
                f"set_weight_version: version must be an int in [-2**63, 2**63) (or None), got {version!r}"
            )
        version = as_int
    RUNTIME.weight_version = version
