"""Profiler windows at step boundaries: one step captured by the configured backend, linked to its step.

:class:`Profiler` is the process's :data:`lens_rl._runtime.RUNTIME` ``step_hook``, installed by the lifecycle
when telemetry starts (never while off: then no file is looked at, ever). The phase engine calls it at step
boundaries only (a driver's step umbrella opening and closing; a worker's first phase of a new step), so a phase
pays one slot read. At a boundary it:

* closes the open window if its step is over (or it was cut: ``max_bytes``, estimated by the memory the
  process grew by while it was open, checked by a watcher thread that only marks it);
* looks at the run folder's request file (:mod:`lens_rl.devices.profile_requests`), at most once a second: a
  stat, and a read only when it changed;
* opens a window when this step is wanted: by the config's ``steps`` (on the config's ``groups`` / ``ranks``),
  by a request naming this process, or by the automatic trigger's request; at most ``max_windows``;
* with ``steps: auto``, on a worker (no step umbrella), writes its line for the step it left
  (:mod:`lens_rl.devices.profile_auto`: its compute there, from the engine's per-step tally).

A window is one step of one process: ``profiles/<group>-<rank>-step<N>.<ext>`` in the run folder (``-2``,
``-3`` ... after ``step<N>`` where an earlier attempt's capture of that step is there: never written over), and a span
``rl.profile`` (bucket ``overhead``) over it with ``rl.profile.path``, ``rl.profile.backend`` and
``rl.profile.reason``. A missing or failing backend is one warning; the step never fails.

Example::

    profiler = install(handle)       # RUNTIME.step_hook = profiler
    ...
    profiler.close("shutdown")
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from lens_rl._errors import internal_error, warn_once
from lens_rl._runtime import RUNTIME
from lens_rl.buckets import COMPUTE_BUCKETS
from lens_rl.devices.profile_auto import AutoTrigger
from lens_rl.devices.profile_backends import Backend, BackendMissingError, make_backend
from lens_rl.devices.profile_devices import claim_devices, device_keys, release_devices
from lens_rl.devices.profile_requests import (
    PROFILES,
    REQUEST_FILE,
    Want,
    matches,
    read_requests,
    want_of,
    write_answer,
)
from lens_rl.devices.profile_window import ALWAYS, Window, free_name, watch, window_span
from lens_rl.store.format import safe_part

__all__ = ["ALWAYS", "Profiler", "install", "uninstall"]

#: How often, at most, a process looks at the request file (seconds): a stat at a step boundary at least this
#: long after the last one, and a read only when it changed.
REQUEST_EVERY_S = 1.0
#: A request written this long before the process's telemetry started is an earlier attempt's: left alone.
STALE_REQUEST_NS = 600 * 10**9
#: The most request ids a process remembers having taken.
SEEN_MAX = 1024


class Profiler:
    """The step hook of one process (see the module docstring)."""

    def __init__(self, handle: Any) -> None:
        config = handle.config
        resource = handle.resource.attributes
        self.handle = handle
        self.spec = getattr(config, "profile", None)
        self.group = str(resource.get("rl.worker_group", "worker"))
        uuids = resource.get("rl.gpu.uuids")
        self.uuids = [str(u) for u in uuids] if isinstance(uuids, (list, tuple)) else []  # (the devices it claims)
        try:
            self.rank = int(resource.get("nv.dl.rank", 0))
        except (TypeError, ValueError):
            self.rank = 0
        self.run = Path(config.trace_dir) / safe_part(config.run_id or "run", "run")
        self.request_path = self.run / REQUEST_FILE
        spec = self.spec
        self.backend = spec.backend if spec is not None else "torch"
        self.max_windows = spec.max_windows if spec is not None else 2
        self.max_bytes = spec.max_bytes if spec is not None else 512 << 20
        self.config_steps = spec.steps if spec is not None and isinstance(spec.steps, tuple) else None
        if self.config_steps is not None and not _chosen(spec, self.group, self.rank):
            self.config_steps = None
        #: what the engine compares a phase's step with (ALWAYS while a window is open)
        self.step: Any = None
        self.current: int | None = None
        self.windows = 0
        self.window: Window | None = None
        self.pending: list[Want] = []  # the steps requests want here, not yet captured or refused
        self.next_look = 0.0  # (the monotonic time from which the next boundary looks at the request file)
        self.request_key: tuple[int, int, int] | None = None  # (the request file's mtime, size, inode last read)
        self.requests_seen: set[str] = set()  # (the ids of the requests in the file: each taken once)
        self.captures: dict[str, tuple[list[str], list[str], list[list[int]]]] = {}  # id -> (files, errors, refused)
        self.done: set[int] = set()  # steps captured (or tried) here: never twice
        self.lock = threading.Lock()
        self.created_ns = time.time_ns()
        self.auto: AutoTrigger | None = None
        self.umbrellas = False  # (a step umbrella ended here: its lines are written as umbrellas end)
        self.cpu_mark = 0.0  # (the process's CPU seconds at its last step boundary: auto only)
        if spec is not None and spec.steps == "auto":
            decides = getattr(handle, "role", "") == "driver" or self.rank == 0
            self.auto = AutoTrigger(self.run, self.group, self.rank, decides, self.plan_local)
        self._backend: Backend | None = None
        self._watch: threading.Event | None = None

    # ------------------------------------------------------------------ the engine's calls

    def boundary(self, step: Any, parent: Any) -> None:
        """A step began here (``parent``: the umbrella's span, or a worker phase's parent context). Never raises."""
        try:
            self._boundary(step, parent)
        except Exception as exc:
            internal_error(exc, "profile-boundary")

    def closing(self, step: Any) -> bool:
        """A step umbrella of ``step`` is closing on this thread: the window of its step stops now, inside it (the
        capture's stopping and writing within the step's wall). True when one stopped. Never raises."""
        window = self.window
        if window is None or window.step != step or window.thread != threading.get_ident():
            return False
        self._close_safe(window.cut or "step end")
        return True

    def step_end(self, step: Any, end_ns: int) -> None:
        """A step umbrella closed: the window of its step ends here if still open (and ``auto`` looks at its wall)."""
        auto, last, window = self.auto, RUNTIME.last_step, self.window
        self.umbrellas = True
        if auto is not None and last is not None and last["step"] == step:
            profiled = window is not None or step in self.done
            compute = sum(last["seconds"].get(bucket, 0.0) for bucket in COMPUTE_BUCKETS)
            auto.step_done(step, last["wall_s"], compute, profiled)
        if window is not None and window.step == step and window.thread == threading.get_ident():
            self._close_safe(window.cut or "step end")

    def _boundary(self, step: Any, parent: Any) -> None:
        window = self.window
        if window is not None:
            if window.cut is None and (step == window.step or _older(step, window.step)):
                return  # a phase of the window's own step, or a late phase of an older one (no boundary)
            if window.thread == threading.get_ident():
                self._close_safe(window.cut or "step end")
        if step.__class__ is not int:  # (a bool or a framework's text step: no window)
            return
        current = self.current
        if current is not None and step < current:
            return  # a late phase of an older step (an async pipeline): no boundary
        if self.auto is not None and (current is None or step > current):
            self._left(current)
        self.current = step
        if self.window is None:
            self.step = step
        now = time.monotonic()
        if now >= self.next_look:  # (at most once a second)
            self.next_look = now + REQUEST_EVERY_S
            self._look(step)
        config = self.config_steps
        if not self.pending and (config is None or not config[0] <= step <= config[1]):
            return  # (the common case: no window wanted at this step)
        with self.lock:  # (threads of one process reaching a boundary at once open one window)
            self._plan(parent, step, config is not None and config[0] <= step <= config[1])

    def _left(self, step: int | None) -> None:
        """``steps: auto``: this process began a later step than ``step`` (None: its first): a worker's line for
        ``step``: its compute there, from the engine's tally, and the CPU seconds the process used since the
        boundary before (a process with step umbrellas writes its lines as they end)."""
        cpu, self.cpu_mark = self.cpu_mark, time.process_time()
        tally = RUNTIME.step_tally
        if tally is None or self.auto is None or step is None:
            return
        compute = tally.pop(step, 0.0)
        for key in list(tally):  # (bounded: late phases of older steps)
            if not (key.__class__ is int and key > step):
                tally.pop(key, None)
        if not self.umbrellas:
            self.auto.worker_step(step, compute, self.cpu_mark - cpu, step in self.done)

    def _plan(self, parent: Any, step: int, configured: bool) -> None:
        """Open the window ``step`` is wanted for (by the config, by requests), or tell each request why not."""
        wants = [want for want in self.pending if want.lo <= step <= want.hi]
        for want in self.pending:
            if want.hi < step:  # (steps this process never began: it went on from an earlier one to this one)
                self._refuse(want.request, want.lo, want.hi, f"this process went on to step {step} without them")
            want.lo = max(want.lo, step + 1)
        self.pending = [want for want in self.pending if want.hi > step]
        if not wants and not configured:
            return
        window = self.window
        if window is not None and window.step == step:  # (opened by another thread at this step: it answers too)
            window.requests.extend(want.request for want in wants if want.request is not None)
            return
        if self.windows >= self.max_windows:  # (every later step of these requests too)
            for want in wants:
                self.pending = [other for other in self.pending if other is not want]
                self._refuse(want.request, step, want.hi, f"max_windows ({self.max_windows}) reached")
            return
        if window is not None or step in self.done:
            why = f"a window is open here (step {window.step})" if window is not None else "already captured here"
            for want in wants:
                self._refuse(want.request, step, step, why)
            return
        if wants:
            first = wants[0]
            requests = [want.request for want in wants if want.request is not None]
            self._open(parent, step, first.reason, requests, first.backend)
        else:
            self._open(parent, step, "config", [], None)

    def _refuse(self, request: str | None, lo: int, hi: int, why: str) -> None:
        """Tell ``request`` (its answer file) that steps ``lo`` to ``hi`` will not be captured here, and why."""
        if request is None:
            return
        shown = f"step {lo}" if lo == hi else f"steps {lo}-{hi}"
        files, errors, refused = self.captures.setdefault(request, ([], [], []))
        errors.append(f"{shown} not captured on {self.group} rank {self.rank}: {why}")
        refused.append([lo, hi])
        self._answer(request)

    def _answer(self, request: str) -> None:
        files, errors, refused = self.captures.setdefault(request, ([], [], []))
        try:
            write_answer(self.run, request, self.group, self.rank, files, errors, refused)
        except OSError as exc:
            internal_error(exc, "profile-answer")

    # ------------------------------------------------------------------ requests

    def plan_local(self, step: int, reason: str) -> None:
        """The automatic trigger's capture of ``step`` on this process (or, if begun, the first step not)."""
        with self.lock:
            begun = self.current
            if begun is not None and begun >= step:
                reason = f"{reason} (step {step} had begun here: step {begun + 1}, the first not)"
                step = begun + 1
            self.pending.append(Want(None, step, step, reason, None))

    def _look(self, step: int) -> None:
        """Read the request file if it changed (a stat; a read only when it changed)."""
        try:
            stat = os.stat(self.request_path)
            key: tuple[int, int, int] | None = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        except OSError:
            key = None
        if key == self.request_key:
            return
        self.request_key = key
        requests = read_requests(self.request_path) if key is not None else []
        seen = {request["id"] for request in requests}
        for request in requests:
            if request["id"] not in self.requests_seen:
                self._take(request, step)
        self.requests_seen |= seen
        if len(self.requests_seen) > SEEN_MAX:  # (bounded: those no longer in the file never come back)
            self.requests_seen = seen

    def _take(self, request: dict[str, Any], step: int) -> None:
        written = request.get("written_ns")
        if isinstance(written, int) and written < self.created_ns - STALE_REQUEST_NS:
            return  # left by an earlier attempt of the run: not this process's to take
        if not matches(request, self.group, self.rank):
            return
        want, why = want_of(request, step)
        if want is None:
            self._refuse(request["id"], request["steps"][0], request["steps"][1], why)
            return
        self.captures.setdefault(request["id"], ([], [], []))
        if self.windows >= self.max_windows:
            self._refuse(request["id"], want.lo, want.hi, f"max_windows ({self.max_windows}) reached")
            return
        self.pending.append(want)
        self._answer(request["id"])  # (an answer with nothing yet: `lens-rl profile` knows this process took it)

    # ------------------------------------------------------------------ windows

    def _open(self, parent: Any, step: int, reason: str, requests: list[str], backend: str | None) -> None:
        backend_name = backend or self.backend
        self.done.add(step)
        claimed: list[Path] = []
        try:
            made = make_backend(backend_name)
            (self.run / PROFILES).mkdir(parents=True, exist_ok=True)
            name = free_name(self.run / PROFILES, f"{safe_part(self.group, 'worker')}-{self.rank}-step{step}")
            claimed = claim_devices(self.run / PROFILES, device_keys(backend_name, self.uuids))
            window = Window(step, backend_name, name, reason, requests, parent)
            window.start_ns = time.time_ns()
            made.start(name)
            window.started_ns = time.time_ns()
            window.device = claimed
        except Exception as exc:
            release_devices(claimed)
            self._failed(requests, step, backend_name, exc)
            return
        self.windows += 1
        self._backend = made
        self.window = window
        self.step = ALWAYS  # every phase now asks whether the window must close (a cut, another step)
        self._watch = watch(window, self.max_bytes)

    def _close_safe(self, why: str) -> None:
        try:
            self.close(why)
        except Exception as exc:
            internal_error(exc, "profile-close")

    def close(self, why: str = "step end") -> None:
        """Stop the open window (on the thread that opened it), write its capture and its span."""
        with self.lock:
            window, backend = self.window, self._backend
            self.window, self._backend = None, None
            self.step = self.current
            if self._watch is not None:
                self._watch.set()
        if window is None or backend is None:
            return
        files: list[str] = []
        device = window.device
        error = None
        stop_ns = time.time_ns()
        try:
            written = backend.stop(self.run / PROFILES / window.name)
            files = [str(path.relative_to(self.run)) for path in written]
        except Exception as exc:
            error = f"{window.backend} backend failed: {type(exc).__name__}: {exc}"
            warn_once(f"profile-{window.backend}-failed", "lens_rl: profiler window not written (%s)", error)
        end_ns = time.time_ns()
        release_devices(device)
        window_span(window, files, why, stop_ns, end_ns, error)
        for request in window.requests:
            done, errors, refused = self.captures.setdefault(request, ([], [], []))
            done.extend(files)
            if error:
                errors.append(error)
                refused.append([window.step, window.step])
            self._answer(request)

    def _failed(self, requests: list[str], step: int, backend: str, exc: BaseException) -> None:
        if isinstance(exc, BackendMissingError):
            text = f"{backend} profiler unavailable: {exc}"
        else:
            text = f"{backend} profiler failed to start: {type(exc).__name__}: {exc}"
        warn_once(f"profile-{backend}", "lens_rl: no profiler window (%s); the job goes on", text)
        for request in requests:
            files, errors, refused = self.captures.setdefault(request, ([], [], []))
            errors.append(text)
            refused.append([step, step])
            self._answer(request)


