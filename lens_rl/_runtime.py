"""The one process state object: handle, job root, on/off flag, open phases, caches.

Everything lens_rl keeps per process lives on :data:`RUNTIME`, so one
:meth:`Runtime.reset` serves a forked child and ``lens_rl.testing``. This module sits
on the runtime floor: it imports nothing of lens_rl but the vocabulary (the error
boundary). Whoever can start telemetry lazily (``lens_rl.lifecycle``) hands itself
in as :attr:`Runtime.resolver`; the runtime never imports upward.

``RUNTIME.on`` is the single check every disabled path makes. It is True while
telemetry runs *and* while the environment has not been consulted yet (the first
call then resolves it, lazily initialising worker telemetry when the environment
says so); it is False once telemetry is known to be off or has been shut down.
Generated wrappers hold the runtime object itself, which pickles as a reference to
this one instance, so a wrapper shipped by value (cloudpickle, Ray) reads the live
flag of the process it lands in.

Example::

    from lens_rl._runtime import RUNTIME
    if RUNTIME.on and RUNTIME.resolve() is not None:
        ...                                  # telemetry runs in this process
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import lens_rl._errors as _errors

if TYPE_CHECKING:  # annotations only: the runtime imports neither OpenTelemetry nor the floors above it
    from opentelemetry.metrics import Meter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, SpanContext, Tracer

    from lens_rl.config import TelemetryConfig

__all__ = ["ACTIVE", "AMBIENT", "RUNTIME", "FastSpans", "Handle", "PhaseRecorder", "Runtime", "StepHook"]

#: The innermost phase entered with ``with`` in this context (a linked stack of tokens).
ACTIVE: contextvars.ContextVar[Any] = contextvars.ContextVar("lens_rl_phase", default=None)
#: The innermost ``with_bucket`` scope in this context: ``(bucket, outer)`` or None.
AMBIENT: contextvars.ContextVar[Any] = contextvars.ContextVar("lens_rl_bucket", default=None)


class FastSpans(Protocol):
    """Starts phase spans without the SDK's per-span cost (``lens_rl.export.fastspan.FastSpanFactory``)."""

    def start(
        self,
        name: str,
        parent: SpanContext,
        attributes: dict[str, Any],
        start_ns: int,
        shape: Any = None,
        parent_context: Any = None,
    ) -> Span: ...


class PhaseRecorder(Protocol):
    """A completed phase's metrics, recorded cheaply and drained in batches (``export.live_metrics.PhaseMetrics``)."""

    def record(self, name: str, bucket: str | None, duration_s: float, exclusive_s: float | None) -> None: ...

    def record_seconds(self, name: str, bucket: str, seconds: float) -> None: ...

    def drain(self) -> None: ...


class StepHook(Protocol):
    """What the phase engine calls at step boundaries (``lens_rl.devices.profile.Profiler``)."""

    #: The last step a boundary was called for.
    step: Any

    def boundary(self, step: Any, parent: Any) -> None: ...

    def closing(self, step: Any) -> bool: ...

    def step_end(self, step: Any, end_ns: int) -> None: ...


class Handle(Protocol):
    """The handle as everything outside ``lens_rl.export`` sees it (``lens_rl.export.handle.TelemetryHandle``).

    The public face is ``tracer``, ``meter``, ``is_exporting``, ``resource`` and the bounded
    ``force_flush`` / ``shutdown``; the rest serves the hot path, lifecycle and ``lens_rl.testing``.
    """

    #: ``driver``, ``worker``, or ``lazy`` (made by a first phase; an explicit init replaces it).
    role: str
    #: The job root's span id: its children are top-level phases.
    root_span_id: int | None
    #: Write the ended spans out whenever the process's last open phase ends (a child ``lens-rl run`` wove,
    #: which may be killed without ``atexit``): :meth:`flush_when_idle`.
    flush_idle: bool

    @property
    def config(self) -> TelemetryConfig: ...
    @property
    def tracer(self) -> Tracer: ...
    @property
    def meter(self) -> Meter: ...
    @property
    def resource(self) -> Resource: ...
    @property
    def is_exporting(self) -> bool: ...
    @property
    def fast(self) -> FastSpans | None: ...
    @property
    def phase_metrics(self) -> PhaseRecorder | None: ...
    @property
    def tracer_provider(self) -> TracerProvider | None: ...

    def set_root(self, span_id: int) -> None: ...

    def adopt(self, old: Handle) -> None: ...

    def force_flush(self, timeout_ms: float | None = 5000) -> bool: ...

    def flush_when_idle(self) -> None: ...

    def shutdown(self, timeout_ms: float | None = 5000) -> bool: ...

    def after_fork(self) -> None: ...


