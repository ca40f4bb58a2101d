"""A heartbeat's fields checked against the JSON types its format gives them, before ``status`` and ``watch``
read one: a field of another type (a string where a number goes, an int past 64 bits, an ``interval_ms``
outside 1..:data:`INTERVAL_MAX_MS`, a ``written_ns`` outside the store's plausible times) makes the heartbeat
malformed, read as nothing but its process's identity.

Example::

    why = malformed(beat)      # None, or the first wrong field: "resource.nv.dl.rank", "open[0].age_s"
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lens_rl.offline.run.live import plausible_ns

__all__ = ["INTERVAL_MAX_MS", "int64", "malformed"]

_NUM = (int, float)
_NONE = type(None)
#: A heartbeat's fields and the JSON types each may have (absent is always fine): any other makes the
#: heartbeat malformed, its row ``unreadable``.
_FIELDS: dict[str, tuple[type, ...]] = {
    "resource": (dict,),
    "pid": (int,),
    "role": (str,),
    "state": (str,),
    "written_ns": (int,),
    "interval_ms": (int,),
    "open": (list,),
    "last_step": (dict, _NONE),
    "phase_step": (int, str, _NONE),
    "phases": (dict,),
    "hangs": (int,),
}
_RESOURCE: dict[str, tuple[type, ...]] = {
    "rl.worker_group": (str,),
    "nv.dl.rank": (int,),
    "host.name": (str,),
    "rl.attempt": (int,),
}
_OPEN: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "step": (int, str, _NONE),
    "start_ns": (int, _NONE),
    "age_s": (*_NUM, _NONE),
    "timeout_s": (*_NUM, _NONE),
    "hang": (dict, bool, _NONE),
}
_LAST: dict[str, tuple[type, ...]] = {"step": (int, str, _NONE)}
_USUAL: dict[str, tuple[type, ...]] = {"p95_s": (*_NUM, _NONE), "max_s": (*_NUM, _NONE)}
#: A heartbeat's ``interval_ms`` is in [1, this]: config's ``heartbeat_interval_ms`` at most (1 day; 0 writes
#: no heartbeat). Outside it (0, 1e308) its process could never go stale: the row is ``unreadable``.
INTERVAL_MAX_MS = 86_400_000


def int64(value: Any) -> bool:
    """Whether ``value`` is a JSON integer that fits in 64 bits (a bool is none)."""
    return type(value) is int and -(2**63) <= value < 2**63


def _wrong(fields: Any, spec: Mapping[str, tuple[type, ...]], where: str) -> str | None:
    """The first field of ``fields`` whose JSON type ``spec`` does not allow (an int must fit in 64 bits), as
    ``where.field``; None when all are fine."""
    for key, types in spec.items():
        value = fields.get(key)
        if key not in fields or value is None and _NONE in types:
            continue
        if type(value) not in types or (type(value) is int and not int64(value)):
            return f"{where}{key}"
    return None


def malformed(beat: Mapping[str, Any]) -> str | None:
    """Which field of a heartbeat has a JSON type the format does not give it (None: none): such a heartbeat
    is read as nothing but its process's identity, where that is readable."""
    last = beat.get("last_step")
    return (
        _wrong(beat, _FIELDS, "")
        or _wrong(beat.get("resource") or {}, _RESOURCE, "resource.")
        or _wrong_each(enumerate(beat.get("open") or ()), _OPEN, "open[{}]")
        or (_wrong(last, _LAST, "last_step.") if last is not None else None)
        or _wrong_each((beat.get("phases") or {}).items(), _USUAL, "phases.{}")
        or ("interval_ms" if "interval_ms" in beat and not 1 <= beat["interval_ms"] <= INTERVAL_MAX_MS else None)
        or ("written_ns" if "written_ns" in beat and not plausible_ns(beat["written_ns"]) else None)
    )


def _wrong_each(pairs: Any, spec: Mapping[str, tuple[type, ...]], where: str) -> str | None:
    """The first of ``pairs`` (index or key, value) whose value is no object, or has a field of a type
    ``spec`` does not allow; ``where`` names it (``{}``: its index or key)."""
    for key, value in pairs:
        place = where.format(key)
        why = place if type(value) is not dict else _wrong(value, spec, place + ".")
        if why is not None:
            return why
    return None
