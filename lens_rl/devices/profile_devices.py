"""Never two profilers on one device: a window claims each GPU its process uses, one lock per device,
``<run>/profiles/.device-<host>-<device>.lock`` (created exclusively, holding the claiming pid), all or none,
and releases them when it closes; a lock whose pid is gone is taken over. ``<device>`` is each of the
process's ``rl.gpu.uuids`` (resolved through NVML: a trainer naming GPU 0 by index and an engine naming it by
UUID claim the same lock), else each entry of its ``CUDA_VISIBLE_DEVICES``, else ``all``. A CPU-only
``torch`` window claims nothing.

Example::

    locks = claim_devices(run / "profiles", device_keys("cuda", uuids))   # DeviceBusyError: one is profiled
    ...
    release_devices(locks)
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from lens_rl.devices.profile_backends import cuda_in_use
from lens_rl.store.format import safe_part

__all__ = ["DeviceBusyError", "claim_device", "claim_devices", "device_keys", "release_device", "release_devices"]


class DeviceBusyError(RuntimeError):
    """Another process of this host has a window open on the device."""


def device_keys(backend: str, uuids: Sequence[str] = ()) -> list[str]:
    """The devices a window of ``backend`` would profile, as lock names (none for a CPU-only window): each of
    ``uuids`` (the process's ``rl.gpu.uuids``), else each ``CUDA_VISIBLE_DEVICES`` entry, else ``all``."""
    if backend == "torch":
        torch = sys.modules.get("torch")
        if torch is None or not cuda_in_use(torch):
            return []
    named = [str(u) for u in uuids] or [
        d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()
    ]
    host = socket.gethostname()
    return sorted({safe_part(f"{host}-{device}", "device") for device in named or ["all"]})


def claim_devices(folder: Path, keys: Sequence[str]) -> list[Path]:
    """Claim every one of ``keys`` for this process, or none: :class:`DeviceBusyError` (the claims made so far
    released) when a live process holds one."""
    claimed: list[Path] = []
    try:
        for key in keys:
            path = claim_device(folder, key)
            if path is not None:
                claimed.append(path)
    except BaseException:
        release_devices(claimed)
        raise
    return claimed


def release_devices(paths: Sequence[Path] | None) -> None:
    """Release the claims :func:`claim_devices` made (only this process's own)."""
    for path in paths or ():
        release_device(path)


def claim_device(folder: Path, key: str | None) -> Path | None:
    """Claim ``key`` for this process (None: nothing to claim); :class:`DeviceBusyError` when a live process
    holds it."""
    if key is None:
        return None
    path = folder / f".device-{key}.lock"
    # the claim appears whole, its pid already in it (written aside, then linked: a link fails where the name
    # exists): a claim seen half-written would read as no holder and be taken over by a second process
    mine = folder / f".device-{key}.{os.getpid()}.{threading.get_ident()}.tmp"
    mine.write_text(str(os.getpid()))
    try:
        for _ in range(2):
            try:
                os.link(mine, path)
            except FileExistsError:
                holder = _holder(path)
                if holder is not None and holder != os.getpid() and _alive(holder):
                    raise DeviceBusyError(f"device {key} has a profiler window open in process {holder}") from None
                try:
                    path.unlink()  # a dead holder's (or our own stale) claim
                except FileNotFoundError:
                    pass
                continue
            return path
    finally:
        mine.unlink(missing_ok=True)
    raise DeviceBusyError(f"device {key}: its lock could not be claimed")


def release_device(path: Path | None) -> None:
    """Release a claim made by :func:`claim_device` (only this process's own)."""
    if path is None:
        return
    try:
        if _holder(path) == os.getpid():
            path.unlink()
    except OSError:
        pass


def _holder(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
