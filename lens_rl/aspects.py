"""`traced_phase` and `traced_worker_init`: spans for training phases and worker start-up.

Cost model (see ``benchmarks/``): with telemetry off, a decorated function costs one
flag read and one extra call; ``with traced_phase("x")`` costs a dict lookup for the
phase object plus two flag reads, and never touches OpenTelemetry. Phase objects
hold no per-entry state (that lives in a contextvar stack), so one object may be
entered from many threads and tasks at once and is cached per name.

Example::

    @traced_phase("policy_training", step=3)        # rl.step = 3, bucket productive
    def train(batch): ...

    with traced_phase("generation") as span:
        span.set_attribute("rl.num_prompts", 64)
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from lens_rl import _codegen, _impl, _state
from lens_rl._attributes import clean_attributes
from lens_rl.buckets import _AMBIENT, Bucket, coerce_bucket, default_bucket

__all__ = ["Phase", "traced_phase", "traced_worker_init"]

_log = logging.getLogger("lens_rl")
F = TypeVar("F", bound=Callable[..., Any])
_ON = True  # mirrored from _state.ON (a module global reads faster than a module attribute)
_WARNED = False


def _internal_error(exc: BaseException) -> None:
    """The one boundary for telemetry's own faults: log once, never raise into user code."""
    global _WARNED
    if not _WARNED:
        _WARNED = True
        _log.warning("lens_rl: telemetry error ignored (further ones are logged at debug): %r", exc, exc_info=exc)
    else:
        _log.debug("lens_rl: telemetry error ignored: %r", exc, exc_info=exc)


class _NoopSpan:
    """What a phase yields when telemetry is off: the span methods, doing nothing."""

    __slots__ = ()

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        pass

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None) -> None:
        pass

    def record_exception(self, exception: BaseException, attributes: Mapping[str, Any] | None = None) -> None:
        pass

    def set_status(self, *args: Any, **kwargs: Any) -> None:
        pass

    def is_recording(self) -> bool:
        return False

    def get_span_context(self) -> Any:
        """OpenTelemetry's invalid span context (imported only when asked for)."""
        from opentelemetry.trace import INVALID_SPAN_CONTEXT

        return INVALID_SPAN_CONTEXT

    def __bool__(self) -> bool:
        return False


NOOP_SPAN = _NoopSpan()


class PhaseSpan(_NoopSpan):
    """What a phase yields when on: the span methods, with attribute values coerced and secrets redacted."""

    __slots__ = ("span",)

    def __init__(self, span: Any) -> None:
        self.span = span

    def set_attribute(self, key: str, value: Any) -> None:
        self.span.set_attributes(clean_attributes({key: value}))

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.span.set_attributes(clean_attributes(attributes))

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None) -> None:
        self.span.add_event(str(name), clean_attributes(attributes), timestamp)

    def record_exception(self, exception: BaseException, attributes: Mapping[str, Any] | None = None) -> None:
        self.span.record_exception(exception, clean_attributes(attributes))

    def set_status(self, *args: Any, **kwargs: Any) -> None:
        self.span.set_status(*args, **kwargs)

    def is_recording(self) -> bool:
        return bool(self.span.is_recording())

    def get_span_context(self) -> Any:
        return self.span.get_span_context()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.span, name)  # the rest of the OpenTelemetry span API

    def __bool__(self) -> bool:
        return True


class _Node:
    """One open phase: the entry on this context's phase stack."""

    __slots__ = ("phase", "span", "token", "bucket", "t0", "child_s", "prev", "__weakref__")

    def __init__(self, phase: Phase, span: Any, token: Any, bucket: Bucket | None, prev: _Node | None) -> None:
        self.phase = phase
        self.span = span
        self.token = token
        self.bucket = bucket
        self.prev = prev
        self.child_s = 0.0
        self.t0 = time.perf_counter()


_ACTIVE: contextvars.ContextVar[_Node | None] = contextvars.ContextVar("lens_rl_phase", default=None)
_OPEN: dict[int, _Node] = {}  # every open phase in the process, so shutdown can end them


