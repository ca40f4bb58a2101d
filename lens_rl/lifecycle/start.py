"""Starting telemetry: the driver (config validated, identity computed, the job root opened, the workers'
environment written) and each worker (from its environment alone; never raises), lazily on a first phase
too, and what a forked child does (starts afresh under its own pid)."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import sys
import time
from typing import Any

import lens_rl.lifecycle.launched as launched
import lens_rl.propagation as propagation
from lens_rl._errors import MissingExtraError, internal_error, warn_once
from lens_rl._runtime import RUNTIME, Handle
from lens_rl.config import TelemetryConfig, mask_url, strip_userinfo
from lens_rl.export.bounded import start_helpers
from lens_rl.identity import RUN_ID, DriverIdentity, for_driver, launch_time_ns, worker_attributes
from lens_rl.lifecycle.environ import forget_projection, project, telemetry_enabled_in_env, warn_about_env
from lens_rl.lifecycle.stop import record_crash, shutdown_at_exit

__all__ = ["activate", "get_telemetry_handle", "init_telemetry_driver", "init_telemetry_worker"]

_log = logging.getLogger("lens_rl")


def get_telemetry_handle() -> Handle | None:
    """The process's :class:`~lens_rl.export.handle.TelemetryHandle`, or None. A plain global read."""
    return RUNTIME.handle


def init_telemetry_driver(master_config: object, algorithm: str | None = None) -> Handle | None:
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
        forget_projection()
        warn_about_env(master_config)
        config = TelemetryConfig.from_master_config(master_config)
        lazy = RUNTIME.handle
        kept = _replace_lazy_handle()
        if not config.enabled:
            RUNTIME.mark_off()
            return None
        config = _with_run_id(config, kept)
        _warn_about_endpoint_credentials(config)
        driver = _identify_driver(master_config, algorithm, config)
        handle = _driver_handle(config, driver.resource)
        _open_job(handle, driver)  # (first: the header names the job root)
        if lazy is not None and launched.root_ids() is not None:
            handle.adopt(lazy)  # lens-rl run's loop: the phases before its first step are the driver's too
        for name, value in driver.projection.items():
            project(name, value, overwrite=name in driver.overwrite)
        _activate(handle, "driver")
        _run_driver_hooks()
        _log_started(config)
        return handle


def _warn_about_endpoint_credentials(config: TelemetryConfig) -> None:
    """Once: credentials in the endpoint's URL stay on the driver (workers get the URL without them)."""
    if config.endpoint and strip_userinfo(config.endpoint) != config.endpoint:
        warn_once(
            "endpoint-credentials",
            "lens_rl: the endpoint's credentials are not passed to workers; "
            "give them headers_file or OTEL_EXPORTER_OTLP_HEADERS on the nodes",
        )


def _identify_driver(master_config: object, algorithm: str | None, config: TelemetryConfig) -> DriverIdentity:
    """The driver's identity (resource, projection for workers, launch time); under ``lens-rl run`` this
    process claims the driver's role first (a dead driver's successor: the next attempt)."""
    claimed = launched.claim()
    driver = for_driver(master_config, algorithm, config)
    if claimed:
        # the launch lens-rl run checked against earlier attempts' files (not this attempt's, written
        # before the loop began); a successor's attempt starts at its own start
        driver.launch = None if launched.took_over() else launch_time_ns(os.environ, time.time_ns())
    return driver


def _driver_handle(config: TelemetryConfig, resource: Any) -> Handle:
    """The driver's handle; a missing extra (the exporter's package) is a bad config: ``ValueError``."""
    from lens_rl.export.handle import TelemetryHandle

    try:
        return TelemetryHandle(config, resource, role="driver")
    except MissingExtraError as exc:
        raise ValueError(str(exc)) from exc


def _run_driver_hooks() -> None:
    """What the package's face handed in for a driver's start (integrations), each behind the boundary."""
    for hook in RUNTIME.driver_hooks:
        try:
            hook()
        except Exception as exc:
            internal_error(exc, "driver-hook")


def _log_started(config: TelemetryConfig) -> None:
    _log.info(
        "lens_rl: telemetry on (exporter=%s, run_id=%s, %s)",
        config.exporter,
        config.run_id,
        f"trace_dir={config.trace_dir}"
        if config.exporter == "file"
        else f"endpoint={mask_url(config.resolved_endpoint)}",
    )


