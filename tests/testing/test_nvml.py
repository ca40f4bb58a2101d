"""The stand-in NVML: NVIDIA's names, errors and shapes over scripted devices, as a job's processes see it."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from lens_rl.testing import nvml
from tests.conftest import run_python


def load(monkeypatch: pytest.MonkeyPatch, scenario: str | None) -> ModuleType:
    """A fresh copy of the stand-in module, reading ``scenario``."""
    if scenario is None:
        monkeypatch.delenv(nvml.SCENARIO_ENV, raising=False)
    else:
        monkeypatch.setenv(nvml.SCENARIO_ENV, scenario)
    # (named inside the package, so it finds its scripted GPUs beside it without the directory on sys.path)
    name = "lens_rl.testing.nvml.standin_pynvml"
    spec = importlib.util.spec_from_file_location(name, os.path.join(nvml.path(), "pynvml.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scenario(tmp_path: Path, devices: list[dict[str, Any]], **kw: Any) -> str:
    return nvml.write_scenario(tmp_path / "gpus.json", devices, **kw)


def test_devices_read_their_scripted_timelines_on_the_wall_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Utilisation, memory, power and SM clock follow each device's segments relative to t0."""
    t0 = time.time()
    path = scenario(
        tmp_path,
        [
            {
                "uuid": "GPU-a",
                "name": "NVIDIA H100",
                "memory_total": 1000,
                "util": [[-5, 100, 70]],
                "mem_util": 30,
                "mem_used": [[-5, 100, 400]],
                "power": 250_000,
                "sm_clock": 1980,
            },
            {"uuid": "GPU-b", "util": [[100, 200, 90]]},
        ],
        t0=t0,
    )
    pynvml = load(monkeypatch, path)
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 2
    a = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetUUID(a) == "GPU-a" and pynvml.nvmlDeviceGetName(a) == "NVIDIA H100"
    rates = pynvml.nvmlDeviceGetUtilizationRates(a)
    assert (rates.gpu, rates.memory) == (70, 30)
    mem = pynvml.nvmlDeviceGetMemoryInfo(a)
    assert (mem.total, mem.used, mem.free) == (1000, 400, 600)
    assert pynvml.nvmlDeviceGetPowerUsage(a) == 250_000
    assert pynvml.nvmlDeviceGetClockInfo(a, pynvml.NVML_CLOCK_SM) == 1980
    b = pynvml.nvmlDeviceGetHandleByUUID("GPU-b")
    assert pynvml.nvmlDeviceGetUtilizationRates(b).gpu == 0  # outside every segment
    pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_no_scenario_or_no_library_is_library_not_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a scenario, or with ``library`` false, nvmlInit raises NVMLError_LibraryNotFound (an NVMLError)."""
    for path in (None, scenario(tmp_path, [], library=False), str(tmp_path / "missing.json")):
        pynvml = load(monkeypatch, path)
        with pytest.raises(pynvml.NVMLError_LibraryNotFound) as caught:
            pynvml.nvmlInit()
        assert isinstance(caught.value, pynvml.NVMLError)
        assert caught.value.value == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND


def test_not_supported_counters_raise_nvidias_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A counter listed not_supported raises NVMLError_NotSupported, equal to NVMLError(NVML_ERROR_NOT_SUPPORTED)."""
    pynvml = load(monkeypatch, scenario(tmp_path, [{"not_supported": ["power", "util", "sm_clock"], "mem_used": 5}]))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    for call in (
        lambda: pynvml.nvmlDeviceGetPowerUsage(handle),
        lambda: pynvml.nvmlDeviceGetUtilizationRates(handle),
        lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported) as caught:
            call()
        assert caught.value == pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    assert pynvml.nvmlDeviceGetMemoryInfo(handle).used == 5


def test_gpm_metrics_are_the_mean_between_two_samples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPM SM activity is the time-weighted mean between the samples; a device without GPM says so."""
    t0 = time.time()
    path = scenario(
        tmp_path,
        [{"gpm": True, "sm_active": [[-100, 100, 60]], "sm_occupancy": 25, "tensor_active": [[-100, 100, 40]]}, {}],
        t0=t0,
    )
    pynvml = load(monkeypatch, path)
    pynvml.nvmlInit()
    gpu, plain = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlGpmQueryDeviceSupport(gpu).isSupportedDevice == 1
    assert pynvml.nvmlGpmQueryDeviceSupport(plain).isSupportedDevice == 0
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(gpu, s1)
    time.sleep(0.01)
    pynvml.nvmlGpmSampleGet(gpu, s2)
    get = pynvml.c_nvmlGpmMetricsGet_t()
    get.version, get.numMetrics, get.sample1, get.sample2 = pynvml.NVML_GPM_METRICS_GET_VERSION, 4, s1, s2
    ids = (
        pynvml.NVML_GPM_METRIC_SM_UTIL,
        pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
        pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
        pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
    )
    for slot, metric_id in zip(get.metrics, ids, strict=False):
        slot.metricId = metric_id
    pynvml.nvmlGpmMetricsGet(get)
    assert [round(m.value) for m in get.metrics[:3]] == [60, 25, 40]
    assert get.metrics[3].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlGpmSampleGet(plain, s1)
    pynvml.nvmlGpmSampleFree(s1)


def test_zero_device_failure_and_mig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A zero device reads 0 but its memory; fail_at makes every query raise; a MIG UUID resolves to its GPU."""
    t0 = time.time()
    path = scenario(
        tmp_path,
        [{"uuid": "GPU-z", "zero": True, "util": 90, "mem_used": 7, "mig": ["MIG-z1"]}, {"fail_at": -1}],
        t0=t0,
    )
    pynvml = load(monkeypatch, path)
    pynvml.nvmlInit()
    zero, lost = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetUtilizationRates(zero).gpu == 0
    assert pynvml.nvmlDeviceGetMemoryInfo(zero).used == 7
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetUtilizationRates(lost)
    mig = pynvml.nvmlDeviceGetHandleByUUID("MIG-z1")
    assert pynvml.nvmlDeviceIsMigDeviceHandle(mig) == 1
    assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)) == "GPU-z"
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetHandleByUUID("GPU-nope")


def test_a_subprocess_imports_it_as_pynvml(tmp_path: Path) -> None:
    """With nvml.env's PYTHONPATH and variable, a fresh process's ``import pynvml`` is the stand-in."""
    path = scenario(tmp_path, [{"uuid": "GPU-sub"}])
    extra = nvml.env(path, base={"PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    out = run_python(
        "import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0)))",
        env=extra,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "GPU-sub"