class Phase(_codegen.Runner):
    """A training phase: a context manager and a decorator (sync, async, generators, methods).

    Made by :func:`traced_phase`; immutable and shareable.
    """

    __slots__ = ("name", "bucket", "parent", "attributes", "rl_attributes", "_static", "_default", "_parent_ctx")

    def __init__(
        self,
        name: str,
        bucket: Bucket | None = None,
        parent: Mapping[str, str] | None = None,
        attributes: Mapping[str, Any] | None = None,
        rl_attributes: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"traced_phase: name must be a non-empty string, got {name!r}")
        if parent is not None and not isinstance(parent, Mapping):
            raise ValueError(f"traced_phase: parent must be a carrier dict from inject_context(), got {parent!r}")
        if attributes is not None and not isinstance(attributes, Mapping):
            raise ValueError(f"traced_phase: attributes must be a mapping, got {attributes!r}")
        self.name = name
        self.bucket = bucket
        self.parent = dict(parent) if parent else None
        self.attributes = dict(attributes) if attributes else None
        self.rl_attributes = dict(rl_attributes) if rl_attributes else None
        self._default = default_bucket(name)
        self._static: dict[str, Any] | None = None
        self._parent_ctx: Any = None

    def __repr__(self) -> str:
        bucket = f", bucket={self.bucket.value!r}" if self.bucket else ""
        return f"traced_phase({self.name!r}{bucket})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.name, self.bucket.value if self.bucket else None, self.parent,
                           self.attributes, self.rl_attributes))  # fmt: skip

    # ------------------------------------------------------------ context manager

    def __enter__(self) -> Any:
        if _ON:
            return _enter(self)
        return NOOP_SPAN

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if _ON:
            _exit(self, exc_type, exc)

    async def __aenter__(self) -> Any:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)

    # ------------------------------------------------------------ decorator

    def __call__(self, fn: F) -> F:
        return _codegen.decorate(fn, self)  # type: ignore[no-any-return]

    # The Runner scope: a span, opened (and made current unless a generator) and closed.
    def _open(self, make_current: bool) -> _Node | None:
        return _start(self, make_current)

    def _close(self, node: _Node | None, exc: BaseException | None) -> None:
        if node is not None:
            _stop(node, exc)

    # ------------------------------------------------------------ enabled path

    def _attributes(self, bucket: Bucket | None) -> dict[str, Any]:
        static = self._static
        if static is None:
            static = clean_attributes(self.attributes)
            static.update(clean_attributes(self.rl_attributes, prefix="rl."))
            static.pop("rl.bucket", None)  # set by lens_rl alone
            self._static = static
        attrs = dict(static)
        if bucket is not None:
            attrs["rl.bucket"] = bucket.value
        return attrs

    def _parent(self) -> Any:
        if self._parent_ctx is None:
            from lens_rl.propagation import extract

            self._parent_ctx = extract(self.parent) or False
        return self._parent_ctx or None


def _rebuild(name: str, bucket: str | None, parent: Any, attributes: Any, rl_attributes: Any) -> Phase:
    return Phase(name, coerce_bucket(bucket), parent, attributes, rl_attributes)


def _start(phase: Phase, make_current: bool = True) -> _Node | None:
    """Open ``phase``'s span; None when telemetry turns out to be off. Never raises."""
    try:
        handle = _state.HANDLE or _state.resolve()
        if handle is None:
            return None
        from opentelemetry import context, trace

        bucket = phase.bucket
        if bucket is None:
            ambient = _AMBIENT.get()
            bucket = ambient[0] if ambient is not None else phase._default
        prev = _ACTIVE.get()
        parent_ctx = None
        if phase.parent is not None:
            parent_ctx = phase._parent()
        if parent_ctx is None and prev is None and _state.ROOT_CONTEXT is not None:
            if not trace.get_current_span().get_span_context().is_valid:
                parent_ctx = _state.ROOT_CONTEXT
        span = handle.tracer.start_span(phase.name, context=parent_ctx, attributes=phase._attributes(bucket))
        token = context.attach(trace.set_span_in_context(span, parent_ctx)) if make_current else None
        node = _Node(phase, span, token, bucket, prev)
        _ACTIVE.set(node)
        _OPEN[id(node)] = node
        return node
    except Exception as exc:
        _internal_error(exc)
        return None


def _enter(phase: Phase) -> Any:
    node = _start(phase)
    return NOOP_SPAN if node is None else PhaseSpan(node.span)


def _exit(phase: Phase, exc_type: Any, exc: Any) -> None:
    node = _ACTIVE.get()
    if node is None:
        return
    if node.phase is not phase:
        # Not the innermost entry: a generator interleaved its phases with ours, or this
        # phase was entered while telemetry was off. Look further down, else nothing to do.
        while node is not None and node.phase is not phase:
            node = node.prev
        if node is None or id(node) not in _OPEN:
            return
    _stop(node, exc)


