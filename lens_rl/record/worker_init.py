"""`traced_worker_init`: a worker's start-up traced, its telemetry started before the constructor's body.

Example::

    @ray.remote
    @traced_worker_init("policy.init", worker_group="lm_policy")
    class PolicyWorker:
        def __init__(self, rank, world_size): ...      # the model load is inside the span
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from lens_rl._errors import internal_error
from lens_rl._runtime import RUNTIME
from lens_rl.buckets import Bucket, coerce_bucket
from lens_rl.record import wrappers
from lens_rl.record.phases import Phase

__all__ = ["traced_worker_init"]

F = TypeVar("F", bound=Callable[..., Any])


class _WorkerInit(Phase):
    """``traced_worker_init``'s runner: start worker telemetry, then open the span."""

    __slots__ = ()
    stepless = True  # it belongs to no step: not its caller's either (SPEC, Aspects)

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_worker_init,
            (self.name, self.bucket.value if self.bucket else None, self.attributes, self.rl_attributes),
        )

    def _run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        handle = RUNTIME.handle
        if handle is None or handle.role == "lazy":
            _init_from_call(self, fn, args, kwargs)
        return super()._run(fn, *args, **kwargs)


def _rebuild_worker_init(name: str, bucket: str | None, attributes: Any, rl_attributes: Any) -> _WorkerInit:
    return _WorkerInit(name, coerce_bucket(bucket), None, attributes, rl_attributes)


def _init_from_call(spec: _WorkerInit, fn: Callable[..., Any], args: Any, kwargs: Any) -> None:
    """Initialise worker telemetry (through the runtime's ``worker_init``, which setup hands in), taking
    rank / world_size / worker_group from the constructor's own arguments when it has parameters of those
    names."""
    try:
        init = RUNTIME.worker_init
        if init is None:  # nothing handed in (lens_rl's setup not imported): lazily, from the environment
            RUNTIME.resolve()
            return
        found: dict[str, Any] = {}
        try:
            bound = inspect.signature(fn).bind_partial(*args, **kwargs).arguments
            found = {k: bound[k] for k in ("rank", "world_size", "worker_group") if bound.get(k) is not None}
        except (TypeError, ValueError):
            pass
        group = found.get("worker_group") or (spec.rl_attributes or {}).get("worker_group")
        init(found.get("rank"), found.get("world_size"), group)
    except Exception as exc:
        internal_error(exc, "worker-init")


def traced_worker_init(
    span_name: str,
    *,
    bucket: Bucket | str = Bucket.OVERHEAD,
    attributes: Mapping[str, Any] | None = None,
    **rl_attributes: Any,
) -> Callable[[F], F]:
    """Decorate a worker's ``__init__`` (or its whole class) to start telemetry and trace start-up.

    Worker telemetry is initialised before the body runs (so the model load is inside
    the span ``span_name``), bucketed ``overhead`` (start-up is necessary work, not a
    step's; ``bucket=`` overrides) and in no step. ``rank``, ``world_size`` and
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
    rl_attributes.pop("step", None)  # start-up belongs to no step
    spec = _WorkerInit(span_name, coerce_bucket(bucket) or Bucket.OVERHEAD, None, attributes, rl_attributes)

    def decorate(target: F) -> F:
        if isinstance(target, type):
            original = cast(Any, target).__init__
            if not inspect.isfunction(original):  # object.__init__ (a slot wrapper): give it a real function
                slot_init = original

                def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - it becomes the class's __init__
                    slot_init(self, *args, **kwargs)

                original = __init__
            wrapper = wrappers.wrap(original, spec, kind="sync")
            wrapper.__qualname__ = f"{target.__qualname__}.__init__"
            wrapper.__module__ = target.__module__
            wrapper.__name__ = "__init__"
            target.__init__ = wrapper  # type: ignore[misc]
            target.__lens_rl_traced__ = True  # type: ignore[attr-defined]  # the Ray integration flushes it
            return target
        wrapped = wrappers.decorate(target, spec)
        wrapped.__lens_rl_traced__ = True
        return wrapped  # type: ignore[no-any-return]

    return decorate
