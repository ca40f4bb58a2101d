"""The stand-in NVML: a ``pynvml`` module (NVIDIA's names and error types) over scripted GPUs, for testing a
job's GPU telemetry on a machine without a GPU.

Use it: write a scenario, name it in ``LENS_RL_FAKE_NVML`` and put :func:`path` first on ``PYTHONPATH``; every
process started with that environment (Ray workers too) then imports the stand-in as ``pynvml``::

    from lens_rl.testing import nvml

    scenario = nvml.write_scenario(tmp_path / "gpus.json", [
        {"uuid": "GPU-aaaa", "util": [[0, 10, 100], [10, 13, 0]], "mem_used": 40 << 30, "gpm": True,
         "sm_active": [[0, 10, 80]]},
        {"uuid": "GPU-bbbb", "not_supported": ["power"]},
        {"uuid": "GPU-cccc", "zero": True, "mem_used": 10 << 30},
    ], t0=time.time())
    subprocess.run([sys.executable, "train.py"], env=nvml.env(scenario))

The scenario (JSON):

- ``t0`` (epoch seconds, default 0): the origin of every timeline and of ``fail_at``; with ``t0`` 0 the
  times are epoch seconds themselves.
- ``library`` (default true): false makes ``nvmlInit`` raise ``NVMLError_LibraryNotFound`` (no driver
  library); ``driver`` false makes it raise ``NVMLError_DriverNotLoaded``. No scenario at all (the variable
  unset or the file unreadable) is "no library" too.
- ``devices``: a list, in NVML index order, of:

  - ``uuid`` (default ``GPU-00000000-0000-0000-0000-<index>``), ``name`` (default ``NVIDIA Stand-in GPU``),
    ``memory_total`` bytes (default 80 GiB), ``mig``: MIG UUIDs of its instances (``nvmlDeviceGetHandleByUUID``
    finds them; ``nvmlDeviceGetDeviceHandleFromMigDeviceHandle`` gives this device);
  - a timeline per counter: ``util``, ``mem_util`` (percent), ``mem_used`` (bytes), ``power`` (mW),
    ``sm_clock`` (MHz), and with ``gpm`` true ``sm_active``, ``sm_occupancy``, ``tensor_active`` (percent);
    a counter not scripted reads 0, but ``power`` (60000 mW) and ``sm_clock`` (1410 MHz), as an idle GPU's do.
    A timeline is a number (constant) or piecewise-constant segments ``[[start, end, value], ...]`` in
    seconds from ``t0``: ``value`` holds in [start, end), 0 outside every segment. Readings are at
    ``time.time()``; GPM metrics are the time-weighted mean between the two GPM samples, as NVML's are;
  - ``not_supported``: counters whose query raises ``NVMLError_NotSupported`` (``util`` or ``mem_util``: the
    one utilisation call; ``mem_used``, ``power``, ``sm_clock``, or a GPM counter: that metric's
    ``nvmlReturn``);
  - ``gpm`` (default false): ``nvmlGpmQueryDeviceSupport`` says the device has GPM;
  - ``zero``: the device reads 0 on every counter but ``mem_used`` (devices that have no counter);
  - ``fail_at`` (seconds from ``t0``) and ``fail_code`` (default ``NVML_ERROR_GPU_IS_LOST``): from then on,
    every query of the device raises that error; ``fail_when`` (a path): the same once that file exists (a
    test's trigger, whatever the machine's load).

``pynvml.CALLS`` counts each function's calls in the process (a test can check no per-process query ran).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["SCENARIO_ENV", "env", "path", "write_scenario"]

#: The variable naming the scenario file every process of the job reads.
SCENARIO_ENV = "LENS_RL_FAKE_NVML"


def path() -> str:
    """The directory holding the stand-in ``pynvml.py``: put it first on ``sys.path`` or ``PYTHONPATH``."""
    return str(Path(__file__).resolve().parent)


def write_scenario(
    file: str | os.PathLike[str],
    devices: Sequence[Mapping[str, Any]],
    *,
    t0: float = 0.0,
    library: bool = True,
    driver: bool = True,
) -> str:
    """Write a scenario (the format above) to ``file``; returns its path."""
    scenario = {"t0": t0, "library": library, "driver": driver, "devices": [dict(d) for d in devices]}
    Path(file).write_text(json.dumps(scenario), encoding="utf-8")
    return os.fspath(file)


def env(scenario: str | os.PathLike[str] | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) with the stand-in first on ``PYTHONPATH`` and ``LENS_RL_FAKE_NVML``
    naming ``scenario`` (None: the stand-in with no library)."""
    out = dict(os.environ if base is None else base)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (path(), out.get("PYTHONPATH", "")) if p)
    if scenario is None:
        out.pop(SCENARIO_ENV, None)
    else:
        out[SCENARIO_ENV] = os.fspath(scenario)
    return out
