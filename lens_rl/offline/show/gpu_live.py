"""What ``status`` and ``watch`` say of a process's GPUs, from its heartbeat's ``gpu`` entry (the host
sampler's latest reading of the process's own devices, each with since when it has read 0 % busy).

A row's ``gpu``: ``busy`` (the mean utilisation of its devices at that reading, a fraction 0..1 as ``goodput
--json``'s ``gpu_busy``; None where no device has the counter), ``idle_s`` (how long every one of its devices has read 0 %, up to that reading;
None when one has not) and ``idle``: ``GPU IDLE``, past the process's ``gpu_idle_alert_s`` while it has
a phase open and runs. A process without GPUs, or a heartbeat whose entry is not of the format's shape,
has none (never a crash: heartbeats are input like any other); an ``idle_since_ns`` outside the store's
plausible times (before 2000, far future) is no reading.

Example::

    gpu_state(beat, open_phases=1, running=True)  # {"busy": 0.0, "idle_s": 412.5, "idle": True, ...}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lens_rl.offline.run.live import plausible_ns

__all__ = ["gpu_state", "gpu_text"]

_NUM = (int, float)


def _number(value: Any) -> float | None:
    return float(value) if type(value) in _NUM and value == value and abs(value) < 1e300 else None


def gpu_state(beat: Mapping[str, Any], *, open_phases: int, running: bool) -> dict[str, Any] | None:
    """A heartbeat's GPU figures (see the module docstring), or None."""
    entry = beat.get("gpu")
    if type(entry) is not dict or type(entry.get("devices")) is not list or not plausible_ns(entry.get("t")):
        return None
    devices = [d for d in entry["devices"] if type(d) is dict]
    if not devices:
        return None
    utils = [u for u in (_number(d.get("util")) for d in devices) if u is not None]
    since = [s for s in (d.get("idle_since_ns") for d in devices) if plausible_ns(s)]
    idle_s = None
    if len(since) == len(devices):  # every device has read 0 % since then
        idle_s = round(max(entry["t"] - max(since), 0) / 1e9, 3)
    alert = _number(entry.get("idle_alert_s"))
    return {
        "busy": round(sum(utils) / len(utils) / 100, 3) if utils else None,  # (samples hold percents)
        "idle_s": idle_s,
        "idle_alert_s": alert,
        "idle": bool(running and open_phases and idle_s is not None and alert is not None and idle_s > alert),
        "devices": len(devices),
    }


def gpu_text(gpu: Mapping[str, Any] | None) -> str:
    """A row's GPU cell: its busy percent, ``-`` without a reading."""
    if not gpu or gpu.get("busy") is None:
        return "-"
    return f"{gpu['busy']:.0%}"
