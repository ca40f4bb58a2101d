"""What every process is doing now: heartbeats, the open-phase gauge and the hang watchdog.

One daemon thread per process with telemetry on (:class:`LiveMonitor`) wakes every ``tick_s``:

* **Heartbeat.** With the file store and ``heartbeat_interval_ms`` > 0, it rewrites
  ``trace_dir/<run_id>/live-<group>-<rank>-<pid>.json`` atomically (a temporary file, then a rename) every
  interval (at least :data:`~lens_rl.store.LIVE_MIN_INTERVAL_MS`, the thread's shortest wait; the heartbeat
  says the interval it keeps): the resource, the time written, the open phases (name, step, bucket, start, thread; a
  suspected hang marked), the last completed step, per phase name the count, longest and p95 completed
  durations, ``stats()``, the interval, ``state`` (``running``; ``ended`` at shutdown: the heartbeat goes
  on while a shutdown flushes the spans, however long the exporter takes within its budget, so a process
  that is shutting down is never read as stale; the last one says ``ended``) and, on Linux, the
  process's mark (``proc``: boot id, pid namespace, start time), by which a reader on the same host tells a
  killed process from a live one at once (:mod:`lens_rl.store.alive`). The open phases
  are read from what the runtime already holds: the hot path pays nothing for it. A failed write warns once.
* **Gauge.** ``rl.phase.open_seconds`` (attribute ``rl.phase``): per open phase name, the age of its
  oldest open run, observed when metrics are collected (any exporter).
* **Watchdog.** A phase open longer than ``max(hang_timeout_s, 5 x its name's longest completed run here)``
  (a name never completed waits ``3 x hang_timeout_s``) is a suspected hang: one warning naming it with
  every thread's stack (bounded), the mark on the heartbeat, ``rl.phase.hangs`` counted, and an
  ``rl.hang_suspected`` event on its span when it ends. Nothing is interrupted and nothing raises.

Example::

    monitor = LiveMonitor(handle)
    monitor.start()
    ...
    monitor.stop()          # the last heartbeat says "ended"
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from opentelemetry import metrics as metrics_api

from lens_rl._errors import internal_error, warn_once
from lens_rl._runtime import RUNTIME
from lens_rl.store import LIVE_FORMAT, LIVE_MIN_INTERVAL_MS, live_path, process_mark

__all__ = [
    "HANG_FACTOR",
    "HANGS",
    "NEVER_DONE_FACTOR",
    "OPEN_SECONDS",
    "LiveMonitor",
    "hang_timeout",
]

OPEN_SECONDS = "rl.phase.open_seconds"
HANGS = "rl.phase.hangs"
#: A phase is suspected hung past this many times its name's longest completed run (and hang_timeout_s).
HANG_FACTOR = 5.0
#: A name never completed in this process waits this many times hang_timeout_s.
NEVER_DONE_FACTOR = 3.0
#: Bounds on a hang warning: frames per thread, characters in all, warnings with stacks per process.
STACK_FRAMES = 30
STACK_CHARS = 20_000
MAX_HANG_WARNINGS = 10
#: At most this many open phases in a heartbeat (the oldest first).
MAX_OPEN = 64

_log = logging.getLogger("lens_rl")


def hang_timeout(longest_s: float | None, hang_timeout_s: float) -> float:
    """The learned timeout of a phase name: ``max(hang_timeout_s, 5 x its longest completed run)``, or
    ``3 x hang_timeout_s`` for a name never completed."""
    if longest_s is None:
        return NEVER_DONE_FACTOR * hang_timeout_s
    return max(hang_timeout_s, HANG_FACTOR * longest_s)


def _open_nodes() -> list[Any]:
    """The process's open phases, oldest first (a copy: the hot path keeps changing the table)."""
    for _ in range(3):
        try:
            nodes = list(RUNTIME.open_phases.values())
            break
        except RuntimeError:  # changed size while copied (another thread): try again
            continue
    else:
        return []
    nodes.sort(key=lambda node: node.start_ns)
    return nodes