def _open_job(handle: Handle, driver: Any) -> None:
    """Open the job root ``rl.job`` (it ends at shutdown: its duration is the attempt's) and add its context
    to the workers' environment (``TRACEPARENT``), so every worker joins the job's trace. With a launch time,
    ``rl.job`` starts there and a ``launch`` span (overhead) covers it to now: queueing and start-up are part
    of the attempt. An uncaught exception from now on is recorded on ``rl.job`` (:func:`_record_crash`)."""
    from opentelemetry import trace

    from lens_rl.export.ids import pinned_ids

    resource = driver.resource
    launch = driver.launch
    parent = propagation.context_from_env()
    ids = launched.root_ids()  # under lens-rl run: the root's ids, fixed before any process of the job started
    if ids is not None:
        parent = propagation.extract({"traceparent": ids[2]} if ids[2] else None)
    with pinned_ids(ids[0], ids[1]) if ids is not None else contextlib.nullcontext():
        root_span = handle.tracer.start_span(
            "rl.job",
            context=parent,
            attributes={
                "rl.run_id": resource["rl.run_id"],
                "rl.algorithm": resource.get("rl.algorithm", "unknown"),
                "rl.attempt": resource.get("rl.attempt", 0),
            },
            start_time=None if launch is None else launch[0],
        )
    RUNTIME.root_span = root_span
    RUNTIME.root_context = trace.set_span_in_context(root_span)
    handle.set_root(root_span.get_span_context().span_id)
    if launch is not None:
        span = handle.tracer.start_span(
            "launch",
            context=RUNTIME.root_context,
            attributes={"rl.bucket": "overhead", "rl.launch.source": launch[1]},
            start_time=launch[0],
        )
        span.end()
    carrier = propagation.carrier_for(RUNTIME.root_context, env_names=True)
    driver.projection.update(carrier)
    driver.overwrite = driver.overwrite | frozenset(carrier)
    if sys.excepthook is not _record_crash:
        global _previous_excepthook
        _previous_excepthook = sys.excepthook
        sys.excepthook = _record_crash


_previous_excepthook: Any = sys.__excepthook__


