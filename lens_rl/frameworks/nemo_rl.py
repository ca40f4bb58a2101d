"""NeMo-RL: every ``Timer`` label is a phase; ``total_step_time`` is the step umbrella.

Read at NeMo-RL main of 2026-08-22 (7ea279a, ``package_info`` 0.6.0; ``nemo_rl/utils/timer.py``, ``utils/nsys.py``,
``algorithms/``); v0.7.0's ``Timer`` has the same ``start`` / ``stop`` / ``time`` and no ``record``. Woven:
``nemo_rl.utils.timer.Timer`` ``start`` / ``stop`` / ``record`` / ``reset`` / ``time`` (and ``ThreadSafeTimer.time``).
``time()`` and ``ThreadSafeTimer`` (whose methods call these under its lock) go through them, so every timer
of the driver, the policy workers and the trajectory collector is seen. ``start(label)`` opens phase
``label`` (its ``timing/`` prefix dropped: ``timing/rollout/total`` -> ``rollout/total``) after NeMo-RL's own
clock starts, ``stop`` closes it after the clock stops; ``record(label, elapsed)`` writes a back-dated phase
ending now; ``reset`` closes what NeMo-RL dropped. A ``with timer.time(label)`` block's phase is scoped (made
current: the blocks inside nest under it); a bare ``start`` / ``stop`` pair's is loose (never current, closed by
whichever thread stops it, in any order: ``_phases``). Labels under ``idle/`` and ``wasted/`` take that bucket.

The step: ``total_step_time`` is the umbrella; its ``rl.step`` is the step the loop last passed to
``maybe_gpu_profile_step(policy, step)`` (woven at its source, ``nemo_rl.utils.nsys``, so any loop importing it
after the weave gets it, and where the algorithms bind it: ``nemo_rl.algorithms.*``), else a per-process count
from 0. When NeMo-RL's own OpenTelemetry layer is on (nemo-lens: ``NEMO_RL_OTEL_ENABLED`` or
``NEMO_LENS_ENABLED``), lens_rl's weaving stands down with one line: no span is counted twice.

Async GRPO (``nemo_rl/algorithms/async_utils/``): what a training step consumes is known only in the
``ReplayBuffer`` actor (the driver gets the trajectories and their mean ``avg_trajectory_age``). Its plain base
``ReplayBufferImpl.sample(num_prompt_groups, current_weight_version, max_age_steps)`` is woven there: each
sample that returns trajectories is phase ``replay_buffer_sample`` (overhead) carrying the sampled groups'
generation versions (``trajectory_versions``, looked up by identity in the buffer before the call), their
tokens (each group's ``batch["input_lengths"]`` summed), ``current_weight_version`` as the policy version and
``max_age_steps`` as the bound, and ``rl.step`` = ``current_weight_version + 1``: the driver's step, as
``async_grpo_train`` keeps ``weight_version == step`` and numbers its profile step ``step + 1``. The collector's
own weight version (``AsyncTrajectoryCollector.set_weight_version``) is not woven: that class is ``@ray.remote``
itself, which Ray pickles by value with whatever its methods are.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import time
from types import ModuleType
from typing import Any

from lens_rl.frameworks import _versions
from lens_rl.frameworks._base import Framework, StepUmbrella, Weaver, close_phase, open_phase, record_interval
from lens_rl.frameworks._trainers import logged_name
from lens_rl.record.engine import Node

__all__ = ["FRAMEWORK"]

UMBRELLA = "total_step_time"
_steps = StepUmbrella(UMBRELLA, first=0, loose=True)
#: (id(timer), label) -> the phases open under it, oldest first
_open: dict[tuple[int, str], list[Node]] = {}
_OPEN_LOCK = threading.Lock()  # starts and stops of one ThreadSafeTimer come from many threads
#: the step last passed to maybe_gpu_profile_step, until a step umbrella takes it
_profiled_step: list[Any] = [None]
#: True while a woven ``time()`` block enters or exits (its start and stop are a scoped phase's)
_IN_TIME: contextvars.ContextVar[bool] = contextvars.ContextVar("lens_rl_nemo_rl_time", default=False)

#: The algorithm modules that bind ``maybe_gpu_profile_step`` by name (``from nemo_rl.utils.nsys import ...``).
_NSYS = "nemo_rl.utils.nsys"  # (maybe_gpu_profile_step's source)
_ALGORITHMS = ("grpo", "grpo_sync", "ppo", "dpo", "distillation", "sft", "rm", "xtoken_off_policy_distillation")
_OWN_OTEL_ENV = ("NEMO_RL_OTEL_ENABLED", "NEMO_LENS_ENABLED")


def _label(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[1] if len(args) > 1 else kwargs.get("label")


class _Timed:
    """A woven ``time(label)`` block: NeMo-RL's own context manager, whose ``start`` and ``stop`` (run in its
    enter and exit, on one thread, in order) make a scoped phase: made current, its blocks nest under it."""

    __slots__ = ("_timed",)

    def __init__(self, timed: Any) -> None:
        self._timed = timed

    def __enter__(self) -> Any:
        token = _IN_TIME.set(True)
        try:
            return self._timed.__enter__()
        finally:
            _IN_TIME.reset(token)

    def __exit__(self, *exc_info: Any) -> Any:
        token = _IN_TIME.set(True)
        try:
            return self._timed.__exit__(*exc_info)
        finally:
            _IN_TIME.reset(token)


def _time(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _Timed(original(*args, **kwargs))


def _start(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = original(*args, **kwargs)  # raises when the label runs already: nothing is opened then
    label = _label(args, kwargs)
    name = logged_name(label)
    if name == UMBRELLA:
        number, _profiled_step[0] = _profiled_step[0], None
        _steps.begin(number)
    else:
        # a time() block's is scoped; a bare start's is loose (its stop may come from any thread, in any order)
        node = open_phase(name, loose=not _IN_TIME.get())
        if node is not None:
            with _OPEN_LOCK:
                _open.setdefault((id(args[0]), label), []).append(node)
    return result


def _stop(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = original(*args, **kwargs)
    label = _label(args, kwargs)
    if logged_name(label) == UMBRELLA:
        _steps.end()
    else:
        _close((id(args[0]), label))
    return result


def _close(key: tuple[int, str]) -> None:
    """Close the phase of the label's run that began first: NeMo-RL runs a label once at a time, so a second
    entry is a new run started on another thread before this stop's own close got here."""
    with _OPEN_LOCK:
        stack = _open.get(key)
        if not stack:
            return
        node = stack.pop(0)
        if not stack:
            del _open[key]
    close_phase(node)


