"""veRL: every ``marked_timer`` / ``simple_timer`` block is a phase; its ``step`` timer is the step umbrella.

Read at veRL 0.9.1 (``verl/utils/profiler/performance.py``, ``verl/trainer/ppo/ray_trainer.py``, ``v1/``,
``experimental/``). Every ``marked_timer`` (the CPU, NVTX and MSTX ones) and ``simple_timer`` reaches the one
generator ``verl.utils.profiler.performance._timer(name, timing_raw)``, looked up when it runs: that is the
choke point woven here, so timers bound anywhere are seen, and weaving in a worker's init is in time. Each
block becomes phase ``name`` (bucketed by the default table's veRL names); the ``step`` block becomes the step
umbrella, its ``rl.step`` the ``global_steps`` of the trainer whose ``fit`` opened it (read from the calling
frame when the timer runs: any trainer class, on the driver or in a Ray actor, woven at any time), else a
per-process count from 1. The phase opens before veRL's own clock starts and closes after it stops, so
lens_rl's seconds contain veRL's ``timing_raw`` by a few microseconds.

veRL's ``main_ppo`` runs ``fit`` in its ``TaskRunner`` Ray actor, not on the driver: the weave reaches it through
``lens-rl run`` or the config field ``instrument`` (every worker's init); nothing Ray dispatches is patched.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

from lens_rl.frameworks._base import Framework, StepUmbrella, Weaver, close_phase, open_phase
from lens_rl.frameworks._trainers import caller_counter, logged_name

__all__ = ["FRAMEWORK"]

_steps = StepUmbrella("step", first=1)


def _timer_on(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[None]:
    name = args[0] if args else kwargs.get("name")
    return _phased(original(*args, **kwargs), logged_name(name))


def _phased(timed: Iterator[None], name: str) -> Iterator[None]:
    """veRL's own timing generator, run inside phase ``name`` (the step umbrella for ``step``)."""
    if name == "step":
        _steps.begin(caller_counter("global_steps"))
        try:
            yield from timed
        except BaseException as exc:
            _steps.end(exc)
            raise
        _steps.end()
        return
    node = open_phase(name)
    try:
        yield from timed
    except BaseException as exc:
        close_phase(node, exc)
        raise
    close_phase(node)


def _weave_timer(module: ModuleType, weaver: Weaver) -> None:
    weaver.around(module, "_timer", _timer_on)


def _unweave() -> None:
    _steps.reset()


FRAMEWORK = Framework(
    "verl",
    "verl",
    ">=0.9,<0.10",
    {"verl.utils.profiler.performance": _weave_timer},
    unweave=_unweave,
)
