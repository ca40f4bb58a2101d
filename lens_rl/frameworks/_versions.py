"""Weight versions and consumed trajectories of the frameworks' async paths: what a weave hands to lens_rl.

The generation side: :func:`generating` is :func:`lens_rl.set_weight_version` for a version a framework's object
just took (an int; anything else is left out with one debug line). The training side: :func:`consumed` keeps what
a trainer just took from its buffer (the policy version it trains, each trajectory's weight version, its tokens,
the framework's staleness bound), process-wide (SkyRL converts the batch on a worker thread and trains on the
event loop's), until the next training-family phase a woven timer opens in the process takes it with
:func:`take` as its ``trajectory_versions=`` / ``trajectory_tokens=`` / ``policy_version=`` /
``max_staleness=`` (what ``traced_phase`` records for the keyword form): the offline pipeline's staleness and
the live ``step_metrics()`` keys read those. Nothing here raises into the framework.

Example::

    consumed(trainer.global_step, [g.global_step_when_scheduled for g in groups], tokens, bound=2)
    node = open_phase(name, **take(name))     # in the woven timer: {} unless a training phase and one is kept
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from lens_rl._errors import warn_once
from lens_rl._runtime import RUNTIME
from lens_rl.buckets import kind_of
from lens_rl.record.versions import set_weight_version

__all__ = ["attributes", "class_with", "consumed", "discard", "generating", "reset", "take", "unexpected"]

_LOG = logging.getLogger("lens_rl.frameworks")
#: what a trainer took last and no training phase has taken yet: the rl attributes of that phase
_PENDING: list[dict[str, Any] | None] = [None]
_LOCK = threading.Lock()
#: the weight version a weave set last (what :func:`reset` takes back, unless the job set its own since)
_SET: list[int | None] = [None]


def _int(value: Any) -> int | None:
    """``value`` as an int when it is one (a numpy integer too), else None."""
    if isinstance(value, bool):
        return None
    try:
        as_int = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return as_int if as_int == value and -(2**63) <= as_int < 2**63 else None


def generating(version: Any, framework: str) -> None:
    """The generating process's weight version is now ``version`` (``lens_rl.set_weight_version``)."""
    as_int = _int(version)
    if as_int is None:
        _LOG.debug("lens_rl: %s weight version %r is no int: not set", framework, version)
        return
    set_weight_version(as_int)
    _SET[0] = as_int


def consumed(
    policy_version: Any, versions: Iterable[Any], tokens: Iterable[Any] | None, framework: str, bound: Any = None
) -> None:
    """A trainer of ``framework`` took trajectories of weight ``versions`` (``tokens`` each, where known) to train
    policy version ``policy_version`` (``bound``: the most versions a trajectory may lag, where the framework has
    one). Kept for the next training phase (:func:`take`)."""
    said = attributes(policy_version, versions, tokens, framework, bound)
    if said is not None:
        with _LOCK:
            _PENDING[0] = said


def attributes(
    policy_version: Any, versions: Iterable[Any], tokens: Iterable[Any] | None, framework: str, bound: Any = None
) -> dict[str, Any] | None:
    """What a phase records of a consumption (``policy_version``, ``trajectory_versions``, ``trajectory_tokens``
    where every count is readable, ``max_staleness``), as plain ints and floats (a framework's numpy values
    too), what ``traced_phase``'s keywords take (:func:`lens_rl.record.consumed.check`): the phase records them
    as the same exact version histogram; None, with one debug line, for a shape that is not this."""
    try:
        policy = _int(policy_version)
        listed = [_int(v) for v in versions]
        counts = None if tokens is None else [_count(t) for t in tokens]
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # another shape: stand down, say why
        _LOG.debug("lens_rl: %s consumed versions not readable (%r): left out", framework, exc)
        return None
    if policy is None or not listed or None in listed:
        _LOG.debug("lens_rl: %s consumed versions not readable (%r, %r): left out", framework, policy, listed)
        return None
    said: dict[str, Any] = {"policy_version": policy, "trajectory_versions": listed}
    if counts is not None and len(counts) == len(listed) and None not in counts:
        said["trajectory_tokens"] = counts
    limit = _int(bound)
    if limit is not None and limit >= 0:
        said["max_staleness"] = limit
    return said


def _count(value: Any) -> int | float | None:
    """A token count: an int >= 0 (a numpy one too) or a finite float >= 0, else None."""
    as_int = _int(value)
    if as_int is not None:
        return as_int if as_int >= 0 else None
    return float(value) if isinstance(value, float) and math.isfinite(value) and value >= 0 else None


def take(name: str) -> dict[str, Any]:
    """The kept consumption as a phase's rl attributes when ``name`` is a training-family phase (then forgotten),
    else ``{}``: one read while nothing is kept."""
    if _PENDING[0] is None or kind_of(name) != "training":
        return {}
    with _LOCK:
        said, _PENDING[0] = _PENDING[0], None
    return said or {}


def discard() -> None:
    """Forget a kept consumption no training phase took (its call ended, or raised)."""
    _PENDING[0] = None


def reset() -> None:
    """Unweave: forget a kept consumption, and the weight version a weave set (a later training of the process
    starts with none, unless the job set its own since)."""
    discard()
    if _SET[0] is not None and RUNTIME.weight_version == _SET[0]:
        set_weight_version(None)
    _SET[0] = None


def unexpected(framework: str, target: str) -> None:
    """A version weave whose target is not as read: one line, and that weave stands down (the framework's timers
    stay woven)."""
    warn_once(
        f"versions-{framework}-{target}",
        "lens_rl: %s: %s is not as read; its weight versions are not woven",
        framework,
        target,
    )


def class_with(framework: str, module: ModuleType, name: str, method: str) -> type | None:
    """``module.name`` when it is a class with a callable ``method`` (the version weave's target as read),
    else None after :func:`unexpected`'s one line."""
    cls = getattr(module, name, None)
    if isinstance(cls, type) and callable(getattr(cls, method, None)):
        return cls
    unexpected(framework, f"{name}.{method}")
    return None
