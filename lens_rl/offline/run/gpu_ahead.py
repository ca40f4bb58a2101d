"""A look's GPU work done beside its other work: the sample files read while the span files are, and the
join run while the rollup merges the parts (the C scanner and numpy let go of the GIL, and this process
only waits on its span-reading workers, then runs the rollup's Python, meanwhile).

Example::

    ahead = read_ahead(paths, cache, jobs)            # before the span files are read
    parts, stats = analyze_parts(paths, ...)
    joining = join_ahead(paths, parts, stats, cache, jobs, ahead)   # the GPU counts now in stats
    report = with_gpu(rolled_up(parts, stats, ...), joining.result())
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, NamedTuple

from lens_rl.offline.read.gpu_samples import SCANNER
from lens_rl.offline.run.gpu import GpuLook, gpu_join, gpu_read, read_run
from lens_rl.store import ReadStats

__all__ = ["Columns", "join_ahead", "read_ahead"]


class Columns(NamedTuple):
    """A part's GPU span columns as they were before the rollup merged the parts (the join's snapshot)."""

    key: Any
    gpu: Any
    device: dict[str, Any]  # (its host.name: the join takes its own host's devices)


def _on_thread(fn: Callable[..., Any], *args: Any) -> Future[Any]:
    """``fn(*args)`` on a daemon thread, its result or error in the future returned: a look that fails or is
    interrupted meanwhile exits at once (a pool's thread would hold the exit until the day of samples is read)."""
    future: Future[Any] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # (the look's to raise, when it asks for the result)
            future.set_exception(exc)

    threading.Thread(target=run, name="lens_rl-gpu-ahead", daemon=True).start()
    return future


class _Later:
    """``fn(*args)`` run in the thread that asks for its result, when it asks (a future that is no thread)."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._fn, self._args = fn, args

    def result(self) -> Any:
        return self._fn(*self._args)


def read_ahead(
    paths: Sequence[Path], cache: str | None, jobs: int | None = None, window: bool = False
) -> Future[Any] | _Later:
    """The run's sample files read on a thread of their own while the span files are read: pass it to
    :func:`join_ahead` (or :func:`~lens_rl.offline.run.gpu.gpu_look`). Without the C scanner they are read
    when the look asks (the pure-Python reading holds the GIL), the same way. ``window``: each device's window
    only where the cache keeps them (a look with no GPU lanes: :func:`~lens_rl.offline.run.gpu.read_run`)."""
    return (_on_thread if SCANNER else _Later)(read_run, paths, cache, jobs, window)


def join_ahead(
    paths: Sequence[Path],
    parts: Sequence[Any],
    stats: ReadStats,
    cache: str | None,
    jobs: int | None = None,
    ahead: Future[Any] | _Later | None = None,
) -> Future[GpuLook]:
    """The run's samples read (or ``ahead``'s reading waited for: its counts and notes are in ``stats`` when
    this returns, before the report is made of them) and joined to the parts on a thread, from a snapshot of
    their GPU columns: the parts may be merged meanwhile. ``.result()`` is the :class:`GpuLook`."""
    found, devices = gpu_read(paths, stats, cache, jobs, ahead)
    columns = [Columns(part.key, part.gpu, part.device) for part in parts if part.gpu is not None]
    if not found or not devices:
        done: Future[GpuLook] = Future()
        done.set_result(gpu_join(found, devices, columns, cache))
        return done
    return _on_thread(gpu_join, found, devices, columns, cache)
