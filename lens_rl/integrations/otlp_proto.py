"""OTLP/HTTP trace requests decoded: what lens_rl's receivers share (the vLLM loopback and the test one).

A request body (protobuf, plain or gzip) becomes ``(resource attributes, scope name, span)`` triples, with
attribute values as plain Python values. Needs ``opentelemetry-proto`` (the OTLP exporters bring it).

:func:`span_chunks` decodes a body a few thousand spans at a time (:func:`count_spans` checks one whole): what it holds decoded at once is one
chunk, never the whole request (a 32 MiB body of small spans is ~600,000 of them, and each decoded span
costs far more memory than its bytes). The wire format's outer messages (the request, its resource and
scope spans) are walked without decoding their spans; a run of consecutive spans of one scope is itself a
valid ``ScopeSpans`` encoding, decoded at once.

Example::

    for resource, scope, span in trace_spans(body):
        print(resource.get("service.name"), scope, span.name)
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from typing import Any

__all__ = [
    "CHUNK_SPANS",
    "FIELDS_PER_SPAN",
    "ID_REMOTE",
    "ID_REMOTE_KNOWN",
    "BodyError",
    "any_value",
    "attributes",
    "body_of",
    "count_spans",
    "span_chunks",
    "trace_spans",
]

#: A span's ``flags`` bits (OTLP 1.1+): whether its parent's remoteness is known, and that it is remote.
ID_REMOTE_KNOWN = 0x100
ID_REMOTE = 0x200
#: Spans decoded at once by :func:`span_chunks`.
CHUNK_SPANS = 4096
#: Field visits of a body's outer messages a span may bring, for :func:`count_spans`'s bound: a span alone in
#: its resource and scope spans, both with a ``schema_url``, costs 13 (its resource spans' field once; the
#: resource, scope spans and schema URL fields of its resource spans, and the scope, span and schema URL fields
#: of its scope spans, each walked twice: once for the header, once for the children).
FIELDS_PER_SPAN = 16
_LEN = 2  # the wire type of a length-delimited field


class BodyError(ValueError):
    """A request body too large or not decodable."""


def any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as a plain value (lists and dicts for arrays and key-value lists)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind) if kind else None


def attributes(key_values: Any) -> dict[str, Any]:
    """OTLP ``KeyValue``s as a dict."""
    return {kv.key: any_value(kv.value) for kv in key_values}


def body_of(raw: bytes, encoding: str | None, limit: int | None = None) -> bytes:
    """The request body decompressed (gzip or deflate), at most ``limit`` bytes; :class:`BodyError` beyond."""
    encoding = (encoding or "").lower()
    if encoding == "gzip":
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        decoder = zlib.decompressobj()
    else:
        if limit is not None and len(raw) > limit:
            raise BodyError(f"body of {len(raw)} bytes over {limit}")
        return raw
    try:
        out = decoder.decompress(raw, limit + 1) if limit is not None else decoder.decompress(raw)
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise BodyError(str(exc)) from exc
    if limit is not None and len(out) > limit:
        raise BodyError(f"decompressed body over {limit} bytes")
    return out


def trace_spans(body: bytes) -> Iterator[tuple[dict[str, Any], str, Any]]:
    """``(resource attributes, scope name, span)`` of every span of an ``ExportTraceServiceRequest``."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as exc:
        raise BodyError(str(exc)) from exc
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for span in ss.spans:
                yield resource, ss.scope.name, span


