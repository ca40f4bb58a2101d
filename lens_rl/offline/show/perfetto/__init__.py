"""Perfetto traces from the file store: Chrome trace-event JSON, or Perfetto's native protobuf.

One process per worker group and rank (named ``"<group> rank <r> (pid <p>)"``, the
driver first), one track per thread (named as the thread was: ``MainThread``,
``ThreadPoolExecutor-0_1``), one slice per span with its attributes, coloured by bucket
(Chrome JSON: ``cname`` productive ``good``, overhead ``yellow``, idle ``grey``, wasted
``terrible``, unbucketed ``generic_work``; both: the bucket as the category), and a
flow arrow from a span to each child that ran in another process (a driver's call into
a worker). ``steps=(A, B)`` and ``group=G`` cut a window, so a month-long run opens
as a readable slice (the GPU counter tracks too: cut to the drawn spans' time, from the reading in effect
at its start).

It streams: each file's events are written as it is read (files in parallel with
``jobs``), so memory is O(jobs x the largest file), in one pass over the lines: the
processes are named from each file's header, and the Chrome JSON's times count from
the earliest header's ``since`` (when that process's telemetry started; a file without
one has its starts read first; the protobuf's times are absolute). A call from another
process is a span whose line marks its parent as remote (``"pr"``). Its caller end is
joined in the parent from the callers' locations: every span of the driver's file (its
header says it is the driver's) and every client or producer span; a call whose caller is
none of those (a worker calling another) is located by one more pass over the other
files, for those spans only. The passes over the files (the first looks, a file's rows and
its window, where each row goes) are :mod:`lens_rl.offline.run.perfetto`'s; here
:mod:`.places` (what every file's drawing shares), :mod:`.render` (a file's events),
:mod:`.chrome` (the JSON), :mod:`.proto` (the protobuf, built with the ``perfetto``
package's trace protos), :mod:`.flows` (calls as arrows), :mod:`.refresh` (a file's events through the
refresh cache: ``cache=`` a folder, and a second look reads only what was appended since).

Example::

    write_trace(span_files("lens_traces/run42"), "trace.pftrace")     # or trace.json
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lens_rl.offline.run.perfetto import INT64_END, Options, Scan, head_file, locate_file, options, scan_file
from lens_rl.offline.run.perfetto_cache import cached_locate
from lens_rl.offline.run.perfetto_scans import cached_scan
from lens_rl.offline.show.perfetto.flows import Flows
from lens_rl.offline.show.perfetto.gpu_tracks import gpu_counters
from lens_rl.offline.show.perfetto.places import BUCKET_COLORS
from lens_rl.offline.show.perfetto.proto import proto_module
from lens_rl.offline.show.perfetto.refresh import cached_render, say_notes
from lens_rl.offline.show.perfetto.render import render_file

__all__ = ["BUCKET_COLORS", "FORMATS", "format_of", "write_trace"]


#: Output extensions and the format each writes.
FORMATS = {
    ".json": "Chrome trace-event JSON",
    ".pftrace": "Perfetto protobuf",
    ".perfetto-trace": "Perfetto protobuf",
    ".pb": "Perfetto protobuf",
}


def format_of(output: str | os.PathLike[str]) -> str | None:
    """``json`` or ``pftrace`` by the output's extension (:data:`FORMATS`); None for any other."""
    name = str(output).lower()
    if name.endswith(".json"):
        return "json"
    return "pftrace" if name.endswith((".pftrace", ".perfetto-trace", ".pb")) else None


def _append_file(path: str, out: Any) -> None:
    """Append the file at ``path`` to ``out``: copied inside the kernel where it can be
    (``copy_file_range``: no pass through this process's memory), else read and written."""
    with open(path, "rb") as part:
        out.flush()
        try:
            while os.copy_file_range(part.fileno(), out.fileno(), 1 << 30):
                pass
            return
        except (AttributeError, OSError):  # no such call here, or not between these files: copy the rest ourselves
            pass  # (the kernel moved both files' offsets past what it copied)
        shutil.copyfileobj(part, out, 1 << 20)


