"""The passes ``status`` and ``watch`` make over a run's folder: its heartbeat files, and (for watch) its
goodput through the refresh cache, so a look costs what is new.

Example::

    beats, notes = heartbeats(run_dir)        # every live-*.json, notes on those not read
    gone(beats[0])                            # its writer surely gone (this host, its pid dead)
    report, notes = goodput_now(run_dir)      # None when no span file is there yet
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from lens_rl.store import LIVE_MIN_INTERVAL_MS, TIME_MAX_NS, TIME_MIN_NS, process_gone, read_live, span_files

if TYPE_CHECKING:
    from lens_rl.offline.rollup.schema import GoodputReport

__all__ = ["LIVE_MIN_INTERVAL_MS", "gone", "goodput_now", "has_heartbeats", "heartbeats", "plausible_ns"]


def heartbeats(run_dir: str | Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every heartbeat of the run in ``run_dir`` in a stable order (each with its ``path`` and ``mtime_ns``),
    and a note on each file that is none."""
    return read_live(run_dir)


def gone(beat: dict[str, Any]) -> bool:
    """Whether the process that wrote ``beat`` is surely gone: a reader on its host, in its pid namespace,
    finds its pid dead or another process's (:func:`lens_rl.store.process_gone`); False where that cannot be
    told (another host, no mark), and the heartbeat's age decides."""
    return process_gone(beat.get("proc"), beat.get("pid"))


def plausible_ns(value: Any) -> TypeGuard[int]:
    """Whether a heartbeat's time (ns since the epoch) is one the store reads (from 2000 on, before the far
    future): any other is no reading."""
    return type(value) is int and TIME_MIN_NS <= value < TIME_MAX_NS


def has_heartbeats(run_dir: Path) -> bool:
    """Whether any process of the run has written a heartbeat file."""
    return any(run_dir.glob("live-*.json"))


def goodput_now(run_dir: Path, jobs: int | None = None) -> tuple[GoodputReport | None, list[str]]:
    """The run's goodput report (None without a span file) read through its refresh cache, and the notes
    on the files not read."""
    from lens_rl.offline.run.analyze import analyze
    from lens_rl.offline.run.cache import cache_folder

    notes: list[str] = []
    paths = span_files(run_dir, notes)
    return (analyze(paths, jobs=jobs, cache=cache_folder(run_dir)) if paths else None), notes
