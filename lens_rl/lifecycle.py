"""Starting and stopping telemetry: driver, workers, flush, shutdown, exit and fork.

* :func:`init_telemetry_driver` — once on the driver, before ``ray.init()``: validates,
  projects the config into ``LENS_RL_OTEL_*`` env vars (``setdefault``: raw env wins),
  opens the job root span ``rl.job`` and exports its context as ``TRACEPARENT``.
* :func:`init_telemetry_worker` — once per worker process, from the environment only.
  Never raises: a bad value logs one warning and leaves telemetry off.
* :func:`shutdown_telemetry` / :func:`flush_telemetry` — bounded by ``timeout_ms``.

Fork rule: a forked child starts with telemetry reset. Its first phase initialises it
again from the inherited environment, under the child's own pid and its own file; the
parent's queued spans stay with the parent. A ``multiprocessing`` child flushes at
its exit (it skips ``atexit``); a child made by a bare ``os.fork`` should call
:func:`shutdown_telemetry` before ``os._exit``.

Example::

    handle = lens_rl.init_telemetry_driver(master_config, algorithm="grpo")
    ray.init()
    ...
    lens_rl.shutdown_telemetry(timeout_ms=5000)
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from typing import Any

import lens_rl.propagation as propagation
from lens_rl._errors import internal_error, warn_once
from lens_rl._runtime import RUNTIME
from lens_rl.config import (
    ENV,
    TelemetryConfig,
    mask_url,
    near_telemetry_key,
    parse_bool,
    strip_userinfo,
    unknown_env_names,
)
from lens_rl.export.bounded import Job, start_helpers, submit
from lens_rl.identity import for_driver, worker_attributes

__all__ = [
    "flush_telemetry",
    "get_telemetry_handle",
    "init_telemetry_driver",
    "init_telemetry_worker",
    "shutdown_telemetry",
    "step_goodput",
    "step_metrics",
    "telemetry_enabled_in_env",
    "vllm_native_tracing_requested",
]

_log = logging.getLogger("lens_rl")
ATEXIT_TIMEOUT_MS = 3000
DEFAULT_TIMEOUT_MS = 5000
_SLACK_S = 0.05
_IN_FLIGHT: list[Job | None] = [None]  # the flush or shutdown the helpers are running, if any
_CALLER = threading.local()  # depth of _within on this thread (a signal handler may nest a call)
_warn_once = warn_once


def step_goodput() -> dict[str, Any] | None:
    """The last completed step's goodput on this process, or None.

    ``{"step", "attempt", "seconds": {bucket: s} (all four, zeros included), "unattributed_s", "wall_s",
    "goodput"}``. A step is a phase with its own ``rl.step`` and no bucket (the umbrella of one training
    step); ``seconds`` are the exclusive seconds of the bucketed phases inside it, ``unattributed_s`` the
    time none of them covers, and goodput = productive / wall: computed live with the rules the offline
    rollup uses. A plain read; None while off or before the first step.

    Example::

        with lens_rl.traced_phase("step", step=step):
            ...
        print(lens_rl.step_goodput()["goodput"])
    """
    last = RUNTIME.last_step
    return None if last is None else {**last, "seconds": dict(last["seconds"])}


def step_metrics(prefix: str = "goodput/") -> dict[str, float]:
    """:func:`step_goodput` as flat floats, keys under ``prefix``: what ``wandb.log``,
    ``SummaryWriter.add_scalar`` and ``mlflow.log_metrics`` take. Empty before the first step (or off).

    Keys: ``step``, ``attempt``, ``goodput`` (absent for a zero-length step), ``wall_s``,
    ``unattributed_s``, and ``productive_s``, ``overhead_s``, ``idle_s``, ``wasted_s``.

    Example::

        wandb.log({"loss": loss, **lens_rl.step_metrics()}, step=step)
        for key, value in lens_rl.step_metrics().items():
            writer.add_scalar(key, value, step)               # TensorBoard
        mlflow.log_metrics(lens_rl.step_metrics(prefix="goodput."), step=step)
    """
    last = RUNTIME.last_step
    if last is None:
        return {}
    out = {f"{prefix}step": float(last["step"]) if isinstance(last["step"], (int, float)) else float("nan"),
           f"{prefix}attempt": float(last["attempt"])}  # fmt: skip
    if last["goodput"] is not None:
        out[f"{prefix}goodput"] = float(last["goodput"])
    out[f"{prefix}wall_s"] = float(last["wall_s"])
    out[f"{prefix}unattributed_s"] = float(last["unattributed_s"])
    for bucket, seconds in last["seconds"].items():
        out[f"{prefix}{bucket}_s"] = float(seconds)
    return out


def get_telemetry_handle() -> Any:
    """The process's :class:`~lens_rl.export.handle.TelemetryHandle`, or None. A plain global read."""
    return RUNTIME.handle


