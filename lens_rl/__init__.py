"""lens_rl: OpenTelemetry traces, metrics and goodput for distributed RL post-training jobs.

Free when off (no OpenTelemetry, Ray or aiohttp is imported by ``import lens_rl``),
one switch when on (``telemetry.enabled: true``), and never a fault in the job.

Example::

    import lens_rl

    lens_rl.init_telemetry_driver(master_config, algorithm="grpo")
    with lens_rl.traced_phase("generation", step=0):
        ...
    lens_rl.shutdown_telemetry()
"""

from __future__ import annotations

import os as _os
from typing import TYPE_CHECKING, Any

from lens_rl._runtime import RUNTIME as _RUNTIME
from lens_rl._runtime import Handle as _Handle
from lens_rl._version import __version__
from lens_rl.buckets import DEFAULT_PHASE_BUCKETS, Bucket
from lens_rl.config import TelemetryConfig
from lens_rl.integrations import install_driver_hooks as _install_driver_hooks
from lens_rl.integrations.aiohttp import instrument_aiohttp_client
from lens_rl.lifecycle import (
    flush_telemetry,
    get_telemetry_handle,
    init_telemetry_driver,
    init_telemetry_worker,
    shutdown_telemetry,
    telemetry_enabled_in_env,
    vllm_native_tracing_requested,
)
from lens_rl.propagation import attach_context, inject_context
from lens_rl.record.phases import Phase, traced_phase
from lens_rl.record.scopes import with_bucket
from lens_rl.record.spans import current_span
from lens_rl.record.steps import step_goodput, step_metrics
from lens_rl.record.versions import set_weight_version
from lens_rl.record.worker_init import traced_worker_init

if TYPE_CHECKING:
    from lens_rl.export.handle import TelemetryHandle

# Integrations sit above lifecycle: the driver's start is handed what they need (no upward import).
if _install_driver_hooks not in _RUNTIME.driver_hooks:
    _RUNTIME.driver_hooks.append(_install_driver_hooks)


def _weave_configured(handle: _Handle) -> None:
    """Every start of telemetry (driver, worker, lazy) weaves what its config's ``instrument`` names;
    ``lens_rl.frameworks`` (above setup) is imported only then: ``import lens_rl`` stays light."""
    if handle.config.instrument:
        from lens_rl.frameworks import weave_configured

        weave_configured(handle)


if _weave_configured not in _RUNTIME.activate_hooks:
    _RUNTIME.activate_hooks.append(_weave_configured)

if _os.environ.get("LENS_RL_RUN_DRIVER_CLAIM"):  # under lens-rl run: its bootstrap's part, should it have been lost
    from lens_rl.frameworks._bootstrap import without_site as _without_site

    _without_site()

__all__ = [
    "Bucket",
    "DEFAULT_PHASE_BUCKETS",
    "Phase",
    "TelemetryConfig",
    "TelemetryHandle",
    "__version__",
    "attach_context",
    "current_span",
    "flush_telemetry",
    "get_telemetry_handle",
    "init_telemetry_driver",
    "init_telemetry_worker",
    "inject_context",
    "instrument",
    "instrument_aiohttp_client",
    "set_weight_version",
    "shutdown_telemetry",
    "step_goodput",
    "step_metrics",
    "telemetry_enabled_in_env",
    "traced_phase",
    "traced_worker_init",
    "uninstrument",
    "vllm_native_tracing_requested",
    "with_bucket",
]


def instrument(*names: str) -> list[str]:
    """Weave lens_rl's phases into the named frameworks' own timers; no names: every supported one installed.

    ``trl``, ``transformers``, ``verl``, ``nemo_rl``, ``skyrl``, ``openrlhf``. Works before or after the
    framework is imported; idempotent; returns the names woven. While telemetry is off a woven timer costs
    about one flag check a use. See ``docs/frameworks.md`` for what each framework gives.

    Example::

        lens_rl.init_telemetry_driver(config, algorithm="grpo")
        lens_rl.instrument("trl")        # ['transformers', 'trl']
        trainer.train()                  # each optimizer step an umbrella, TRL's profiled blocks its phases
    """
    from lens_rl.frameworks import instrument as _instrument  # (imported on first use: import lens_rl stays light)

    return _instrument(*names)


def uninstrument(*names: str) -> list[str]:
    """Remove lens_rl's own wrappers from the named frameworks (none: every woven one); any other tool's stay."""
    from lens_rl.frameworks import uninstrument as _uninstrument

    return _uninstrument(*names)


def __getattr__(name: str) -> Any:
    # TelemetryHandle lives over the OpenTelemetry SDK: import it only when asked for.
    if name == "TelemetryHandle":
        from lens_rl.export.handle import TelemetryHandle

        return TelemetryHandle
    raise AttributeError(f"module 'lens_rl' has no attribute {name!r}")
