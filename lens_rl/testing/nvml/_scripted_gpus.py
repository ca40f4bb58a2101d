"""The stand-in NVML's scripted GPUs: a scenario's devices (and their MIG instances), each counter's timeline
read at a time or averaged over a window, and whether a device has failed yet. The stand-in ``pynvml`` beside
it answers NVIDIA's calls from these; the scenario's format is in ``lens_rl/testing/nvml/__init__.py``.
Standard library only: it never imports lens_rl (a job's processes import it as a top-level module).

Example::

    devices, by_uuid = devices_of({"devices": [{"uuid": "GPU-a", "util": [[0, 10, 70]]}]}, lost_code=15)
    devices[0].value("util", at=5.0)   # 70.0
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

__all__ = ["COUNTERS", "Device", "Timeline", "devices_of", "read_scenario"]

#: The counters a device scripts (the GPM ones: ``sm_active``, ``sm_occupancy``, ``tensor_active``).
COUNTERS = ("util", "mem_util", "mem_used", "power", "sm_clock", "clock", "sm_active", "sm_occupancy", "tensor_active")

#: What a counter the scenario does not script reads: an idle GPU's power and clock (never 0: a real idle GPU
#: draws power), 0 for the rest.
_IDLE = {"power": 60_000, "sm_clock": 1410}

#: A timeline: a constant, or its segments as (start, end, value) floats (parsed once: reads are cheap).
Timeline = float | tuple[tuple[float, float, float], ...]


class Device:
    """One scripted device (or a MIG instance of one: ``parent`` set)."""

    def __init__(self, index: int, spec: dict[str, Any], t0: float, lost_code: int, parent: Device | None = None):
        self.index = index
        self.spec = spec
        self.t0 = t0
        self.parent = parent
        self.uuid = str(spec.get("uuid") or f"GPU-00000000-0000-0000-0000-{index:012d}")
        self.name = str(spec.get("name", "NVIDIA Stand-in GPU"))
        self.memory_total = int(spec.get("memory_total", 80 * 1024**3))
        self.not_supported = {str(n) for n in spec.get("not_supported", ())}
        self.zero = bool(spec.get("zero", False))
        self.gpm = bool(spec.get("gpm", False))
        fail = spec.get("fail_at")
        self.fail_at = None if fail is None else float(fail) + t0
        self.fail_code = int(spec.get("fail_code", lost_code))
        self.fail_when = spec.get("fail_when")
        self.failing = self.fail_at is not None or self.fail_when is not None
        self.timelines: dict[str, Timeline] = {name: _parse(spec.get(name, _IDLE.get(name, 0))) for name in COUNTERS}

    def failed(self) -> bool:
        """Whether the device has failed by now (``fail_at`` passed, or the ``fail_when`` file there)."""
        if self.fail_at is not None and time.time() >= self.fail_at:
            return True
        return self.fail_when is not None and os.path.exists(self.fail_when)

    def value(self, counter: str, at: float | None = None) -> float:
        if self.zero and counter != "mem_used":
            return 0.0
        return _at(self.timelines[counter], (time.time() if at is None else at) - self.t0)

    def mean(self, counter: str, start: float, end: float) -> float:
        """The time-weighted mean of ``counter`` over [start, end] (a GPM metric's window)."""
        if self.zero:
            return 0.0
        timeline = self.timelines[counter]
        start, end = start - self.t0, end - self.t0
        if end <= start or isinstance(timeline, float):
            return _at(timeline, end)
        total = 0.0
        for lo, hi, value in timeline:
            lo, hi = max(lo, start), min(hi, end)
            if hi > lo:
                total += (hi - lo) * value
        return total / (end - start)


def read_scenario(path: str) -> Any:
    """The scenario in the JSON file ``path``, or None when there is none (no path, or a file unreadable or not
    JSON: to the caller, a machine without the driver library)."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def devices_of(scenario: dict[str, Any], lost_code: int) -> tuple[list[Device], dict[str, Device]]:
    """A scenario's devices in index order, and every device and MIG instance by UUID; ``lost_code`` is the
    error a failing device raises when its spec names no ``fail_code``."""
    t0 = float(scenario.get("t0", 0.0))
    devices = [Device(i, spec, t0, lost_code) for i, spec in enumerate(scenario.get("devices", ()))]
    by_uuid: dict[str, Device] = {}
    for device in devices:
        by_uuid[device.uuid] = device
        for j, mig in enumerate(device.spec.get("mig", ())):
            by_uuid[str(mig)] = Device(j, {**device.spec, "uuid": str(mig)}, t0, lost_code, parent=device)
    return devices, by_uuid


def _parse(timeline: Any) -> Timeline:
    """A scenario's timeline: a number (constant), or ``[[start, end, value], ...]`` as float triples."""
    if isinstance(timeline, (int, float)):
        return float(timeline)
    return tuple((float(seg[0]), float(seg[1]), float(seg[2])) for seg in timeline)


def _at(timeline: Timeline, t: float) -> float:
    """A timeline's value at ``t``: a constant, or ``value`` in [start, end) of its segment, 0 outside every
    segment."""
    if isinstance(timeline, float):
        return timeline
    for start, end, value in timeline:
        if start <= t < end:
            return value
    return 0.0
