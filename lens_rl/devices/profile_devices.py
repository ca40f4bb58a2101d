"""One profiler window per device across the processes of a host: a trainer and a vLLM engine on one GPU never
profile at once (two profilers on one device lose data or clash on the GPU's counters).

A window on a device claims ``<run>/profiles/.device-<host>-<devices>.lock`` (created exclusively, holding the
claiming pid) and releases it when it closes; a lock whose pid is gone is taken over. ``<devices>`` is the
process's ``CUDA_VISIBLE_DEVICES`` (``all`` when unset). A CPU-only ``torch`` window claims nothing.

Example::

    lock = claim_device(run / "profiles", device_key("cuda"))    # RuntimeError: another process profiles it
    ...
    release_device(lock)
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path

from lens_rl.devices.profile_backends import cuda_in_use
from lens_rl.store.format import safe_part

__all__ = ["DeviceBusyError", "claim_device", "device_key", "release_device"]


class DeviceBusyError(RuntimeError):
    """Another process of this host has a window open on the device."""


def device_key(backend: str) -> str | None:
    """The device a window of ``backend`` would profile, as a lock name; None for a CPU-only window."""
    if backend == "torch":
        torch = sys.modules.get("torch")
        if torch is None or not cuda_in_use(torch):
            return None
    devices = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip() or "all"
    return safe_part(f"{socket.gethostname()}-{devices}", "device")


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
