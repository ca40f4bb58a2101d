"""Goodput buckets: `Bucket`, the ambient `with_bucket` scope and the default phase table.

A phase's bucket is, in order: the explicit ``bucket=`` argument, the innermost
:class:`with_bucket` scope (a contextvar, so it follows threads' and asyncio tasks'
contexts), the default for a known RL phase name (:data:`DEFAULT_PHASE_BUCKETS`),
else none (an umbrella span such as a whole step).

Example::

    with with_bucket(Bucket.OVERHEAD):              # validation is not training
        with traced_phase("generation"):            # -> rl.bucket = "overhead"
            ...
"""

from __future__ import annotations

import contextvars
import enum
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from lens_rl import _codegen

__all__ = ["DEFAULT_PHASE_BUCKETS", "Bucket", "current_bucket", "default_bucket", "with_bucket"]

F = TypeVar("F", bound=Callable[..., Any])


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


# The ambient scope: a linked node (bucket, outer node), so nothing per-entry lives on
# the with_bucket object and one object can be entered from many threads at once.
_AMBIENT: contextvars.ContextVar[tuple[Bucket, Any] | None] = contextvars.ContextVar("lens_rl_bucket", default=None)


def current_bucket() -> Bucket | None:
    """The innermost :class:`with_bucket` scope's bucket in this context, or None."""
    node = _AMBIENT.get()
    return None if node is None else node[0]


class with_bucket(_codegen.Runner):  # noqa: N801 - a context manager named like a function, per the SPEC
    """Set the ambient bucket for the phases inside; a context manager and a decorator.

    Validates ``bucket`` at once (``ValueError``), enabled or not. Costs one contextvar
    set and reset (~0.2 µs); state lives in the contextvar, so it follows asyncio tasks
    and nesting restores the outer scope.

    Example::

        @with_bucket("overhead")
        def validate(): ...
    """

    __slots__ = ("bucket",)

    def __init__(self, bucket: Bucket | str) -> None:
        coerced = coerce_bucket(bucket)
        if coerced is None:
            raise ValueError(f"bucket: invalid bucket None; allowed: {_ALLOWED}")
        self.bucket = coerced

    def __enter__(self) -> Bucket:
        _AMBIENT.set((self.bucket, _AMBIENT.get()))
        return self.bucket

    def __exit__(self, *exc_info: object) -> None:
        node = _AMBIENT.get()
        if node is not None:
            _AMBIENT.set(node[1])

    def __call__(self, fn: F) -> F:
        return _codegen.decorate(fn, self)  # type: ignore[return-value]

    def __reduce__(self) -> tuple[Any, ...]:
        return (with_bucket, (self.bucket.value,))

    def __repr__(self) -> str:
        return f"with_bucket({self.bucket.value!r})"

    # The Runner scope: the ambient bucket, set for the whole call (generators included).
    def _open(self, make_current: bool) -> None:
        self.__enter__()

    def _close(self, token: None, exc: BaseException | None) -> None:
        self.__exit__()
