"""The GPU sample file's format: what the sampler (``lens_rl.devices``) writes and the offline tools read.

``trace_dir/<run_id>/gpu-<host>-<pid>.jsonl``, one per sampling process (one per host and run at a time; a
process that takes the sampling over writes its own file). Whole lines, each flushed as written::

    {"v": 1, "header": true, "format": "lens_rl.gpu/1", "kind": "gpu", "host": str, "run_id": str,
     "attempt": int, "pid": int, "since": ns, "hz": float,
     "devices": [{"i": int, "uuid": str, "name": str, "mem_total": int bytes, "has": [counter names]}]}
    {"t": ns, "d": [[util, mem_util, mem_used, power_mw, sm_clock_mhz, sm_active, sm_occupancy,
                     tensor_active], ...]}

A sample line's ``t`` is ``time.time_ns()`` at the reading; ``d`` holds one list per device in the header's
order (or ``null`` for a device that could not be read at that sample), its values in :data:`COUNTERS`'
order: percents (0-100) for the utilisations and activities, bytes, mW, MHz; ``null`` for a counter the
device lacks (never 0 in its place). The header's ``has`` names the counters a device answered when the
sampling started.

Example::

    gpu_path("lens_traces", "run42", "node-1", 4321)   # lens_traces/run42/gpu-node-1-4321.jsonl
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lens_rl.store.format import safe_part

__all__ = ["COUNTERS", "GPU_FORMAT", "GPU_KIND", "GPU_VERSION", "gpu_header", "gpu_path"]

GPU_VERSION = 1
GPU_FORMAT = "lens_rl.gpu/1"
GPU_KIND = "gpu"
#: A sample's values, in the order of each device's list (and the names a header's ``has`` uses).
COUNTERS = ("util", "mem_util", "mem_used", "power", "sm_clock", "sm_active", "sm_occupancy", "tensor_active")


def gpu_path(trace_dir: str | Path, run_id: str, host: str, pid: int) -> Path:
    """Where a sampling process writes: ``trace_dir/<run_id>/gpu-<host>-<pid>.jsonl`` (parts made harmless)."""
    return Path(trace_dir) / safe_part(run_id, "run") / f"gpu-{safe_part(host, 'host')}-{int(pid)}.jsonl"


def gpu_header(
    *, host: str, run_id: str, attempt: int, pid: int, since_ns: int, hz: float, devices: list[dict[str, Any]]
) -> dict[str, Any]:
    """A sample file's header (the format above)."""
    return {
        "v": GPU_VERSION,
        "header": True,
        "format": GPU_FORMAT,
        "kind": GPU_KIND,
        "host": host,
        "run_id": run_id,
        "attempt": attempt,
        "pid": pid,
        "since": since_ns,
        "hz": float(hz),
        "devices": devices,
    }
