"""Goodput vocabulary: `Bucket`, the default phase table and the exclusive-time rule.

A phase's bucket is, in order: the explicit ``bucket=`` argument, the innermost
``with_bucket`` scope, the bucket carried by the caller's context, the default for a
known RL phase name (:data:`DEFAULT_PHASE_BUCKETS`), else none (an umbrella span such
as a whole step). This module imports nothing of lens_rl: the live metrics and the
offline rollup both take :func:`exclusive_time` from here, so they agree.

Example::

    default_bucket("policy.generation")            # Bucket.PRODUCTIVE
    exclusive_time(0, 10, [(2, 5), (4, 6)])        # 6: the children's union is 4
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType

__all__ = ["DEFAULT_PHASE_BUCKETS", "Bucket", "coerce_bucket", "default_bucket", "exclusive_time", "goodput_of",
           "union_length"]


class Bucket(str, enum.Enum):
    """Where a phase's time goes. Values are the strings recorded as ``rl.bucket``."""

    PRODUCTIVE = "productive"
    OVERHEAD = "overhead"
    IDLE = "idle"
    WASTED = "wasted"

    def __str__(self) -> str:
        return self.value


_BY_VALUE = {b.value: b for b in Bucket}
_ALLOWED = ", ".join(_BY_VALUE)


def coerce_bucket(value: object, *, field: str = "bucket") -> Bucket | None:
    """``value`` as a :class:`Bucket` (None stays None); ``ValueError`` naming what is allowed."""
    if value is None or value.__class__ is Bucket:
        return value  # type: ignore[return-value]
    if isinstance(value, str):
        bucket = _BY_VALUE.get(value.strip().lower())
        if bucket is not None:
            return bucket
    raise ValueError(f"{field}: invalid bucket {value!r}; allowed: {_ALLOWED}")


_VALUES = tuple(member.value for member in Bucket)  # (iterating the enum and .value are Python calls)
_P, _O, _I, _W = Bucket.PRODUCTIVE, Bucket.OVERHEAD, Bucket.IDLE, Bucket.WASTED

#: Known RL phase names and their default bucket. Lookups normalise the name: lower
#: case, the last ``.``/``/``-separated part, ``-`` and spaces as ``_``.
DEFAULT_PHASE_BUCKETS: Mapping[str, Bucket] = MappingProxyType({
    # productive: the work an RL step exists to do
    "generation": _P, "generate": _P, "rollout": _P, "rollouts": _P,
    "reward": _P, "rewards": _P, "reward_computation": _P, "reward_model": _P,
    "policy_training": _P, "train": _P, "training": _P, "train_step": _P, "optimizer_step": _P,
    "value_training": _P, "critic_training": _P, "loss": _P, "backward": _P,
    "logprob": _P, "logprobs": _P, "policy_logprob": _P, "ref_logprob": _P, "reference_logprob": _P,
    "advantage": _P, "advantages": _P, "advantage_computation": _P,
    # overhead: necessary, but not the step's work
    "checkpointing": _O, "checkpoint": _O, "save_checkpoint": _O,
    "weight_sync": _O, "refit": _O, "weight_update": _O, "broadcast_weights": _O,
    "data_processing": _O, "data_loading": _O, "dataloader": _O, "tokenization": _O,
    "validation": _O, "evaluation": _O, "eval": _O,
    "logging": _O, "metrics_logging": _O,
    "offload": _O, "onload": _O, "prepare_for_generation": _O, "prepare_for_training": _O,
    "setup": _O, "cluster_setup": _O, "model_load": _O, "load_model": _O,
    # idle: waiting
    "wait": _I, "waiting": _I, "idle": _I, "barrier": _I, "queue_wait": _I, "sync_wait": _I,
    # wasted: work thrown away
    "wasted": _W, "discarded": _W, "retry": _W, "failed_rollout": _W,
})  # fmt: skip

_SEP = re.compile(r"[.\/]")


def default_bucket(name: str) -> Bucket | None:
    """The default bucket for a phase name (``"policy.generation"`` -> productive), else None."""
    key = _SEP.split(name.strip().lower())[-1].replace("-", "_").replace(" ", "_")
    return DEFAULT_PHASE_BUCKETS.get(key)


def goodput_of(seconds: Mapping[str, float]) -> float | None:
    """productive / (productive + overhead + idle + wasted); None when nothing is bucketed."""
    total = sum([seconds.get(value, 0.0) for value in _VALUES])  # (added in the buckets' order, as always)
    return seconds.get("productive", 0.0) / total if total > 0 else None


def union_length(intervals: Iterable[tuple[float, float]], *, ordered: bool = False) -> float:
    """The length covered by the union of ``(start, end)`` intervals (any one unit).

    ``ordered``: they come sorted already (e.g. a ``heapq.merge`` of sorted streams): read
    as they come, never held in memory at once.
    """
    total = 0.0
    lo: float | None = None
    hi = 0.0
    for start, stop in intervals if ordered else sorted(intervals):
        if lo is None or start > hi:
            if lo is not None:
                total += hi - lo
            lo, hi = start, stop
        elif stop > hi:
            hi = stop
    if lo is not None:
        total += hi - lo
    return total


def exclusive_time(start: float, end: float, inner: Iterable[tuple[float, float]]) -> float:
    """The one exclusive-time rule, live and offline: a bucketed span's own time.

    ``inner`` are the intervals of its nearest bucketed descendants; their union,
    clipped to ``[start, end]``, is taken away from its duration (never below zero).
    Concurrent children (threads, async tasks) therefore count once. Any one unit.
    """
    clipped = [(max(a, start), min(b, end)) for a, b in inner if min(b, end) > max(a, start)]
    return max((end - start) - union_length(clipped), 0.0)
