"""NeMo-RL: every ``Timer`` label is a phase; ``total_step_time`` is the step umbrella.

Read at NeMo-RL main of 2026-08-22 (7ea279a, ``package_info`` 0.6.0; ``nemo_rl/utils/timer.py``, ``utils/nsys.py``,
``algorithms/``); v0.7.0's ``Timer`` has the same ``start`` / ``stop`` / ``time`` and no ``record``. Woven:
``nemo_rl.utils.timer.Timer`` ``start`` / ``stop`` / ``record`` / ``reset`` / ``time`` (and ``ThreadSafeTimer.time``).
``time()`` and ``ThreadSafeTimer`` (whose methods call these under its lock) go through them, so every timer
of the driver, the policy workers and the trajectory collector is seen. ``start(label)`` opens phase
``label`` (its ``timing/`` prefix dropped: ``timing/rollout/total`` -> ``rollout/total``) after NeMo-RL's own
clock starts, ``stop`` closes it after the clock stops; ``record(label, elapsed)`` writes a back-dated phase
ending now (an ``elapsed`` of no sane duration is NeMo-RL's alone); ``reset`` closes the bare starts' phases
NeMo-RL dropped. A ``with timer.time(label)`` block's phase is scoped (made current: the blocks inside nest under
it) and the block's own, ended on its thread with the block; a bare ``start`` / ``stop`` pair's is loose (never
current, closed by whichever thread stops it, in any order: ``_phases``), kept per timer object (a new timer at
a dropped one's address never closes the dropped one's). Labels under ``idle/`` and ``wasted/`` take that
bucket. A timer hook's own faults end in the one error boundary: none raises into NeMo-RL.

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
import functools
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

from lens_rl._errors import WARNED, internal_error, warn_once
from lens_rl.frameworks import _versions
from lens_rl.frameworks._base import Framework, StepUmbrella, Weaver, close_phase, open_phase, record_interval
from lens_rl.frameworks._trainers import logged_name
from lens_rl.record.engine import Node

__all__ = ["FRAMEWORK"]

UMBRELLA = "total_step_time"
_steps = StepUmbrella(UMBRELLA, first=0, loose=True)
#: id(timer) -> (a reference to that timer, its bare starts' open phases: label -> nodes, oldest first). The
#: reference tells a timer from a dropped one whose address it reuses; an entry goes when its last phase closes
#: or its timer is collected (a phase left running there stays open, ended at shutdown as never stopped)
_open: dict[int, tuple[Callable[[], Any], dict[Any, list[Node]]]] = {}
_OPEN_LOCK = threading.Lock()  # starts and stops of one ThreadSafeTimer come from many threads
#: the step last passed to maybe_gpu_profile_step, until a step umbrella takes it
_profiled_step: list[Any] = [None]
#: the woven ``time()`` block whose enter or exit runs here (its start and stop are a scoped phase's)
_IN_TIME: contextvars.ContextVar[_Timed | None] = contextvars.ContextVar("lens_rl_nemo_rl_time", default=None)

#: The algorithm modules that bind ``maybe_gpu_profile_step`` by name (``from nemo_rl.utils.nsys import ...``).
_NSYS = "nemo_rl.utils.nsys"  # (maybe_gpu_profile_step's source)
_ALGORITHMS = ("grpo", "grpo_sync", "ppo", "dpo", "distillation", "sft", "rm", "xtoken_off_policy_distillation")
_OWN_OTEL_ENV = ("NEMO_RL_OTEL_ENABLED", "NEMO_LENS_ENABLED")
#: The longest ``record(label, elapsed)`` written as a phase: a week. Longer, infinite, NaN or negative, the
#: record is NeMo-RL's alone (no timer of a training measures that; a span back-dated by it would start
#: before the job did).
RECORD_MAX_S = 7 * 24 * 3600.0


def _label(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[1] if len(args) > 1 else kwargs.get("label")


class _Timed:
    """A woven ``time(label)`` block: NeMo-RL's own context manager, whose ``start`` and ``stop`` (run in its
    enter and exit, on one thread, in order) make a scoped phase: made current, its blocks nest under it. The
    block owns its phase: it ends at the block's exit on the block's own thread, also when NeMo-RL's ``stop``
    raises there (its label dropped by a ``reset``, from any thread), its error recorded on it. Like what it
    wraps (a ``contextlib`` context manager) it is a decorator too: ``@timer.time("x")``."""

    __slots__ = ("_timed", "label", "node")

    def __init__(self, timed: Any) -> None:
        self._timed = timed
        self.label: Any = None
        self.node: Node | None = None

    def __enter__(self) -> Any:
        token = _IN_TIME.set(self)
        try:
            return self._timed.__enter__()
        except BaseException as exc:
            self._end(exc)
            raise
        finally:
            _IN_TIME.reset(token)

    def __exit__(self, *exc_info: Any) -> Any:
        token = _IN_TIME.set(self)
        try:
            return self._timed.__exit__(*exc_info)
        except BaseException as exc:
            self._end(exc)
            raise
        finally:
            _IN_TIME.reset(token)
            self._end(None)  # (its stop closed it already, unless the exit never called it)

    def _end(self, exc: BaseException | None) -> None:
        node, self.node = self.node, None
        close_phase(node, exc)

    def __call__(self, func: Any) -> Any:
        recreate = getattr(self._timed, "_recreate_cm", None)
        if recreate is None:  # not a contextlib one: its own call, whatever that does
            return self._timed(func)

        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with _Timed(recreate()):  # a fresh block per call, as contextlib's decorator does
                return func(*args, **kwargs)

        return timed


def _time(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _Timed(original(*args, **kwargs))


def _start(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = original(*args, **kwargs)  # raises when the label runs already: nothing is opened then
    try:
        label = _label(args, kwargs)
        name = logged_name(label)
        timed = _IN_TIME.get()
        if name == UMBRELLA:
            number, _profiled_step[0] = _profiled_step[0], None
            _steps.begin(number)
        elif timed is not None and timed.node is None:  # a time() block's: scoped, the block's own
            timed.label, timed.node = label, open_phase(name)
        else:  # a bare start's: loose (its stop may come from any thread, in any order)
            node = open_phase(name, loose=True)
            if node is not None:
                _keep(args[0], label, node)
    except Exception as exc:
        internal_error(exc, "framework-nemo_rl")
    return result


def _keep(timer: Any, label: Any, node: Node) -> None:
    with _OPEN_LOCK:
        entry = _open.get(id(timer))
        if entry is None or entry[0]() is not timer:  # (none, or a dropped timer's that had this address)
            entry = _open[id(timer)] = (_reference(timer), {})
        entry[1].setdefault(label, []).append(node)


def _reference(timer: Any) -> Callable[[], Any]:
    """A weak reference to ``timer`` that forgets its entry when it is collected; a timer that takes none
    (``__slots__`` without ``__weakref__``) is held, so its address is not reused while a phase of it runs."""
    key = id(timer)
    try:
        return weakref.ref(timer, functools.partial(_forget, key))
    except TypeError:
        return lambda: timer


def _forget(key: int, reference: Any) -> None:
    """A timer was collected: its entry goes (no lock: this runs wherever the collector does; the address is
    not reused before this returns)."""
    entry = _open.get(key)
    if entry is not None and entry[0] is reference:
        _open.pop(key, None)


def _stop(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = original(*args, **kwargs)
    try:
        label = _label(args, kwargs)
        timed = _IN_TIME.get()
        if logged_name(label) == UMBRELLA:
            _steps.end()
        elif timed is not None and timed.node is not None and timed.label == label:
            timed._end(None)  # right after NeMo-RL's clock stopped
        else:
            _close(args[0], label)
    except Exception as exc:
        internal_error(exc, "framework-nemo_rl")
    return result


def _close(timer: Any, label: Any) -> None:
    """Close the phase of the label's run that began first: NeMo-RL runs a label once at a time, so a second
    entry is a new run started on another thread before this stop's own close got here."""
    with _OPEN_LOCK:
        entry = _open.get(id(timer))
        if entry is None or entry[0]() is not timer:
            return
        stack = entry[1].get(label)
        if not stack:
            return
        node = stack.pop(0)
        if not stack:
            del entry[1][label]
            if not entry[1]:
                del _open[id(timer)]
    close_phase(node)


