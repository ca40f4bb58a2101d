"""OpenRLHF: the PPO trainer's own timed calls are phases; a step runs from its sample generation to the end
of its ``train_step``.

Read at OpenRLHF 0.11.0 (``openrlhf/trainer/ppo_trainer.py``, ``ppo_trainer_async.py``,
``ppo_utils/samples_generator.py``, ``ppo_utils/experience_maker.py``). OpenRLHF has no timer object: its
trainer times four calls inline (``timing/generation``, ``timing/make_experience``, ``timing/ppo_train``,
``timing/broadcast``) and sums them as ``timing/step_total``. Those calls are woven, each a phase named as
OpenRLHF logs it: ``SamplesGenerator.generate_samples`` (``generation``),
``RemoteExperienceMaker.make_experience_batch`` (``make_experience``), ``BasePPOTrainer.ppo_train``
(``ppo_train``), ``BasePPOTrainer.broadcast_to_vllm`` (``broadcast``), and the checkpoint,
``BasePPOTrainer.save_logs_and_checkpoints`` (by its method's name: OpenRLHF does not time it). All are methods
the trainer calls on itself or its helpers, looked up when they run, so weaving a Ray actor's worker late is
in time (the trainers' ``fit``, which Ray dispatches, is not woven).

The step: phase ``step_total`` with ``rl.step`` = the ``global_step`` its ``train_step(rollout_samples,
global_step)`` returns (the step OpenRLHF logs), no bucket. It opens when a trainer asks for samples (so
generation is in the step, as in ``timing/step_total``), or at ``train_step`` when none is open (the async
trainer, whose samples come from another actor), and closes when ``train_step`` returns. A step opened at
generation takes the number after the last ``train_step`` returned (or after the checkpoint's
``global_step``, ``init_checkpoint_states``), else a per-process count from 1. A generation that returns no
samples leaves its step open (it still waits for its batch); the last one, at the end of the data, is ended by
shutdown, which the goodput rollup reads as an incomplete step. Generation in a process with no trainer (the
async generation actor) is a phase of no step.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from lens_rl.frameworks._base import Framework, StepUmbrella, Weaver, call_in_phase
from lens_rl.frameworks._trainers import called_from

__all__ = ["FRAMEWORK"]

UMBRELLA = "step_total"
_steps = StepUmbrella(UMBRELLA, first=1, loose=True)  # opened at generation, closed by train_step
#: the global_step of the last step done (train_step's return, or the checkpoint's), None before any
_last_step: list[Any] = [None]


_generation = call_in_phase("generation")


def _generate_samples(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if not _steps.is_open and called_from("train_step"):
        last = _last_step[0]
        _steps.begin(last + 1 if isinstance(last, int) else None)
    return _generation(original, args, kwargs)


def _train_step(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if not _steps.is_open:
        given = args[2] if len(args) > 2 else kwargs.get("global_step")
        _steps.begin(given + 1 if isinstance(given, int) and not isinstance(given, bool) else None)
    try:
        result = original(*args, **kwargs)
    except BaseException as exc:
        _steps.end(exc)
        raise
    _steps.end()
    done = result[1] if isinstance(result, tuple) and len(result) > 1 else None
    if isinstance(done, int) and not isinstance(done, bool):
        _last_step[0] = done
    return result


def _checkpoint_states(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    states = original(*args, **kwargs)
    step = states.get("global_step") if isinstance(states, dict) else None
    if isinstance(step, int) and not isinstance(step, bool) and step > 0:
        _last_step[0] = step  # a resumed run: its first step is the one after the checkpoint's
    return states


def _weave_trainer(module: ModuleType, weaver: Weaver) -> None:
    for attr, on_call in {
        "train_step": _train_step,
        "ppo_train": call_in_phase("ppo_train"),
        "broadcast_to_vllm": call_in_phase("broadcast"),
        "save_logs_and_checkpoints": call_in_phase("save_logs_and_checkpoints"),
        "init_checkpoint_states": _checkpoint_states,
    }.items():
        weaver.around(module.BasePPOTrainer, attr, on_call)


def _weave_generator(module: ModuleType, weaver: Weaver) -> None:
    weaver.around(module.SamplesGenerator, "generate_samples", _generate_samples)


def _weave_experience(module: ModuleType, weaver: Weaver) -> None:
    weaver.around(module.RemoteExperienceMaker, "make_experience_batch", call_in_phase("make_experience"))


def _unweave() -> None:
    _steps.reset()
    _last_step[0] = None


FRAMEWORK = Framework(
    "openrlhf",
    "openrlhf",
    ">=0.11,<0.12",
    {
        "openrlhf.trainer.ppo_trainer": _weave_trainer,
        "openrlhf.trainer.ppo_utils.samples_generator": _weave_generator,
        "openrlhf.trainer.ppo_utils.experience_maker": _weave_experience,
    },
    unweave=_unweave,
)
