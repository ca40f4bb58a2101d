"""Perfetto's passes over the files: a first look (each file's processes and first start, from its header
or every line), the rows of a file (those of a window of steps by the tree rule, :mod:`lens_rl.offline.read.tree`),
and where each row goes (:class:`Places`: its process and thread, its times, the ends of calls across files).
:mod:`lens_rl.offline.show.perfetto` draws what these hand it.

Example::

    opts = options([head_file(p) for p in paths], "json", None, None, paths, frozenset())
    for pid, tid, start, end, row in Places(opts, Chunk(), False, 1).walk(file_rows(path, opts.steps)):
        ...
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lens_rl.offline.read.tree import steps_of_rows
from lens_rl.store import INT64_END, Head, Process, Row, iter_rows, not_a_store_file, read_head, trace_time_ns

__all__ = [
    "INT64_END",
    "Calls",
    "Chunk",
    "Options",
    "Places",
    "Rows",
    "Scan",
    "file_rows",
    "head_file",
    "locate_file",
    "options",
    "scan_file",
    "scan_rows",
]


@dataclass
class Scan:
    """What a first look learns of one file: its processes and, read whole, its first start."""

    keys: set[Process] = field(default_factory=set)
    origin: int | None = None
    driver: bool = False  # its header is the driver's: its spans call into the workers
    notes: list[str] = field(default_factory=list)  # the refresh cache's entries not used, and why


@dataclass
class Options:
    """What writing one file's events needs."""

    fmt: str  # "json" or "pftrace"
    processes: dict[Process, int]
    origin: int
    steps: tuple[int, int] | None = None
    group: str | None = None
    spill: str | None = None  # a directory: a file's events go to a file there, not back through a pipe
    wanted: frozenset[str] = frozenset()  # locating: the span ids (as text) whose locations are sought
    numbers: dict[str, int] = field(default_factory=dict)  # each file's number (its path as given), for flow ids
    callers: frozenset[str] = frozenset()  # the driver's files (paths as given): every span of theirs is located
    cache: str | None = None  # the refresh cache's folder (None: every file read whole)
    again: bool = False  # the processes and the origin from every line (a second pass: its entries its own)


@dataclass
class Chunk:
    """One file's rendered events (bytes, or a spilled file), and the ends of cross-process calls seen in it."""

    data: bytes = b""
    path: str | None = None
    spans: int = 0
    #: spans other files may call into, per thread (pid, tid): their ids (as text), starts and ends
    locations: dict[tuple[int, int], tuple[list[str], array[int], array[int]]] = field(default_factory=dict)
    callees: Calls = field(default_factory=lambda: Calls())  # the spans called from another file
    unknown: bool = False  # a process not in ``Options.processes`` was met: its events are not numbered right
    first: int = INT64_END  # the first start met (a JSON time before ``Options.origin`` would be negative)
    last: int = -1  # the last end met (with ``first``: the window a cut's GPU counter tracks cover)
    notes: list[str] = field(default_factory=list)  # the refresh cache's entries not used, and why


Rows = Iterable[tuple[Head, Row]]  # (head, row), as store.iter_rows yields


@dataclass
class Calls:
    """Calls from another process, as columns (no object per call to send and receive): each callee's
    flow id, its caller's span id (as text) and its start."""

    flows: array[int] = field(default_factory=lambda: array("Q"))
    callers: list[str] = field(default_factory=list)
    starts: array[int] = field(default_factory=lambda: array("q"))

    def __len__(self) -> int:
        return len(self.callers)


def scan_rows(rows: Rows) -> Scan:
    """The processes and the first start of ``rows`` (every line read)."""
    scan = Scan()
    origin = INT64_END
    last: Any = None
    for head, row in rows:
        if head is not last:
            last = head
            scan.keys.add(head.process)
            scan.driver = scan.driver or head.process.driver
        start = row.b
        if type(start) is not int or not 0 <= start < INT64_END:
            start = trace_time_ns(start)
        if start < origin:
            origin = start
    scan.origin = origin if origin < INT64_END else None
    return scan


def scan_file(path: str | os.PathLike[str]) -> Scan:
    return scan_rows(iter_rows(path))


def head_file(path: str | os.PathLike[str]) -> Scan:
    """What a file's header tells: its process, whether it is the driver's, and as ``origin`` its ``since``
    (no span of the file starts before it; None where the header has none)."""
    head, _ = read_head(path)
    if head is None:  # (a file of another shape: named once, as every command names it; an empty one is not)
        return Scan(notes=[not_a_store_file(path)] if _has_bytes(path) else [])
    since = head.header.get("since")
    bound = since if type(since) is int and 0 <= since < INT64_END else None
    return Scan({head.process}, bound, head.process.driver)


def _has_bytes(path: str | os.PathLike[str]) -> bool:
    try:
        return os.stat(path).st_size > 0
    except OSError:
        return False


#: Span kinds whose spans call out (OpenTelemetry's): located wherever they are.
_CALLER_KINDS = frozenset({"CLIENT", "PRODUCER"})


