"""The profilers a window drives: ``torch`` (the job's own ``torch.profiler``), ``cuda`` (the CUDA profiler API,
for ``nsys profile --capture-range=cudaProfilerApi``) and ``vllm`` (an engine's own ``start_profile`` /
``stop_profile``).

Each backend is made for one window: ``start()`` begins capturing, ``stop(path)`` ends it and writes what it
captured at ``path`` (the extension is the backend's :attr:`Backend.ext`), returning the files written. Either
may raise: the caller (:mod:`lens_rl.devices.profile`) turns that into one warning and the step goes on.
lens_rl never imports torch itself: a backend uses the module the job already imported (``sys.modules``).

Example::

    backend = make_backend("torch")
    backend.start("trainer-1-step3")
    ...                                  # the step
    files = backend.stop(Path("run/profiles/trainer-1-step3"))
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

__all__ = [
    "Backend",
    "BackendMissingError",
    "CudaBackend",
    "TorchBackend",
    "VllmBackend",
    "make_backend",
    "register_engine",
]


class BackendMissingError(RuntimeError):
    """The backend cannot run in this process (its library is absent or not in use): said once, no window."""


class Backend:
    """One window's profiler."""

    #: The capture's file extension (after ``<group>-<rank>-step<N>.``).
    ext = "json"

    def start(self, name: str) -> None:
        """Begin capturing; ``name`` (``<group>-<rank>-step<N>``) names the capture where the profiler takes one."""
        raise NotImplementedError

    def stop(self, base: Path) -> list[Path]:
        raise NotImplementedError


def _job_torch() -> Any:
    """The job's torch, or :class:`BackendMissingError` when the job has not imported it (lens_rl never does)."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "profiler"):
        raise BackendMissingError("torch is not imported by this process (lens_rl never imports it)")
    return torch


def cuda_in_use(torch: Any) -> bool:
    """Has the job initialised CUDA through ``torch`` (a torch without CUDA, or a broken one: no)?"""
    try:
        return bool(torch.cuda.is_available() and torch.cuda.is_initialized())
    except (RuntimeError, AttributeError, AssertionError, OSError):
        return False


class TorchBackend(Backend):
    """``torch.profiler.profile`` with CPU activities, and CUDA where the job initialised CUDA; a gzip'd Chrome
    trace. Started and stopped on one thread (kineto's session is the starting thread's)."""

    ext = "pt.trace.json.gz"

    def __init__(self) -> None:
        self.torch = _job_torch()
        self.prof: Any = None

    def start(self, name: str) -> None:
        activity = self.torch.profiler.ProfilerActivity
        activities = [activity.CPU]
        if cuda_in_use(self.torch):
            activities.append(activity.CUDA)
        self.prof = self.torch.profiler.profile(activities=activities)
        self.prof.start()

    def stop(self, base: Path) -> list[Path]:
        prof, self.prof = self.prof, None
        if prof is None:
            return []
        prof.stop()
        path = base.with_name(f"{base.name}.{self.ext}")
        raw = path.with_name(f".{base.name}.{os.getpid()}.json")
        try:
            prof.export_chrome_trace(str(raw))
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            with open(raw, "rb") as src, gzip.open(tmp, "wb", compresslevel=5) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                raw.unlink()
        return [path]


class CudaBackend(Backend):
    """``cudaProfilerStart`` / ``cudaProfilerStop``: through the job's torch (``torch.cuda.cudart()``) where it
    initialised CUDA, else ``cuda-python`` (``cuda.bindings.runtime`` or ``cuda.cudart``). The capture is
    nsys's (its ``-o``); the file written here says which window it covers."""

    ext = "cuda.json"

    def __init__(self) -> None:
        self.api = _cuda_api()
        self.start_ns = 0

    def start(self, name: str) -> None:
        _cuda_call(self.api.cudaProfilerStart())
        self.start_ns = time.time_ns()

    def stop(self, base: Path) -> list[Path]:
        _cuda_call(self.api.cudaProfilerStop())
        path = base.with_name(f"{base.name}.{self.ext}")
        note = {
            "backend": "cuda",
            "pid": os.getpid(),
            "start_ns": self.start_ns,
            "end_ns": time.time_ns(),
            "capture": "nsys profile --capture-range=cudaProfilerApi: the report nsys writes (its -o)",
        }
        _write_json(path, note)
        return [path]


