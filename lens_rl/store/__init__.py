"""The embedded file store: its format (:mod:`lens_rl.store.format`) and its reader (:mod:`lens_rl.store.reader`,
which reads a line into a row through :mod:`lens_rl.store.rows` and a header through :mod:`lens_rl.store.heads`).

The store is the only contract between recording (``lens_rl.export`` writes it) and reading (the offline
tools read it, opening its files through :mod:`lens_rl.store.files` alone); this package imports nothing else of lens_rl and no OpenTelemetry. The format is
documented in ``docs/store-format.md``.

Example::

    from lens_rl.store import iter_rows, span_files
    for path in span_files("lens_traces/run42"):
        for head, row in iter_rows(path):
            print(head.process, row.n)
"""

from __future__ import annotations

from lens_rl.store.alive import process_gone, process_mark
from lens_rl.store.files import LINE_MAX, UnreadableError, listed, open_file, read_capped, unreadable
from lens_rl.store.format import (
    FIELD_TYPES,
    FORMAT_VERSION,
    HEADER_FORMAT,
    LIVE_FORMAT,
    LIVE_MIN_INTERVAL_MS,
    OWN_SCOPE,
    ROW_KEYS,
    TIME_MAX_NS,
    TIME_MIN_NS,
    Process,
    file_name,
    header,
    live_path,
    process_of,
    safe_part,
    store_path,
)
from lens_rl.store.reader import (
    BAD_LINE,
    HEADER_PREFIX,
    INT64_END,
    CacheRead,
    Head,
    ReadStats,
    Row,
    decode_row,
    driver_attempts,
    heads,
    iter_rows,
    loads,
    not_a_store_file,
    plausible,
    read_head,
    read_live,
    scan,
    scan_runs,
    span_files,
    time_ns,
    trace_time_ns,
    unseen,
)

__all__ = [
    "BAD_LINE",
    "FIELD_TYPES",
    "FORMAT_VERSION",
    "HEADER_FORMAT",
    "LIVE_FORMAT",
    "LIVE_MIN_INTERVAL_MS",
    "HEADER_PREFIX",
    "INT64_END",
    "LINE_MAX",
    "TIME_MAX_NS",
    "TIME_MIN_NS",
    "OWN_SCOPE",
    "ROW_KEYS",
    "Head",
    "Process",
    "CacheRead",
    "ReadStats",
    "Row",
    "UnreadableError",
    "decode_row",
    "driver_attempts",
    "heads",
    "file_name",
    "header",
    "live_path",
    "iter_rows",
    "listed",
    "loads",
    "not_a_store_file",
    "open_file",
    "plausible",
    "read_capped",
    "process_gone",
    "process_mark",
    "process_of",
    "read_head",
    "read_live",
    "scan",
    "scan_runs",
    "safe_part",
    "span_files",
    "store_path",
    "time_ns",
    "trace_time_ns",
    "unreadable",
    "unseen",
]
