"""The embedded file store's format: what recording and reading agree on (the only contract between them).

Layout: ``trace_dir/<run_id>/spans-<group>-<rank>-<pid>.jsonl`` and ``metrics-<group>-<rank>-<pid>.jsonl``,
one file per process and signal, and ``live-<group>-<rank>-<pid>.json`` heartbeats. File names are for
people: a process's identity (group, rank, pid, attempt, driver or not) is its header's, never its name's.

**Format v2**: a file's first line is a header carrying the process's resource; span lines carry none and
use short keys (a typical phase span is ~250 bytes)::

    {"v": 2, "header": true, "format": "lens_rl.spans/2", "kind": "spans", "role": "driver" | "worker",
     "resource": {...}, "pid": int, "since": ns (no span of the file starts before it),
     "remote_parents": true (a span line marks a parent from another process with "pr"),
     "root": span id (the driver's: the job root rl.job, its top-level spans' parent; absent elsewhere)}
    {"n": name, "t": trace id (32 hex), "s": span id (16 hex), "p": parent span id | absent,
     "pr": true when that parent was carried in from another process (absent: local),
     "b": start ns, "e": end ns, "a": {attributes} | absent, "th": thread id, "tn": thread name,
     "k": kind (absent: INTERNAL), "st": status (absent: UNSET), "sm": status message,
     "ev": [{"n", "ts", "a"}], "ln": [{"t", "s", "a"}], "sc": scope (absent: "lens_rl")}

A header may appear again later in a file (a re-init in the same process); it applies to the lines after
it. A metric line: ``{"time_ns": int, "metrics": <OTel MetricsData JSON>}`` after its header. Every line is
strict JSON (a NaN or infinite number is written as the string ``"NaN"``, ``"Infinity"``,
``"-Infinity"``). A file whose first line is no v2 header is not read (0.x: there is no v1 reader).

Example::

    path = store_path("lens_traces", "run42", "spans", {"rl.worker_group": "lm_policy", "nv.dl.rank": 1}, 4321)
    process_of({"rl.worker_group": "driver"}, {"role": "driver", "pid": 7})   # Process("driver", 0, 7, 0, True)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "FIELD_TYPES",
    "TIME_MAX_NS",
    "TIME_MIN_NS",
    "LIVE_FORMAT",
    "LIVE_MIN_INTERVAL_MS",
    "FORMAT_VERSION",
    "HEADER_FORMAT",
    "OWN_SCOPE",
    "ROW_KEYS",
    "Process",
    "file_name",
    "header",
    "live_path",
    "process_of",
    "safe_part",
    "store_path",
]

FORMAT_VERSION = 2
#: Plausible span times (ns since the epoch): from 2000-01-01 to 2200-01-01 (UTC).
TIME_MIN_NS = 946_684_800 * 10**9
TIME_MAX_NS = 7_258_118_400 * 10**9
HEADER_FORMAT = "lens_rl.spans/2"
#: A heartbeat file's ``format`` (``live-<group>-<rank>-<pid>.json``, rewritten whole, atomically).
LIVE_FORMAT = "lens_rl.live/1"
#: The shortest interval a heartbeat is rewritten at (its thread's shortest wait): a shorter
#: ``heartbeat_interval_ms`` is kept as this, and the heartbeat's ``interval_ms`` says so.
LIVE_MIN_INTERVAL_MS = 50
OWN_SCOPE = "lens_rl"

#: The keys a line may carry: a span line's, and a header's that tell it apart.
ROW_KEYS = (
    "n",
    "t",
    "s",
    "p",
    "pr",
    "b",
    "e",
    "a",
    "th",
    "tn",
    "k",
    "st",
    "sm",
    "ev",
    "ln",
    "sc",
    "v",
    "header",
    "resource",
    "root",
)
#: The JSON types a span line's keys may have (besides null): a line with another is garbage, skipped and
#: counted, so no reader meets a list for a name or text for attributes. Times are integers of ns in
#: [TIME_MIN_NS, TIME_MAX_NS) (2000 to 2200, UTC), the end not before the start.
FIELD_TYPES: Mapping[str, tuple[type, ...]] = {
    "b": (int,),
    "e": (int,),
    "n": (str,),
    "t": (str,),
    "s": (str, int),
    "p": (str, int),
    "pr": (bool,),
    "a": (dict,),
    "th": (int, str),
    "tn": (str,),
    "k": (str,),
    "st": (str,),
    "sm": (str,),
    "ev": (list,),
    "ln": (list,),
    "sc": (str,),
}


class Process(NamedTuple):
    """One process of a run, as its file's header names it."""

    group: str
    rank: int
    pid: int
    attempt: int = 0
    driver: bool = False


