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

A process names its devices in its span file's resource (``rl.gpu.uuids``). The readers here take headers
only (no numpy): the sample lines are read in bulk by :mod:`lens_rl.offline.read.gpu_samples`.

Example::

    gpu_path("lens_traces", "run42", "node-1", 4321)   # lens_traces/run42/gpu-node-1-4321.jsonl
    for path in gpu_files(["lens_traces/run42"]):
        ...
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from lens_rl.store.files import listed
from lens_rl.store.format import TIME_MAX_NS, TIME_MIN_NS, safe_part
from lens_rl.store.rows import loads

__all__ = [
    "COUNTERS",
    "GPU_COUNTERS",
    "GPU_FORMAT",
    "GPU_KIND",
    "GPU_UUIDS",
    "GPU_VERSION",
    "GpuDevice",
    "GpuHead",
    "gpu_files",
    "gpu_head",
    "gpu_header",
    "gpu_path",
    "gpu_uuids",
]

GPU_VERSION = 1
GPU_FORMAT = "lens_rl.gpu/1"
GPU_KIND = "gpu"
#: A sample's values, in the order of each device's list (and the names a header's ``has`` uses).
COUNTERS = ("util", "mem_util", "mem_used", "power", "sm_clock", "sm_active", "sm_occupancy", "tensor_active")
GPU_COUNTERS = COUNTERS  # (the readers' name for it)
#: The resource attribute naming a process's devices (a list of NVML UUIDs).
GPU_UUIDS = "rl.gpu.uuids"
_MAX_DEVICES = 1024
_MAX_HZ = 1000.0
#: the rate a header's is read as at least (a sample stands for at most 1000 s: a tiny configured rate, 1e-300,
#: would make its period overflow the join's nanoseconds)
_MIN_HZ = 1e-3


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


class GpuDevice(NamedTuple):
    """One device of a sample file's header."""

    i: int
    uuid: str
    name: str
    mem_total: int | None
    has: tuple[str, ...]


class GpuHead(NamedTuple):
    """A sample file's header as read (bad fields read as defaults; no device list: no header)."""

    host: str
    run_id: str
    attempt: int
    pid: int
    since: int | None
    hz: float
    devices: tuple[GpuDevice, ...]


def _int(value: Any, default: int = 0) -> int:
    return value if type(value) is int and -(2**63) <= value < 2**63 else default


def _device(entry: Any, at: int) -> GpuDevice | None:
    if type(entry) is not dict or type(entry.get("uuid")) is not str:
        return None
    has = entry.get("has")
    known = tuple(c for c in GPU_COUNTERS if type(has) is list and c in has) if has is not None else GPU_COUNTERS
    total = entry.get("mem_total")
    return GpuDevice(
        _int(entry.get("i"), at),
        entry["uuid"][:256],
        str(entry.get("name", ""))[:256],
        total if type(total) is int and 0 <= total < 2**63 else None,
        known,
    )


def gpu_head(line: bytes) -> GpuHead | None:
    """A sample file's header from its first line; None where it is none (not JSON, another format, no
    device that names a UUID)."""
    try:
        head = loads(line)
    except (ValueError, RecursionError):
        return None
    if type(head) is not dict or head.get("format") != GPU_FORMAT or type(head.get("devices")) is not list:
        return None
    devices = [_device(d, i) for i, d in enumerate(head["devices"][:_MAX_DEVICES])]
    if not devices or any(d is None for d in devices):
        return None
    hz = head.get("hz")
    since = head.get("since")
    return GpuHead(
        str(head.get("host", ""))[:256],
        str(head.get("run_id", ""))[:256],
        _int(head.get("attempt")),
        _int(head.get("pid")),
        since if type(since) is int and TIME_MIN_NS <= since < TIME_MAX_NS else None,
        max(float(hz), _MIN_HZ) if (type(hz) is int or type(hz) is float) and 0 < hz <= _MAX_HZ else 2.0,
        tuple(d for d in devices if d is not None),
    )


def gpu_files(folders: Iterable[str | os.PathLike[str]], notes: list[str] | None = None) -> list[Path]:
    """Every readable sample file (``gpu-*.jsonl``) in ``folders`` (a run's folders: where its span files
    are), in a stable order; an entry named like one that cannot be read is named in one line of ``notes``."""
    out: list[Path] = []
    for folder in sorted({str(f) for f in folders}):
        out.extend(listed(folder, "gpu-*.jsonl", notes))
    return out


def gpu_uuids(resource: Any) -> tuple[str, ...]:
    """The devices a process's resource names (``rl.gpu.uuids``: a list of UUID strings; anything else:
    none)."""
    value = resource.get(GPU_UUIDS) if type(resource) is dict else None
    if type(value) is str:
        value = [value]
    if type(value) is not list:
        return ()
    return tuple(dict.fromkeys(v for v in value if type(v) is str and v))
