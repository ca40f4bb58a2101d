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

The fully async path (``verl/experimental/fully_async_policy/``): veRL's ``FullyAsyncTrainer`` is a ``@ray.remote``
class, which Ray pickles by value, so nothing of its own is patched; its base ``SeparateRayPPOTrainer`` is
imported by name. Its ``_fit_update_actor(batch)`` (woven) hands the batch's ``meta_info``
``trajectory_param_versions`` (each trajectory's ``max_global_steps``, the weight version it finished with) and
``global_token_num`` (its tokens) with the trainer's ``current_param_version`` to the ``update_actor`` phase
inside it (``_versions``): the staleness veRL's ``stale_trajectory_processed`` counts. The generation side: each
response an ``LLMServerClient.generate`` (and ``FullyAsyncLLMServerClient``'s) returns carries the server's
weight version (``extra_fields["global_steps"]``, set by ``set_global_steps`` at each weight update): it
becomes the process's ``lens_rl.set_weight_version``. The weight sync is ``timing_s/param_sync``: phase
``param_sync``, of the weight-sync family.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from lens_rl.frameworks import _versions
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
    node = open_phase(name, **(_versions.take(name) if name == _CONSUMING else {}))
    try:
        yield from timed
    except BaseException as exc:
        close_phase(node, exc)
        raise
    close_phase(node)


#: the phase that trains on what the fully async trainer took (veRL's policy update)
_CONSUMING = "update_actor"


def _update_actor(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``SeparateRayPPOTrainer._fit_update_actor(batch)``: on the fully async trainer (it has
    ``current_param_version``; the batch's ``meta_info`` has ``trajectory_param_versions``), what it trains on is
    handed to the ``update_actor`` phase inside; other trainers pass straight through."""
    policy = getattr(instance, "current_param_version", None)
    batch = args[0] if args else kwargs.get("batch")
    meta = getattr(batch, "meta_info", None)
    if policy is None or not isinstance(meta, dict) or meta.get("trajectory_param_versions") is None:
        return wrapped(*args, **kwargs)
    _versions.consumed(policy, meta["trajectory_param_versions"], meta.get("global_token_num"), "verl")
    try:
        return wrapped(*args, **kwargs)
    finally:
        _versions.discard()  # (no update_actor ran: critic warm-up)


def _generate(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _versioned(wrapped(*args, **kwargs))


async def _versioned(pending: Any) -> Any:
    """A response's weight version (``extra_fields["global_steps"]``) becomes the process's."""
    output = await pending
    extra = getattr(output, "extra_fields", None)
    if isinstance(extra, dict) and extra.get("global_steps") is not None:
        _versions.generating(extra["global_steps"], "verl")
    return output


def _weave_timer(module: ModuleType, weaver: Weaver) -> None:
    weaver.around(module, "_timer", _timer_on)


def _weave_trainer(module: ModuleType, weaver: Weaver) -> None:
    trainer = _versions.class_with("verl", module, "SeparateRayPPOTrainer", "_fit_update_actor")
    if trainer is not None:  # (else the timers stay woven)
        weaver.wrap(trainer, "_fit_update_actor", _update_actor)


def _weave_server_client(module: ModuleType, weaver: Weaver) -> None:
    found = [getattr(module, name, None) for name in ("LLMServerClient", "FullyAsyncLLMServerClient")]
    found = [
        cls
        for cls in found
        if isinstance(cls, type) and "generate" in vars(cls) and inspect.iscoroutinefunction(vars(cls)["generate"])
    ]  # (a coroutine as read: a generate of another kind is not woven, never handed an awaitable in its stead)
    if not found:
        _versions.unexpected("verl", "LLMServerClient.generate")
    for cls in found:
        weaver.wrap(cls, "generate", _generate)


def _unweave() -> None:
    _steps.reset()
    _versions.reset()


FRAMEWORK = Framework(
    "verl",
    "verl",
    ">=0.9,<0.10",
    {
        "verl.utils.profiler.performance": _weave_timer,
        "verl.experimental.separation.ray_trainer": _weave_trainer,
        "verl.workers.rollout.llm_server": _weave_server_client,
    },
    unweave=_unweave,
)
