"""Ray: hand the telemetry environment to actors, name their group and rank, flush them.

* A local cluster started by ``ray.init()`` inherits the driver's environment, so
  calling :func:`lens_rl.init_telemetry_driver` *before* ``ray.init()`` is enough.
  For a cluster the driver does not start, pass
  :func:`telemetry_runtime_env` as (or merged into) the job's ``runtime_env``.
* :func:`actor_options` gives one actor of a worker group its ``LENS_RL_WORKER_GROUP``,
  ``RANK`` and ``WORLD_SIZE`` (``Actor.options(**actor_options("lm_policy", i, n))``).
* ``ray.kill`` skips ``atexit``, so an actor killed that way loses what it had not
  exported: call :func:`flush_actors` (or :func:`kill_actors`, which flushes first).
* Ray carries neither contextvars nor trace context into tasks and actors. Pass
  ``lens_rl.inject_context()`` explicitly (``traced_phase(..., parent=carrier)``), or
  opt in per method with :func:`accepts_context` and call through :func:`traced_actor`.

Example::

    lens_rl.init_telemetry_driver(cfg, "grpo")
    ray.init()
    Policy = ray.remote(PolicyWorker)
    workers = [Policy.options(**actor_options("lm_policy", i, 2)).remote() for i in range(2)]
    ...
    flush_actors(workers)
"""

from __future__ import annotations

import atexit
import copy
import functools
import inspect
import os
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, SupportsIndex, TypeVar

import wrapt

from lens_rl._errors import internal_error, warn_once
from lens_rl._runtime import RUNTIME
from lens_rl.config import strip_userinfo
from lens_rl.propagation import attach_context, inject_context

__all__ = [
    "CONTEXT_KWARG",
    "accepts_context",
    "actor_options",
    "flush_actors",
    "flush_known_actors",
    "install_ray_hooks",
    "kill_actors",
    "telemetry_env",
    "telemetry_runtime_env",
    "traced_actor",
    "worker_env",
    "worker_process_setup",
]

F = TypeVar("F", bound=Callable[..., Any])
#: The keyword argument :func:`accepts_context` adds and :func:`traced_actor` fills.
CONTEXT_KWARG = "lens_rl_context"
_PASSED_VARS = (
    "TRACEPARENT",
    "TRACESTATE",
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_RESOURCE_ATTRIBUTES",
)


def telemetry_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's telemetry environment: ``LENS_RL_OTEL_*``, trace context, ``OTEL_*`` basics.

    OTLP headers and an endpoint's userinfo (credentials) are deliberately not copied:
    set headers on the cluster's nodes or in ``headers_file``, whose path travels and
    whose content never does.
    """
    env = os.environ if environ is None else environ
    out = {k: v for k, v in env.items() if k.startswith("LENS_RL_OTEL_") or k in _PASSED_VARS}
    for key in ("LENS_RL_OTEL_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        if key in out:
            out[key] = strip_userinfo(out[key])  # credentials never travel in a runtime_env
    return out


def telemetry_runtime_env(runtime_env: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A copy of ``runtime_env`` with the telemetry environment merged into ``env_vars``.

    ``setdefault`` semantics: a variable the given runtime_env already sets is kept.
    When the config's ``instrument`` names frameworks, it also sets Ray's ``worker_process_setup_hook`` to
    :func:`worker_process_setup` (every worker weaves them before any actor class loads), chaining a hook
    the runtime_env already has (a callable or an import path: it runs right after lens_rl's).
    The input is not mutated.
    """
    merged: dict[str, Any] = copy.deepcopy(dict(runtime_env or {}))
    env_vars = dict(merged.get("env_vars") or {})
    for key, value in telemetry_env().items():
        env_vars.setdefault(key, value)
    merged["env_vars"] = env_vars
    if env_vars.get(_INSTRUMENT_ENV, "").strip():
        merged["worker_process_setup_hook"] = _setup_hook(merged.get("worker_process_setup_hook"))
    return merged


_INSTRUMENT_ENV = "LENS_RL_OTEL_INSTRUMENT"
#: Ray's import path of :func:`worker_process_setup` (a string hook needs no export through Ray's GCS).
SETUP_HOOK = "lens_rl.integrations.ray.worker_process_setup"


def worker_process_setup() -> None:
    """Ray's ``worker_process_setup_hook``: weave the frameworks ``LENS_RL_OTEL_INSTRUMENT`` names in this
    worker, before any actor class loads (Ray loads an actor's methods once). Never raises."""
    try:
        from lens_rl.frameworks import apply_configured

        apply_configured()
    except Exception as exc:
        internal_error(exc, "ray-setup-hook")


