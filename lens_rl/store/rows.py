"""A span line decoded: :class:`Row` (its short keys as attributes, None where absent), by ``msgspec``, which
checks each key's JSON type and each time's range as it decodes and builds nothing for keys no reader uses;
``loads`` (orjson) for the other JSON the reading side reads (headers, kept answers); and the checks every
reader shares on a row's times. Both parsers are base dependencies, imported by the reading side only (never
by ``import lens_rl``).

A span line with no name, or with a key of another JSON type than the format's
(:data:`lens_rl.store.format.FIELD_TYPES`), or a time out of the plausible range, is garbage: ``decode_row``
raises one of :data:`BAD_LINE`; so is one whose ``rl.step`` is not an int (:data:`BAD_STEP`, which the readers
check after decoding).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import orjson

from lens_rl.store.format import TIME_MAX_NS, TIME_MIN_NS

__all__ = ["BAD_LINE", "BAD_STEP", "INT64_END", "Row", "decode_row", "loads", "plausible", "time_ns", "trace_time_ns"]

#: Past the last int64: a time in ns is an int in [-INT64_END, INT64_END).
INT64_END = 2**63

#: The parser of the reading side's other JSON (a span line: :func:`decode_row`).
loads = orjson.loads

# (checked as the line is decoded: a time that is no int in the plausible range makes the line garbage)
_Time = Annotated[int, msgspec.Meta(ge=TIME_MIN_NS, lt=TIME_MAX_NS)]


class Row(msgspec.Struct, gc=False):  # gc=False: rows form no cycle
    """One line of a span file, by its short keys (a key the line lacks is None); times in ns."""

    n: str | None = None
    t: str | None = None
    s: str | int | None = None
    p: str | int | None = None
    pr: bool | None = None
    b: _Time | None = None
    e: _Time | None = None
    a: dict[str, Any] | None = None
    th: int | str | None = None
    tn: str | None = None
    k: str | None = None
    st: str | None = None
    sm: str | None = None
    ev: list[dict[str, Any]] | None = None
    ln: list[dict[str, Any]] | None = None
    sc: str | None = None
    v: Any = None
    header: Any = None
    resource: Any = None
    root: Any = None


decode_row: Any = msgspec.json.Decoder(Row).decode
#: what ``decode_row`` raises on a line that is no span row (half a line, garbage, a wrong type; RecursionError:
#: a value nested deeper than the parser allows)
BAD_LINE: tuple[type[Exception], ...] = (ValueError, RecursionError, msgspec.DecodeError)


#: The types of an ``rl.step`` that make its line garbage (SPEC: ``rl.step`` stays an int; a field of the wrong
#: JSON type: the line is skipped and counted): text, a boolean, a number with a fraction or an exponent. (A
#: list or an object, or an int past 64 bits, reads as no step.)
BAD_STEP: frozenset[type] = frozenset({str, bool, float})


def plausible(row: Row) -> bool:
    """Whether a decoded span row has both times, the end not before the start (each time's range the decoder
    checked), and no ``rl.step`` of a :data:`BAD_STEP` type: :func:`scan` skips any other as a bad line."""
    b, e, a = row.b, row.e, row.a
    return b is not None and e is not None and b <= e and (a is None or a.get("rl.step").__class__ not in BAD_STEP)


def time_ns(value: Any) -> int:
    """A time in ns as the int64 arrays hold it: a bad or out-of-range value reads as 0."""
    try:
        number = int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0
    return number if -INT64_END <= number < INT64_END else 0


def trace_time_ns(value: Any) -> int:
    """A time as a trace holds it (ns, 0 <= t < 2**63): a bad, negative or out-of-range value reads as 0."""
    return max(time_ns(value), 0)
