# ruff: noqa: N801, N802, N803, N815
"""A stand-in ``pynvml`` (the ``nvidia-ml-py`` module) for machines without a GPU: NVIDIA's names, error
types and return shapes, over devices scripted by a JSON scenario whose path is in ``LENS_RL_FAKE_NVML``.

Put this file's directory first on ``sys.path`` / ``PYTHONPATH`` (``lens_rl.testing.nvml.path()``) and every
process of a job sees the same scripted GPUs on the wall clock. No scenario: ``nvmlInit`` raises
``NVMLError_LibraryNotFound`` (a machine without the driver). The scenario's format is in
``lens_rl/testing/nvml/__init__.py``; the devices it scripts are in ``_scripted_gpus.py`` beside it. Standard
library only: as the top-level ``pynvml`` it never imports lens_rl.
"""

from __future__ import annotations

import os
import string
import threading
import time
from typing import Any

if __package__:  # (as lens_rl.testing.nvml.pynvml)
    from ._scripted_gpus import Device as _Device
    from ._scripted_gpus import devices_of, read_scenario
else:  # (as the top-level pynvml, its directory on sys.path)
    from _scripted_gpus import Device as _Device  # type: ignore[no-redef]
    from _scripted_gpus import devices_of, read_scenario  # type: ignore[no-redef]

SCENARIO_ENV = "LENS_RL_FAKE_NVML"

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999

NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3

NVML_GPM_METRIC_GRAPHICS_UTIL = 1
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRIC_SM_OCCUPANCY = 3
NVML_GPM_METRIC_INTEGER_UTIL = 4
NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
NVML_GPM_METRIC_DRAM_BW_UTIL = 10
NVML_GPM_METRIC_MAX = 98
NVML_GPM_METRICS_GET_VERSION = 1
NVML_GPM_SUPPORT_VERSION = 1

#: Function name -> how many times this process called it (tests check that no per-process query ran).
CALLS: dict[str, int] = {}


class NVMLError(Exception):
    """NVIDIA's error: ``NVMLError(code)`` gives the subclass of that code (``NVMLError_NotSupported``, ...)."""

    _valClassMapping: dict[int, type[NVMLError]] = {}
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "Argument version mismatch",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


def _error_classes() -> None:
    """One subclass per ``NVML_ERROR_*`` code, named as NVIDIA's module names them."""
    names = globals()
    for name in [n for n in list(names) if n.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        code = names[name]

        def new(cls: type[NVMLError], code: int = code) -> NVMLError:
            return NVMLError.__new__(cls, code)

        def init(self: NVMLError, *args: Any) -> None:
            Exception.__init__(self, self.value)

        cls = type(class_name, (NVMLError,), {"__new__": new, "__init__": init})
        cls.__module__ = __name__
        names[class_name] = cls
        NVMLError._valClassMapping[code] = cls


_error_classes()
NVMLError_NotSupported: type[NVMLError]
NVMLError_LibraryNotFound: type[NVMLError]
NVMLError_Uninitialized: type[NVMLError]
NVMLError_DriverNotLoaded: type[NVMLError]
NVMLError_GpuIsLost: type[NVMLError]
NVMLError_NotFound: type[NVMLError]
NVMLError_InvalidArgument: type[NVMLError]


# --------------------------------------------------------------------------- return shapes


class c_nvmlUtilization_t:
    def __init__(self, gpu: int, memory: int) -> None:
        self.gpu, self.memory = gpu, memory


class c_nvmlMemory_t:
    def __init__(self, total: int, free: int, used: int) -> None:
        self.total, self.free, self.used = total, free, used


class c_nvmlGpmSupport_t:
    def __init__(self) -> None:
        self.version = NVML_GPM_SUPPORT_VERSION
        self.isSupportedDevice = 0


class c_nvmlGpmSample_t:
    """An opaque GPM sample: which device, and when it was taken."""

    def __init__(self) -> None:
        self.device: _Device | None = None
        self.t: float | None = None


class c_nvmlGpmMetric_t:
    def __init__(self) -> None:
        self.metricId = 0
        self.nvmlReturn = NVML_SUCCESS
        self.value = 0.0


class c_nvmlGpmMetricsGet_t:
    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: c_nvmlGpmSample_t | None = None
        self.sample2: c_nvmlGpmSample_t | None = None
        self.metrics = [c_nvmlGpmMetric_t() for _ in range(NVML_GPM_METRIC_MAX)]


_LOCK = threading.Lock()
_STATE: dict[str, Any] = {"refs": 0, "devices": [], "by_uuid": {}}


def _count(name: str) -> None:
    CALLS[name] = CALLS.get(name, 0) + 1


def _load() -> None:
    scenario = read_scenario(os.environ.get(SCENARIO_ENV, ""))
    if scenario is None or not scenario.get("library", True):
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    if not scenario.get("driver", True):
        raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
    devices, by_uuid = devices_of(scenario, NVML_ERROR_GPU_IS_LOST)
    _STATE.update(devices=devices, by_uuid=by_uuid)


def _initialised() -> None:
    if _STATE["refs"] <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def _check(device: _Device, counter: str | None = None) -> None:
    """Raise the device's error once it has failed, and ``NotSupported`` for a counter it lacks."""
    if device.failing and device.failed():
        raise NVMLError(device.fail_code)
    if counter is not None and counter in device.not_supported:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def _device(handle: object) -> _Device:
    _initialised()
    if not isinstance(handle, _Device):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return handle


# --------------------------------------------------------------------------- NVIDIA's functions


def nvmlInit() -> None:
    _count("nvmlInit")
    with _LOCK:
        if _STATE["refs"] <= 0:
            _load()
        _STATE["refs"] += 1


def nvmlInitWithFlags(flags: int) -> None:
    nvmlInit()


def nvmlShutdown() -> None:
    _count("nvmlShutdown")
    with _LOCK:
        _initialised()
        _STATE["refs"] -= 1


def nvmlSystemGetDriverVersion() -> str:
    _initialised()
    return "000.00.standin"


def nvmlDeviceGetCount() -> int:
    _count("nvmlDeviceGetCount")
    _initialised()
    return len(_STATE["devices"])


def nvmlDeviceGetHandleByIndex(index: int) -> _Device:
    _count("nvmlDeviceGetHandleByIndex")
    _initialised()
    devices = _STATE["devices"]
    if not isinstance(index, int) or not 0 <= index < len(devices):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return devices[index]  # type: ignore[no-any-return]


def nvmlDeviceGetHandleByUUID(uuid: str | bytes) -> _Device:
    _count("nvmlDeviceGetHandleByUUID")
    _initialised()
    key = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    device = _STATE["by_uuid"].get(key)
    if device is None:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return device  # type: ignore[no-any-return]


def nvmlDeviceIsMigDeviceHandle(handle: object) -> int:
    return int(_device(handle).parent is not None)


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle: object) -> _Device:
    device = _device(handle)
    if device.parent is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return device.parent