class Places:
    """Where each row goes: its process (pid) and thread (tid, named), and the ends of calls across files.

    :meth:`walk` yields ``(pid, tid, start, end, row)`` per row, recording the locations of the spans that may
    be called from another file (every span with ``callers``, else the client and producer spans and those
    ``opts.wanted`` names) and the spans called from another process (their line says so: ``"pr"``).
    """

    def __init__(self, opts: Options, chunk: Chunk, callers: bool, number: int) -> None:
        self.opts, self.chunk, self.callers = opts, chunk, callers
        self.flows = number << 32  # a call's flow id: its file's number, then its own in the file
        self.pid_of: dict[int, int] = {}  # per header
        self.threads: dict[tuple[int, Any], int] = {}
        self.names: dict[tuple[int, Any], str] = {}
        #: (span id, parent id, pid, tid, start) of each span called from another process
        self.calls: list[tuple[Any, Any, int, int, int]] = []

    def pid(self, head: Head) -> int:
        pid = self.pid_of.get(id(head))
        if pid is None:
            pid = self.opts.processes.get(head.process)
            if pid is None:  # (a re-init under another identity, past the file's first line)
                self.chunk.unknown, pid = True, len(self.opts.processes) + 1
            self.pid_of[id(head)] = pid
        return pid

    def tid(self, pid: int, row: Row) -> int:
        thread = row.th or "main"
        tid = self.threads.get((pid, thread))
        if tid is None:
            tid = self.threads[(pid, thread)] = sum(1 for t in self.threads if t[0] == pid) + 1
            self.names[(pid, thread)] = row.tn or f"thread {thread}"
        return tid

    def walk(self, rows: Rows) -> Iterator[tuple[int, int, int, int, Row]]:
        """``(pid, tid, start, end, row)`` for each row (the hot loops' source); counts the chunk's spans."""
        wanted, kinds, everyone = self.opts.wanted, _CALLER_KINDS, self.callers
        locations, call = self.chunk.locations, self.calls.append
        here: Any = None  # the current thread's locations: ids, starts, ends
        head_now: Any = None
        thread_now: Any = None
        pid = tid = spans = 0
        first, last = INT64_END, -1
        for head, row in rows:  # rows come in runs of one process and thread
            if head is not head_now:
                pid, head_now, thread_now = self.pid(head), head, None
            thread = row.th
            if thread != thread_now or thread is None:
                tid, thread_now = self.tid(pid, row), thread
                here = locations.get((pid, tid))
            start = row.b or 0
            end = row.e or start
            if type(start) is not int or type(end) is not int or not (0 <= start < INT64_END and 0 <= end < INT64_END):
                start, end = trace_time_ns(start), trace_time_ns(end)
            if end < start:
                end = start
            if start < first:
                first = start
            if end > last:
                last = end
            span_id = row.s
            if everyone or row.k in kinds or (wanted and str(span_id) in wanted):
                if here is None:
                    here = locations[(pid, tid)] = ([], array("q"), array("q"))
                here[0].append(str(span_id))
                here[1].append(start)
                here[2].append(end)
            if row.p is not None and row.pr:
                call((span_id, row.p, pid, tid, start))
            spans += 1
            yield pid, tid, start, end, row
        self.chunk.spans = spans  # (the reader yields each span id once)
        self.chunk.first, self.chunk.last = first, last

    def callees(self) -> dict[Any, tuple[int, int, int, int]]:
        """Once every row is walked: child span id -> (flow id, pid, tid, start) for each span called from
        another process (also recorded in the chunk, for the caller's end of the arrow)."""
        out = {}
        calls = self.chunk.callees
        flows, callers, starts = calls.flows.append, calls.callers.append, calls.starts.append
        flow = self.flows
        for span_id, parent_id, pid, tid, start in self.calls:
            flow += 1  # (unique in the run, and under 2**53: exact as a JSON number)
            out[span_id] = (flow, pid, tid, start)
            flows(flow)
            callers(str(parent_id))
            starts(start)
        return out


def _in_window(rows: Sequence[tuple[Head, Row]], steps: tuple[int, int]) -> list[tuple[Head, Row]]:
    """The rows of the steps ``steps`` selects (each span's step by the tree rule: its own, else its nearest
    ancestor's; :mod:`lens_rl.offline.read.tree`)."""
    of, _cycles = steps_of_rows([row for _, row in rows])
    lo, hi = steps
    return [r for r, step in zip(rows, of, strict=True) if type(step) is int and lo <= step <= hi]


def file_rows(path: str | os.PathLike[str], steps: tuple[int, int] | None, rows: Rows | None = None) -> Rows:
    """The rows of one file (or ``rows``, read from it), streamed; with ``steps``, those of the steps it
    selects (the file's rows held, each span's step taken from its ancestors)."""
    rows = iter_rows(path) if rows is None else rows
    if steps is None:
        return rows
    return _in_window(list(rows), steps)


def locate_file(path: str | os.PathLike[str], opts: Options) -> Chunk:
    """The locations of the spans ``opts.wanted`` names in one file (no events)."""
    chunk = Chunk()
    for _ in Places(opts, chunk, False, 0).walk(iter_rows(path)):
        pass
    chunk.spans, chunk.callees = 0, Calls()
    return chunk


def options(
    scans: Iterable[Scan],
    fmt: str,
    steps: tuple[int, int] | None,
    group: str | None,
    paths: Sequence[Path],
    callers: frozenset[str],
) -> Options:
    """The options of one trace: the processes numbered from the first looks ``scans`` (the driver first),
    the run's first start, each file's number (its path as given), the window and the group cut."""
    keys: set[Process] = set()
    origins = []
    for scan in scans:
        keys |= scan.keys
        if scan.origin is not None:
            origins.append(scan.origin)
    processes = {key: i + 1 for i, key in enumerate(sorted(keys, key=lambda k: (not k.driver, k)))}
    numbers = {str(path): i + 1 for i, path in enumerate(paths)}
    return Options(fmt, processes, min(origins, default=0), steps, group, numbers=numbers, callers=callers)
