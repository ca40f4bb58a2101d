"""Which process of a run samples a host's GPUs: the one holding an exclusive ``flock`` on a local file keyed
by the run id (never on the shared store: locks there are unreliable). The kernel drops the lock when its
holder exits or is killed, so a process that retries takes it over. The same directory holds the holder's
latest sample (:func:`latest_path`), which every process of the run on the host reads for its heartbeat.

A forked child closes its copy of the lock's descriptor at once: a lock inherited across ``fork`` would
keep the sampling held by a process that does not sample.

Example::

    lock = try_lock("run42")      # an open descriptor: this process samples; None: another one does
    ...
    unlock(lock)
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

from lens_rl.store import safe_part

__all__ = ["latest_path", "lock_path", "try_lock", "unlock"]

_HELD: set[int] = set()
_GUARD = threading.Lock()


def _base(run_id: str, suffix: str) -> Path:
    """The run's file of this kind (``suffix`` appended: a run id with a dot, ``qwen2.5-7b``, keeps all of it)."""
    user = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"lens_rl-gpu-{user}-{safe_part(run_id, 'run')}{suffix}"


def lock_path(run_id: str) -> Path:
    """The run's lock file on this host (the system's temporary directory, per user)."""
    return _base(run_id, ".lock")


def latest_path(run_id: str) -> Path:
    """Where the run's sampler on this host keeps its latest sample (rewritten whole)."""
    return _base(run_id, ".latest.json")


def try_lock(run_id: str) -> int | None:
    """Take the run's lock without waiting: its descriptor, or None when another process holds it (or the
    file cannot be opened)."""
    import fcntl

    try:
        fd = os.open(lock_path(run_id), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    with _GUARD:
        _HELD.add(fd)
    return fd


def unlock(fd: int | None) -> None:
    """Release the lock (closing its descriptor, once: a second call does nothing); never raises."""
    with _GUARD:
        if fd is None or fd not in _HELD:
            return
        _HELD.discard(fd)
    try:
        os.close(fd)
    except OSError:
        pass


def _after_fork_in_child() -> None:
    for fd in list(_HELD):
        unlock(fd)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
