"""The GPU sampler: one per host and run, from a daemon thread, at ``gpu_sample_hz``.

Every process of the run with telemetry on starts a thread (``lens_rl-gpu``) that checks NVML is there
(no ``pynvml``, library, driver or GPU: one debug line, the thread ends, nothing is written) and takes part
in the host's election (:mod:`lens_rl.devices.election`): the holder of the run's local lock samples every
device NVML sees; the others retry the lock every half heartbeat interval, so one of them takes over
within one interval when the holder exits or is killed. The holder writes its samples to the store
(:mod:`lens_rl.store.gpu`: ``gpu-<host>-<pid>.jsonl``, with the file exporter), reports them as gauges
(``rl.gpu.*``, with ``gpu.uuid`` and ``host.name``, with the OTLP exporter) and keeps its latest sample in
a local file that every process's heartbeat reads (:func:`heartbeat_entry`). A failing NVML call is one
warning and the sampler stops; the job never sees it.

Example::

    start(handle)      # by the lifecycle, with telemetry on
    stop(1.0)          # at shutdown, bounded
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from lens_rl._errors import internal_error, warn_once
from lens_rl.devices import election
from lens_rl.devices.nvml import Device, NvmlError, load, probe, read, release
from lens_rl.store import open_file
from lens_rl.store.gpu import COUNTERS, gpu_header, gpu_path

__all__ = ["GAUGES", "GpuSampler", "current", "heartbeat_entry", "start", "stop"]

_log = logging.getLogger("lens_rl")

#: counter -> (gauge name, unit); the gauges the OTLP exporter gets.
GAUGES = {
    "util": ("rl.gpu.utilization", "%"),
    "mem_util": ("rl.gpu.memory.utilization", "%"),
    "mem_used": ("rl.gpu.memory.used", "By"),
    "power": ("rl.gpu.power", "mW"),
    "sm_clock": ("rl.gpu.sm_clock", "MHz"),
    "sm_active": ("rl.gpu.sm_active", "%"),
    "sm_occupancy": ("rl.gpu.sm_occupancy", "%"),
    "tensor_active": ("rl.gpu.tensor_active", "%"),
}
#: The latest-sample file is rewritten every heartbeat interval (heartbeats read it once an interval), and
#: at most this often.
LATEST_EVERY_S = 1.0


class GpuSampler:
    """One process's part in the host's GPU sampling (see the module docstring)."""

    def __init__(
        self,
        *,
        run_id: str,
        hz: float,
        retry_s: float,
        trace_dir: str | None,
        host: str,
        attempt: int = 0,
    ) -> None:
        self.run_id = run_id
        self.hz = float(hz)
        self.retry_s = max(float(retry_s), 0.05)
        self.trace_dir = trace_dir
        self.host = host
        self.attempt = attempt
        self.pid = os.getpid()
        self.devices: list[Device] = []
        self.latest: tuple[int, list[Any]] | None = None  # (t ns, rows) of the last sample, the holder's
        self.samples = 0
        #: The sampling thread's own CPU seconds and the monotonic time, at the first and the latest sample
        #: (the benchmark's figures: start-up apart from the steady state).
        self.cpu_s = 0.0
        self.first: tuple[float, float] | None = None
        self.last: tuple[float, float] | None = None
        self.holding = False
        self._lock: int | None = None
        self._stop = threading.Event()
        # Held until stop() releases it: the loop waits by acquiring it with a timeout, one primitive wait
        # (an Event's wait goes through a Condition: a new lock and several Python calls per wake).
        self._halt = threading.Lock()
        self._halt.acquire()
        self._thread: threading.Thread | None = None
        self._idle_since: dict[int, int] = {}
        self._latest_written = 0.0

    # ------------------------------------------------------------------ thread

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lens_rl-gpu", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and os.getpid() == self.pid

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop sampling (waiting at most ``timeout_s`` for the thread) and give the lock up."""
        if not self._stop.is_set():
            self._stop.set()
            try:
                self._halt.release()
            except RuntimeError:  # a concurrent stop() released it first
                pass
        thread = self._thread
        if thread is not None and thread is not threading.current_thread() and os.getpid() == self.pid:
            thread.join(max(timeout_s, 0.0))
        if thread is None or not thread.is_alive():
            election.unlock(self._lock)
            self._lock = None

    def _wait(self, seconds: float) -> bool:
        """Wait ``seconds`` (at least none); True once stopped."""
        if self._halt.acquire(timeout=min(max(seconds, 0.0), threading.TIMEOUT_MAX)):  # (1e-300 Hz: no overflow)
            self._halt.release()  # stays free: every later wait returns at once
            return True
        return False

    def _run(self) -> None:
        try:
            nv = load()
            if nv is None:
                return
            release(nv)  # NVML is there; it is opened again by the process that wins the election
            while not self._stop.is_set():
                self._lock = election.try_lock(self.run_id)
                if self._lock is not None:
                    self.holding = True
                    self._hold()
                    return
                if self._wait(self.retry_s):
                    return
        except Exception as exc:  # never the job's problem
            internal_error(exc, "gpu-sampler")
        finally:
            if self._stop.is_set() or os.getpid() != self.pid:
                election.unlock(self._lock)
                self._lock = None

    def _hold(self) -> None:
        """Sample until stopped or an NVML call fails (one warning; the lock stays held: nobody retries a
        failing NVML on this host)."""
        nv = load()
        if nv is None:
            return
        out = None
        try:
            try:
                self.devices = probe(nv)
            except NvmlError as exc:
                warn_once("gpu-sampler", "lens_rl: GPU sampling off on %s: %s", self.host, exc)
                return
            if not self.devices:
                _log.debug("lens_rl: no GPU sampling: NVML sees no device on %s", self.host)
                return
            self._idle_since = self._inherited_idle()
            out = self._open_file()
            self._loop(nv, out)
        finally:
            self.latest = None  # (sampling stopped: no gauge reports its last reading as current)
            if out is not None:
                out.close()
            release(nv)

    def _inherited_idle(self) -> dict[int, int]:
        """Since when each device has read idle, as the previous holder on this host last said (a takeover
        keeps the idle clock running: a sampler SIGKILLed mid-stretch does not restart a `GPU IDLE` alert's
        wait). Only a recent file counts (at most two heartbeat intervals old), by device UUID."""
        try:
            with open_file(election.latest_path(self.run_id), 0) as handle:  # (a regular file only: never waits)
                latest = json.loads(handle.read(1 << 20))
            if (time.time_ns() - int(latest["t"])) / 1e9 > max(4 * self.retry_s, 2 * LATEST_EVERY_S):
                return {}
            before, at = latest["devices"], int(latest["t"])
            out = {}
            for index, device in enumerate(self.devices):
                since = before.get(device.uuid, {}).get("idle_since_ns")
                if type(since) is int:
                    out[index] = min(since, at)  # (never later than the reading that said it)
            return out
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def _open_file(self) -> Any:
        if self.trace_dir is None:
            return None
        path = gpu_path(self.trace_dir, self.run_id, self.host, self.pid)
        head = gpu_header(
            host=self.host,
            run_id=self.run_id,
            attempt=self.attempt,
            pid=self.pid,
            since_ns=time.time_ns(),
            hz=self.hz,
            devices=[d.describe() for d in self.devices],
        )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            out = open(path, "ab", buffering=0)
            out.write(_line(head))
            return out
        except OSError as exc:
            warn_once(f"gpu-file-{path}", "lens_rl: cannot write GPU samples to %s: %s", path, exc)
            return None

    def _loop(self, nv: Any, out: Any) -> None:
        period = 1.0 / self.hz
        due = time.monotonic()
        while not self._wait(due - time.monotonic()):
            now_ns = time.time_ns()
            rows: list[Any] = []
            failure: NvmlError | None = None
            for device in self.devices:
                try:
                    rows.append(read(nv, device))
                except NvmlError as exc:
                    rows.append(None)
                    failure = failure or exc
            self.latest = (now_ns, rows)
            self.samples += 1
            if out is not None:
                try:
                    out.write(_line({"t": now_ns, "d": rows}))
                except OSError as exc:
                    warn_once("gpu-file-write", "lens_rl: cannot write GPU samples: %s (sampling goes on)", exc)
                    out = None
            self._track_idle(now_ns, rows, final=failure is not None)
            self.cpu_s = time.thread_time()
            self.last = (self.cpu_s, time.monotonic())
            if self.first is None:
                self.first = self.last
            if failure is not None:
                warn_once(
                    "gpu-sampler",
                    "lens_rl: GPU sampling stopped on %s: %s (the job goes on; samples so far are kept)",
                    self.host,
                    failure,
                )
                return
            due += period
            if due < time.monotonic():  # fell behind (a paused process): skip, never burst
                due = time.monotonic() + period

    # -------------------------------------------------------------- live side

    def _track_idle(self, now_ns: int, rows: Sequence[Any], final: bool = False) -> None:
        """Since when each device has read 0 % busy (a reading of another value, or none, resets it), and
        the latest sample in the local file every process's heartbeat reads."""
        for index, row in enumerate(rows):
            if row is not None and row[0] == 0:
                self._idle_since.setdefault(index, now_ns)
            else:
                self._idle_since.pop(index, None)
        if not final and time.monotonic() - self._latest_written < max(2 * self.retry_s, LATEST_EVERY_S):
            return
        self._latest_written = time.monotonic()
        devices = {}
        for index, (device, row) in enumerate(zip(self.devices, rows, strict=False)):
            entry: dict[str, Any] = {"idle_since_ns": self._idle_since.get(index)}
            entry.update(zip(COUNTERS, row or [None] * len(COUNTERS), strict=False))
            devices[device.uuid] = entry
        latest = {"t": now_ns, "pid": self.pid, "hz": self.hz, "devices": devices}
        path = election.latest_path(self.run_id)
        temporary = path.with_name(f".{path.name}.{self.pid}.tmp")
        try:
            temporary.write_bytes(_line(latest))
            os.replace(temporary, path)
        except OSError as exc:
            warn_once("gpu-latest", "lens_rl: cannot keep the latest GPU sample in %s: %s", path, exc)

    def observe(self, counter: str) -> list[tuple[float, dict[str, str]]]:
        """The latest sample's ``counter`` per device, with its gauge attributes (the holder's only, while it
        samples: none once sampling stopped)."""
        latest = self.latest
        if latest is None:
            return []
        slot = COUNTERS.index(counter)
        out = []
        for device, row in zip(self.devices, latest[1], strict=False):
            if row is not None and row[slot] is not None:
                out.append((float(row[slot]), {"gpu.uuid": device.uuid, "host.name": self.host}))
        return out


