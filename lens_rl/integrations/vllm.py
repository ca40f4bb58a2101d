"""vLLM's own tracing, inside the job: its request spans in the job's trace, its store and its goodput.

lens_rl's phases around generation need nothing from vLLM. vLLM also traces each request (an
``llm_request`` span with ``gen_ai.*`` latencies and token counts) and its engine. When telemetry and
``telemetry.vllm_native_tracing`` are on, :func:`vllm_tracing_kwargs` returns the engine arguments that
make it trace into this job, and prepares the environment vLLM's processes read:

* ``otlp_traces_endpoint``: the job's collector with ``exporter: otlp``; with the embedded file store, a
  loopback receiver this process starts once (:mod:`lens_rl.integrations.vllm_receiver`) that writes
  every vLLM process's spans into the store, one file per process; it stops at ``shutdown_telemetry``;
* ``disable_log_stats=False``: vLLM computes a request's span from its stats; without them its tracing
  fails the first finished request (``LLM`` disables them by default);
* ``collect_detailed_traces`` only when asked for (``detail=``), from the modules the installed vLLM knows;
* the environment (before the engine starts its processes, which inherit it), where the user did not
  set it: ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` (vLLM's exporter defaults to gRPC; the receiver is HTTP),
  ``OTEL_SERVICE_NAME`` (``<service_name>-vllm``), ``OTEL_RESOURCE_ATTRIBUTES`` gaining the caller's
  ``rl.run_id``, ``rl.attempt``, ``rl.worker_group`` and ``nv.dl.rank`` where it lacks them, and
  ``OTEL_BSP_SCHEDULE_DELAY`` (500 ms: vLLM kills its engine core and workers at shutdown, so they
  export as they go). A value the user set is never touched. lens_rl remembers what it wrote (in this
  process, and in ``LENS_RL_OTEL_VLLM_ENV`` for the processes it starts): a value still lens_rl's is
  written again by the next call (another run, or a worker of another group or rank that inherited it),
  never taken for the user's, and ``shutdown_telemetry`` puts the environment back as the user had it.
  These variables stay set until then (other OpenTelemetry SDKs the process starts read them too);
  lens_rl's own providers take their identity from lens_rl's config, never from what it gave vLLM.

The traces protocol the user set is theirs: vLLM exports with it, or not at all. vLLM takes only
``grpc`` and ``http/protobuf`` (any other value, such as ``http/json``, makes its engine fail to start),
and the file store's loopback receiver takes only ``http/protobuf``. So a value set before the call that
vLLM cannot use, or (with the file store) any value but ``http/protobuf``, gives ``{}`` and one warning
naming the variable and its value: vLLM runs untraced, as it would without lens_rl. With ``exporter:
otlp`` a ``grpc`` or ``http/protobuf`` the user set is used, and the endpoint follows it (gRPC: the bare
endpoint; HTTP: its ``/v1/traces``).

vLLM's spans are children of the caller's span when its context travels: the offline ``LLM`` makes
its request spans in the calling thread, under the current phase (it takes no per-request context);
``AsyncLLM.generate`` takes ``trace_headers=lens_rl.inject_context()``; the OpenAI-compatible server
takes the ``traceparent`` an instrumented aiohttp client stamps (``instrument_aiohttp_client``). In the
calling process vLLM's spans go through lens_rl's provider (OpenTelemetry's global one), into this
process's own file; its engine-core and worker processes export to the endpoint.

Merge it with your own engine arguments (``{**mine, **vllm_tracing_kwargs()}``): it sets
``disable_log_stats``, which vLLM's tracing cannot do without.

``{}`` (and no environment change) when off, with ``traces_enabled: false`` (the job records no trace for
vLLM's spans to join: they would be orphans in the store, or at the collector, that no phase parents and no
goodput reads), when vLLM is not installed, when its version cannot trace
(one warning), with the ``console`` / ``none`` exporter, or when the traces protocol the user set cannot
work (one warning). It never makes an engine fail that would
have run without it: any fault of its own is logged and answered with ``{}``.

Example::

    llm = vllm.LLM(model=name, **vllm_tracing_kwargs())
    with lens_rl.traced_phase("generate", bucket="productive", step=step):
        outputs = llm.generate(prompts, params)
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote

from lens_rl._errors import internal_error, warn_once
from lens_rl._runtime import RUNTIME
from lens_rl.config import VLLM_ENV, users_environ

__all__ = [
    "BSP_DELAY_MS",
    "RESOURCE_KEYS",
    "stop_receiver",
    "vllm_server_args",
    "vllm_tracing_env",
    "vllm_tracing_kwargs",
]

#: The caller's resource keys vLLM's processes are given through ``OTEL_RESOURCE_ATTRIBUTES``.
RESOURCE_KEYS = ("rl.run_id", "rl.attempt", "rl.worker_group", "nv.dl.rank")
_DETAIL_MODULES = ("model", "worker", "all")  # vLLM's DetailedTraceModules
_STOP_BUDGET_MS = 2000
#: ``OTEL_BSP_SCHEDULE_DELAY`` for vLLM's processes (ms; the SDK's default is 5000).
BSP_DELAY_MS = "500"
_PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
_VLLM_PROTOCOLS = ("grpc", "http/protobuf")  # what vLLM's get_span_exporter takes (else its engine fails)

_LOCK = threading.Lock()
_RECEIVER: list[Any] = [None]  # this process's loopback receiver, once started


def vllm_tracing_kwargs(detail: str | None = None) -> dict[str, object]:
    """Engine keyword arguments that make vLLM trace into this job (and its environment set), or ``{}``.

    ``detail``: vLLM's ``collect_detailed_traces`` modules, comma-separated (``model``, ``worker``,
    ``all``); unknown ones are left out with a warning. Starts the loopback receiver with the file store.

    ``{}`` when telemetry or ``vllm_native_tracing`` is off, and with ``traces_enabled: false``: the job
    then has no trace for vLLM's spans to join, so vLLM is not told to trace into lens_rl's receiver or
    collector at all (no receiver started, no environment written).

    ``{}`` and one warning (vLLM runs untraced) when ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` is set to a
    value vLLM cannot export with (anything but ``grpc`` / ``http/protobuf``, e.g. ``http/json``, which
    would stop its engine from starting), or, with the file store, to anything but ``http/protobuf`` (the
    loopback receiver's). With ``exporter: otlp`` a ``grpc`` set by the user is used. The variables it
    writes are lens_rl's until the user changes them: the next call (another run, another worker) rewrites
    them, and ``shutdown_telemetry`` removes them.

    Example::

        engine = AsyncLLM.from_engine_args(AsyncEngineArgs(model=name, **vllm_tracing_kwargs()))
        async for out in engine.generate(prompt, params, request_id, trace_headers=lens_rl.inject_context()):
            ...
    """
    try:
        return _kwargs(detail)
    except Exception as exc:  # never an engine's failure: it runs untraced
        internal_error(exc, "vllm-tracing")
        return {}


def vllm_server_args(kwargs: Mapping[str, object] | None = None) -> list[str]:
    """The OpenAI-compatible server's command-line flags for :func:`vllm_tracing_kwargs` (or ``kwargs``).

    The server logs stats by default (``disable_log_stats=False`` is no flag). Example::

        subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", *vllm_server_args()])
    """
    kwargs = vllm_tracing_kwargs() if kwargs is None else kwargs
    args: list[str] = []
    if kwargs.get("otlp_traces_endpoint"):
        args += ["--otlp-traces-endpoint", str(kwargs["otlp_traces_endpoint"])]
    detail = kwargs.get("collect_detailed_traces")
    if detail:
        args += ["--collect-detailed-traces", ",".join(map(str, detail))]  # type: ignore[call-overload]
    if kwargs.get("disable_log_stats") is True:
        args.append("--disable-log-stats")
    return args


def vllm_tracing_env() -> dict[str, str]:
    """The environment :func:`vllm_tracing_kwargs` sets for vLLM's processes (as it stands now), or ``{}``."""
    names = (
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_BSP_SCHEDULE_DELAY",
    )
    return {name: os.environ[name] for name in names if name in os.environ} if _tracing_wanted() else {}


def _tracing_wanted() -> bool:
    from lens_rl.lifecycle import vllm_native_tracing_requested

    return vllm_native_tracing_requested()


def _kwargs(detail: str | None) -> dict[str, object]:
    if not _tracing_wanted():
        return {}
    if not _vllm_can_trace():
        return {}
    handle = RUNTIME.resolve()
    if handle is None:
        return {}
    config = handle.config
    if not config.traces_enabled:  # no trace of the job's for vLLM's spans to join (and no receiver for them)
        return {}
    resource = dict(handle.resource.attributes)
    # (a worker's resource carries the run id only where the driver's environment handed it over; started
    # from LENS_RL_OTEL_RUN_ID alone, the run is its config's: vLLM's processes get it either way)
    if resource.get("rl.run_id") in (None, "") and config.run_id:
        resource["rl.run_id"] = str(config.run_id)
    if config.exporter not in ("otlp", "file"):
        warn_once("vllm-exporter", "lens_rl: vLLM's tracing needs the file or otlp exporter (not %s)", config.exporter)
        return {}
    users = users_environ(os.environ)
    preset = users.get(_PROTOCOL_ENV)
    if preset is not None and preset not in _VLLM_PROTOCOLS:
        warn_once(
            "vllm-protocol",
            "lens_rl: %s=%s is set, which vLLM cannot export with: vLLM runs untraced (set it to grpc or "
            "http/protobuf, or unset it, to trace vLLM)",
            _PROTOCOL_ENV,
            preset,
        )
        return {}
    if config.exporter == "otlp":
        protocol = preset or config.protocol
        endpoint = config.resolved_endpoint
        if protocol != "grpc":
            endpoint = endpoint.rstrip("/") + "/v1/traces"
    else:
        if preset not in (None, "http/protobuf"):
            warn_once(
                "vllm-protocol",
                "lens_rl: %s=%s is set, but lens_rl's loopback receiver (the file store) takes http/protobuf "
                "only: vLLM runs untraced (unset it, or set it to http/protobuf, to trace vLLM into the store)",
                _PROTOCOL_ENV,
                preset,
            )
            return {}
        protocol = "http/protobuf"
        endpoint = _receiver(config.trace_dir, config.run_id or "run", resource).endpoint
    _set_env(users, protocol, f"{config.service_name}-vllm", resource)
    out: dict[str, object] = {"otlp_traces_endpoint": endpoint, "disable_log_stats": False}
    if detail:
        modules = [part.strip() for part in detail.split(",") if part.strip()]
        unknown = [m for m in modules if m not in _DETAIL_MODULES]
        if unknown:
            warn_once(
                "vllm-detail", "lens_rl: vLLM knows no detailed traces of %s (known: %s)", unknown, _DETAIL_MODULES
            )
        modules = [m for m in modules if m in _DETAIL_MODULES]
        if modules:
            out["collect_detailed_traces"] = modules
    return out


def _vllm_can_trace() -> bool:
    """vLLM is installed and its tracing can run here (its OpenTelemetry packages import); one warning if not."""
    import importlib
    import importlib.util

    try:
        if importlib.util.find_spec("vllm") is None:
            warn_once("vllm-missing", "lens_rl: vllm_native_tracing is on but vLLM is not installed")
            return False
        tracing = importlib.import_module("vllm.tracing")
    except Exception as exc:
        warn_once("vllm-no-tracing", "lens_rl: this vLLM has no tracing lens_rl can use (%r): running untraced", exc)
        return False
    available = getattr(tracing, "is_otel_available", None)
    if available is None or not available():
        warn_once(
            "vllm-no-tracing",
            "lens_rl: this vLLM cannot trace (no vllm.tracing.is_otel_available, or its OpenTelemetry "
            "exporters, gRPC and HTTP, do not import): running untraced",
        )
        return False
    return True


def _set_env(users: Mapping[str, str], protocol: str, service_name: str, resource: Mapping[str, Any]) -> None:
    """Write vLLM's variables where ``users`` (the environment as the user set it) lacks them, over any value
    lens_rl wrote before (this process's or a parent's), and remember them (:data:`VLLM_ENV`)."""
    from lens_rl.lifecycle.environ import project

    wanted = {
        _PROTOCOL_ENV: protocol,
        "OTEL_SERVICE_NAME": service_name,
        # vLLM's front-end kills its engine core and workers at shutdown (no grace with the server's default):
        # their batch processors export every half second, so what they recorded has left before that.
        "OTEL_BSP_SCHEDULE_DELAY": BSP_DELAY_MS,
    }
    marks: dict[str, list[str | None]] = {}
    for name, value in wanted.items():
        if name not in users:
            marks[name] = [value, None]
    before = users.get("OTEL_RESOURCE_ATTRIBUTES")
    merged = merged_resource_env(before or "", resource)
    if merged != (before or ""):
        marks["OTEL_RESOURCE_ATTRIBUTES"] = [merged, before]
    for name, mark in marks.items():
        project(name, str(mark[0]), overwrite=True)  # (shutdown_telemetry puts back what was there)
    for name in wanted.keys() | {"OTEL_RESOURCE_ATTRIBUTES"}:
        if name not in marks and os.environ.get(name) != users.get(name):  # lens_rl's old value: the user's again
            if name in users:
                project(name, users[name], overwrite=True)
            else:
                os.environ.pop(name, None)
    project(VLLM_ENV, json.dumps(marks, sort_keys=True), overwrite=True)


def merged_resource_env(current: str, resource: Mapping[str, Any]) -> str:
    """``OTEL_RESOURCE_ATTRIBUTES`` (``k=v,...``, values percent-encoded) gaining :data:`RESOURCE_KEYS` of
    ``resource`` it lacks: a key already there keeps its value (setdefault, key by key)."""
    items = [item for item in current.split(",") if item.strip()]
    present = {unquote(item.split("=", 1)[0].strip()) for item in items if "=" in item}
    for key in RESOURCE_KEYS:
        if key in resource and key not in present:
            items.append(f"{key}={quote(str(resource[key]), safe='')}")
    return ",".join(items)


def _receiver(trace_dir: str, run_id: str, resource: Mapping[str, Any]) -> Any:
    """This process's loopback receiver, started on first use (and again after a shutdown stopped it)."""
    with _LOCK:
        rx = _RECEIVER[0]
        if rx is not None and not rx.closed and rx.run_id == run_id and rx.trace_dir == trace_dir:
            return rx
        from lens_rl.integrations.vllm_receiver import StoreReceiver

        if rx is not None:
            rx.close(timeout_s=_STOP_BUDGET_MS / 1000)
        rx = _RECEIVER[0] = StoreReceiver(trace_dir, run_id, resource)
        if "vllm-receiver" not in RUNTIME.registered:
            RUNTIME.registered.add("vllm-receiver")
            RUNTIME.shutdown_hooks.append(stop_receiver)
            RUNTIME.reset_hooks.append(_forget_receiver)
        return rx


def stop_receiver(timeout_ms: int = _STOP_BUDGET_MS) -> bool:
    """Stop the loopback receiver, if one runs, within ``timeout_ms`` (``shutdown_telemetry`` calls it).

    True when it stopped in time (or none ran). Repeats across vLLM's processes are warned about here.
    """
    with _LOCK:
        rx, _RECEIVER[0] = _RECEIVER[0], None
    if rx is None:
        return True
    ok = bool(rx.close(timeout_s=min(max(timeout_ms, 0), _STOP_BUDGET_MS) / 1000))
    return ok


def _forget_receiver(after_fork: bool = False) -> None:
    """On a runtime reset (tests, a forked child: ``after_fork``, as every reset hook is called): stop this
    process's receiver, or forget the parent's."""
    rx, _RECEIVER[0] = _RECEIVER[0], None
    if rx is not None:
        rx.close(timeout_s=0.5)  # a no-op in a forked child: the server and files are the parent's