def write_trace(
    paths: Sequence[Path],
    output: str | os.PathLike[str],
    *,
    steps: tuple[int, int] | None = None,
    group: str | None = None,
    jobs: int | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
    cache: str | None = None,
    skipped: list[str] | None = None,
) -> int:
    """Write the trace of these span files to ``output`` (format by extension); returns the spans written.
    ``cache``: the refresh cache's folder (:mod:`.refresh`; None: every file read whole); ``skipped``: filled
    with a line naming each file not read (its first line is no v2 header), as every command names them."""
    from lens_rl.offline.run.parallel import no_gc

    fmt = format_of(output)
    if fmt is None:
        raise ValueError(f"{str(output)!r}: no trace format has that extension; allowed: {', '.join(FORMATS)}")
    if fmt == "pftrace":
        proto_module()  # fail before any work when the extra is missing
    parallel: dict[str, Any] = {"jobs": jobs, "use_ray": use_ray, "ray_address": ray_address}
    notes: list[str] = []  # the cache's entries not used, and why
    with no_gc():  # (the parent too builds millions of acyclic objects: the callers' locations, the calls)
        heads = [head_file(path) for path in paths]  # the processes, when each file's spans may start
        unread = [note for head in heads for note in head.notes]  # (files of another shape: not cache notes)
        if skipped is not None:
            skipped += unread
        callers = frozenset(str(path) for path, head in zip(paths, heads, strict=True) if head.driver)
        scans = list(heads)
        if fmt == "json":  # its times count from the run's first start: where a header does not bound it, read
            unbounded = [path for path, head in zip(paths, heads, strict=True) if head.origin is None]
            scans += _scans(unbounded, cache, parallel)
        opts = _cached(options(scans, fmt, steps, group, paths, callers), cache, False)
        spans = _write(paths, output, opts, parallel, notes)
        if spans < 0:  # a process past a file's first line (a re-init under another identity), or a span
            # starting before its header's bound (the clock set back): the processes and the origin from every line
            scans = _scans(paths, cache, parallel)
            opts = _cached(options(scans, fmt, steps, group, paths, callers), cache, True)
            spans = _write(paths, output, opts, parallel, notes)
        said = notes + [n for scan in scans for n in scan.notes if n not in unread]
        say_notes(list(dict.fromkeys(said)))
    return spans


def _scans(paths: Sequence[Path], cache: str | None, parallel: dict[str, Any]) -> list[Scan]:
    """Each file's processes and first start, from every line (through the cache in ``cache``)."""
    from lens_rl.offline.run.parallel import map_files

    if cache is None:
        return list(map_files(scan_file, paths, **parallel, desc="perfetto: first starts"))
    return list(map_files(cached_scan, paths, cache, **parallel, desc="perfetto: first starts"))


def _cached(opts: Options, cache: str | None, again: bool) -> Options:
    opts.cache, opts.again = cache, again
    return opts


def _write(
    paths: Sequence[Path], output: str | os.PathLike[str], opts: Options, parallel: dict[str, Any], notes: list[str]
) -> int:
    """The events of every file, then the caller ends of calls across processes; the spans written, or
    -1 when a file met a process ``opts`` does not number, or (JSON) a start before ``opts.origin``
    (the output is then incomplete)."""
    from lens_rl.offline.run.parallel import map_files

    spans = 0
    first, last = INT64_END, -1  # the drawn spans' window: a cut's GPU counter tracks cover it alone
    # callers first (the driver's files), so callees resolve as they arrive
    ordered = sorted(paths, key=lambda p: str(p) not in opts.callers)
    with (
        open(output, "wb") as out,
        tempfile.TemporaryDirectory(dir=Path(output).parent, prefix=".lens-parts-") as spill,
    ):
        if not parallel["use_ray"]:  # local workers write their events next to the output; a Ray task sends them back
            opts.spill = spill
        if opts.fmt == "json":
            out.write(b'{"displayTimeUnit":"ms","otherData":{"source":"lens_rl"},"traceEvents":[\n')
        flows = Flows(opts.fmt, opts.origin, out.write)
        render = render_file if opts.cache is None else cached_render  # (through the refresh cache: what is new)
        for chunk in map_files(render, ordered, opts, **parallel, desc="perfetto"):
            if chunk.path is not None:
                _append_file(chunk.path, out)
                os.unlink(chunk.path)
            out.write(chunk.data)
            if chunk.unknown or (opts.fmt == "json" and chunk.first < opts.origin):
                return -1
            spans += chunk.spans
            first, last = min(first, chunk.first), max(last, chunk.last)
            notes += chunk.notes
            flows.add(chunk)
        _locate_callers(flows, ordered, opts, parallel, notes)
        cut = opts.steps is not None or opts.group is not None
        out.write(gpu_counters(paths, opts, (first, last) if cut else None))  # (a track per GPU, where sampled)
        if opts.fmt == "json":
            out.write(b'{"ph":"M","name":"trace_end","pid":0,"tid":0,"args":{}}\n]}\n')
    return spans


def _locate_callers(
    flows: Flows, ordered: Sequence[Path], opts: Options, parallel: dict[str, Any], notes: list[str]
) -> None:
    """Calls whose caller is neither a driver's span nor a client: one more pass over the other files
    locates their callers, for the flows still open (through the cache: an unchanged file is not read)."""
    from lens_rl.offline.run.parallel import map_files

    wanted = frozenset(flows.pending.callers)
    others = [path for path in ordered if str(path) not in opts.callers]
    if wanted and others:
        located = dataclasses.replace(opts, wanted=wanted, spill=None)
        locate = locate_file if opts.cache is None else cached_locate
        for chunk in map_files(locate, others, located, **parallel, desc="perfetto: callers"):
            notes += chunk.notes
            flows.add(chunk)