def telemetry_enabled_in_env() -> bool:
    """True when this process's environment turns telemetry on (never raises; a bad value warns once)."""
    env = os.environ
    try:
        if "OTEL_SDK_DISABLED" in env and parse_bool(env["OTEL_SDK_DISABLED"], "OTEL_SDK_DISABLED"):
            return False
        return parse_bool(env.get(ENV["enabled"], ""), f"enabled (from ${ENV['enabled']})")
    except ValueError as exc:
        warn_once("enabled-env", "lens_rl: telemetry off in this process, bad environment: %s", exc)
        return False


def _warn_about_env(master_config: object = None) -> None:
    """Did-you-mean warnings: an unknown ``LENS_RL_OTEL_*`` variable, a misspelt ``telemetry`` block."""
    for name, close in unknown_env_names():
        hint = f"; did you mean {close}?" if close else ""
        warn_once(f"unknown-env-{name}", "lens_rl: unknown environment variable %s is ignored%s", name, hint)
    near = near_telemetry_key(master_config)
    if near is not None:
        warn_once(f"near-telemetry-{near}", "lens_rl: the master config has no 'telemetry' block but a key %r; "
                  "did you mean 'telemetry'? Telemetry stays off.", near)  # fmt: skip


def _project(name: str, value: str, *, overwrite: bool = False) -> None:
    """Write ``name`` into the environment for workers (``setdefault`` unless ``overwrite``), remembering it."""
    before = os.environ.get(name)
    if before is not None and not overwrite:
        return
    os.environ[name] = value
    RUNTIME.projected.setdefault(name, (value, before))
    RUNTIME.projected[name] = (value, RUNTIME.projected[name][1])


def _forget_projection() -> None:
    """Undo an earlier init's environment writes (those nobody changed since): re-init honours its config."""
    for name, (value, before) in list(RUNTIME.projected.items()):
        if os.environ.get(name) == value:
            if before is None:
                del os.environ[name]
            else:
                os.environ[name] = before
    RUNTIME.projected.clear()


def vllm_native_tracing_requested() -> bool:
    """True when telemetry is on *and* ``vllm_native_tracing`` asks for vLLM's own tracing."""
    try:
        return telemetry_enabled_in_env() and parse_bool(os.environ.get(ENV["vllm_native_tracing"], ""))
    except ValueError:
        return False


# ---------------------------------------------------------------------- driver


