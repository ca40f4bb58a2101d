"""A span line decoded: :class:`Row` (its short keys as attributes, None where absent), by ``msgspec`` (the
``analysis`` extra; it builds nothing for keys no reader uses), else into the same shape from ``orjson`` or the
standard library's parser; and the checks every reader shares on a row's times.

A span line with no name, or with a key of another JSON type than the format's
(:data:`lens_rl.store.format.FIELD_TYPES`), is garbage: ``decode_row`` raises one of :data:`BAD_LINE`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from lens_rl.store.format import FIELD_TYPES, ROW_KEYS, TIME_MAX_NS, TIME_MIN_NS

__all__ = ["BAD_LINE", "INT64_END", "Row", "decode_row", "loads", "plausible", "time_ns", "trace_time_ns"]

#: Past the last int64: a time in ns is an int in [-INT64_END, INT64_END).
INT64_END = 2**63

loads: Any
try:  # the analysis extra: a parser several times faster than the standard library's
    import orjson as _orjson

    loads = _orjson.loads
except ImportError:  # pragma: no cover - exercised where the extra is missing
    loads = json.loads

_msgspec: Any
try:  # the analysis extra: msgspec decodes a line straight into a Row, skipping what no reader needs
    import msgspec as _msgspec
except ImportError:  # pragma: no cover - exercised where the extra is missing
    _msgspec = None

if _msgspec is not None:
    # (checked as the line is decoded: a time that is no int in the plausible range makes the line garbage)
    _Time = Annotated[int, _msgspec.Meta(ge=TIME_MIN_NS, lt=TIME_MAX_NS)]

    class Row(_msgspec.Struct, gc=False):  # type: ignore[call-arg]  # gc=False: rows form no cycle
        """One line of a span file, by its short keys (a key the line lacks is None); times in ns."""

        n: str | None = None
        t: str | None = None
        s: str | int | None = None
        p: str | int | None = None
        pr: bool | None = None
        b: _Time | None = None  # type: ignore[valid-type]
        e: _Time | None = None  # type: ignore[valid-type]
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

    decode_row: Any = _msgspec.json.Decoder(Row).decode
    # (RecursionError: a value nested deeper than the parser allows)
    _BAD_LINE: tuple[type[Exception], ...] = (ValueError, RecursionError, _msgspec.DecodeError)
else:  # pragma: no cover - exercised where the extra is missing

    class Row:  # type: ignore[no-redef]
        """One line of a span file, by its short keys (a key the line lacks is None)."""

        __slots__ = ROW_KEYS

        def __init__(self, **fields: Any) -> None:
            for key in ROW_KEYS:
                setattr(self, key, fields.get(key))

        def __eq__(self, other: object) -> bool:
            return type(other) is Row and all(getattr(self, k) == getattr(other, k) for k in ROW_KEYS)

        def __repr__(self) -> str:
            return (
                "Row(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in ROW_KEYS if getattr(self, k) is not None) + ")"
            )

    def decode_row(raw: bytes) -> Row:
        fields = loads(raw)
        if type(fields) is not dict:
            raise ValueError("a span line is a JSON object")
        return _checked(Row(**{k: v for k, v in fields.items() if k in _KEY_SET}))

    def _checked(row: Row) -> Row:
        """``row``, or ``ValueError`` when a key has another JSON type than the format allows (what msgspec
        checks as it decodes)."""
        for key, types in FIELD_TYPES.items():
            value = getattr(row, key)
            if value is not None and type(value) not in types:
                raise ValueError(f"a span line's {key!r} is no {' or '.join(t.__name__ for t in types)}")
        if any(t is not None and not TIME_MIN_NS <= t < TIME_MAX_NS for t in (row.b, row.e)):
            raise ValueError("a span line's time is out of the plausible range")
        if any(type(item) is not dict for key in ("ev", "ln") for item in getattr(row, key) or ()):
            raise ValueError("a span line's events and links are objects")
        return row

    _KEY_SET = frozenset(ROW_KEYS)
    _BAD_LINE = (ValueError, RecursionError)

#: what ``decode_row`` raises on a line that is no span row (half a line, garbage, a wrong type)
BAD_LINE = _BAD_LINE


def plausible(row: Row) -> bool:
    """Whether a span row's times are integers in [:data:`TIME_MIN_NS`, :data:`TIME_MAX_NS`), the end not
    before the start (:func:`scan` skips any other as a bad line)."""
    b, e = row.b, row.e
    return type(b) is int and type(e) is int and TIME_MIN_NS <= b <= e < TIME_MAX_NS


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
