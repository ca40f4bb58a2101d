"""What a training phase consumed: ``traced_phase``'s staleness keywords, checked, and recorded as a histogram.

A training phase says the policy version it trains (``policy_version=``, an int), the weight versions of the
trajectories it consumes (``trajectory_versions=``, a list or tuple of ints, one per trajectory), their tokens
(``trajectory_tokens=``, numbers >= 0, one per trajectory) and the framework's bound (``max_staleness=``, an int
>= 0). Anything else is a ``ValueError`` at the call naming the keyword, the value and what is allowed, as for
``step=``; numpy integers, whole floats (``3.0``) and 1-d numpy or torch arrays (any 1-d numeric array with
``tolist()``) are taken as ints. :func:`check` (on and off) looks at each
keyword's type and length, in constant time (off stays free of a batch's size); :func:`consumed` (while on, once
per phase made) reads the items too, and makes the histogram the span carries. A bad item (``[1, "x"]``, a NaN,
a negative token count) is found only there, so it is one warning naming the keyword, the value and what is
allowed, and the phase records no staleness (:func:`recorded`): telemetry on never raises where off did not.

A batch is thousands of trajectories of a few versions, so the span carries its version histogram, not the lists:
``rl.trajectory_versions`` the distinct versions (ascending), ``rl.trajectory_counts`` the trajectories of each,
``rl.trajectory_tokens`` their summed tokens (where given). The staleness figures
(:func:`lens_rl.buckets.staleness`) are exact from it, live and offline, and the span's size is bounded by
:data:`MAX_VERSIONS`, not by the batch.

Example::

    consumed({"trajectory_versions": [4, 4, 3], "trajectory_tokens": [10, 20, 5]})
    # {"trajectory_versions": [3, 4], "trajectory_counts": [1, 2], "trajectory_tokens": [5, 30]}
"""

from __future__ import annotations

import math
import operator
import reprlib
from collections import Counter
from typing import Any

from lens_rl._errors import warn_once

__all__ = ["HISTOGRAM", "KEYWORDS", "MAX_VERSIONS", "check", "consumed", "int64_of", "recorded"]

#: The keywords checked here (``traced_phase(name, **these)``).
KEYWORDS = frozenset({"trajectory_versions", "trajectory_tokens", "policy_version", "max_staleness"})
#: The keywords of a recorded histogram (``rl.<each>`` on the span).
HISTOGRAM = ("trajectory_versions", "trajectory_counts", "trajectory_tokens")
#: The most distinct versions one span records (the oldest kept: what max and the share beyond a bound need).
MAX_VERSIONS = 1024
_END = 2**63
_VERSIONS = "a list or tuple of ints in [-2**63, 2**63), one per trajectory (a 1-d numpy or torch array too)"
_TOKENS = "a list or tuple of numbers >= 0, one per item of trajectory_versions"
_ALLOWED = {
    "policy_version": "an int in [-2**63, 2**63)",
    "max_staleness": "an int >= 0 (versions a trajectory may lag)",
}


def _refuse(keyword: str, value: Any, allowed: str, detail: str = "") -> ValueError:
    return ValueError(f"traced_phase: {keyword} must be {allowed}, got {reprlib.repr(value)}{detail}")


def int64_of(value: Any) -> int | None:
    """``value`` as an int within int64 (a numpy integer too; a bool is none), else None."""
    if value.__class__ is not int:
        if isinstance(value, bool) or not hasattr(type(value), "__index__"):
            return None
        try:
            value = operator.index(value)
        except (TypeError, ValueError, OverflowError):
            return None
    return value if -_END <= value < _END else None  # type: ignore[no-any-return]


def _whole(value: Any) -> int | None:
    """:func:`int64_of`, a whole float within int64 (``3.0``) taken as its int too."""
    as_int = int64_of(value)
    if as_int is None and isinstance(value, float) and value.is_integer() and -_END <= value < _END:
        return int(value)
    return as_int


def _listed(value: Any) -> bool:
    """A list or tuple, or a 1-d numeric array with ``tolist()``: numpy's (dtype kind i, u or f), torch's (a
    dtype not complex), any alike (duck-typed: numpy and torch are never imported)."""
    if value.__class__ in (list, tuple) or isinstance(value, (list, tuple)):
        return True
    dtype = getattr(value, "dtype", None)
    kind = getattr(dtype, "kind", None)
    numeric = (isinstance(kind, str) and kind in ("i", "u", "f")) or getattr(dtype, "is_complex", True) is False
    return numeric and getattr(value, "ndim", None) == 1 and callable(getattr(value, "tolist", None))


def check(said: dict[str, Any]) -> None:
    """``ValueError`` unless the staleness keywords of ``said`` (any of :data:`KEYWORDS`; None: absent) are of
    the types allowed and the tokens as many as the versions: constant time, the check made on and off."""
    versions, tokens = said.get("trajectory_versions"), said.get("trajectory_tokens")
    if versions is not None and not _listed(versions):
        raise _refuse("trajectory_versions", versions, _VERSIONS)
    if tokens is not None and (versions is None or not _listed(tokens) or len(tokens) != len(versions)):
        raise _refuse("trajectory_tokens", tokens, _TOKENS + ("" if versions is None else f" ({len(versions)})"))
    for keyword in ("policy_version", "max_staleness"):
        value = said.get(keyword)
        if value is not None:
            as_int = _whole(value)
            if as_int is None or (keyword == "max_staleness" and as_int < 0):
                raise _refuse(keyword, value, _ALLOWED[keyword])