def _record(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``record(label, elapsed)``: a phase that ended now and lasted ``elapsed`` seconds. An ``elapsed`` that is
    not a number of seconds from 0 to :data:`RECORD_MAX_S` (infinite, NaN, negative, absurdly long) is recorded
    by NeMo-RL only, never clamped: lens_rl writes nothing for it and says so in one warning per process."""
    result = original(*args, **kwargs)
    try:
        elapsed = args[2] if len(args) > 2 else kwargs.get("elapsed")
        if isinstance(elapsed, (int, float)) and not isinstance(elapsed, bool):
            if 0 <= elapsed <= RECORD_MAX_S:  # (False for NaN)
                end_ns = time.time_ns()
                record_interval(logged_name(_label(args, kwargs)), end_ns - int(elapsed * 1e9), end_ns)
            elif "nemo_rl-record" not in WARNED:
                warn_once(
                    "nemo_rl-record",
                    "lens_rl: NeMo-RL's Timer.record(%r, %r): not a number of seconds from 0 to %s; recorded by "
                    "NeMo-RL, not as a phase (said once per process)",
                    _label(args, kwargs),
                    elapsed,
                    RECORD_MAX_S,
                )
    except Exception as exc:
        internal_error(exc, "framework-nemo_rl")
    return result


def _reset(original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``reset(label=None)``: the bare starts' phases whose labels NeMo-RL dropped end here (a ``time()``
    block's ends with its block, on its own thread)."""
    result = original(*args, **kwargs)
    try:
        label = _label(args, kwargs)
        timer = args[0]
        with _OPEN_LOCK:
            entry = _open.get(id(timer))
            if entry is None or entry[0]() is not timer:
                return result
            labels = entry[1]
            dropped = [labels.pop(label, [])] if label else list(labels.values())
            if not label:
                labels.clear()
            if not labels:
                del _open[id(timer)]
        for nodes in dropped:
            for node in nodes:
                close_phase(node)
    except Exception as exc:
        internal_error(exc, "framework-nemo_rl")
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
    with _OPEN_LOCK:
        entries = _open.copy()  # (a copy made in one step: a collected timer's entry may go meanwhile)
        _open.clear()
    for _, labels in entries.values():
        for nodes in labels.values():
            for node in nodes:
                close_phase(node)
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
