"""Perfetto's Chrome trace-event JSON: one ``X`` event per span, flow events for calls across processes.

Example::

    json_events(rows, places, out.write)       # one file's events, written in slices
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import orjson

from lens_rl.offline.run.perfetto import Places, Rows
from lens_rl.offline.show.perfetto.places import BUCKET_COLORS, SLICE, category, dumps, process_name

__all__ = ["event_lines", "json_body", "json_events", "json_tail"]


def json_events(rows: Rows, places: Places, write: Callable[[bytes], Any]) -> None:
    """A file's events: one ``X`` line per span (:func:`json_body`), then :func:`json_tail`."""
    json_body(rows, places, write)
    write(b"".join(json_tail(places)))


def json_body(rows: Rows, places: Places, write: Callable[[bytes], Any]) -> None:
    """One ``X`` event per span, a line each (what a grown file's later lines append to)."""
    events: list[dict[str, Any]] = []
    append = events.append
    origin = places.opts.origin
    colors = BUCKET_COLORS
    for pid, tid, start, end, row in places.walk(rows):
        args = row.a
        if args is None:
            args = {}
        cat = category(args)
        args["trace_id"] = row.t
        args["span_id"] = row.s
        args["parent_span_id"] = row.p
        args["status"] = "UNSET" if row.st is None else row.st
        ts = (start - origin) / 1000.0
        append(
            {
                "ph": "X",
                "name": row.n,
                "cat": cat,
                "pid": pid,
                "tid": tid,
                "ts": ts,
                "dur": (end - start) / 1000.0,
                "cname": colors.get(cat, "generic_work"),
                "args": args,
            }
        )
        if len(events) >= SLICE:
            write(event_lines(events))
            events.clear()
    write(event_lines(events))


def json_tail(places: Places, skip: int = 0) -> tuple[bytes, bytes]:
    """Once every row is walked: the callee ends of calls from other processes (past the first ``skip``:
    those an earlier look wrote), then the processes' and threads' names."""
    opts = places.opts
    origin = opts.origin
    events: list[dict[str, Any]] = []
    append = events.append
    callees = places.callees().values()  # (every call numbered, in order: the chunk's callees)
    for flow, pid, tid, start in itertools.islice(callees, skip, None):  # the callee ends of calls from other processes
        append(
            {
                "ph": "f",
                "bp": "e",
                "id": flow,
                "name": "call",
                "cat": "flow",
                "pid": pid,
                "tid": tid,
                "ts": (start - origin) / 1000.0,
            }
        )
    called = event_lines(events)
    events.clear()
    for pid in sorted(set(places.pid_of.values())):
        append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": process_name(opts, pid)}})
        append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    for key, tid in places.threads.items():
        append({"ph": "M", "name": "thread_name", "pid": key[0], "tid": tid, "args": {"name": places.names[key]}})
    return called, event_lines(events)


def event_lines(events: list[dict[str, Any]]) -> bytes:
    """Events (each a dict whose first key is ``ph``) as comma-terminated members of the traceEvents array, a
    line each: an event's bytes are its own whatever its neighbours (a grown file's new events append to what
    an earlier look wrote). One dumps call, its events split where a member begins (``,{"ph":`` is never
    inside a JSON string, its quote would be escaped; where an attribute nests one, each event alone)."""
    if not events:
        return b""
    try:
        data = orjson.dumps(events, default=str)[1:-1]
    except TypeError:  # (an integer past 64 bits: each event alone, that one through the standard library)
        data = b""
    if data and data.count(b',{"ph":') == len(events) - 1:
        return data.replace(b',{"ph":', b',\n{"ph":') + b",\n"
    return b",\n".join(map(dumps, events)) + b",\n"
