"""SkyRL: every ``Timer`` block (``with`` and ``async with``) is a phase; its ``step`` block is the step umbrella.

Read at SkyRL 0.3.0 (``skyrl/train/utils/utils.py``, ``skyrl/train/trainer.py``, ``fully_async_trainer.py``,
``utils/metrics.py``) and skyrl_train 0.3.1 (``skyrl_train/utils/utils.py``, the same ``Timer``). Woven:
``Timer.__enter__`` / ``__exit__`` / ``__aenter__`` / ``__aexit__`` in both modules, the one choke point of
every timer of the trainers (the fully async trainer's ``timed_phase`` macro-phases go through it too). A block
becomes phase ``message`` (the name SkyRL logs as ``timing/<message>``), opened before SkyRL's clock starts and
closed after it stops; ``step`` becomes the step umbrella, its ``rl.step`` the ``global_step`` of the trainer
whose ``train`` opened it (read from the calling frame when the timer runs), else a per-process count from 1.

The fully async trainer (``skyrl/train/fully_async_trainer.py``): its
``convert_generation_group_mini_batch_to_training_input(groups)`` (woven) hands each group's
``global_step_when_scheduled`` (the version SkyRL stamps on what it generates), its response tokens, the
trainer's ``global_step`` and ``max_staleness_steps`` to the next training phase (``run_training``): SkyRL's own
``staleness = global_step - global_step_when_scheduled``, token-weighted. Each ``step`` of that trainer sets the
process's weight version to its ``global_step``, the stamp its generator tasks put on the groups they schedule.
"""

from __future__ import annotations

from collections.abc import Awaitable
from types import ModuleType
from typing import Any

from lens_rl.frameworks import _versions
from lens_rl.frameworks._base import Framework, OpenPhases, StepUmbrella, Weaver
from lens_rl.frameworks._trainers import called_from, caller_counter, logged_name

__all__ = ["FRAMEWORK"]

UMBRELLA = "step"
_steps = StepUmbrella(UMBRELLA, first=1)
_phases = OpenPhases()


def _open(timer: Any) -> None:
    name = logged_name(getattr(timer, "message", ""))
    if name == UMBRELLA:
        number = caller_counter("global_step")
        _steps.begin(number)
        if number is not None and called_from(_ASYNC_MARK):  # the fully async trainer: its generation stamp
            _versions.generating(number, "skyrl")
    else:
        _phases.start(id(timer), name, **_versions.take(name))


def _close(timer: Any, exc: Any) -> None:
    error = exc if isinstance(exc, BaseException) else None
    if logged_name(getattr(timer, "message", "")) == UMBRELLA:
        _steps.end(error)
    else:
        _phases.stop(id(timer), error)


def _enter(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    _open(args[0])
    try:
        return original(*args, **kwargs)
    except BaseException as exc:
        _close(args[0], exc)
        raise


def _exit(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return original(*args, **kwargs)
    finally:
        _close(args[0], args[2] if len(args) > 2 else None)


def _aenter(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    _open(args[0])  # here, in the task that enters: the phase is current in the block
    return original(*args, **kwargs)


def _aexit(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _closed_after(original(*args, **kwargs), args[0], args[2] if len(args) > 2 else None)


async def _closed_after(exiting: Awaitable[Any], timer: Any, exc: Any) -> Any:
    try:
        return await exiting
    finally:
        _close(timer, exc)


#: what only the fully async trainer has (its staleness bound)
_ASYNC_MARK = "max_staleness_steps"


def _convert(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``convert_generation_group_mini_batch_to_training_input(groups)``: what the trainer takes, kept for its
    training phase (read before the call: SkyRL's own figure is computed from the same objects there)."""
    groups: Any = args[0] if args else kwargs.get("cur_generation_group_mini_batch")
    try:
        versions = [g.global_step_when_scheduled for g in groups]
        tokens = [sum(len(r) for r in g.generator_output["response_ids"]) for g in groups]
    except (TypeError, AttributeError, KeyError) as exc:
        _versions.unexpected("skyrl", f"GeneratedOutputGroup ({exc!r})")
    else:
        bound = getattr(instance, _ASYNC_MARK, None)
        _versions.consumed(getattr(instance, "global_step", None), versions, tokens, "skyrl", bound)
    try:
        return wrapped(*args, **kwargs)
    except BaseException:
        _versions.discard()  # (no training input made: no training phase takes this consumption)
        raise


def _weave_fully_async(module: ModuleType, weaver: Weaver) -> None:
    method = "convert_generation_group_mini_batch_to_training_input"
    trainer = _versions.class_with("skyrl", module, "FullyAsyncRayPPOTrainer", method)
    if trainer is not None:  # (else the timers stay woven)
        weaver.wrap(trainer, method, _convert)


def _weave_timer(module: ModuleType, weaver: Weaver) -> None:
    timer = module.Timer
    weaver.around(timer, "__enter__", _enter)
    weaver.around(timer, "__exit__", _exit)
    if "__aenter__" in vars(timer):
        weaver.around(timer, "__aenter__", _aenter)
        weaver.around(timer, "__aexit__", _aexit)


def _unweave() -> None:
    _phases.clear()
    _steps.reset()
    _versions.reset()


FRAMEWORK = Framework(
    "skyrl",
    "skyrl",
    ">=0.3,<0.4",
    {
        "skyrl.train.utils.utils": _weave_timer,
        "skyrl_train.utils.utils": _weave_timer,
        "skyrl.train.fully_async_trainer": _weave_fully_async,
    },
    unweave=_unweave,
    distributions={"skyrl_train": "skyrl-train"},  # (SkyRL's earlier package, a distribution of its own)
)
