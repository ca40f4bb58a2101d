"""NVML through ``pynvml`` (the ``nvidia-ml-py`` package, extra ``gpu``): device-level queries only.

Never a per-process query (those cost milliseconds and hold the driver's lock), never CUDA, never torch.
``pynvml`` is imported by :func:`load` alone, which lens_rl calls only with telemetry on; no ``pynvml``, no
library, no driver or no GPU is one debug line and None.

Example::

    nv = load()
    if nv is not None:
        devices = probe(nv)             # what each device answers (its "has")
        row = read(nv, devices[0])      # one sample: values in lens_rl.store.gpu.COUNTERS' order
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from lens_rl.store.gpu import COUNTERS

__all__ = ["Device", "NvmlError", "load", "probe", "read", "release", "resolve_uuids"]

_log = logging.getLogger("lens_rl")

NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
FUNCTION_NOT_FOUND = 13  # NVML_ERROR_FUNCTION_NOT_FOUND: an older driver without the call (GPM)
_GPM = ("sm_active", "sm_occupancy", "tensor_active")
_GPM_IDS = ("NVML_GPM_METRIC_SM_UTIL", "NVML_GPM_METRIC_SM_OCCUPANCY", "NVML_GPM_METRIC_ANY_TENSOR_UTIL")
_SLOT = {name: i for i, name in enumerate(COUNTERS)}


class NvmlError(Exception):
    """An NVML call failed for another reason than "not supported" (a lost GPU, a driver gone)."""


#: why NVML could not be loaded, once said (identity and the sampler both load it: one debug line a process)
_SAID: list[str] = []


def _unloaded(why: str) -> None:
    """One debug line a process for why NVML is not there (the first reason met)."""
    if not _SAID:
        _SAID.append(why)
        _log.debug("lens_rl: no GPU sampling: %s", why)


def load() -> Any:
    """``pynvml``, initialised, or None (one debug line a process: no package, no library, no driver)."""
    try:
        import pynvml
    except Exception as exc:  # ImportError, or a broken install
        _unloaded(f"pynvml cannot be imported ({exc})")
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        _unloaded(f"nvmlInit failed ({exc})")
        return None
    return pynvml


def release(nv: Any) -> None:
    """``nvmlShutdown`` (NVML counts its inits); never raises."""
    try:
        nv.nvmlShutdown()
    except Exception as exc:
        _log.debug("lens_rl: nvmlShutdown failed (%s)", exc)


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Device:
    """One device as the sampler sees it: its NVML handle, identity, which counters it has, its GPM state."""

    __slots__ = ("index", "handle", "uuid", "name", "mem_total", "has", "gpm")

    def __init__(self, index: int, handle: Any, uuid: str, name: str, mem_total: int | None) -> None:
        self.index = index
        self.handle = handle
        self.uuid = uuid
        self.name = name
        self.mem_total = mem_total
        self.has: set[str] = set()
        self.gpm: list[Any] | None = None  # [previous sample, next sample, the metrics-get struct]

    def describe(self) -> dict[str, Any]:
        """Its entry in a sample file's header."""
        return {
            "i": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "mem_total": self.mem_total,
            "has": [name for name in COUNTERS if name in self.has],
        }


def _try(nv: Any, call: Any, *args: Any) -> tuple[bool, Any]:
    """``(True, result)``; ``(False, None)`` when the device does not support the call; raises
    :class:`NvmlError` on any other NVML error."""
    try:
        return True, call(*args)
    except nv.NVMLError as exc:
        if _code(exc) == NOT_SUPPORTED:
            return False, None
        raise NvmlError(f"{getattr(call, '__name__', 'NVML')}: {exc}") from exc


def probe(nv: Any) -> list[Device]:
    """Every device NVML sees, with the counters each answers (each asked once here, never again when
    unsupported). Raises :class:`NvmlError` on an NVML error other than "not supported"."""
    devices = []
    try:
        count = int(nv.nvmlDeviceGetCount())
    except nv.NVMLError as exc:
        raise NvmlError(f"nvmlDeviceGetCount: {exc}") from exc
    for index in range(count):
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            uuid, name = _text(nv.nvmlDeviceGetUUID(handle)), _text(nv.nvmlDeviceGetName(handle))
        except nv.NVMLError as exc:
            raise NvmlError(f"device {index}: {exc}") from exc
        ok, memory = _try(nv, nv.nvmlDeviceGetMemoryInfo, handle)
        device = Device(index, handle, uuid, name, int(memory.total) if ok else None)
        if ok:
            device.has.add("mem_used")
        if _try(nv, nv.nvmlDeviceGetUtilizationRates, handle)[0]:
            device.has.update(("util", "mem_util"))
        if _try(nv, nv.nvmlDeviceGetPowerUsage, handle)[0]:
            device.has.add("power")
        if _try(nv, nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM)[0]:
            device.has.add("sm_clock")
        _start_gpm(nv, device)
        devices.append(device)
    return devices


def _start_gpm(nv: Any, device: Device) -> None:
    """GPM (Hopper and newer): a first sample now, so the first reading has an interval. Absent on devices
    without it, older drivers (no such function) and older ``pynvml`` releases (no such name)."""
    try:
        if not nv.nvmlGpmQueryDeviceSupport(device.handle).isSupportedDevice:
            return
        first, second = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
        nv.nvmlGpmSampleGet(device.handle, first)
        get = nv.c_nvmlGpmMetricsGet_t()
        get.version = nv.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = len(_GPM_IDS)
        for slot, name in enumerate(_GPM_IDS):
            get.metrics[slot].metricId = getattr(nv, name)
    except AttributeError:
        return
    except nv.NVMLError as exc:
        if _code(exc) in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
            return
        raise NvmlError(f"GPM on device {device.index}: {exc}") from exc
    device.gpm = [first, second, get]
    device.has.update(_GPM)