def consumed(said: dict[str, Any]) -> dict[str, Any]:
    """``said``'s staleness keywords checked item by item (after :func:`check`'s), as what the span records:
    ``policy_version`` and ``max_staleness`` as ints, and the versions and tokens as the histogram
    (:data:`HISTOGRAM`, :data:`MAX_VERSIONS` versions at most: the oldest, one warning when more are left out);
    ``ValueError`` naming the keyword, the value and the item for anything else. One pass over the items."""
    check(said)
    out: dict[str, Any] = {k: _whole(said[k]) for k in ("policy_version", "max_staleness") if said.get(k) is not None}
    versions, tokens = said.get("trajectory_versions"), said.get("trajectory_tokens")
    if versions is None:
        return out
    listed: list[Any] = list(versions) if isinstance(versions, (list, tuple)) else versions.tolist()
    if not listed:
        return out
    try:
        counted = Counter(listed)  # (a value equal to an int, 1.0 or True after a 1, counts as it)
    except Exception as exc:  # an unhashable item (a tuple holding a list too), or one whose hash or == raises
        n, why = _unhashable(listed, exc)
        item = reprlib.repr(listed[n])
        raise _refuse("trajectory_versions", versions, _VERSIONS, f" (item {n}: {item}) ({why})") from None
    keys = list(counted)
    if not all(k.__class__ is int and -_END <= k < _END for k in keys):
        converted = [_whole(k) for k in keys]
        if None in converted:
            bad = keys[converted.index(None)]  # (the item itself: a Counter keeps the first of equal items)
            n = next((n for n, item in enumerate(listed) if item is bad), 0)
            raise _refuse("trajectory_versions", versions, _VERSIONS, f" (item {n}: {reprlib.repr(listed[n])})")
        merged: Counter[int] = Counter()
        for key, as_int in zip(keys, converted, strict=True):
            merged[as_int] += counted[key]  # type: ignore[index]
        counted, listed = merged, [_whole(v) for v in listed]
    distinct = sorted(counted)
    if len(distinct) > MAX_VERSIONS:
        warn_once(
            "trajectory-versions-cut",
            "lens_rl: a phase consumed trajectories of %d distinct versions: the oldest %d are recorded",
            len(distinct),
            MAX_VERSIONS,
        )
        distinct = distinct[:MAX_VERSIONS]
    out["trajectory_versions"], out["trajectory_counts"] = distinct, [counted[v] for v in distinct]
    if tokens is not None:
        out["trajectory_tokens"] = _summed(tokens, listed, counted, distinct)
    return out


def recorded(name: str, said: dict[str, Any]) -> dict[str, Any]:
    """:func:`consumed` for a phase made: a ``ValueError`` of :func:`check`'s raised at the call (on and off
    alike); one of an item (read only while on: telemetry on never raises where off did not) is one warning per
    keyword, naming the value and what is allowed, and the phase records nothing of what it consumed."""
    check(said)
    try:
        return consumed(said)
    except Exception as exc:  # (any: an item's own __hash__, __eq__ or __index__ may raise what it likes)
        warn_unread(name, exc)
        return {}


def warn_unread(name: str, exc: Exception) -> None:
    """The one warning (per keyword) for a phase whose consumption could not be read: ``exc`` (a
    :func:`consumed` error, or whatever an item raised) said, and no staleness recorded."""
    words = str(exc).split(" ", 2)
    keyword = words[1] if isinstance(exc, ValueError) and len(words) > 1 and words[1] in KEYWORDS else "item"
    warn_once(f"consumed-{keyword}", "lens_rl: %s; phase %r records no staleness", exc, name)


def _unhashable(listed: list[Any], exc: Exception) -> tuple[int, Exception]:
    """The index of the first item of ``listed`` that cannot be hashed, and what hashing it raised (item 0 and
    ``exc``, what counting them raised, when each hashes alone)."""
    for n, item in enumerate(listed):
        try:
            hash(item)
        except Exception as why:  # (any: the item's own __hash__)
            return n, why
    return 0, exc


def _summed(tokens: Any, versions: list[Any], counted: Counter[int], distinct: list[int]) -> list[int | float]:
    """Each distinct version's tokens summed; ``ValueError`` naming the first item that is no number >= 0."""
    items = tokens if isinstance(tokens, (list, tuple)) else tokens.tolist()
    sums: dict[Any, Any] = dict.fromkeys(counted, 0)
    fine = False
    try:
        for version, token in zip(versions, items, strict=True):
            sums[version] += token
        out = [_number(sums[v]) for v in distinct]
        fine = min(items) >= 0 and all(n is not None and math.isfinite(n) and n < _END for n in out)
    except (TypeError, ValueError, OverflowError):
        pass
    if not fine:
        for n, item in enumerate(items):
            number = _number(item)
            if number is None or not math.isfinite(number) or not 0 <= number < _END:
                raise _refuse("trajectory_tokens", tokens, _TOKENS, f" (item {n}: {reprlib.repr(item)})")
        raise _refuse("trajectory_tokens", tokens, _TOKENS + " (their sums within int64)")
    return out  # type: ignore[return-value]


def _number(value: Any) -> int | float | None:
    """An int or float as it is, a numpy number as one; None for anything else (a bool, a str)."""
    if value.__class__ in (int, float):
        return value  # type: ignore[no-any-return]
    as_int = int64_of(value)
    if as_int is not None or isinstance(value, (bool, str, bytes)) or not hasattr(type(value), "__float__"):
        return as_int
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None