class Runtime:
    """The process's telemetry state. One instance, :data:`RUNTIME`; read its fields, set them under ``lock``."""

    __slots__ = (
        "on",
        "stacked",
        "handle",
        "root_span",
        "root_context",
        "resolved",
        "resolver",
        "lock",
        "open_phases",
        "phase_cache",
        "warned",
        "last_shutdown",
        "registered",
        "reset_hooks",
        "projected",
        "shutdown_hooks",
        "driver_hooks",
        "activate_hooks",
        "last_step",
        "phase_step",
        "weight_version",
        "worker_init",
        "otel_keys",
        "step_claim",
        "step_hook",
        "step_tally",
    )

    def __init__(self) -> None:
        #: The hot-path flag (see the module docstring).
        self.on = True
        #: True once a ``with`` phase was entered while on: exits must then look at the stack even when off.
        self.stacked = False
        #: The current TelemetryHandle, or None.
        self.handle: Handle | None = None
        #: The job root span (driver only) and the root context (driver: that span; worker: TRACEPARENT).
        self.root_span: Any = None
        self.root_context: Any = None
        #: Set once the environment has been consulted (or telemetry shut down): no lazy init after.
        self.resolved = False
        #: Called (under ``lock``) to start telemetry lazily; returns a handle or None. Set by lifecycle.
        self.resolver: Callable[[], Handle | None] | None = None
        self.lock = threading.RLock()
        #: Every open lens_rl phase in the process, by span id, so shutdown can end them.
        self.open_phases: dict[int, Any] = {}
        #: ``traced_phase(name)`` -> the shared Phase (the C entry point reads this very dict).
        self.phase_cache: dict[str, Any] = {}
        #: Warned-once keys (shared with :mod:`lens_rl._errors`).
        self.warned = _errors.WARNED
        #: The first shutdown's answer, returned by later calls.
        self.last_shutdown: bool | None = None
        #: Process-wide registrations made once (``atexit``, fork hooks, OTel globals): never undone.
        self.registered: set[str] = set()
        #: Called by :meth:`reset` with its ``after_fork`` flag: whatever keeps per-process state (the export
        #: side's queues and helper threads, integrations) registers here. A forked child runs them through
        #: the process's one ``os.register_at_fork`` hook (:meth:`after_fork_in_child`). Never undone.
        self.reset_hooks: list[Callable[[bool], None]] = []
        #: Environment variables a driver init wrote: name -> (value written, value before or None).
        #: A later init removes them first, so re-init honours its own config. Survives reset:
        #: it describes ``os.environ``, which a reset does not touch.
        self.projected: dict[str, tuple[str, str | None]] = {}
        #: Run by shutdown before the providers close, given the budget in ms; False: data was lost
        #: (the Ray integration flushes its workers here). Registrations: never undone.
        self.shutdown_hooks: list[Callable[[int], bool]] = []
        #: Run when a driver starts (handed in by the package's face: integrations sit above lifecycle).
        self.driver_hooks: list[Callable[[], None]] = []
        #: Run with the new handle by every start of telemetry (driver, worker, lazy), after it is installed:
        #: what sits above setup and acts on the config (the frameworks the config's ``instrument`` names) is
        #: handed in here by the package's face, never imported by the lifecycle. Each behind the boundary.
        self.activate_hooks: list[Callable[[Handle], None]] = []
        #: The last completed step's goodput (``lens_rl.step_goodput()``), or None.
        self.last_step: dict[str, Any] | None = None
        #: The step of the latest phase this process ended that had one (a worker's step between its phases:
        #: ``lens-rl status``), or None.
        self.phase_step: Any = None
        #: The weight version this process generates with (``lens_rl.set_weight_version``), or None: recorded
        #: as ``rl.weight_version`` on its generation-family phases and in its heartbeat.
        self.weight_version: int | None = None
        #: ``(rank, world_size, worker_group) -> handle | None``: starts worker telemetry from a decorated
        #: constructor's arguments (set by lifecycle: the hot path never imports upward).
        self.worker_init: Callable[[Any, Any, Any], Handle | None] | None = None
        #: OpenTelemetry's context keys and runtime context (set by the export side with its first handle),
        #: read directly on the hot path: see :func:`lens_rl.propagation.keys`.
        self.otel_keys: tuple[Any, ...] | None = None
        #: Called by the first phase with a step of a process ``lens-rl run`` started, before it opens (that
        #: process may claim the driver's role); set by the bootstrap, cleared by the call. Survives reset.
        self.step_claim: Callable[[], None] | None = None
        #: Called at step boundaries (``lens_rl.devices.profile``: profiler windows) when set: the engine calls
        #: ``boundary(step, parent)`` when a step umbrella opens (``parent``: its span) and before a phase that
        #: carries a step other than ``step_hook.step`` starts (``parent``: its parent context), and
        #: ``closing(step)`` as an umbrella closes, before its span ends (its window stops inside it: True), and
        #: ``step_end(step, end_ns)`` once it closed. None: nothing is called.
        self.step_hook: StepHook | None = None
        #: With ``profile: {steps: auto}``: per step, the exclusive seconds of this process's compute phases (every
        #: bucket but idle) outside any step umbrella (a worker's; read and emptied by the step hook). None: not kept.
        self.step_tally: dict[Any, float] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_the_runtime, ())

    def __repr__(self) -> str:
        return f"<lens_rl runtime on={self.on} handle={self.handle!r}>"

    def resolve(self) -> Handle | None:
        """The handle, starting telemetry lazily the first time the env says enabled. Never raises."""
        handle = self.handle
        if handle is not None or self.resolved:
            return handle
        with self.lock:
            if self.handle is not None or self.resolved:
                return self.handle
            handle = None
            resolver = self.resolver
            if resolver is not None:
                try:
                    handle = resolver()
                except Exception as exc:
                    _errors.internal_error(exc, "lazy-init")
                    handle = None
            if handle is None:
                self.mark_off()
            return handle

    def install(self, handle: Handle) -> None:
        """Make ``handle`` current and telemetry on (call under ``lock``)."""
        self.handle = handle
        self.resolved = True
        self.last_shutdown = None
        self.on = True

    def mark_off(self) -> None:
        """Telemetry is off in this process until an explicit init or a reset."""
        self.resolved = True
        self.on = False

    def end_open_phases(self) -> None:
        """End every open lens_rl span (shutdown, a replaced handle): exported with their time so far.

        Their owners still close them later (restoring the context they made current);
        the spans are not ended twice.
        """
        for span_id in list(self.open_phases):
            node = self.open_phases.pop(span_id, None)
            if node is None:
                continue
            try:
                node.span.set_attribute("rl.ended_by_shutdown", True)
                hang = getattr(node, "hang", None)
                if hang is not None:  # suspected hung until the end: said on its span
                    node.span.add_event("rl.hang_suspected", {"rl.hang.age_s": hang[0], "rl.hang.timeout_s": hang[1]})
                node.span.end()
            except Exception as exc:
                _errors.internal_error(exc, "end-open-spans")

    def reset(self, *, after_fork: bool = False) -> None:
        """Forget everything without exporting: the next use resolves from the env again.

        Serves a forked child (``after_fork=True`` also replaces the lock, which another
        thread of the parent may have held at fork time) and ``lens_rl.testing.reset``.
        """
        if after_fork:
            self.lock = threading.RLock()
        self.handle = None
        self.root_span = None
        self.root_context = None
        self.resolved = False
        self.last_shutdown = None
        self.last_step = None
        self.phase_step = None
        self.weight_version = None
        self.step_hook = None
        self.step_tally = None
        self.open_phases.clear()
        self.phase_cache.clear()
        _errors.forget()
        ACTIVE.set(None)
        AMBIENT.set(None)
        self.on = True
        for hook in list(self.reset_hooks):
            try:
                hook(after_fork)
            except Exception as exc:
                _errors.internal_error(exc, "reset-hook")

    def after_fork_in_child(self) -> None:
        """In a forked child: forget the parent's telemetry (its threads did not survive the fork)."""
        old = self.handle
        self.reset(after_fork=True)
        if old is not None:  # the SDK restarts its metric thread in the child: stop the parent's copy
            try:
                old.after_fork()
            except Exception as exc:
                _errors.internal_error(exc, "after-fork")


#: The process's runtime.
RUNTIME = Runtime()
if hasattr(os, "register_at_fork"):  # the process's one fork hook: the rest are reset hooks
    os.register_at_fork(after_in_child=RUNTIME.after_fork_in_child)


def _the_runtime() -> Runtime:
    """The live runtime of this process (what a pickled reference to it unpickles as)."""
    return RUNTIME