def _older(step: Any, than: Any) -> bool:
    """Is ``step`` an older step than ``than`` (both ints)?"""
    return step.__class__ is int and than.__class__ is int and step < than


def _chosen(spec: Any, group: str, rank: int) -> bool:
    import fnmatch

    if spec.groups and not any(fnmatch.fnmatchcase(group, pattern) for pattern in spec.groups):
        return False
    return not (spec.ranks and rank not in spec.ranks)


def install(handle: Any) -> Profiler | None:
    """Make a :class:`Profiler` for ``handle`` the process's step hook (closing any previous one's window)."""
    uninstall()
    try:
        profiler = Profiler(handle)
    except Exception as exc:
        internal_error(exc, "profile-install")
        return None
    RUNTIME.step_hook = profiler
    RUNTIME.step_tally = {} if profiler.auto is not None else None  # (a worker's compute per step: auto only)
    return profiler


def uninstall(why: str = "shutdown") -> None:
    """Close the open window, if any (shutdown: its capture is written), and remove the hook."""
    hook = RUNTIME.step_hook
    RUNTIME.step_hook = None
    RUNTIME.step_tally = None
    if isinstance(hook, Profiler):
        with hook.lock:
            pending, hook.pending = hook.pending, []
        for want in pending:  # (a request waiting here is told, so `lens-rl profile` stops waiting)
            hook._refuse(want.request, want.lo, want.hi, f"the process ended ({why}) before it")
    if isinstance(hook, Profiler) and hook.window is not None:
        if hook.window.thread == threading.get_ident():
            hook._close_safe(why)
        else:
            warn_once("profile-other-thread", "lens_rl: a profiler window open on another thread was not written")
