"""OTLP/HTTP trace requests decoded: what lens_rl's receivers share (the vLLM loopback and the test one).

A request body (protobuf, plain or gzip) becomes ``(resource attributes, scope name, span)`` triples, with
attribute values as plain Python values. Needs ``opentelemetry-proto`` (the OTLP exporters bring it).

Example::

    for resource, scope, span in trace_spans(body):
        print(resource.get("service.name"), scope, span.name)
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from typing import Any

__all__ = ["ID_REMOTE", "ID_REMOTE_KNOWN", "BodyError", "any_value", "attributes", "body_of", "trace_spans"]

#: A span's ``flags`` bits (OTLP 1.1+): whether its parent's remoteness is known, and that it is remote.
ID_REMOTE_KNOWN = 0x100
ID_REMOTE = 0x200


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