def _stop(node: _Node, exc: BaseException | None) -> None:
    """Close ``node``: record the exception, detach, end, count the bucket time. Never raises."""
    try:
        duration_s = time.perf_counter() - node.t0
        if _ACTIVE.get() is node:
            _ACTIVE.set(node.prev)
        if _OPEN.pop(id(node), None) is None:
            return  # already ended (shutdown got there first)
        span = node.span
        if exc is not None:
            if isinstance(exc, Exception):
                from opentelemetry.trace import Status, StatusCode

                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:1024]))
            else:
                span.add_event("rl.interrupted", {"exception.type": type(exc).__name__})
        if node.token is not None:
            from opentelemetry import context

            try:
                context.detach(node.token)
            except Exception:
                pass
        span.end()
        bucket = node.bucket
        exclusive_s = duration_s
        if bucket is not None:
            exclusive_s = duration_s - node.child_s
            outer = node.prev
            while outer is not None and outer.bucket is None:
                outer = outer.prev
            if outer is not None:
                outer.child_s += duration_s
        handle = _state.HANDLE
        if handle is not None:
            if handle.phase_metrics is not None:
                handle.phase_metrics.record(node.phase.name, bucket.value if bucket else None, duration_s, exclusive_s)
            if handle.config.flush_on_step and bucket is None and node.phase.rl_attributes and "step" in node.phase.rl_attributes:
                handle.force_flush(handle.config.export_timeout_ms)
    except Exception as exc:
        _internal_error(exc)


def _end_open_spans() -> None:
    """End every open lens_rl span (shutdown): they are exported with their time so far."""
    for node in list(_OPEN.values()):
        if _OPEN.pop(id(node), None) is not None:
            try:
                node.span.set_attribute("rl.ended_by_shutdown", True)
                node.span.end()
            except Exception as exc:
                _internal_error(exc)


def _forget_open_spans() -> None:
    _OPEN.clear()
    _ACTIVE.set(None)


# ---------------------------------------------------------------------- public API

_CACHE: dict[str, Phase] = {}
_CACHE_MAX = 4096


if TYPE_CHECKING:

    def traced_phase(
        name: str,
        *,
        bucket: Bucket | str | None = None,
        parent: Mapping[str, str] | None = None,
        attributes: Mapping[str, Any] | None = None,
        **rl_attributes: Any,
    ) -> Phase: ...

else:

    def _traced_phase_py(name, /, **kwargs):
        """A training phase: ``with traced_phase(name): ...`` or ``@traced_phase(name)``.

        Enabled, it opens a span ``name`` carrying ``rl.bucket``: the explicit
        ``bucket``, else the innermost :func:`with_bucket`, else the default for a known
        RL phase name, else none (an umbrella span such as a whole step). ``parent``
        takes a carrier from :func:`inject_context`. Keyword attributes are recorded as
        ``rl.<key>``; ``attributes={...}`` takes exact keys. An invalid bucket raises
        ``ValueError`` here, enabled or not. Disabled, it yields a no-op span and
        touches no OpenTelemetry. The first phase of a process whose environment says
        enabled starts worker telemetry.

        Example::

            with traced_phase("generation", step=step) as span:
                outputs = llm.generate(prompts)
                span.set_attribute("rl.num_samples", len(outputs))
        """
        if not kwargs:
            try:
                return _CACHE[name]
            except (KeyError, TypeError):
                return _make_phase(name)
        bucket = kwargs.get("bucket")
        if bucket is not None and bucket.__class__ is not Bucket:
            kwargs["bucket"] = coerce_bucket(bucket)
        if _ON:
            return _make_phase(name, **kwargs)
        lazy = _LazyPhase()  # a type call without __init__: cheaper than object.__new__(cls)
        lazy.name = name
        lazy.kwargs = kwargs
        return lazy


