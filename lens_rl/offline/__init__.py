"""The offline tools' face: what the CLI and the demo import. They read the file store (:mod:`lens_rl.store`)
and nothing of the recording side, over four sub-floors: ``read/`` (one file -> its parts), ``rollup/``
(parts -> the report, pure), ``run/`` (every pass over the files, the parallel map, the refresh cache) and
``show/`` (the table, the HTML report, Perfetto, status, watch, replay).

The names load on first use, so ``lens-rl status`` does not import the goodput machinery (numpy) it never
runs."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lens_rl.offline.run.analyze import analyze
    from lens_rl.offline.run.cache import cache_folder
    from lens_rl.offline.show.perfetto import FORMATS, format_of, write_trace
    from lens_rl.offline.show.replay import replay
    from lens_rl.offline.show.report import write_report
    from lens_rl.offline.show.status import format_status, run_status
    from lens_rl.offline.show.table import format_table
    from lens_rl.offline.show.watch import watch

#: public name -> the module that holds it
_HOME = {
    "analyze": "lens_rl.offline.run.analyze",
    "cache_folder": "lens_rl.offline.run.cache",
    "FORMATS": "lens_rl.offline.show.perfetto",
    "format_of": "lens_rl.offline.show.perfetto",
    "write_trace": "lens_rl.offline.show.perfetto",
    "replay": "lens_rl.offline.show.replay",
    "write_report": "lens_rl.offline.show.report",
    "format_status": "lens_rl.offline.show.status",
    "run_status": "lens_rl.offline.show.status",
    "format_table": "lens_rl.offline.show.table",
    "watch": "lens_rl.offline.show.watch",
}

__all__ = [
    "FORMATS",
    "analyze",
    "cache_folder",
    "format_of",
    "format_status",
    "format_table",
    "replay",
    "run_status",
    "watch",
    "write_report",
    "write_trace",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'lens_rl.offline' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
