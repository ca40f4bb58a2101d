"""TRL woven: every profiled block (``ProfilingContext``) is a phase, named as TRL logs it, by role where one
method serves several.

Read from trl 1.16 (``trl/extras/profiling.py``, ``trl/trainer/grpo_trainer.py``, ``rloo_trainer.py``). Every
``profiling_context(trainer, name)`` and ``@profiling_decorator`` goes through ``ProfilingContext``'s
``__enter__`` / ``__exit__``; TRL logs it as ``profiling/Time taken: <Trainer class>.<name>``, and the phase is
``<name>`` (``transformers.generate``, ``_prepare_inputs``, ``compute_loss``, ``sync_weights``), except:

- ``_get_per_token_logps_and_entropies`` (and ``_get_per_token_logps``) serves three roles: the old policy's
  and the reference policy's logprobs (phase ``logprob``), and inside ``compute_loss`` the training forward
  (phase ``training``);
- a block inside ``_calculate_rewards`` is a reward function (TRL names it after the function): phase
  ``reward`` with ``rl.reward_fn`` = the function's name.

TRL's ``name`` is kept as ``rl.trl_block``. The step comes from ``transformers`` (woven with ``trl``).
"""

from __future__ import annotations

import contextvars
import time
from typing import Any

from lens_rl._errors import internal_error
from lens_rl.frameworks import transformers as _transformers
from lens_rl.frameworks._base import Framework, OpenPhases, Weaver
from lens_rl.frameworks._phases import phase_for

__all__ = ["FRAMEWORK", "phase_of"]

_LOGPS = frozenset(["_get_per_token_logps_and_entropies", "_get_per_token_logps"])
#: The role of the innermost open profiled block that names its nested blocks (``reward``) in this context.
_ROLE: contextvars.ContextVar[str | None] = contextvars.ContextVar("lens_rl_trl_role", default=None)
_OPEN = OpenPhases()
_TOKENS: dict[int, list[Any]] = {}  # id(context) -> the role tokens its entries set


def phase_of(block: str) -> tuple[str, dict[str, Any]]:
    """The phase name and ``rl.`` attributes for TRL's profiled block ``block`` (``"GRPOTrainer.compute_loss"``)
    in the current context."""
    inner = block.split(".", 1)[1] if "." in block else block
    attributes: dict[str, Any] = {"trl_block": block}
    if inner in _LOGPS:
        return ("training" if _transformers.IN_LOSS.get() else "logprob"), attributes
    if _ROLE.get() == "reward":
        attributes["reward_fn"] = inner
        return "reward", attributes
    return inner, attributes


def _enter(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # TRL's clock starts first and lens_rl's is read right after it returns (the phase made ready before, its
    # opening after both clocks), so both measure the block alike.
    context = args[0]
    name = ""
    attributes: dict[str, Any] = {}
    try:
        block = str(context.name)
        name, attributes = phase_of(block)
        phase_for(name, **attributes)
        tokens = _TOKENS.setdefault(id(context), [])
        if block.endswith(".compute_loss"):
            tokens.append((_transformers.IN_LOSS, _transformers.IN_LOSS.set(True)))
        elif block.endswith("._calculate_rewards"):
            tokens.append((_ROLE, _ROLE.set("reward")))
        else:
            tokens.append(None)
    except Exception as exc:
        internal_error(exc, "framework-trl")
    result = original(*args, **kwargs)
    if name:
        _OPEN.start(id(context), name, start_ns=time.time_ns(), **attributes)
    return result


def _exit(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # TRL's clock stops first (in its __exit__), lens_rl's right after.
    context = args[0]
    try:
        return original(*args, **kwargs)
    finally:
        end_ns = time.time_ns()
        try:
            exc = args[2] if len(args) > 2 else kwargs.get("exc_val")
            _OPEN.stop(id(context), exc if isinstance(exc, BaseException) else None, end_ns=end_ns)
            tokens = _TOKENS.get(id(context))
            if tokens:
                entry = tokens.pop()
                if not tokens:
                    _TOKENS.pop(id(context), None)
                if entry is not None:
                    entry[0].reset(entry[1])
        except Exception as err:
            internal_error(err, "framework-trl")


def _weave_profiling(module: Any, weaver: Weaver) -> None:
    weaver.around(module.ProfilingContext, "__enter__", _enter)
    weaver.around(module.ProfilingContext, "__exit__", _exit)


def _forget() -> None:
    _OPEN.clear()
    _TOKENS.clear()


FRAMEWORK = Framework(
    name="trl",
    distribution="trl",
    tested=">=1.16,<2",
    targets={"trl.extras.profiling": _weave_profiling},
    requires=("transformers",),
    unweave=_forget,
)