def span_chunks(
    body: bytes, chunk: int = CHUNK_SPANS, max_fields: int | None = None
) -> Iterator[tuple[dict[str, Any], str, list[Any]]]:
    """``(resource attributes, scope name, spans)`` of an ``ExportTraceServiceRequest``, at most ``chunk``
    spans at a time, in the body's order; :class:`BodyError` when a part cannot be decoded (raised when the
    walk reaches it: :func:`count_spans` checks a body whole first) or the walk passes ``max_fields`` field
    visits of the outer messages (spans included). Holds one chunk decoded at a time."""
    from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ScopeSpans

    view, left = memoryview(body), [max_fields if max_fields is not None else -1]
    for rs_start, rs_end in _payloads(view, 0, len(view), 1, left):
        resource: dict[str, Any] = {}
        for start, end in _payloads(view, rs_start, rs_end, 1, left):  # (the last one wins, wherever it is)
            resource = attributes(_decode(Resource, view[start:end]).attributes)
        for ss_start, ss_end in _payloads(view, rs_start, rs_end, 2, left):
            name = ""
            for start, end in _payloads(view, ss_start, ss_end, 1, left):
                name = _decode(InstrumentationScope, view[start:end]).name
            for start, end in _span_runs(view, ss_start, ss_end, chunk, left):
                yield resource, name, list(_decode(ScopeSpans, view[start:end]).spans)


def count_spans(body: bytes, limit: int | None = None, chunk: int = CHUNK_SPANS) -> int:
    """The spans of a request body, each chunk decoded and let go (stopping once over ``limit``);
    :class:`BodyError` if a part cannot be decoded, or if the body's outer messages hold over
    ``FIELDS_PER_SPAN`` field visits a span of ``limit`` (a body of millions of empty resource or scope spans, or of
    unknown fields, walked in Python, cost seconds of CPU a request: 14 s for 32 MiB)."""
    n = 0
    fields = None if limit is None else FIELDS_PER_SPAN * limit + FIELDS_PER_SPAN
    for _, _, spans in span_chunks(body, chunk, fields):
        n += len(spans)
        if limit is not None and n > limit:
            break
    return n


def _span_runs(view: memoryview, pos: int, end: int, chunk: int, left: list[int]) -> Iterator[tuple[int, int]]:
    """Runs of at most ``chunk`` consecutive ``spans`` fields of a ``ScopeSpans``, each with its tags: such a
    run is itself the encoding of a ``ScopeSpans`` holding those spans alone."""
    run_start = run_end = -1
    n = 0
    for number, framed, _, stop in _all_fields(view, pos, end, left):
        if number != 2:
            continue
        if n and run_end == framed and n < chunk:
            run_end, n = stop, n + 1
            continue
        if n:
            yield run_start, run_end
        run_start, run_end, n = framed, stop, 1
    if n:
        yield run_start, run_end


def _decode(kind: Any, data: memoryview) -> Any:
    from google.protobuf.message import DecodeError

    try:
        return kind.FromString(data)
    except (DecodeError, RecursionError) as exc:
        raise BodyError(str(exc)) from exc


def _varint(view: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise BodyError("truncated or overlong varint")
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _all_fields(view: memoryview, pos: int, end: int, left: list[int]) -> Iterator[tuple[int, int, int, int]]:
    """``(field number, framed, start, end)`` of every length-delimited field of the message in
    ``view[pos:end]``: ``start:end`` its payload, ``framed:end`` its whole encoding (tag and length too);
    fields of other wire types are skipped."""
    while pos < end:
        left[0] -= 1
        if left[0] == -1:  # (a budget of n fields spent; -1 less each field when none was given: never 0 again)
            raise BodyError("too many fields for the spans a request may hold")
        field_start = pos
        tag, pos = _varint(view, pos, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise BodyError("field number 0")
        if wire == 0:
            _, pos = _varint(view, pos, end)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == _LEN:
            length, pos = _varint(view, pos, end)
            if pos + length > end:
                raise BodyError("a field runs past its message")
            yield number, field_start, pos, pos + length
            pos += length
        else:
            raise BodyError(f"wire type {wire}")
        if pos > end:
            raise BodyError("a field runs past its message")


def _payloads(view: memoryview, pos: int, end: int, number: int, left: list[int]) -> Iterator[tuple[int, int]]:
    """The payloads of the length-delimited fields ``number`` of the message in ``view[pos:end]``."""
    for n, _, start, stop in _all_fields(view, pos, end, left):
        if n == number:
            yield start, stop