def nvmlDeviceGetIndex(handle: object) -> int:
    return _device(handle).index


def nvmlDeviceGetUUID(handle: object) -> str:
    _count("nvmlDeviceGetUUID")
    device = _device(handle)
    _check(device)
    return device.uuid


def nvmlDeviceGetName(handle: object) -> str:
    _count("nvmlDeviceGetName")
    device = _device(handle)
    _check(device)
    return device.name


def nvmlDeviceGetUtilizationRates(handle: object) -> c_nvmlUtilization_t:
    _count("nvmlDeviceGetUtilizationRates")
    device = _device(handle)
    _check(device)
    if {"util", "mem_util"} & device.not_supported:  # one call answers both: unsupported together
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return c_nvmlUtilization_t(int(device.value("util")), int(device.value("mem_util")))


def nvmlDeviceGetMemoryInfo(handle: object, version: int | None = None) -> c_nvmlMemory_t:
    _count("nvmlDeviceGetMemoryInfo")
    device = _device(handle)
    _check(device, "mem_used")
    used = min(int(device.value("mem_used")), device.memory_total)
    return c_nvmlMemory_t(device.memory_total, device.memory_total - used, used)


def nvmlDeviceGetPowerUsage(handle: object) -> int:
    _count("nvmlDeviceGetPowerUsage")
    device = _device(handle)
    _check(device, "power")
    return int(device.value("power"))


def nvmlDeviceGetClockInfo(handle: object, type: int) -> int:
    _count("nvmlDeviceGetClockInfo")
    device = _device(handle)
    _check(device, "sm_clock" if type == NVML_CLOCK_SM else "clock")
    return int(device.value("sm_clock" if type == NVML_CLOCK_SM else "clock"))


def nvmlDeviceGetComputeRunningProcesses(handle: object) -> list[Any]:
    """A per-process query: costly on a real driver (it holds the driver's lock); counted so tests see it."""
    _count("nvmlDeviceGetComputeRunningProcesses")
    _check(_device(handle))
    return []


def nvmlGpmQueryDeviceSupport(device: object) -> c_nvmlGpmSupport_t:
    _count("nvmlGpmQueryDeviceSupport")
    dev = _device(device)
    _check(dev)
    support = c_nvmlGpmSupport_t()
    support.isSupportedDevice = int(dev.gpm)
    return support


def nvmlGpmSampleAlloc() -> c_nvmlGpmSample_t:
    _count("nvmlGpmSampleAlloc")
    _initialised()
    return c_nvmlGpmSample_t()


def nvmlGpmSampleFree(gpmSample: c_nvmlGpmSample_t) -> None:
    _count("nvmlGpmSampleFree")


def nvmlGpmSampleGet(device: object, gpmSample: c_nvmlGpmSample_t) -> c_nvmlGpmSample_t:
    _count("nvmlGpmSampleGet")
    dev = _device(device)
    _check(dev)
    if not dev.gpm:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    gpmSample.device, gpmSample.t = dev, time.time()
    return gpmSample


_GPM_COUNTERS = {
    NVML_GPM_METRIC_GRAPHICS_UTIL: "util",
    NVML_GPM_METRIC_SM_UTIL: "sm_active",
    NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy",
    NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor_active",
}


def nvmlGpmMetricsGet(metricsGet: c_nvmlGpmMetricsGet_t) -> c_nvmlGpmMetricsGet_t:
    """Each asked metric's time-weighted mean between the two samples, as NVML computes it."""
    _count("nvmlGpmMetricsGet")
    _initialised()
    if metricsGet.version != NVML_GPM_METRICS_GET_VERSION:
        raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    s1, s2 = metricsGet.sample1, metricsGet.sample2
    if s1 is None or s2 is None or s1.device is None or s1.device is not s2.device or s1.t is None or s2.t is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    _check(s1.device)
    for metric in metricsGet.metrics[: metricsGet.numMetrics]:
        counter = _GPM_COUNTERS.get(metric.metricId)
        if counter is None or counter in s1.device.not_supported:
            metric.nvmlReturn, metric.value = NVML_ERROR_NOT_SUPPORTED, 0.0
        else:
            metric.nvmlReturn, metric.value = NVML_SUCCESS, s1.device.mean(counter, s1.t, s2.t)
    return metricsGet
