"""What a process can tell of its GPUs: how many and which (from ``CUDA_VISIBLE_DEVICES`` or Ray), their
UUIDs and kind (through NVML when it is there, else torch when the job imported it). Neither Ray nor torch
is ever imported here; ``pynvml`` only when the process names GPUs (telemetry is on: identity is computed
then alone)."""

from __future__ import annotations

import sys
from collections.abc import Mapping

from lens_rl._errors import internal_error

__all__ = ["device_name", "gpu_uuids", "gpus"]


def gpus(env: Mapping[str, str]) -> tuple[int, str | None]:
    """This process's GPUs: the devices ``CUDA_VISIBLE_DEVICES`` lists (set and empty: none), else Ray's GPU
    ids when this is a Ray worker, else none; and their ids, comma-separated, when known (what tells two
    processes sharing a GPU apart from two GPUs). Ray is never imported here."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return _visible(visible)
    ray = sys.modules.get("ray")
    try:
        if ray is not None and ray.is_initialized():
            ids = [str(d) for d in ray.get_gpu_ids()]
            return len(ids), ",".join(ids) or None
    except Exception as exc:  # a Ray without a worker context: nothing to learn
        internal_error(exc, "ray-gpu-ids")
    return 0, None


def _visible(visible: str) -> tuple[int, str | None]:
    """The devices a ``CUDA_VISIBLE_DEVICES`` value lists, read as CUDA reads it: indices, ``GPU-`` UUIDs or
    ``MIG-`` ids up to the first entry that is none of them (a negative index, garbage: CUDA hides it and
    every one after it); an entry named twice (``0,0``, ``1,01``, a UUID again) hides them all, as CUDA
    does."""
    ids: list[str] = []
    seen: set[object] = set()
    for entry in visible.split(","):
        entry = entry.strip()
        digits = entry.isdigit() and entry.isascii()
        if not digits and not entry.startswith(("GPU-", "MIG-")):
            break
        same = int(entry) if digits else entry
        if same in seen:
            return 0, None
        seen.add(same)
        ids.append(entry)
    return len(ids), ",".join(ids) or None


def device_name() -> str | None:
    """The first visible GPU's name, best effort: from torch when the job already imported it (lens_rl never
    imports it), else None."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            return str(torch.cuda.get_device_name(0))
    except Exception as exc:
        internal_error(exc, "device-name")
    return None


def gpu_uuids(ids: str) -> tuple[list[str] | None, str | None]:
    """The UUIDs of the GPUs ``ids`` names (comma-separated indices, ``GPU-`` UUIDs or prefixes of one, or
    ``MIG-`` ids: a MIG instance counts as its GPU) and the first one's name, resolved through NVML as CUDA
    resolves them (up to the first that names no device: an empty list where the first does not); without
    NVML, UUIDs given as such are kept and anything else is unknown (None)."""
    names = [d.strip() for d in ids.split(",") if d.strip()]
    if not names:
        return None, None
    try:
        from lens_rl.devices.nvml import resolve_uuids

        resolved = resolve_uuids(names)
    except Exception as exc:
        internal_error(exc, "gpu-uuids")
        resolved = None
    if resolved is not None:
        return resolved
    if all(name.startswith("GPU-") for name in names):
        return names, None
    return None, None
