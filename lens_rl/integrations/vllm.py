"""vLLM's own OTLP tracing, switched on from lens_rl's resolved config.

lens_rl's spans around generation need nothing from vLLM. vLLM can also export its
engine's internal spans; :func:`vllm_tracing_kwargs` returns the engine arguments that
turn that on (``otlp_traces_endpoint``, ``collect_detailed_traces``) when
``telemetry.vllm_native_tracing`` *and* the master switch are on, else ``{}``;
:func:`vllm_tracing_env` the environment vLLM's exporter reads for its protocol.
They correlate with lens_rl's trace through the shared run id / resource, not as
parent and child.

Example::

    llm = vllm.LLM(model=name, **vllm_tracing_kwargs())
"""

from __future__ import annotations

from lens_rl.config import TelemetryConfig
from lens_rl.lifecycle import vllm_native_tracing_requested

__all__ = ["vllm_tracing_env", "vllm_tracing_kwargs"]


def _config() -> TelemetryConfig | None:
    if not vllm_native_tracing_requested():
        return None
    try:
        return TelemetryConfig.from_env()
    except ValueError:
        return None


def vllm_tracing_kwargs(detail: str = "all") -> dict[str, object]:
    """Engine keyword arguments for vLLM's native tracing, or ``{}`` when not requested.

    ``detail`` is vLLM's ``collect_detailed_traces`` module list (``model``, ``worker``, ``all``).
    """
    config = _config()
    if config is None:
        return {}
    endpoint = config.resolved_endpoint
    if config.protocol != "grpc":
        endpoint += "/v1/traces"
    return {"otlp_traces_endpoint": endpoint, "collect_detailed_traces": [part.strip() for part in detail.split(",")]}


def vllm_tracing_env() -> dict[str, str]:
    """Environment for vLLM's exporter (its protocol and service name), or ``{}``."""
    config = _config()
    if config is None:
        return {}
    return {
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": config.protocol,
        "OTEL_SERVICE_NAME": f"{config.service_name}-vllm",
    }