class LiveMonitor:
    """The live side of one handle: heartbeats (file store), the open-phase gauge, the hang watchdog."""

    def __init__(self, handle: Any) -> None:
        config = handle.config
        self.handle = handle
        self.hang_timeout_s = float(config.hang_timeout_s)
        # (the interval it keeps and says: a shorter one than its thread's shortest wait would be said and
        # not kept, and a reader would call a healthy process stale)
        self.interval_s = config.heartbeat_interval_ms / 1000.0
        if self.interval_s > 0:
            self.interval_s = max(self.interval_s, LIVE_MIN_INTERVAL_MS / 1000.0)
        resource = dict(handle.resource.attributes)
        self.resource = resource
        self.pid = os.getpid()
        self.path = (
            live_path(config.trace_dir, config.run_id or "run", resource, self.pid)
            if config.exporter == "file" and self.interval_s > 0
            else None
        )
        #: this process's mark (boot id, pid namespace, start time; None off Linux), read once, not per beat
        self.mark = process_mark() if self.path is not None else None
        beat = self.interval_s if self.path is not None else 1.0
        self.tick_s = max(LIVE_MIN_INTERVAL_MS / 1000.0, min(beat, 1.0, self.hang_timeout_s / 4))
        self.hangs = 0
        self._warned = 0
        self._last_write = 0.0
        self._write_lock = threading.Lock()
        self._ended = False  # the last heartbeat is written: no later one (a late round of the thread) replaces it
        #: key -> a callable whose answer (unless None) the heartbeat carries under that key (``gpu``: the
        #: process's GPUs' latest sample, from ``lens_rl.devices``, a floor above this one).
        self.sources: dict[str, Callable[[], Any]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        meter = handle.meter
        self._hangs = meter.create_counter(HANGS, unit="{phase}", description="Phases suspected hung")
        meter.create_observable_gauge(
            OPEN_SECONDS,
            callbacks=[self._observe],
            unit="s",
            description="Age of the oldest open run of each open phase name",
        )

    # ------------------------------------------------------------------ thread

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lens_rl-live", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 1.0, *, last: bool = True) -> None:
        """Stop the thread (waiting at most ``timeout_s``) and, with ``last``, write the last heartbeat
        (:meth:`end`). A handle shutting down stops it once its spans are flushed (the heartbeat goes on
        while they are), so the last heartbeat's ``stats()`` are the final ones."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(timeout_s, 0.0))
        if last:
            self.end()

    def end(self) -> None:
        """Write the last heartbeat, ``state: ended`` (not in a forked child: the file is its parent's)."""
        if self.path is not None and os.getpid() == self.pid:
            self.write("ended")

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            if os.getpid() != self.pid:
                return  # a forked child: its own handle has its own monitor
            try:
                self.tick()
            except Exception as exc:
                internal_error(exc, "live")

    def tick(self, now_ns: int | None = None) -> None:
        """One round: the watchdog, then a heartbeat if one is due."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        self.watch(now_ns)
        if self.path is not None and time.monotonic() - self._last_write >= self.interval_s * 0.999:
            self.write("running", now_ns)

    # ---------------------------------------------------------------- watchdog

    def _timeout(self, name: str) -> float:
        metrics = self.handle.phase_metrics
        longest = metrics.stats.longest(name) if metrics is not None else None
        return hang_timeout(longest, self.hang_timeout_s)

    def watch(self, now_ns: int) -> None:
        """Flag every open phase past its learned timeout (once each), innermost first per thread: a phase
        waits while one opened inside it on its thread is still within its own timeout (the inner one says
        where the time goes). One warning per thread and round, about the innermost flagged; the
        enclosing ones flagged with it are named in it."""
        metrics = self.handle.phase_metrics
        if metrics is not None:
            metrics.drain()  # completed runs so far: what the timeouts are learned from
        by_thread: dict[int, list[Any]] = {}
        for node in _open_nodes():
            by_thread.setdefault(node.thread, []).append(node)
        for nodes in by_thread.values():
            flagged = []
            for node in reversed(nodes):  # innermost (latest opened) first
                if node.hang is not None:
                    continue
                age = (now_ns - node.start_ns) / 1e9
                timeout = self._timeout(node.name)
                if age <= timeout:
                    break  # within its timeout: what encloses it waits for it
                node.hang = (round(age, 3), round(timeout, 3))
                self.hangs += 1
                self._hangs.add(1, {"rl.phase": node.name})
                flagged.append(node)
            if flagged:
                self._warn(flagged[0], [n.name for n in flagged[1:]])

    def _warn(self, node: Any, enclosing: list[str]) -> None:
        res = self.resource
        where = f"{res.get('rl.worker_group', 'worker')} rank {res.get('nv.dl.rank', 0)} (pid {self.pid})"
        self._warned += 1
        if self._warned > MAX_HANG_WARNINGS:
            if self._warned == MAX_HANG_WARNINGS + 1:
                _log.warning("lens_rl: more suspected hangs on %s: counted in %s, no longer logged", where, HANGS)
            return
        age, timeout = node.hang
        inside = f" (inside {', '.join(map(repr, enclosing))}, suspected too)" if enclosing else ""
        _log.warning(
            "lens_rl: suspected hang: phase %r (step %s)%s on %s has been open %.1f s, past its timeout %.1f s "
            "(max(hang_timeout_s, %gx its longest run here)); the job is not interrupted. Threads:\n%s",
            node.name,
            node.step,
            inside,
            where,
            age,
            timeout,
            HANG_FACTOR,
            stacks(node.thread),
        )

    # --------------------------------------------------------------- heartbeat

    def heartbeat(self, state: str, now_ns: int | None = None) -> dict[str, Any]:
        """The heartbeat's content (see the module docstring)."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        names = {t.ident: t.name for t in threading.enumerate()}
        open_phases = []
        for node in _open_nodes()[:MAX_OPEN]:
            entry: dict[str, Any] = {
                "name": node.name,
                "step": node.step,
                "bucket": node.bucket.value if node.bucket is not None else None,
                "start_ns": node.start_ns,
                "age_s": round((now_ns - node.start_ns) / 1e9, 3),
                "timeout_s": round(self._timeout(node.name), 3),
                "thread": node.thread,
                "thread_name": names.get(node.thread),
            }
            if node.hang is not None:
                entry["hang"] = {"age_s": node.hang[0], "timeout_s": node.hang[1]}
            open_phases.append(entry)
        metrics = self.handle.phase_metrics
        if metrics is not None:
            metrics.drain()
        beat = {
            "v": 1,
            "format": LIVE_FORMAT,
            "kind": "live",
            "role": "driver" if self.handle.role == "driver" else "worker",
            "resource": self.resource,
            "pid": self.pid,
            "written_ns": now_ns,
            "interval_ms": round(self.interval_s * 1000),
            "hang_timeout_s": self.hang_timeout_s,
            "state": state,
            "open": open_phases,
            "last_step": RUNTIME.last_step,
            "phase_step": RUNTIME.phase_step,
            "weight_version": RUNTIME.weight_version,
            "phases": metrics.stats.snapshot() if metrics is not None else {},
            "hangs": self.hangs,
            "stats": self.handle.stats(),
        }
        if self.mark is not None:
            beat["proc"] = self.mark
        for key, source in list(self.sources.items()):
            try:
                value = source()
            except Exception as exc:
                internal_error(exc, f"heartbeat-{key}")
                continue
            if value is not None:
                beat[key] = value
        return beat

    def write(self, state: str, now_ns: int | None = None) -> bool:
        """Write the heartbeat atomically; a failure warns once (per file) and never raises. Nothing once the
        last one (``ended``) is written."""
        with self._write_lock:
            if self._ended:
                return False
            self._ended = state == "ended"
            return self._write(state, now_ns)

    def _write(self, state: str, now_ns: int | None) -> bool:
        from lens_rl.export.lines import json_line

        path = self.path
        if path is None:
            return False
        self._last_write = time.monotonic()
        temporary = path.with_name(f".{path.name}.tmp")
        try:
            data = (json_line(self.heartbeat(state, now_ns)) + "\n").encode()
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(temporary, "wb") as handle:
                handle.write(data)
            os.replace(temporary, path)
            return True
        except OSError as exc:
            warn_once(f"live-{path}", "lens_rl: cannot write the heartbeat %s: %s (retrying)", path, exc)
        except Exception as exc:
            internal_error(exc, "heartbeat")
        try:
            os.unlink(temporary)
        except OSError:
            pass
        return False

    # ------------------------------------------------------------------ gauge

    def _observe(self, _options: Any) -> list[metrics_api.Observation]:
        now_ns = time.time_ns()
        ages: dict[str, float] = {}
        for node in _open_nodes():
            ages.setdefault(node.name, (now_ns - node.start_ns) / 1e9)  # oldest first: the first is the oldest
        return [metrics_api.Observation(age, {"rl.phase": name}) for name, age in ages.items()]


def stacks(marked: int | None = None) -> str:
    """Every thread's stack but the calling watchdog's own (the last :data:`STACK_FRAMES` frames each,
    :data:`STACK_CHARS` characters in all), the thread ``marked`` first, named as the suspected phase's."""
    names = {t.ident: t.name for t in threading.enumerate()}
    frames = sys._current_frames()
    me = threading.get_ident()
    order = sorted((ident for ident in frames if ident != me or ident == marked), key=lambda ident: ident != marked)
    parts = []
    for ident in order:
        label = " <- the suspected phase's thread" if ident == marked else ""
        parts.append(f"--- thread {names.get(ident, '?')} ({ident}){label}\n")
        parts.extend(traceback.format_stack(frames[ident], limit=STACK_FRAMES))
    text = "".join(parts)
    if len(text) > STACK_CHARS:
        text = text[:STACK_CHARS] + f"\n... (cut at {STACK_CHARS} characters)"
    return text