def init_telemetry_driver(master_config: object, algorithm: str | None = None) -> Any:
    """Start the driver's telemetry and hand the job's config and identity to workers.

    Call once before ``ray.init()``. Raises ``ValueError`` on a bad config (field, value,
    what is allowed). Returns None when telemetry is disabled. Idempotent. Touches
    ``os.environ`` (``LENS_RL_OTEL_*``, ``TRACEPARENT``: written once, at the end of a
    successful start) and the process-global handle.

    Example::

        handle = lens_rl.init_telemetry_driver(master_config, algorithm="grpo")
        ray.init()                                  # workers inherit the environment
    """
    with RUNTIME.lock:
        if RUNTIME.handle is not None and RUNTIME.handle.role != "lazy":
            return RUNTIME.handle
        _forget_projection()
        _warn_about_env(master_config)
        config = TelemetryConfig.from_master_config(master_config)
        _replace_lazy_handle()
        if not config.enabled:
            RUNTIME.mark_off()
            return None
        config = config.with_run_id()
        if config.endpoint and strip_userinfo(config.endpoint) != config.endpoint:
            warn_once("endpoint-credentials", "lens_rl: the endpoint's credentials are not passed to workers; "
                      "give them headers_file or OTEL_EXPORTER_OTLP_HEADERS on the nodes")  # fmt: skip
        driver = for_driver(master_config, algorithm, config)
        from lens_rl.export.exporters import MissingExtraError  # (the SDK side: imported once telemetry is on)
        from lens_rl.export.handle import TelemetryHandle

        try:
            handle = TelemetryHandle(config, driver.resource, role="driver")
        except MissingExtraError as exc:
            raise ValueError(str(exc)) from exc
        _open_job(handle, driver)
        for name, value in driver.projection.items():
            _project(name, value, overwrite=name in driver.overwrite)
        _activate(handle, "driver")
        for hook in RUNTIME.driver_hooks:
            try:
                hook()
            except Exception as exc:
                internal_error(exc, "driver-hook")
        _log.info("lens_rl: telemetry on (exporter=%s, run_id=%s, %s)", config.exporter, config.run_id,
                  f"trace_dir={config.trace_dir}" if config.exporter == "file"
                  else f"endpoint={mask_url(config.resolved_endpoint)}")  # fmt: skip
        return handle


def _open_job(handle: Any, driver: Any) -> None:
    """Open the job root ``rl.job`` (it ends at shutdown: its duration is the job's) and add its context to
    the workers' environment (``TRACEPARENT``), so every worker joins the job's trace."""
    from opentelemetry import trace

    resource = driver.resource
    root_span = handle.tracer.start_span(
        "rl.job",
        context=propagation.context_from_env(),
        attributes={"rl.run_id": resource["rl.run_id"], "rl.algorithm": resource.get("rl.algorithm", "unknown")},
    )
    RUNTIME.root_span = root_span
    RUNTIME.root_context = trace.set_span_in_context(root_span)
    handle.set_root(root_span.get_span_context().span_id)
    carrier = propagation.carrier_for(RUNTIME.root_context, env_names=True)
    driver.projection.update(carrier)
    driver.overwrite = driver.overwrite | frozenset(carrier)


# ---------------------------------------------------------------------- worker


def init_telemetry_worker(
    rank: int | None = None,
    world_size: int | None = None,
    worker_group: str | None = None,
    resource_attributes: dict[str, Any] | None = None,
) -> Any:
    """Start this worker process's telemetry from its environment. Never raises.

    ``rank``/``world_size`` default to ``RANK``/``WORLD_SIZE``; ``worker_group`` to
    ``LENS_RL_WORKER_GROUP``, else ``worker``. Returns the handle, or None when the
    environment says off or holds a bad value (one warning). Idempotent per process.
    """
    return _init_worker_guarded(rank, world_size, worker_group, resource_attributes, "worker")


def _init_worker_guarded(
    rank: int | None, world_size: int | None, worker_group: str | None, explicit: dict[str, Any] | None, role: str
) -> Any:
    """Under the lock, keep or replace the current handle; never raise (one warning, then off).

    A handle made lazily by a first phase is kept unless this call says something the
    environment did not (rank, world size, group, attributes); then it is replaced.
    """
    try:
        with RUNTIME.lock:
            current = RUNTIME.handle
            says_more = not (rank is None and world_size is None and not worker_group and not explicit)
            if current is not None and (current.role != "lazy" or role == "lazy" or not says_more):
                return current
            _replace_lazy_handle()
            return _init_worker(rank, world_size, worker_group, explicit, role)
    except Exception as exc:  # the boundary: telemetry faults never reach training code
        _warn_once("worker-init", "lens_rl: telemetry off in this worker: %s", exc)
        RUNTIME.mark_off()
        return None


