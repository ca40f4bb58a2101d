"""The file store's lines: a finished span as its v2 line (short keys, defaults left out, no resource) and any
record as one strict-JSON line (a NaN or infinite number as the string ``"NaN"``, ``"Infinity"``,
``"-Infinity"``), the format :mod:`lens_rl.store` reads. The writer (:mod:`lens_rl.export.file`) appends them.

Example::

    span_lines(spans)          # ['{"n":"generation","t":"…","s":"…","b":…,"e":…,"a":{…}}', ...]
    json_line({"x": float("nan")})   # '{"x":"NaN"}'
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from lens_rl.export.fastspan import remember
from lens_rl.store import OWN_SCOPE

__all__ = ["hex_id", "json_line", "span_line", "span_lines", "span_row"]


def hex_id(value: int, width: int) -> str:
    """An id as lowercase hex of ``width`` digits (a trace id 32, a span id 16)."""
    return format(value, f"0{width}x")


def span_row(span: ReadableSpan) -> dict[str, Any]:
    """The v2 line of one finished span: short keys, defaults left out, no resource."""
    ctx = span.context
    row: dict[str, Any] = {"n": span.name, "t": hex_id(ctx.trace_id, 32), "s": hex_id(ctx.span_id, 16)}
    parent = span.parent
    if parent is not None:
        row["p"] = hex_id(parent.span_id, 16)
        if parent.is_remote:
            row["pr"] = True
    row["b"] = span.start_time
    row["e"] = span.end_time
    if span.attributes:
        row["a"] = dict(span.attributes)
    thread = getattr(span, "_lens_thread", None)
    if thread is not None:
        row["th"] = thread
        row["tn"] = getattr(span, "_lens_thread_name", None)
    kind = span.kind.name
    if kind != "INTERNAL":
        row["k"] = kind
    status = span.status
    if status.status_code.name != "UNSET":
        row["st"] = status.status_code.name
        if status.description:
            row["sm"] = status.description
    if span.events:
        row["ev"] = [{"n": e.name, "ts": e.timestamp, "a": dict(e.attributes or {})} for e in span.events]
    if span.links:
        row["ln"] = [
            {
                "t": hex_id(link.context.trace_id, 32),
                "s": hex_id(link.context.span_id, 16),
                "a": dict(link.attributes or {}),
            }
            for link in span.links
        ]
    scope = span.instrumentation_scope.name if span.instrumentation_scope else None
    if scope != OWN_SCOPE:
        row["sc"] = scope
    return row


_SHAPES: dict[Any, tuple[str, str]] = {}  # a phase span's shape -> its name and attributes, as JSON


def span_line(span: ReadableSpan) -> str:
    """The v2 line of one finished span: :func:`span_row` as strict JSON."""
    return span_lines((span,))[0]


def span_lines(spans: Sequence[ReadableSpan]) -> list[str]:
    """The v2 lines of ``spans``, in order: :func:`span_row` as strict JSON.

    A lens_rl phase span still as its shape made it (the common case) is written from
    its shape's name and attributes as JSON, encoded once, and the trace id, parent id
    and thread its neighbours in the batch share, formatted once: the same line
    (``tests/export/test_file.py`` compares them), several times cheaper.
    """
    out = []
    trace_id = parent_id = thread = name = None
    trace_part = parent_part = thread_part = ""
    for span in spans:
        shape = getattr(span, "shape", None)
        if shape is None:
            out.append(json_line(span_row(span)))
            continue
        known = _SHAPES.get(shape)
        if known is None:
            attrs = span._attributes
            known = remember(_SHAPES, shape, (json_line(span.name), f',"a":{json_line(dict(attrs))}' if attrs else ""))
        context: Any = span._context
        if context[0] != trace_id:
            trace_id = context[0]
            trace_part = f',"t":"{trace_id:032x}","s":"'
        parent = span._parent
        if parent is None:
            parent_id, parent_part = None, ""
        elif parent[1] != parent_id:
            parent_id = parent[1]  # (a SpanContext is a tuple: trace id, span id, is_remote, ...)
            parent_part = f',"p":"{parent_id:016x}","pr":true' if parent[2] else f',"p":"{parent_id:016x}"'
        span_thread, span_name = getattr(span, "_lens_thread", None), getattr(span, "_lens_thread_name", None)
        if span_thread != thread or span_name != name:
            thread, name = span_thread, span_name
            thread_part = f',"th":{thread},"tn":{json_line(name)}' if thread is not None else ""
        out.append(
            f'{{"n":{known[0]}{trace_part}{context[1]:016x}"{parent_part},'
            f'"b":{span._start_time},"e":{span._end_time}{known[1]}{thread_part}}}'
        )
    return out


def _json_default(value: Any) -> Any:
    return list(value) if isinstance(value, (tuple, set, frozenset)) else str(value)


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as strings, at any depth (strict JSON has neither)."""
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def json_line(record: Any) -> str:
    """One strict-JSON line for ``record``."""
    try:
        return json.dumps(record, separators=(",", ":"), default=_json_default, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(record), separators=(",", ":"), default=_json_default, allow_nan=False)
