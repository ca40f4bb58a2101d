"""The trace's GPU counter tracks: one per device (``GPU <index> <uuid> busy %``), under a process per host
(``GPUs on <host>``), from the run's sample files. Only changes are written (a constant stretch is one
point), and a sample with no utilisation reading breaks the line (Chrome JSON: no point; protobuf: no value),
never reads 0. A cut (``--steps``, ``--group``) keeps the points of the drawn spans' window alone, from a point
at its start holding the reading in effect then (the line does not start blank); a window of no span, none.

Example::

    out.write(gpu_counters(paths, opts))      # after the spans, before the JSON's closing event
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lens_rl.offline.run.gpu import read_devices, sample_files
from lens_rl.offline.run.perfetto import Options
from lens_rl.offline.show.perfetto.places import dumps

__all__ = ["GPU_PID", "gpu_counters"]

#: the first pid of the hosts' GPU processes in the trace (past any worker's number)
GPU_PID = 1_000_000


def _points(t: Any, util: Any) -> tuple[Any, Any]:
    """The samples where the reading changes (the first included), nan readings left out."""
    keep = ~np.isnan(util)
    t, util = t[keep], util[keep]
    if not t.size:
        return t, util
    order = np.argsort(t, kind="stable")
    t, util = t[order], util[order]
    change = np.ones(t.size, bool)
    change[1:] = util[1:] != util[:-1]
    return t[change], util[change]


def _within(t: Any, util: Any, window: tuple[int, int]) -> tuple[Any, Any]:
    """The points of ``window`` (its start and end included), the first at its start with the reading then."""
    lo, hi = window
    at = int(np.searchsorted(t, lo, side="right")) - 1  # (the last change at or before the window's start)
    keep = (t > lo) & (t <= hi)
    if at < 0:
        return t[keep], util[keep]
    return np.concatenate((np.array([lo], t.dtype), t[keep])), np.concatenate((util[at : at + 1], util[keep]))


def gpu_counters(paths: Sequence[Path], opts: Options, window: tuple[int, int] | None = None) -> bytes:
    """The counter tracks of the devices sampled beside ``paths`` (none: empty), in ``opts.fmt``; ``window``
    (a cut's drawn spans' first start and last end, ns): those points alone, from the reading at its start."""
    if window is not None and window[0] > window[1]:  # (no span drawn: no time to cover)
        return b""
    found, _notes = sample_files(paths)
    if not found:
        return b""
    devices, _stats = read_devices(found)
    hosts = sorted({d.host for d in devices.values()})
    events: list[dict[str, Any]] = []
    tracks = []
    for device in devices.values():  # (a device on its host's track: named by its UUID)
        t, util = _points(device.t, device.v[:, 0].astype(np.float64))
        if window is not None:
            t, util = _within(t, util, window)
        if opts.fmt == "json":
            t, util = t[t >= opts.origin], util[t >= opts.origin]
        pid = GPU_PID + hosts.index(device.host)
        tracks.append((pid, device.host, f"GPU {device.number} {device.uuid} busy %", t, util))
    if opts.fmt != "json":
        return _proto(tracks)
    for pid, host in sorted({(pid, host) for pid, host, *_ in tracks}):  # (in a set's order, the hash seed's)
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"GPUs on {host}"}})
    for pid, _host, name, t, util in tracks:
        ts = ((t - opts.origin) / 1000.0).tolist()
        events.extend(
            {"ph": "C", "name": name, "pid": pid, "ts": at, "args": {"busy %": value}}
            for at, value in zip(ts, util.tolist(), strict=True)
        )
    return dumps(events)[1:-1] + b",\n" if events else b""


def _proto(tracks: list[tuple[int, str, str, Any, Any]]) -> bytes:
    from lens_rl.offline.show.perfetto.proto import proto_module, uuid_of

    pb = proto_module()
    packets = []
    for pid, host in sorted({(pid, host) for pid, host, *_ in tracks}):
        descriptor = pb.TrackDescriptor(
            uuid=uuid_of("gpu-host", pid), process=pb.ProcessDescriptor(pid=pid, process_name=f"GPUs on {host}")
        )
        packets.append(pb.TracePacket(track_descriptor=descriptor))
    for pid, _host, name, t, util in tracks:
        track = uuid_of("gpu", name)
        descriptor = pb.TrackDescriptor(
            uuid=track, parent_uuid=uuid_of("gpu-host", pid), name=name, counter=pb.CounterDescriptor()
        )
        packets.append(pb.TracePacket(track_descriptor=descriptor))
        for at, value in zip(t.tolist(), util.tolist(), strict=True):
            packet = pb.TracePacket(timestamp=at, trusted_packet_sequence_id=1)
            packet.track_event.type = pb.TrackEvent.TYPE_COUNTER
            packet.track_event.track_uuid = track
            packet.track_event.double_counter_value = value
            packets.append(packet)
    return bytes(pb.Trace(packet=packets).SerializeToString())
