"""Step umbrellas that are open but not current (a framework's step, opened by one call, closed by another).

An umbrella opened by one call and closed by another (transformers' ``on_step_begin`` / ``on_step_end``,
NeMo-RL's ``total_step_time``) is never made current: a context attached in one call and detached in
another is restored stale when they interleave. It is kept here instead, per thread, so that every phase
opened on that thread while it is open and with no phase made current since (a woven framework timer, and
the job's own ``traced_phase`` alike) opens under it and carries its step. Once it closes it is forgotten,
so no later phase is parented under it. Costs nothing while none is open: :data:`UMBRELLAS` is empty.
"""

from __future__ import annotations

import threading
from typing import Any

from lens_rl._runtime import RUNTIME
from lens_rl.propagation import phase_parent

__all__ = ["UMBRELLAS", "forget_umbrella", "keep_umbrella", "umbrella_parent"]

#: thread id -> the step umbrellas opened on that thread and still open, oldest first, each with the context
#: the phases opened under it while it is the innermost
UMBRELLAS: dict[int, list[tuple[Any, Any]]] = {}
_LOCK = threading.Lock()


def keep_umbrella(node: Any, context: Any) -> None:
    """``node`` (an open umbrella of this thread) is where this thread's phases open, under ``context``."""
    with _LOCK:
        UMBRELLAS.setdefault(node.thread, []).append((node, context))


def umbrella_parent() -> Any:
    """The context a phase with no parent of its own opens under: the innermost step umbrella open on this
    thread, unless a phase made current after it opened is current (a ``with`` block inside it); else None
    (the current context decides, as for any phase)."""
    stack = UMBRELLAS.get(threading.get_ident())
    if not stack:
        return None
    open_phases = RUNTIME.open_phases
    with _LOCK:
        while stack and stack[-1][0].span_id not in open_phases:  # ended meanwhile (shutdown, a new handle)
            stack.pop()
        if not stack:
            return None
        node, context = stack[-1]
    current = open_phases.get(phase_parent()[1][1])  # (a SpanContext is a tuple: [1] is its span id)
    if current is not None and current.start_ns > node.start_ns:
        return None
    return context


def forget_umbrella(node: Any) -> None:
    """``node`` closed (or was never an umbrella): no phase opens under it from now on."""
    with _LOCK:
        stack = UMBRELLAS.get(node.thread)
        if stack:
            for i in range(len(stack) - 1, -1, -1):
                if stack[i][0] is node:
                    del stack[i]
                    break
            if not stack:
                UMBRELLAS.pop(node.thread, None)