def _init_worker(
    rank: int | None,
    world_size: int | None,
    worker_group: str | None,
    explicit: dict[str, Any] | None,
    role: str,
) -> Any:
    if not telemetry_enabled_in_env():
        RUNTIME.mark_off()
        return None
    _warn_about_env()
    try:
        config = TelemetryConfig.from_env()
    except ValueError as exc:
        _warn_once("worker-config", "lens_rl: telemetry off in this worker, bad environment: %s", exc)
        RUNTIME.mark_off()
        return None
    if not config.enabled:
        RUNTIME.mark_off()
        return None
    config = config.with_run_id()
    problems: list[str] = []
    attrs, has_rank = worker_attributes(
        service_name=config.service_name,
        rank=rank,
        world_size=world_size,
        worker_group=worker_group,
        explicit=explicit,
        problems=problems,
    )
    for problem in problems:
        _warn_once(f"rank-{problem}", "lens_rl: %s (%s rank %s); check the rank and world size passed to this "
                   "worker", problem, attrs["rl.worker_group"], attrs["nv.dl.rank"])  # fmt: skip
    if not has_rank and not problems and not (explicit and "nv.dl.rank" in explicit):
        _warn_once(
            "no-rank",
            "lens_rl: no rank for this worker (pass rank= or set RANK); reporting rank %s",
            attrs["nv.dl.rank"],
        )
    from lens_rl.export.handle import TelemetryHandle

    handle = TelemetryHandle(config, attrs, role=role)
    RUNTIME.root_context = propagation.context_from_env()
    if RUNTIME.root_context is not None:
        from opentelemetry import trace

        handle.root_span_id = trace.get_current_span(RUNTIME.root_context).get_span_context().span_id
    _activate(handle, role)
    return handle


def _lazy_init() -> Any:
    """The runtime's resolver: called by ``RUNTIME.resolve()`` on the first phase of a process.

    The handle it makes has role ``lazy``: an explicit ``init_telemetry_driver`` or
    ``init_telemetry_worker(rank=..., worker_group=...)`` later replaces it, so a phase
    that ran before the real init cannot pin the wrong identity on the process.
    """
    if not telemetry_enabled_in_env():
        return None
    return _init_worker_guarded(None, None, None, None, "lazy")


def _replace_lazy_handle() -> None:
    """Retire a lazily made handle (bounded flush) before an explicit init replaces it."""
    old = RUNTIME.handle
    if old is None:
        return
    RUNTIME.handle = None
    RUNTIME.end_open_phases()
    old.shutdown(1000)


def activate(handle: Any, role: str = "worker") -> None:
    """Make a handle built elsewhere (``lens_rl.testing``) the process's; register the process hooks once."""
    with RUNTIME.lock:
        _activate(handle, role)


def _activate(handle: Any, role: str) -> None:
    from lens_rl.export import providers

    handle.role = role
    RUNTIME.install(handle)
    start_helpers()  # the flush/shutdown helpers, started here: never from a signal handler
    providers.register_once()
    providers.rebind()
    registered = RUNTIME.registered
    if "atexit" not in registered:
        registered.add("atexit")
        atexit.register(_shutdown_at_exit)
    if "fork" not in registered and hasattr(os, "register_at_fork"):
        registered.add("fork")
        os.register_at_fork(after_in_child=_after_fork_in_child)
        import multiprocessing.util

        multiprocessing.util.register_after_fork(_MP_TOKEN, _after_mp_fork)


# ---------------------------------------------------------------------- stopping


def shutdown_telemetry(timeout_ms: int | None = 5000) -> bool:
    """End open lens_rl spans, flush and shut down, returning within ``timeout_ms``.

    True only when every span and metric recorded so far was exported. Idempotent
    (a second call returns the first call's answer at once). Runs at exit, bounded by 3 s.
    """
    timeout_ms = _budget(timeout_ms)
    if RUNTIME.handle is None:
        return True if RUNTIME.last_shutdown is None else RUNTIME.last_shutdown
    return _within(timeout_ms, lambda: _shutdown(timeout_ms))


