"""transformers' ``Trainer`` woven: its step is the umbrella, its loss, backward and optimizer step are phases.

Read from transformers 5.25 (``trainer.py``'s ``_inner_training_loop``, ``trainer_callback.py``) and
accelerate 1.x (``Accelerator.backward``):

- the step umbrella ``step`` opens as ``CallbackHandler.on_step_begin`` starts (before the job's callbacks run)
  and closes once ``on_step_end``'s callbacks have run, numbered ``state.global_step + 1`` (the optimizer step
  it makes; ``global_step`` is raised just before ``on_step_end``);
- ``optimizer_step`` runs from right after the ``on_pre_optimizer_step`` callbacks to right after the
  ``on_optimizer_step`` ones (the ``optimizer.step()`` between them), lens_rl's clock read beside theirs;
- ``compute_loss`` (``Trainer.compute_loss``, the forward and the loss), ``backward`` (``Accelerator.backward``);
- outside the step: ``data_loading`` (``get_batch_samples``, the batches of the next step), ``logging``
  (``Trainer.log``), ``checkpoint`` (``_save_checkpoint``), ``evaluation`` (``Trainer.evaluate``).
"""

from __future__ import annotations

import contextvars
import time
from typing import Any

from lens_rl.frameworks._base import Framework, StepUmbrella, Weaver, call_in_phase, close_phase, open_phase

__all__ = ["FRAMEWORK", "IN_LOSS", "STEPS"]

#: The optimizer steps of this process's trainers.
STEPS = StepUmbrella("step", loose=True)  # opened by one callback, closed by another
#: Set while a ``compute_loss`` phase is open in this context (TRL names a logprob call inside it as training).
IN_LOSS: contextvars.ContextVar[bool] = contextvars.ContextVar("lens_rl_in_loss", default=False)

_OPTIMIZER: list[Any] = []  # the open optimizer_step phase (one trainer loop per process at a time)


def _step_begin(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    state = args[2] if len(args) > 2 else kwargs.get("state")
    STEPS.begin(_next_step(state))
    return original(*args, **kwargs)


def _next_step(state: Any) -> Any:
    step = getattr(state, "global_step", None)
    return step + 1 if isinstance(step, int) else None


def _step_end(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return original(*args, **kwargs)
    finally:
        STEPS.end()


# The job's callbacks run first and lens_rl's clock is read right after they return: the phase's own
# bookkeeping falls after both clocks, so a callback's clock and lens_rl's measure the optimizer step alike.
def _pre_optimizer(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = original(*args, **kwargs)
    start_ns = time.time_ns()
    _close_optimizer(start_ns)
    _OPTIMIZER.append(open_phase("optimizer_step", start_ns=start_ns, loose=True))
    return result


def _post_optimizer(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return original(*args, **kwargs)
    finally:
        _close_optimizer(time.time_ns())


def _close_optimizer(end_ns: int | None = None) -> None:
    while _OPTIMIZER:
        close_phase(_OPTIMIZER.pop(), end_ns=end_ns)


_LOSS_PHASE = call_in_phase("compute_loss")


def _compute_loss(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if IN_LOSS.get():  # a subclass's compute_loss calling this one: one phase
        return original(*args, **kwargs)
    token = IN_LOSS.set(True)
    try:
        return _LOSS_PHASE(original, args, kwargs)
    finally:
        IN_LOSS.reset(token)


def _weave_callbacks(module: Any, weaver: Weaver) -> None:
    handler = module.CallbackHandler
    weaver.around(handler, "on_step_begin", _step_begin)
    weaver.around(handler, "on_step_end", _step_end)
    weaver.around(handler, "on_pre_optimizer_step", _pre_optimizer)
    weaver.around(handler, "on_optimizer_step", _post_optimizer)


def _weave_trainer(module: Any, weaver: Weaver) -> None:
    trainer = module.Trainer
    weaver.around(trainer, "compute_loss", _compute_loss)
    weaver.around(trainer, "get_batch_samples", call_in_phase("data_loading"))
    weaver.around(trainer, "log", call_in_phase("logging"))
    weaver.around(trainer, "_save_checkpoint", call_in_phase("checkpoint"))
    weaver.around(trainer, "evaluate", call_in_phase("evaluation"))


def _weave_accelerator(module: Any, weaver: Weaver) -> None:
    weaver.around(module.Accelerator, "backward", call_in_phase("backward"))


def _forget() -> None:
    _close_optimizer()
    STEPS.reset()


FRAMEWORK = Framework(
    name="transformers",
    distribution="transformers",
    tested=">=5.0,<6",
    targets={
        "transformers.trainer_callback": _weave_callbacks,
        "transformers.trainer": _weave_trainer,
        "accelerate.accelerator": _weave_accelerator,
    },
    unweave=_forget,
)