class _LazyPhase(_impl.LazyBase):  # type: ignore[misc, valid-type]
    """What ``traced_phase(name, **kwargs)`` returns while off: the arguments, unprocessed.

    The bucket is validated at once; everything else waits until the object is used
    as a decorator or entered while telemetry is on, so the off path stays cheap.
    Its storage (``name``, ``kwargs``, ``phase``) comes from :mod:`lens_rl._impl`.
    """

    __slots__ = ()
    name: str
    kwargs: dict[str, Any]
    phase: Phase | None

    def _materialize(self) -> Phase:
        return _make_phase(self.name, **self.kwargs)

    def __enter__(self) -> Any:
        if _ON:
            # Materialised once and kept: a Phase holds no per-entry state, so one stored
            # lazy object can be entered from several threads at once.
            phase = getattr(self, "phase", None)
            if phase is None:
                self.phase = phase = self._materialize()  # type: ignore[misc]
            return phase.__enter__()
        return NOOP_SPAN

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if _ON:
            phase = getattr(self, "phase", None)
            if phase is not None:
                phase.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> Any:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, fn: F) -> F:
        return self._materialize()(fn)

    def __reduce__(self) -> tuple[Any, ...]:
        return self._materialize().__reduce__()

    def __repr__(self) -> str:
        return repr(self._materialize())


def _make_phase(
    name: str,
    *,
    bucket: Bucket | str | None = None,
    parent: Mapping[str, str] | None = None,
    attributes: Mapping[str, Any] | None = None,
    **rl_attributes: Any,
) -> Phase:
    phase = Phase(name, coerce_bucket(bucket), parent, attributes, rl_attributes)
    if not (bucket or parent or attributes or rl_attributes) and len(_CACHE) < _CACHE_MAX:
        _CACHE[name] = phase
    return phase


if not TYPE_CHECKING:
    _traced_phase_py.__signature__ = inspect.signature(_make_phase)
    traced_phase = _impl.traced_phase_entry(_traced_phase_py, _CACHE, _LazyPhase, Bucket, globals())


class _WorkerInit(Phase):
    """``traced_worker_init``'s runner: start worker telemetry, then open the span."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_worker_init, (self.name, self.attributes, self.rl_attributes))

    def _run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        handle = _state.HANDLE
        if handle is None or handle.role == "lazy":
            _init_from_call(self, fn, args, kwargs)
        return super()._run(fn, *args, **kwargs)


def _rebuild_worker_init(name: str, attributes: Any, rl_attributes: Any) -> _WorkerInit:
    return _WorkerInit(name, None, None, attributes, rl_attributes)


def _init_from_call(spec: _WorkerInit, fn: Callable[..., Any], args: Any, kwargs: Any) -> None:
    """Initialise worker telemetry, taking rank / world_size / worker_group from the
    constructor's own arguments when it has parameters of those names."""
    try:
        from lens_rl.lifecycle import init_telemetry_worker, telemetry_enabled_in_env

        if not telemetry_enabled_in_env():
            if _state.HANDLE is None:
                _state.resolve()
            return
        found: dict[str, Any] = {}
        try:
            bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
            found = {k: bound[k] for k in ("rank", "world_size", "worker_group") if bound.get(k) is not None}
        except (TypeError, ValueError):
            pass
        group = found.get("worker_group") or (spec.rl_attributes or {}).get("worker_group")
        init_telemetry_worker(rank=found.get("rank"), world_size=found.get("world_size"), worker_group=group)
    except Exception as exc:
        _internal_error(exc)


def traced_worker_init(
    span_name: str, *, attributes: Mapping[str, Any] | None = None, **rl_attributes: Any
) -> Callable[[F], F]:
    """Decorate a worker's ``__init__`` (or its whole class) to start telemetry and trace start-up.

    Worker telemetry is initialised before the body runs (so the model load is inside
    the span ``span_name``); the span has no bucket. ``rank``, ``world_size`` and
    ``worker_group`` are taken from the constructor's arguments of those names, else
    from the environment; ``worker_group=`` here names the group too. Disabled, the
    constructor runs untouched. On a class it returns that same class, so
    ``ray.remote`` accepts it.

    Example::

        @ray.remote
        @traced_worker_init("policy.init", worker_group="lm_policy")
        class PolicyWorker:
            def __init__(self, rank, world_size): ...
    """
    spec = _WorkerInit(span_name, None, None, attributes, rl_attributes)

    def decorate(target: F) -> F:
        if isinstance(target, type):
            original = cast(Any, target).__init__
            wrapper = _codegen.wrap(original, spec, kind="sync")
            wrapper.__qualname__ = f"{target.__qualname__}.__init__"
            wrapper.__module__ = target.__module__
            wrapper.__name__ = "__init__"
            target.__init__ = wrapper  # type: ignore[misc]
            return target
        return _codegen.decorate(target, spec)  # type: ignore[no-any-return]

    return decorate


_state.mirror(sys.modules[__name__])