def _shutdown(timeout_ms: int) -> bool:
    deadline = time.monotonic() + timeout_ms / 1000.0
    hooks_ok = True
    for hook in RUNTIME.shutdown_hooks:  # e.g. Ray workers flushed before the driver closes
        try:
            hooks_ok = bool(hook(max(int((deadline - time.monotonic()) * 1000), 0))) and hooks_ok
        except Exception as exc:
            internal_error(exc, "shutdown-hook")
            hooks_ok = False
    timeout_ms = max(int((deadline - time.monotonic()) * 1000), 0)
    with RUNTIME.lock:
        handle = RUNTIME.handle
        if handle is None:
            return True if RUNTIME.last_shutdown is None else RUNTIME.last_shutdown
        RUNTIME.mark_off()
        RUNTIME.handle = None
        root, RUNTIME.root_span = RUNTIME.root_span, None
    try:
        RUNTIME.end_open_phases()
        if root is not None:
            root.end()
        ok = bool(handle.shutdown(timeout_ms)) and hooks_ok
    except Exception as exc:
        internal_error(exc, "shutdown")
        ok = False
    with RUNTIME.lock:
        _forget_projection()  # the environment is the user's again: a next init reads its own config
    RUNTIME.last_shutdown = ok
    return ok


def _within(timeout_ms: int, work: Any) -> bool:
    """``work()`` on a helper thread, waited for at most ``timeout_ms`` (plus a little slack); False on timeout.

    Flush and shutdown may be called from a signal handler that interrupted the very
    thread holding a lock they need: the helper may block there, the caller never does.
    One call at a time goes to the helpers: a call made while another is still running
    (a signal storm) first waits for that one, within its own budget, so work never piles up.
    """
    if getattr(_CALLER, "depth", 0):
        return False  # a signal handler interrupted this very wait: the outer call answers, this one at once
    _CALLER.depth = 1
    try:
        deadline = time.monotonic() + timeout_ms / 1000.0 + _SLACK_S
        previous = _IN_FLIGHT[0]
        if previous is not None and not previous.finished():
            previous.wait(deadline - time.monotonic())
            if not previous.finished():
                return False
        job = submit(work)
        _IN_FLIGHT[0] = job
        done, result = job.wait(deadline - time.monotonic())
        return bool(done and result)
    except Exception as exc:
        internal_error(exc, "flush")
        return False
    finally:
        _CALLER.depth = 0


def _budget(timeout_ms: int | None) -> int:
    """``timeout_ms`` as a bounded budget: None means the default (5 s), never "forever"."""
    if timeout_ms is None:
        return DEFAULT_TIMEOUT_MS
    try:
        return max(int(timeout_ms), 0)
    except (TypeError, ValueError):
        return DEFAULT_TIMEOUT_MS


def flush_telemetry(timeout_ms: int | None = 5000) -> bool:
    """Export everything recorded so far within ``timeout_ms``, without shutting down.

    Use at step boundaries and before ``ray.kill`` (which skips ``atexit``).
    True only when all of it was exported. Never raises.
    """
    handle = RUNTIME.handle
    if handle is None:
        return True
    budget_ms = _budget(timeout_ms)
    return _within(budget_ms, lambda: handle.force_flush(budget_ms))


def _shutdown_at_exit() -> None:
    try:
        shutdown_telemetry(ATEXIT_TIMEOUT_MS)
    except Exception as exc:
        internal_error(exc, "atexit")


# ---------------------------------------------------------------------- fork


class _Token:
    """A long-lived object for ``multiprocessing.util.register_after_fork`` (it keys a WeakValueDict)."""


_MP_TOKEN = _Token()


def _after_fork_in_child() -> None:
    old = RUNTIME.handle
    RUNTIME.reset(after_fork=True)
    if old is not None:  # the SDK restarts its metric thread in the child: stop the parent's copy
        old.after_fork()


def _after_mp_fork(_token: object) -> None:
    import multiprocessing.util

    multiprocessing.util.Finalize(None, _shutdown_at_exit, exitpriority=100)



def _init_from_decorator(rank: Any, world_size: Any, worker_group: Any) -> Any:
    """``RUNTIME.worker_init``: what ``traced_worker_init`` calls before a constructor's body runs."""
    if not telemetry_enabled_in_env():
        if RUNTIME.handle is None:
            RUNTIME.resolve()
        return None
    return init_telemetry_worker(rank=rank, world_size=world_size, worker_group=worker_group)


RUNTIME.resolver = _lazy_init
RUNTIME.worker_init = _init_from_decorator