def _cuda_api() -> Any:
    torch = sys.modules.get("torch")
    if torch is not None and cuda_in_use(torch):
        return torch.cuda.cudart()
    for name in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            module = __import__(name, fromlist=["cudaProfilerStart"])
        except ImportError:
            continue
        if hasattr(module, "cudaProfilerStart"):
            return module
    raise BackendMissingError("no CUDA profiler API: CUDA is not initialised by torch and cuda-python is not installed")


def _cuda_call(result: Any) -> None:
    """cuda-python answers ``(error,)``, torch's cudart an error code or None: a non-zero error raises."""
    err = result[0] if isinstance(result, tuple) and result else result
    code = getattr(err, "value", err)
    if code not in (None, 0):
        raise RuntimeError(f"CUDA profiler API error {err!r}")


#: vLLM engines (``LLM``, ``AsyncLLM``, an engine client) or server base URLs registered by the user.
_ENGINES: list[Any] = []


def register_engine(engine: Any) -> None:
    """Profile ``engine`` in ``vllm`` windows: an in-process ``LLM`` / ``AsyncLLM`` (its ``start_profile`` /
    ``stop_profile``) or a server's base URL (``http://host:8000``: its ``/start_profile`` / ``/stop_profile``).
    The engine writes its traces where its own ``profiler_config`` says (``torch_profiler_dir``)."""
    _ENGINES.append(engine)


class VllmBackend(Backend):
    """vLLM's own profiler on every registered engine (else every ``vllm.LLM`` found alive in the process). The
    engine writes its traces under its ``profiler_config.torch_profiler_dir`` (vLLM >= 0.11; older: the env
    ``VLLM_TORCH_PROFILER_DIR``); the file written here names that folder and the window."""

    ext = "vllm.json"

    def __init__(self) -> None:
        self.engines = list(_ENGINES) or _found_engines()
        if not self.engines:
            raise BackendMissingError("no vLLM engine registered (lens_rl.devices.register_engine) or found in-process")
        self.start_ns = 0
        self.prefix = ""

    def start(self, name: str) -> None:
        self.prefix = name
        for engine in self.engines:
            _engine_call(engine, "start_profile", name)
        self.start_ns = time.time_ns()

    def stop(self, base: Path) -> list[Path]:
        for engine in self.engines:
            _engine_call(engine, "stop_profile", "")
        path = base.with_name(f"{base.name}.{self.ext}")
        note = {
            "backend": "vllm",
            "pid": os.getpid(),
            "start_ns": self.start_ns,
            "end_ns": time.time_ns(),
            "engines": [_describe(engine) for engine in self.engines],
            "profile_prefix": self.prefix,
            "torch_profiler_dir": [_profiler_dir(engine) for engine in self.engines],
        }
        _write_json(path, note)
        return [path]


def _found_engines() -> list[Any]:
    if "vllm" not in sys.modules:
        return []
    import gc

    return [
        obj for obj in gc.get_objects() if type(obj).__name__ in ("LLM", "AsyncLLM") and hasattr(obj, "start_profile")
    ]


def _engine_call(engine: Any, method: str, prefix: str) -> None:
    if isinstance(engine, str):  # a server: POST its endpoint
        request = urllib.request.Request(f"{engine.rstrip('/')}/{method}", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()
        return
    call = getattr(engine, method)
    result = call(prefix) if method == "start_profile" and prefix else call()
    if hasattr(result, "__await__"):  # AsyncLLM: run it on a loop of its own (the window's thread has none)
        import asyncio

        asyncio.run(_awaited(result))


async def _awaited(result: Any) -> Any:
    return await result


def _describe(engine: Any) -> str:
    return engine if isinstance(engine, str) else type(engine).__name__


def _profiler_dir(engine: Any) -> str | None:
    for path in ("llm_engine.vllm_config.profiler_config", "vllm_config.profiler_config"):
        obj = engine
        for part in path.split("."):
            obj = getattr(obj, part, None)
        if obj is not None:
            return getattr(obj, "torch_profiler_dir", None) or None
    return os.environ.get("VLLM_TORCH_PROFILER_DIR") or None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)


_BACKENDS: dict[str, type[Backend]] = {"torch": TorchBackend, "cuda": CudaBackend, "vllm": VllmBackend}


def make_backend(name: str) -> Backend:
    """The backend ``name`` for one window; :class:`BackendMissingError` when it cannot run here."""
    return _BACKENDS[name]()