def _int(value: Any, default: int = 0) -> int:
    """``value`` as an int64 (a rank, pid or attempt); ``default`` for anything else (past 64 bits too)."""
    try:
        number = int(value) if value is not None and not isinstance(value, bool) else default
    except (TypeError, ValueError, OverflowError):
        return default
    return number if -(2**63) <= number < 2**63 else default


def process_of(resource: Mapping[str, Any] | None, head: Mapping[str, Any] | None = None) -> Process:
    """The process a header describes (``head``, with its ``resource``); bad values read as defaults. The
    driver is the process whose header says ``"role": "driver"`` (a group named ``driver-pool`` is not)."""
    res = resource or {}
    head = head or {}
    group = str(res.get("rl.worker_group", "worker"))
    role = head.get("role")
    driver = role == "driver" if role is not None else group == "driver"
    pid = head.get("pid") if type(head.get("pid")) is int else res.get("process.pid")
    return Process(group, _int(res.get("nv.dl.rank")), _int(pid), _int(res.get("rl.attempt")), driver)


def header(kind: str, resource: Mapping[str, Any], pid: int, since_ns: int, *, role: str = "worker") -> dict[str, Any]:
    """A v2 file's header (``kind``: ``spans`` or ``metrics``); the driver's gains ``root`` once it is known."""
    head: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "header": True,
        "format": HEADER_FORMAT,
        "kind": kind,
        "role": "driver" if role == "driver" else "worker",
        "resource": dict(resource),
        "pid": pid,
        "since": since_ns,
    }
    if kind == "spans":
        head["remote_parents"] = True
    return head


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_MAX_PART = 64  # characters per path part; a file name stays far below 255 bytes


def safe_part(value: object, default: str) -> str:
    """``value`` as one harmless path part: no separator, no ``..``, not empty, not too long."""
    text = _UNSAFE.sub("_", str(value)).strip(".") or default
    if len(text) > _MAX_PART:
        digest = hashlib.sha1(text.encode()).hexdigest()[:8]
        text = f"{text[: _MAX_PART - 9]}-{digest}"
    return text


def file_name(kind: str, resource: Mapping[str, Any], pid: int, suffix: str = ".jsonl") -> str:
    """``<kind>-<group>-<rank>-<pid><suffix>``: a name for people (readers never parse it)."""
    group = safe_part(resource.get("rl.worker_group", "worker"), "worker")
    rank = safe_part(resource.get("nv.dl.rank", 0), "0")
    return f"{kind}-{group}-{rank}-{pid}{suffix}"


def store_path(
    trace_dir: str | Path, run_id: str, kind: str, resource: Mapping[str, Any], pid: int, suffix: str = ".jsonl"
) -> Path:
    """Where a process writes ``kind`` for ``run_id``: always inside ``trace_dir``, whatever the values."""
    return Path(trace_dir) / safe_part(run_id, "run") / file_name(kind, resource, pid, suffix)


def live_path(trace_dir: str | Path, run_id: str, resource: Mapping[str, Any], pid: int) -> Path:
    """Where a process keeps its heartbeat: ``trace_dir/<run_id>/live-<group>-<rank>-<pid>.json``."""
    return store_path(trace_dir, run_id, "live", resource, pid, ".json")