def _setup_hook(previous: Any) -> Any:
    """lens_rl's setup hook, followed by ``previous`` (a callable or an import path) when the job set one."""
    if previous is None or previous == SETUP_HOOK or getattr(previous, "lens_rl_chains", None) is not None:
        return SETUP_HOOK if previous is None else previous

    def lens_rl_worker_process_setup() -> None:
        worker_process_setup()
        hook = previous
        if isinstance(hook, str):  # "module.function", as Ray imports it
            import importlib

            module, _, name = hook.rpartition(".")
            hook = getattr(importlib.import_module(module), name)
        hook()  # the job's own hook: its exceptions are the job's (Ray reports them)

    lens_rl_worker_process_setup.lens_rl_chains = previous  # type: ignore[attr-defined]
    return lens_rl_worker_process_setup


def worker_env(worker_group: str, rank: int, world_size: int) -> dict[str, str]:
    """The per-actor variables that name a worker: group, rank, world size."""
    if not 0 <= int(rank) < int(world_size):
        raise ValueError(f"rank must be in [0, world_size): rank={rank!r}, world_size={world_size!r}")
    return {"LENS_RL_WORKER_GROUP": str(worker_group), "RANK": str(int(rank)), "WORLD_SIZE": str(int(world_size))}


def actor_options(
    worker_group: str, rank: int, world_size: int, runtime_env: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``.options(...)`` keyword arguments for one actor of a worker group.

    Its ``runtime_env`` carries the telemetry environment plus the actor's group, rank
    and world size (these three override; everything else keeps ``setdefault`` semantics).
    """
    merged = telemetry_runtime_env(runtime_env)
    merged["env_vars"].update(worker_env(worker_group, rank, world_size))
    return {"runtime_env": merged}


def _flush_in_actor(_instance: object, timeout_ms: int) -> bool:
    from lens_rl.lifecycle import flush_telemetry

    return flush_telemetry(timeout_ms)


def flush_actors(actors: Iterable[Any], timeout_ms: int = 5000) -> list[bool]:
    """Flush each actor's telemetry (in parallel), bounded by ``timeout_ms`` plus Ray's round trip.

    Returns one bool per actor (False for an actor that failed, timed out or is gone).
    Never raises.
    """
    import ray

    actors = list(actors)
    refs = []
    for actor in actors:
        try:
            refs.append(actor.__ray_call__.remote(_flush_in_actor, timeout_ms))
        except Exception as exc:
            internal_error(exc, "ray-flush")
            refs.append(None)
    live = [ref for ref in refs if ref is not None]
    ready: set[Any] = set()
    if live:
        try:  # one deadline for all of them, whatever their number
            done, _ = ray.wait(live, num_returns=len(live), timeout=timeout_ms / 1000.0 + _RAY_ROUND_TRIP_S)
            ready = set(done)
        except Exception as exc:
            internal_error(exc, "ray-flush")
    results: list[bool] = []
    for ref in refs:
        if ref is None or ref not in ready:
            results.append(False)
            continue
        try:
            results.append(bool(ray.get(ref, timeout=0)))
        except Exception as exc:
            internal_error(exc, "ray-flush")
            results.append(False)
    return results


# ---------------------------------------------------------------------- the ordinary end of a job

#: Actors lens_rl knows (traced_worker_init classes, actor_options): flushed before Ray shuts down.
_KNOWN: weakref.WeakSet[Any] = weakref.WeakSet()
_LAST_FLUSH: list[bool] = [True]
_RAY_ROUND_TRIP_S = 5.0


def _known_actor(actor_class: Any, options: Mapping[str, Any]) -> bool:
    env_vars = ((options.get("runtime_env") or {}).get("env_vars") or {}) if isinstance(options, Mapping) else {}
    if "LENS_RL_WORKER_GROUP" in env_vars:
        return True
    cls = getattr(getattr(actor_class, "__ray_metadata__", None), "modified_class", None)
    return bool(
        getattr(cls, "__lens_rl_traced__", False)
        or getattr(getattr(cls, "__init__", None), "__lens_rl_traced__", False)
    )


def _remember_actor(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    handle = wrapped(*args, **kwargs)
    try:
        if _known_actor(instance, kwargs):
            _KNOWN.add(handle)
            if "ray-atexit" not in RUNTIME.registered:
                # Registered after ray.init(), so it runs before Ray's own exit handler shuts the cluster down.
                RUNTIME.registered.add("ray-atexit")
                atexit.register(flush_known_actors, 3000)
    except Exception as exc:
        internal_error(exc, "ray-actor-registry")
    return handle


def _flush_before_shutdown(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    flush_known_actors()
    return wrapped(*args, **kwargs)


def flush_known_actors(timeout_ms: int = 5000) -> bool:
    """Flush every live actor lens_rl knows, once; True when all of them exported everything.

    Runs before ``ray.shutdown()``, at the driver's exit and inside
    :func:`lens_rl.shutdown_telemetry`, so the ordinary end of a Ray job loses no
    span that ended on a worker (Ray does not reliably call ``__ray_shutdown__``
    when the owner exits). Later calls return the last answer. Never raises.
    """
    actors = list(_KNOWN)
    if not actors:
        return _LAST_FLUSH[0]
    _KNOWN.clear()
    try:
        import ray

        ok = ray.is_initialized() and all(flush_actors(actors, timeout_ms))
    except Exception as exc:
        internal_error(exc, "ray-flush")
        ok = False
    if not ok:
        warn_once("ray-flush-failed", "lens_rl: some Ray workers could not flush their spans before shutdown")
    _LAST_FLUSH[0] = ok
    return ok


def install_ray_hooks() -> None:
    """Once per process: when Ray is (or gets) imported, remember lens_rl's actors and flush them
    before ``ray.shutdown()`` and at exit; ``shutdown_telemetry`` flushes them too."""
    if "ray-hooks" in RUNTIME.registered:
        return
    RUNTIME.registered.add("ray-hooks")
    RUNTIME.shutdown_hooks.append(flush_known_actors)
    wrapt.register_post_import_hook(_patch_ray, "ray")


def _patch_ray(ray_module: Any) -> None:
    try:
        import ray.actor

        wrapt.wrap_function_wrapper(ray.actor, "ActorClass._remote", _remember_actor)
        wrapt.wrap_function_wrapper(ray_module, "shutdown", _flush_before_shutdown)
    except Exception as exc:
        internal_error(exc, "ray-hooks")


def kill_actors(actors: Iterable[Any], timeout_ms: int = 5000, **kill_kwargs: Any) -> list[bool]:
    """Flush, then ``ray.kill`` each actor. Returns the flush results."""
    import ray

    actors = list(actors)
    flushed = flush_actors(actors, timeout_ms)
    for actor in actors:
        try:
            ray.kill(actor, **kill_kwargs)
        except Exception as exc:
            internal_error(exc, "ray-kill")
    return flushed


# ---------------------------------------------------------------------- implicit context


def accepts_context(method: F) -> F:
    """Let an actor method receive its caller's trace context without a parameter of its own.

    Adds a keyword-only ``lens_rl_context=None`` to the method's signature (so Ray's
    argument checks accept it) and makes that carrier current while the method runs.
    Callers going through :func:`traced_actor` fill it in automatically; other
    callers need not change. Works on sync and async methods.

    Example::

        class Policy:
            @accepts_context
            @traced_phase("logprob")
            def logprob(self, batch): ...
    """
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def async_wrapper(*args: Any, lens_rl_context: Mapping[str, str] | None = None, **kwargs: Any) -> Any:
            with attach_context(lens_rl_context):
                return await method(*args, **kwargs)

        wrapper: Any = async_wrapper
    else:

        @functools.wraps(method)
        def sync_wrapper(*args: Any, lens_rl_context: Mapping[str, str] | None = None, **kwargs: Any) -> Any:
            with attach_context(lens_rl_context):
                return method(*args, **kwargs)

        wrapper = sync_wrapper
    sig = inspect.signature(method)
    params = list(sig.parameters.values())
    extra = inspect.Parameter(CONTEXT_KWARG, inspect.Parameter.KEYWORD_ONLY, default=None)
    at = next((i for i, p in enumerate(params) if p.kind is p.VAR_KEYWORD), len(params))
    params.insert(at, extra)
    wrapper.__signature__ = sig.replace(parameters=params)
    # Ray reads actor method signatures through inspect.unwrap(), all the way down:
    # end the chain here so it sees the signature that includes lens_rl_context.
    del wrapper.__wrapped__
    return wrapper  # type: ignore[no-any-return]


def _method_accepts_context(handle: Any, name: str) -> bool:
    signatures = getattr(handle, "_ray_method_signatures", None) or {}
    params = signatures.get(name) or []
    return any(getattr(p, "name", None) == CONTEXT_KWARG for p in params)


class _ContextMethod(wrapt.ObjectProxy):  # type: ignore[misc]
    """An ``ActorMethod`` whose ``.remote()`` adds the caller's trace context."""

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault(CONTEXT_KWARG, inject_context())
        return self.__wrapped__.remote(*args, **kwargs)

    def options(self, *args: Any, **kwargs: Any) -> Any:
        return _ContextMethod(self.__wrapped__.options(*args, **kwargs))


class _TracedActor(wrapt.ObjectProxy):  # type: ignore[misc]
    """An ``ActorHandle`` proxy: methods marked :func:`accepts_context` get the caller's context."""

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.__wrapped__, name)
        if not name.startswith("_") and _method_accepts_context(self.__wrapped__, name):
            return _ContextMethod(attr)
        return attr

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        # Shipping the proxy ships the plain handle: the receiver can wrap it again.
        return self.__wrapped__.__reduce_ex__(protocol)


def traced_actor(handle: Any) -> Any:
    """Wrap an actor handle so calls to :func:`accepts_context` methods carry the trace context.

    Example::

        policy = traced_actor(Policy.remote())
        with traced_phase("step", step=i):
            ray.get(policy.logprob.remote(batch))   # its span is a child of "step"
    """
    return _TracedActor(handle)
