"""The live request: one file in the run folder that every process looks at, at its step boundaries, at most once
a second; and the answers the processes that took it write back.

* ``<run>/profile-request.json``: ``{"id", "group", "rank", "steps": "next" | [A, B], "backend", "reason",
  "written_ns"}`` (``group`` a name or glob, ``group`` / ``rank`` / ``backend`` null: any / the configured one).
  Written atomically (a temporary file, then a rename); a newer request replaces the older.
* ``<run>/profiles/request-<id>-<group>-<rank>-<pid>.json``: ``{"id", "files": [paths relative to the run
  folder], "errors": [text], "refused": [[first, last]]}``, rewritten as each window of the request closes or
  steps of it are refused (``refused``: the steps this process will not capture, each said why in ``errors``).

Written by ``lens-rl profile`` and by the driver's automatic trigger; read by :mod:`lens_rl.devices.profile`.

Example::

    request_id = write_request(run, steps="next", rank=1)
    answers(run, request_id)          # [] until a process wrote its capture
"""

from __future__ import annotations

import fnmatch
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from lens_rl._errors import warn_once
from lens_rl.store.files import read_capped

__all__ = [
    "PROFILES",
    "REQUEST_FILE",
    "Want",
    "answers",
    "want_of",
    "matches",
    "read_request",
    "write_answer",
    "write_request",
]

REQUEST_FILE = "profile-request.json"
#: The folder of the run where captures and answers are written.
PROFILES = "profiles"
#: The largest request file read (a request is a few hundred bytes); a larger one is ignored with one warning.
REQUEST_MAX = 64 << 10


def write_request(
    run: Path,
    *,
    steps: str | tuple[int, int] = "next",
    group: str | None = None,
    rank: int | None = None,
    backend: str | None = None,
    reason: str = "request",
) -> str:
    """Write a request into the run folder ``run``; its id. Raises ``OSError`` when the folder cannot be written."""
    request_id = secrets.token_hex(4)
    body = {
        "id": request_id,
        "group": group,
        "rank": rank,
        "steps": steps if isinstance(steps, str) else list(steps),
        "backend": backend,
        "reason": reason,
        "written_ns": time.time_ns(),
    }
    tmp = run / f".{REQUEST_FILE}.{os.getpid()}.{request_id}.tmp"
    try:
        tmp.write_text(json.dumps(body), encoding="utf-8")
        os.replace(tmp, run / REQUEST_FILE)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    return request_id


def read_request(path: Path) -> dict[str, Any] | None:
    """The request at ``path``, or None when it is absent or not a request (never raises, never blocks).

    Opened like every store file (:func:`lens_rl.store.files.read_capped`): a regular file only (a FIFO or a
    link to a device is not opened), at most :data:`REQUEST_MAX` bytes; anything unreadable or unparsable (a
    deeply nested document included) is ignored with one warning."""
    try:
        data = read_capped(path, REQUEST_MAX)
    except OSError as exc:
        if os.path.lexists(path):  # (absent: no request, nothing to say)
            warn_once("profile-request-unreadable", "lens_rl: profile request %s ignored: %s", path, exc)
        return None
    try:
        body = json.loads(data.decode("utf-8"))
    except Exception as exc:  # (ValueError, UnicodeDecodeError, RecursionError: a hostile document)
        warn_once(
            "profile-request-unparsable", "lens_rl: profile request %s ignored: not JSON (%s)", path, type(exc).__name__
        )
        return None
    if not isinstance(body, dict) or not isinstance(body.get("id"), str):
        return None
    steps = body.get("steps")
    if steps != "next" and not (
        isinstance(steps, list) and len(steps) == 2 and all(isinstance(s, int) and s >= 0 for s in steps)
    ):
        return None
    return body


def matches(request: dict[str, Any], group: str, rank: int) -> bool:
    """Does ``request`` name this process (its group a name or glob, its rank; null: any)?"""
    want_group, want_rank = request.get("group"), request.get("rank")
    if isinstance(want_group, str) and want_group and not fnmatch.fnmatchcase(group, want_group):
        return False
    return not (isinstance(want_rank, int) and want_rank != rank)


class Want:
    """Steps ``lo`` to ``hi`` that a request (``request``: its id; None: this process's own trigger) wants
    captured here, with the window's ``reason`` and ``backend`` (None: the configured one)."""

    __slots__ = ("request", "lo", "hi", "reason", "backend")

    def __init__(self, request: str | None, lo: int, hi: int, reason: str, backend: str | None) -> None:
        self.request, self.lo, self.hi, self.reason, self.backend = request, lo, hi, reason, backend


def want_of(request: dict[str, Any], step: int) -> tuple[Want | None, str]:
    """What ``request``, read at the boundary of ``step`` (a step this process has not begun capturing), wants
    here: a :class:`Want` from ``step`` on, or None and why (its steps are over)."""
    backend: str | None = request["backend"] if request.get("backend") in ("torch", "cuda", "vllm") else None
    reason: str = request["reason"] if isinstance(request.get("reason"), str) else "request"
    steps = request["steps"]
    if steps == "next":
        return Want(request["id"], step + 1, step + 1, reason, backend), ""
    lo, hi = steps
    if hi < step:
        return None, f"this process was already at step {step}"
    return Want(request["id"], max(lo, step), hi, reason, backend), ""


def write_answer(
    run: Path,
    request_id: str,
    group: str,
    rank: int,
    files: list[str],
    errors: list[str],
    refused: list[list[int]] | None = None,
) -> None:
    """This process's answer to ``request_id``: the captures written (relative paths), what failed, and the
    steps it refused (``[first, last]`` ranges, each said why in ``errors``)."""
    folder = run / PROFILES
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"request-{request_id}-{group}-{rank}-{os.getpid()}.json"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(
        json.dumps({"id": request_id, "files": files, "errors": errors, "refused": refused or []}), encoding="utf-8"
    )
    os.replace(tmp, path)


def answers(run: Path, request_id: str) -> list[dict[str, Any]]:
    """Every process's answer to ``request_id`` so far."""
    out = []
    for path in sorted((run / PROFILES).glob(f"request-{request_id}-*.json")):
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(body, dict):
            out.append(body)
    return out