def _percent(value: Any) -> float | None:
    number = float(value)
    return round(number, 1) if math.isfinite(number) and 0.0 <= number <= 100.0 else None


def read(nv: Any, device: Device) -> list[Any]:
    """One sample of ``device``: values in :data:`~lens_rl.store.gpu.COUNTERS`' order, None where it has no
    such counter. A device reading 0 on every busy counter while its memory is in use has none of them (it
    reports no counter: GB10, Thor; a live GPU always draws power and clocks), so they read None, never 0.
    Raises :class:`NvmlError` on an NVML error other than "not supported"."""
    row: list[Any] = [None] * 8
    handle, has = device.handle, device.has
    try:
        if "util" in has:
            rates = _or_none(nv, nv.nvmlDeviceGetUtilizationRates, handle)
            if rates is not None:  # (a value past 0-100 is no percentage: null, or readers drop the whole line)
                util, mem_util = int(rates.gpu), int(rates.memory)
                row[0] = util if 0 <= util <= 100 else None
                row[1] = mem_util if 0 <= mem_util <= 100 else None
        if "mem_used" in has:
            memory = _or_none(nv, nv.nvmlDeviceGetMemoryInfo, handle)
            if memory is not None:
                row[2] = int(memory.used)
        if "power" in has:
            power = _or_none(nv, nv.nvmlDeviceGetPowerUsage, handle)
            row[3] = None if power is None else int(power)
        if "sm_clock" in has:
            clock = _or_none(nv, nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM)
            row[4] = None if clock is None else int(clock)
    except nv.NVMLError as exc:
        raise NvmlError(f"device {device.index}: {exc}") from exc
    if device.gpm is not None:
        _read_gpm(nv, device, row)
    if row[2] and (row[3] is not None or row[4] is not None) and not any((row[0], row[1], row[3], row[4], row[5])):
        for slot in (0, 1, 3, 4, 5, 6, 7):
            row[slot] = None
    return row


def _or_none(nv: Any, call: Any, *args: Any) -> Any:
    """``call(*args)``, None when the device does not support it (any other NVML error propagates)."""
    try:
        return call(*args)
    except nv.NVMLError as exc:
        if _code(exc) == NOT_SUPPORTED:
            return None
        raise


def _read_gpm(nv: Any, device: Device, row: list[Any]) -> None:
    previous, current, get = device.gpm  # type: ignore[misc]
    try:
        nv.nvmlGpmSampleGet(device.handle, current)
        get.sample1, get.sample2 = previous, current
        nv.nvmlGpmMetricsGet(get)
    except nv.NVMLError as exc:
        if _code(exc) == NOT_SUPPORTED:
            return
        raise NvmlError(f"GPM on device {device.index}: {exc}") from exc
    device.gpm = [current, previous, get]
    for slot, name in enumerate(_GPM):
        metric = get.metrics[slot]
        if metric.nvmlReturn == 0:
            row[_SLOT[name]] = _percent(metric.value)


def resolve_uuids(ids: Sequence[str]) -> tuple[list[str], str | None] | None:
    """The UUIDs of the GPUs ``ids`` names and the first one's name, through NVML, as CUDA reads
    ``CUDA_VISIBLE_DEVICES``: indices as NVML numbers them, ``GPU-`` UUIDs or a unique prefix of one, ``MIG-``
    ids (their GPU's UUID; the older ``MIG-GPU-<uuid>/<gi>/<ci>`` too); the devices up to the first id that
    names none (CUDA hides it and every one after it: an empty list where the first does). None when NVML
    cannot say (no package, library or driver, or a call failing otherwise)."""
    nv = load()
    if nv is None:
        return None
    try:
        uuids, name = [], None
        for ident in ids:
            handle = _handle(nv, ident)
            if handle is None:
                break
            uuids.append(_text(nv.nvmlDeviceGetUUID(handle)))
            if name is None:
                name = _text(nv.nvmlDeviceGetName(handle))
        return uuids, name
    except Exception as exc:  # an NVMLError, or an older pynvml without the MIG call
        _log.debug("lens_rl: cannot resolve the GPUs %s through NVML (%s)", ",".join(ids), exc)
        return None
    finally:
        release(nv)


#: NVML's answers for an id that names no device (an index past the count, a UUID it does not know)
_NAMES_NONE = (2, 6)  # NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND


def _handle(nv: Any, ident: str) -> Any:
    """The device (a MIG instance's GPU) ``ident`` names, or None where it names none; other NVML errors raise."""
    if ident.startswith("MIG-GPU-") and "/" in ident:  # (CUDA 11's MIG form: its GPU's UUID, then the instance)
        ident = ident[len("MIG-") : ident.index("/")]
    try:
        if ident.isdigit():
            return nv.nvmlDeviceGetHandleByIndex(int(ident))
        handle = nv.nvmlDeviceGetHandleByUUID(ident)
        return nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle) if ident.startswith("MIG-") else handle
    except nv.NVMLError as exc:
        if getattr(exc, "value", None) not in _NAMES_NONE:
            raise
    if not ident.startswith("GPU-"):
        return None
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
    matches = [h for h in handles if _text(nv.nvmlDeviceGetUUID(h)).startswith(ident)]
    return matches[0] if len(matches) == 1 else None  # (CUDA takes a prefix that names one GPU alone)
