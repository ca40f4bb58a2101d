"""The devices floor: what lens_rl reads from the GPUs, beside the clock.

- the GPU sampler (NVML, device-level queries only, one per host and run), its sample files and gauges;
- the profiler windows (``torch.profiler``, the CUDA profiler API, vLLM's own profiler) and their backends.

Started by the lifecycle when telemetry is on; nothing here is imported by ``import lens_rl``.
"""

from lens_rl.devices.profile_backends import register_engine

__all__ = ["register_engine"]