def _record_crash(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    """``sys.excepthook`` on the driver: an uncaught exception ends the attempt in ``error``, recorded on the
    open ``rl.job``; then the hook that was there runs as before (exit ends ``rl.job`` and flushes, as ever)."""
    record_crash(value)
    _previous_excepthook(kind, value, tb)


def init_telemetry_worker(
    rank: int | None = None,
    world_size: int | None = None,
    worker_group: str | None = None,
    resource_attributes: dict[str, Any] | None = None,
) -> Handle | None:
    """Start this worker process's telemetry from its environment. Never raises.

    ``rank``/``world_size`` default to ``RANK``/``WORLD_SIZE``; ``worker_group`` to
    ``LENS_RL_WORKER_GROUP``, else ``worker``. Returns the handle, or None when the
    environment says off or holds a bad value (one warning). Idempotent per process.
    """
    return _init_worker_guarded(rank, world_size, worker_group, resource_attributes, "worker")


def _init_worker_guarded(
    rank: int | None, world_size: int | None, worker_group: str | None, explicit: dict[str, Any] | None, role: str
) -> Handle | None:
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
            kept = _replace_lazy_handle()
            return _init_worker(rank, world_size, worker_group, explicit, role, kept)
    except Exception as exc:  # the boundary: telemetry faults never reach training code
        warn_once("worker-init", "lens_rl: telemetry off in this worker: %s", exc)
        RUNTIME.mark_off()
        return None


def _init_worker(
    rank: int | None,
    world_size: int | None,
    worker_group: str | None,
    explicit: dict[str, Any] | None,
    role: str,
    kept_run_id: str | None = None,
) -> Handle | None:
    if not telemetry_enabled_in_env():
        RUNTIME.mark_off()
        return None
    warn_about_env()
    try:
        config = TelemetryConfig.from_env()
    except ValueError as exc:
        warn_once("worker-config", "lens_rl: telemetry off in this worker, bad environment: %s", exc)
        RUNTIME.mark_off()
        return None
    if not config.enabled:
        RUNTIME.mark_off()
        return None
    config = _with_run_id(config, kept_run_id)
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
        warn_once(
            f"rank-{problem}",
            "lens_rl: %s (%s rank %s); check the rank and world size passed to this worker",
            problem,
            attrs["rl.worker_group"],
            attrs["nv.dl.rank"],
        )
    # (a process lens-rl run started is told apart by its pid: no line in the user's terminal)
    if not has_rank and not problems and not (explicit and "nv.dl.rank" in explicit) and not launched.under_run():
        warn_once(
            "no-rank",
            "lens_rl: no rank for this worker (pass rank= or set RANK); reporting rank %s",
            attrs["nv.dl.rank"],
        )
    from lens_rl.export.handle import TelemetryHandle

    attrs.setdefault(RUN_ID, config.run_id)  # (the run its spans land in: a worker started from its environment alone)
    handle = TelemetryHandle(config, attrs, role=role)
    RUNTIME.root_context = propagation.context_from_env()
    if RUNTIME.root_context is not None:
        from opentelemetry import trace

        handle.root_span_id = trace.get_current_span(RUNTIME.root_context).get_span_context().span_id
    _activate(handle, role)
    return handle


def _lazy_init() -> Handle | None:
    """The runtime's resolver: called by ``RUNTIME.resolve()`` on the first phase of a process.

    The handle it makes has role ``lazy``: an explicit ``init_telemetry_driver`` or
    ``init_telemetry_worker(rank=..., worker_group=...)`` later replaces it, so a phase
    that ran before the real init cannot pin the wrong identity on the process.
    """
    if not telemetry_enabled_in_env():
        return None
    return _init_worker_guarded(None, None, None, None, "lazy")


def _replace_lazy_handle() -> str | None:
    """Retire a lazily made handle (bounded flush) before an explicit init replaces it; its run id, which the
    explicit init keeps unless its config names one (one process, one run folder)."""
    old = RUNTIME.handle
    if old is None:
        return None
    RUNTIME.handle = None
    RUNTIME.end_open_phases()
    old.shutdown(1000)
    return getattr(old.config, "run_id", None) or None


def _with_run_id(config: TelemetryConfig, kept: str | None) -> TelemetryConfig:
    """``config`` with its run id: its own (config, env); else the retired lazy handle's ``kept``; else
    ``SLURM_JOB_ID`` or a new random one."""
    if config.run_id or not kept:
        return config.with_run_id()
    return dataclasses.replace(config, run_id=kept)


def activate(handle: Handle, role: str = "worker") -> None:
    """Make a handle built elsewhere (``lens_rl.testing``) the process's; register the process hooks once."""
    with RUNTIME.lock:
        _activate(handle, role)


def _activate(handle: Handle, role: str) -> None:
    from lens_rl.export import providers

    handle.role = role
    # a child lens-rl run wove (a Pool worker, a Ray actor) may be killed without atexit once it replied:
    # its ended spans are written out whenever its last open phase ends, to the store's file (a local write;
    # never a network round trip per phase, which would stall a rollout server's event loop)
    handle.flush_idle = role != "driver" and launched.under_run() and handle.config.exporter == "file"
    RUNTIME.install(handle)
    start_helpers()  # the flush/shutdown helpers, started here: never from a signal handler
    providers.register_once()
    providers.rebind()
    registered = RUNTIME.registered
    if "atexit" not in registered:
        registered.add("atexit")
        atexit.register(shutdown_at_exit)
    if "fork" not in registered:  # a multiprocessing child skips atexit: it shuts down through its Finalize
        registered.add("fork")
        import multiprocessing.util

        multiprocessing.util.register_after_fork(_MP_TOKEN, _after_mp_fork)
    for hook in RUNTIME.activate_hooks:  # (the configured frameworks woven: handed in by the package's face)
        try:
            hook(handle)
        except Exception as exc:
            internal_error(exc, "activate-hook")
    _start_devices(handle)
    _profile_windows(handle)


def _profile_windows(handle: Any) -> None:
    """The profiler windows' step hook (``lens_rl.devices.profile``): telemetry on, so requests are looked at."""
    try:
        from lens_rl.devices.profile import install

        install(handle)
    except Exception as exc:
        internal_error(exc, "profile")


def _start_devices(handle: Any) -> None:
    """This process's part in sampling the host's GPUs (``lens_rl.devices``: pynvml is imported there, in
    the sampler's own thread, only now that telemetry is on)."""
    if not getattr(getattr(handle, "config", None), "gpu_sample_hz", 0):
        return
    try:
        from lens_rl.devices import gpu

        gpu.start(handle)
    except Exception as exc:
        internal_error(exc, "gpu-sampler")


class _Token:
    """A long-lived object for ``multiprocessing.util.register_after_fork`` (it keys a WeakValueDict)."""


_MP_TOKEN = _Token()


def _after_mp_fork(_token: object) -> None:
    import multiprocessing.util

    multiprocessing.util.Finalize(None, shutdown_at_exit, exitpriority=100)


def _init_from_decorator(rank: Any, world_size: Any, worker_group: Any) -> Handle | None:
    """``RUNTIME.worker_init``: what ``traced_worker_init`` calls before a constructor's body runs."""
    if not telemetry_enabled_in_env():
        if RUNTIME.handle is None:
            RUNTIME.resolve()
        return None
    return init_telemetry_worker(rank=rank, world_size=world_size, worker_group=worker_group)


RUNTIME.resolver = _lazy_init
RUNTIME.worker_init = _init_from_decorator
