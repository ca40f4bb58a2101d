"""One sampled device as a look reads it: its samples from every file that sampled it, and its headers' word.

Example::

    device = devices["GPU-0"]
    device.t.size + device.skipped           # its samples
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Device"]


class Device(NamedTuple):
    """One device's samples from every file that sampled it: times (int64 ns), values ``(n, 8)`` (a counter
    its header says it lacks: nan), each sample's period (ns: ``1/hz``), and what the headers say of it."""

    uuid: str
    host: str
    name: str
    number: int
    mem_total: int | None
    has: tuple[str, ...]
    t: Any
    v: Any
    period: Any
    unavailable: bool
    files: tuple[str, ...]
    #: samples before ``t[0]`` not held (a window's: :mod:`lens_rl.offline.read.gpu_window`), and what an
    #: earlier look kept of them (:class:`~lens_rl.offline.read.gpu_window.Before`; None: every sample held)
    skipped: int = 0
    before: Any = None