def _record(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = original(*args, **kwargs)
    elapsed = args[2] if len(args) > 2 else kwargs.get("elapsed")
    if isinstance(elapsed, (int, float)) and elapsed >= 0:
        end_ns = time.time_ns()
        record_interval(logged_name(_label(args, kwargs)), end_ns - int(elapsed * 1e9), end_ns)
    return result


def _reset(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = original(*args, **kwargs)
    label = args[1] if len(args) > 1 else kwargs.get("label")
    timer = id(args[0])
    for key in [k for k in _open if k[0] == timer and (not label or k[1] == label)]:
        while key in _open:
            _close(key)
    return result


def _profile_step(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    step = args[1] if len(args) > 1 else kwargs.get("step")
    if isinstance(step, int) and not isinstance(step, bool):
        _profiled_step[0] = step
    return wrapped(*args, **kwargs)


def _weave_timer(module: ModuleType, weaver: Weaver) -> None:
    timer = module.Timer
    weaver.around(timer, "start", _start)
    weaver.around(timer, "stop", _stop)
    weaver.around(timer, "reset", _reset)
    if "record" in vars(timer):  # main since 2026-06; v0.7.0 has none
        weaver.around(timer, "record", _record)
    for cls in (timer, getattr(module, "ThreadSafeTimer", None)):  # (main's ThreadSafeTimer has a time() of its own)
        if isinstance(cls, type) and "time" in vars(cls):
            weaver.around(cls, "time", _time)


#: the replay buffer's sample, as a phase of the step it feeds (what it handed the trainer)
SAMPLE_PHASE = "replay_buffer_sample"


def _sample(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``ReplayBufferImpl.sample``: the sampled groups' versions, tokens and the trainer's version, recorded."""
    before = _versions_in(args[0])
    start_ns = time.time_ns()
    result = original(*args, **kwargs)
    taken = result.get("trajectories") if isinstance(result, dict) else None
    if before is not None and taken:
        policy = args[2] if len(args) > 2 else kwargs.get("current_weight_version")
        bound = args[3] if len(args) > 3 else kwargs.get("max_age_steps")
        versions = [before.get(id(group)) for group in taken]
        said = _versions.attributes(policy, versions, [_tokens(group) for group in taken], "nemo_rl", bound)
        if said is not None:
            record_interval(SAMPLE_PHASE, start_ns, bucket="overhead", step=said["policy_version"] + 1, **said)
    return result


def _versions_in(buffer: Any) -> dict[int, Any] | None:
    """The buffer's trajectories' generation versions by the trajectory's identity (read under its lock)."""
    lock = getattr(buffer, "_lock", None)
    try:
        if lock is not None:
            with lock:
                groups, versions = list(buffer.trajectories), list(buffer.trajectory_versions)
        else:
            groups, versions = list(buffer.trajectories), list(buffer.trajectory_versions)
    except (AttributeError, TypeError) as exc:
        _versions.unexpected("nemo_rl", f"ReplayBufferImpl ({exc!r})")
        return None
    return {id(group): version for group, version in zip(groups, versions, strict=False)}


def _tokens(group: Any) -> Any:
    """A group's tokens: its batch's ``input_lengths`` summed (None where it has none)."""
    try:
        lengths = group["batch"]["input_lengths"]
        return lengths.sum().item() if hasattr(lengths, "sum") else sum(lengths)
    except (KeyError, TypeError, AttributeError, ValueError, RuntimeError):
        return None


def _weave_buffer(module: ModuleType, weaver: Weaver) -> None:
    buffer = _versions.class_with("nemo_rl", module, "ReplayBufferImpl", "sample")
    if buffer is not None:  # (else the timers stay woven)
        weaver.around(buffer, "sample", _sample)


def _weave_algorithm(module: ModuleType, weaver: Weaver) -> None:
    original = getattr(module, "maybe_gpu_profile_step", None)
    if callable(original) and weaver.wrap(module, "maybe_gpu_profile_step", _profile_step):
        if module.__name__ == _NSYS:
            _weave_bound(original, weaver)


def _weave_bound(original: Any, weaver: Weaver) -> None:
    """The modules that bound the source's function by name before it was woven (a user's loop that imports
    ``maybe_gpu_profile_step`` at its top, then initialises telemetry): their binding is woven too, so its
    steps carry the loop's numbers (one pass over the loaded modules' own dicts; plain modules only: a lazy
    module's attribute access may import)."""
    for other in list(sys.modules.values()):
        if type(other) is ModuleType and other.__name__ != _NSYS:
            if other.__dict__.get("maybe_gpu_profile_step") is original:
                weaver.wrap(other, "maybe_gpu_profile_step", _profile_step)


def _stands_down() -> str | None:
    for name in _OWN_OTEL_ENV:
        if os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"NeMo-RL's own OpenTelemetry layer (nemo-lens) is on ({name}); its spans are the timers'"
    return None


def _unweave() -> None:
    for key in list(_open):
        while key in _open:
            _close(key)
    _steps.reset()
    _profiled_step[0] = None
    _versions.reset()


FRAMEWORK = Framework(
    "nemo_rl",
    "nemo-rl",
    ">=0.6,<0.8",
    {
        "nemo_rl.utils.timer": _weave_timer,
        _NSYS: _weave_algorithm,  # its source: a loop imported after weaving binds the woven one
        "nemo_rl.algorithms.async_utils.replay_buffer": _weave_buffer,
        **{f"nemo_rl.algorithms.{name}": _weave_algorithm for name in _ALGORITHMS},
    },
    unweave=_unweave,
    stands_down=_stands_down,
)
