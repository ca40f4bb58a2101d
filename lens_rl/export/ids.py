"""Trace and span ids, and sampling draws, from a random stream of lens_rl's own.

RL jobs seed Python's global ``random`` identically on every rank (``set_seed(1234)``), and OpenTelemetry's
``RandomIdGenerator`` draws from that global stream: every rank would then make the same ids, and every id
drawn would shift the job's own random numbers (telemetry on would change training). lens_rl draws from
:data:`STREAM` instead: a private ``random.Random`` seeded from ``os.urandom`` when this module is imported
and re-seeded (from ``os.urandom`` again) in every forked child, so a child never repeats its parent's ids.
Nothing here reads or advances the global ``random`` (nor numpy's or torch's).

:class:`LensIdGenerator` is the same stream as an OpenTelemetry ``IdGenerator``: every ``TracerProvider``
lens_rl builds uses it (third-party spans through lens_rl's providers), and it is registered as the
``opentelemetry_id_generator`` entry point ``lens_rl``, so ``OTEL_PYTHON_ID_GENERATOR=lens_rl`` selects it
in processes OpenTelemetry's auto-configuration sets up, and there only: a ``TracerProvider()`` built without
an ``id_generator`` (vLLM's, any library's own) never reads the variable and draws from the global ``random``.

Costs: a draw is one C call on the private instance, as cheap as ``random.getrandbits`` on the global one.

Example::

    from lens_rl.export.ids import getrandbits
    span_id = getrandbits(64) or 1
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from threading import get_ident

from opentelemetry.sdk.trace.id_generator import IdGenerator

__all__ = ["STREAM", "LensIdGenerator", "getrandbits", "pinned_ids", "random_float", "reseed"]

#: lens_rl's own random stream (never the global one).
STREAM = random.Random(os.urandom(32))
#: Bound to :data:`STREAM`: re-seeding it in place keeps these valid wherever they were copied.
getrandbits = STREAM.getrandbits
random_float = STREAM.random


def reseed() -> None:
    """Seed :data:`STREAM` afresh from ``os.urandom`` (run in every forked child, before any code of the child)."""
    STREAM.seed(os.urandom(32))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=reseed)


#: thread ident -> [trace id, span id] the next draws of that thread return (0: drawn already)
_PINNED: dict[int, list[int]] = {}


@contextlib.contextmanager
def pinned_ids(trace_id: int, span_id: int) -> Iterator[None]:
    """Inside the block, this thread's next trace id and span id drawn by a :class:`LensIdGenerator` are
    these, once each (the job root whose ids ``lens-rl run`` fixed before any process started)."""
    _PINNED[get_ident()] = [trace_id, span_id]
    try:
        yield
    finally:
        _PINNED.pop(get_ident(), None)


def _pinned(index: int) -> int:
    pin = _PINNED.get(get_ident())
    if pin is None or not pin[index]:
        return 0
    value, pin[index] = pin[index], 0
    return value


class LensIdGenerator(IdGenerator):
    """OpenTelemetry's ``IdGenerator`` over lens_rl's own stream: random, non-zero 64-bit span and 128-bit
    trace ids, unique per process whatever the job does to ``random``."""

    def generate_span_id(self) -> int:
        if _PINNED:
            return _pinned(1) or getrandbits(64) or 1
        return getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        if _PINNED:
            return _pinned(0) or getrandbits(128) or 1
        return getrandbits(128) or 1

    def is_trace_id_random(self) -> bool:  # (OpenTelemetry >= 1.45 asks; older releases never call it)
        return True
