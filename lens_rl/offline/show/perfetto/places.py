"""What every Perfetto file's rendering shares: the colours, the encoding, a slice's category, a process's name
(where each row goes is :mod:`lens_rl.offline.run.perfetto`'s).

A process is named from each file's header (``"<group> rank <r> (pid <p>)"``, the driver first), a thread
as it was named.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from lens_rl.offline.run.perfetto import Options

__all__ = ["BUCKET_COLORS", "NO_ATTRS", "SLICE", "category", "dumps", "process_name"]

BUCKET_COLORS = {"productive": "good", "overhead": "yellow", "idle": "grey", "wasted": "terrible", None: "generic_work"}
NO_ATTRS: dict[str, Any] = {}
#: Events (or packets) encoded at a time: memory stays flat however large the file.
SLICE = 20_000


def dumps(value: Any) -> bytes:
    """One compact JSON value (orjson); what JSON lacks as text."""
    try:
        return bytes(orjson.dumps(value, default=str))
    except TypeError:  # an integer past 64 bits, which orjson does not write: the standard library does
        pass
    return json.dumps(value, separators=(",", ":"), default=str).encode()


def category(attrs: Mapping[str, Any]) -> str:
    """A slice's category: its bucket (any text), else ``phase``."""
    bucket = attrs.get("rl.bucket")
    return bucket if type(bucket) is str and bucket else "phase"


def process_name(opts: Options, pid: int) -> str:
    """How Perfetto names a process: ``"<group> rank <r> (pid <p>)"``, its attempt after a restart."""
    key = next((k for k, v in opts.processes.items() if v == pid), None)  # (None: see Chunk.unknown)
    if key is None:
        return "? rank 0 (pid 0)"
    return f"{key.group} rank {key.rank} (pid {key.pid}" + (f", attempt {key.attempt})" if key.attempt else ")")
