"""GPU sample lines decoded to arrays on the checked path: numpy's text parser for runs of the common shape,
JSON for the others, each line checked (what :mod:`~lens_rl.offline.read.gpu_samples` reads where the C scanner
was not built, and each line the scanner does not take).

A chunk of whole lines is checked against the shape its header implies (the line with every number, ``null``
and blank taken out must read ``{"t":,"d":[[,,,,,,,],...]}``: :func:`skeleton`) and its numbers parsed by numpy
in one call (as integers where all are: 3.5x faster than as floats). A line not of that shape (a device entry
``null`` at a sample, a garbage line) is decoded alone (:func:`one_line`). Bad lines: not JSON, longer than
:data:`~lens_rl.store.LINE_MAX`, another shape than the header's devices, a time outside 2000-2200, a
percentage outside 0-100, a value negative or of 10^18 or more (:func:`plausible_rows`).

Example::

    parsed = bulk(data, data.count(b"\\n"), devices)   # (times (n,), values (n, devices, 8)), or None
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

import numpy as np

from lens_rl.offline.read.gpu_grammar import json_shaped
from lens_rl.store import TIME_MAX_NS, TIME_MIN_NS, loads
from lens_rl.store.gpu import GPU_COUNTERS

__all__ = ["COUNTERS", "PERCENT", "SKELETON_DROP", "bulk", "one_line", "plausible_rows", "skeleton"]

COUNTERS = len(GPU_COUNTERS)
#: the counters that are percentages (0-100), by their place in a device's values
PERCENT = [GPU_COUNTERS.index(c) for c in ("util", "mem_util", "sm_active", "sm_occupancy", "tensor_active")]
_HUGE = 10**18
#: the bytes a line of the common shape is left without: what remains is its :func:`skeleton`
SKELETON_DROP = b"0123456789.-+eEnul \t\r"


#: a line's structure to blanks, keeping the commas, a line's end a comma: exactly one number between commas
_BLANKS = bytes.maketrans(b'{}[]":td\n', b"        ,")
_NOT_INT = (b".", b"-", b"+", b"e", b"E")
_TIME = re.compile(rb'^[ \t\r]*\{[ \t\r]*"t"[ \t\r]*:[ \t\r]*([^, \t\r]*)', re.M)


def skeleton(devices: int) -> bytes:
    """A line of the common shape for ``devices`` devices without its :data:`SKELETON_DROP` bytes."""
    return b'{"t":,"d":[' + b",".join([b"[" + b"," * (COUNTERS - 1) + b"]"] * devices) + b"]}\n"


def plausible_rows(t: Any, v: Any) -> Any:
    """Which rows are plausible (a time in range, percentages 0-100, no value negative nor 10^18 or more)."""
    ok = (t >= TIME_MIN_NS) & (t < TIME_MAX_NS)
    with np.errstate(invalid="ignore"):
        pct = v[:, :, PERCENT]
        ok &= ~((pct < 0) | (pct > 100)).any(axis=(1, 2))
        ok &= ~((v < 0) | (v >= _HUGE)).any(axis=(1, 2))
    return ok


def _numbers(text: bytes, dtype: Any) -> Any:
    """Every number of ``text`` (one between each two commas) as ``dtype`` (None where a slot holds no
    number, or two: a line with one number short and one with one more never read as two good lines)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return np.fromstring(text, dtype=dtype, sep=",")  # type: ignore[call-overload]
        except (ValueError, DeprecationWarning):
            return None


def _bulk_ints(data: bytes, lines: int, devices: int) -> tuple[Any, Any] | None:
    """``lines`` whole lines of the common shape whose numbers are all integers (no ``.``, sign or exponent:
    devices without GPM activity) parsed at once as integers, 3.5x faster than as floats (measured: 0.025 s
    against 0.088 s a 4 MB chunk); None where they are not all such."""
    if any(c in data for c in _NOT_INT):
        return None
    ints = _numbers(data.replace(b"null", b"-1").translate(_BLANKS), np.int64)  # (-1: null; no sign read)
    width = 1 + devices * COUNTERS
    if ints is None or ints.size != lines * width:
        return None
    ints = ints.reshape(lines, width)
    values = ints[:, 1:].astype(np.float64).astype(np.float32)  # (rounded as text read as a float64 is)
    values[ints[:, 1:] < 0] = np.nan
    return ints[:, 0].copy(), values.reshape(lines, devices, COUNTERS)


def bulk(data: bytes, lines: int, devices: int) -> tuple[Any, Any] | None:
    """``lines`` whole lines of the common shape parsed at once (None where they are not all JSON or numpy
    cannot read them all: then each is read alone)."""
    if not json_shaped(data):
        return None
    parsed = _bulk_ints(data, lines, devices)
    if parsed is not None:
        return parsed
    values = _numbers(data.replace(b"null", b"nan ").translate(_BLANKS), np.float64)
    width = 1 + devices * COUNTERS
    if values is None or values.size != lines * width:
        return None
    values = values.reshape(lines, width)
    with np.errstate(invalid="ignore"):
        t = np.where(np.isfinite(values[:, 0]), values[:, 0], 0).astype(np.int64)
    if not _exact_times(data, t):
        return None
    with np.errstate(over="ignore"):  # (a value past float32 reads inf: its line is a bad one, plausible_rows says)
        return t, values[:, 1:].reshape(lines, devices, COUNTERS).astype(np.float32)


def _exact_times(data: bytes, t: Any) -> bool:
    """``t`` (the lines' times read as float64: to 256 ns) with each time, an integer, read exactly; False
    where a time is not found or not a non-negative int64 (then each line is read alone, on the checked path:
    a time is an integer, as the decode requires)."""
    found = _TIME.findall(data)
    if len(found) != t.size:
        return False
    for i, raw in enumerate(found):
        if not (raw.isdigit() and len(raw) <= 19 and int(raw) < 2**63):
            return False
        t[i] = int(raw)
    return True


def one_line(raw: bytes, devices: int) -> tuple[int, list[float]] | None:
    """One line of another shape decoded (a device entry ``null``): (time, values), None where it is bad."""
    try:
        line = loads(raw)
    except (ValueError, RecursionError):
        return None
    if type(line) is not dict or type(line.get("t")) is not int or type(line.get("d")) is not list:
        return None
    if not -(2**63) <= line["t"] < 2**63:  # (past int64: no time, and no crash of the reader)
        return None
    entries = line["d"]
    if len(entries) != devices:
        return None
    out: list[float] = []
    for entry in entries:
        if entry is None:
            out.extend([float("nan")] * COUNTERS)
            continue
        if type(entry) is not list or len(entry) != COUNTERS:
            return None
        for value in entry:
            kind = type(value)
            if value is None:
                out.append(float("nan"))
            elif (kind is int and -_HUGE < value < _HUGE) or (kind is float and math.isfinite(value)):
                out.append(float(value))  # (a value of 10^18 or more: a bad line, as any is, by plausible_rows)
            else:
                return None
    return line["t"], out