def _line(obj: Any) -> bytes:
    return (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode()


def heartbeat_entry(run_id: str, uuids: Sequence[str], idle_alert_s: float, stale_s: float) -> dict[str, Any] | None:
    """What a process's heartbeat says of its GPUs: the host's latest sample of its devices (``uuids``), each
    with since when it has read 0 % busy, and the alert threshold; None when there is none or it is older
    than ``stale_s`` (no sampler on the host now)."""
    try:
        with open_file(election.latest_path(run_id), 0) as handle:  # (a FIFO there: no entry, never a wait)
            latest = json.loads(handle.read(1 << 20))
        t = int(latest["t"])
        if (time.time_ns() - t) / 1e9 > stale_s:
            return None
        devices = latest["devices"]
        mine = [{"uuid": uuid, **devices[uuid]} for uuid in uuids if isinstance(devices.get(uuid), dict)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not mine:
        return None
    return {"t": t, "idle_alert_s": idle_alert_s, "devices": mine}


# --------------------------------------------------------------------------- the process's sampler

_CURRENT: list[GpuSampler | None] = [None]


def current() -> GpuSampler | None:
    """This process's sampler (holding or waiting), if one runs."""
    sampler = _CURRENT[0]
    return sampler if sampler is not None and sampler.pid == os.getpid() else None


def start(handle: Any) -> GpuSampler | None:
    """Start (or keep) this process's part in the GPU sampling for ``handle``'s run, and hand its heartbeats
    the process's GPUs' latest sample. Nothing when ``gpu_sample_hz`` is 0 or the exporter writes nowhere."""
    config = handle.config
    hz = float(getattr(config, "gpu_sample_hz", 0) or 0)
    run_id = str(config.run_id or "run")
    resource = dict(handle.resource.attributes)
    interval_s = (config.heartbeat_interval_ms or 10_000) / 1000.0
    live = getattr(handle, "live", None)
    uuids = resource.get("rl.gpu.uuids")
    if hz > 0 and live is not None and isinstance(uuids, (list, tuple)) and uuids:
        stale_s = max(2 * interval_s, 5.0 / hz, 2.0)
        idle_alert_s = float(config.gpu_idle_alert_s)
        live.sources["gpu"] = lambda: heartbeat_entry(run_id, list(uuids), idle_alert_s, stale_s)
    if hz <= 0 or config.exporter not in ("file", "otlp"):
        return None
    sampler = current()
    if sampler is not None and sampler.alive() and sampler.run_id == run_id:
        return sampler
    stop(1.0)
    sampler = GpuSampler(
        run_id=run_id,
        hz=hz,
        retry_s=interval_s / 2,
        trace_dir=config.trace_dir if config.exporter == "file" else None,
        host=str(resource.get("host.name") or socket.gethostname()),
        attempt=int(resource.get("rl.attempt", 0) or 0),
    )
    if config.exporter == "otlp":
        _gauges(handle, sampler)
    _CURRENT[0] = sampler
    sampler.start()
    return sampler


def _gauges(handle: Any, sampler: GpuSampler) -> None:
    from opentelemetry import metrics as metrics_api

    def callback(counter: str) -> Any:
        return lambda _options: [metrics_api.Observation(v, a) for v, a in sampler.observe(counter)]

    for counter, (name, unit) in GAUGES.items():
        handle.meter.create_observable_gauge(name, callbacks=[callback(counter)], unit=unit)


def stop(timeout_s: float = 1.0) -> None:
    """Stop this process's sampler, if any (bounded by ``timeout_s``); never raises."""
    sampler, _CURRENT[0] = _CURRENT[0], None
    if sampler is None or sampler.pid != os.getpid():
        return
    try:
        sampler.stop(timeout_s)
    except Exception as exc:
        internal_error(exc, "gpu-sampler-stop")
