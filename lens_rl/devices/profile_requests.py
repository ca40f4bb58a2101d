"""The live requests: one file in the run folder that every process looks at, at its step boundaries, at most once
a second; and the answers the processes that took each request write back.

* ``<run>/profile-request.json``: ``{"requests": [request, ...]}``, each request ``{"id", "group", "rank",
  "steps": "next" | [A, B], "backend", "reason", "written_ns"}`` (``group`` a name or glob, ``group`` / ``rank``
  / ``backend`` null: any / the configured one). A writer adds its request to those already there (under an
  ``flock`` on ``<run>/.profile-request.lock``, so two users, or a user and the automatic trigger, never drop
  each other's), drops those older than :data:`KEEP_NS` and keeps the newest :data:`KEEP`, and replaces the file
  atomically (a temporary file, then a rename). A file holding one bare request (the format before) is read as
  that one request.
* ``<run>/profiles/request-<id>-<group>-<rank>-<pid>.json``: ``{"id", "group", "rank", "pid", "files": [paths
  relative to the run folder], "errors": [text], "refused": [[first, last]]}``, rewritten as each window of the
  request closes or steps of it are refused (``refused``: the steps this process will not capture, each said
  why in ``errors``; ``group`` / ``rank`` / ``pid``: who answers, as its heartbeat names it).

Written by ``lens-rl profile`` and by the driver's automatic trigger; read by :mod:`lens_rl.devices.profile`.

Example::

    request_id = write_request(run, steps="next", rank=1)
    answers(run, request_id)          # [] until a process wrote its capture
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lens_rl._errors import warn_once
from lens_rl.store.files import read_capped
from lens_rl.store.format import safe_part

__all__ = [
    "PROFILES",
    "REQUEST_FILE",
    "Want",
    "answers",
    "want_of",
    "matches",
    "read_request",
    "read_requests",
    "write_answer",
    "write_request",
]

REQUEST_FILE = "profile-request.json"
#: The lock writers of the request file take (an empty file next to it).
LOCK_FILE = ".profile-request.lock"
#: The folder of the run where captures and answers are written.
PROFILES = "profiles"
#: A request older than this is dropped by the next writer (readers take a request once, when they first see it).
KEEP_NS = 600 * 10**9
#: The most requests the file keeps (the newest).
KEEP = 32
#: The largest request file read (a request is a few hundred bytes); a larger one is ignored with one warning.
REQUEST_MAX = 64 << 10
#: The largest answer file read (a process's answer names a few files and reasons).
ANSWER_MAX = 1 << 20


def write_request(
    run: Path,
    *,
    steps: str | tuple[int, int] = "next",
    group: str | None = None,
    rank: int | None = None,
    backend: str | None = None,
    reason: str = "request",
    or_later: bool = False,
) -> str:
    """Write a request into the run folder ``run``; its id (``or_later``: steps ``[A, A]`` a process has begun
    already become the first step it has not: the automatic trigger's). Raises ``OSError`` when the folder
    cannot be written."""
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
    if or_later:
        body["or_later"] = True
    tmp = run / f".{REQUEST_FILE}.{os.getpid()}.{request_id}.tmp"
    with _locked(run):
        now = body["written_ns"]
        kept = [
            old
            for old in read_requests(run / REQUEST_FILE)
            if isinstance(old.get("written_ns"), int) and now - old["written_ns"] < KEEP_NS
        ]
        try:
            tmp.write_text(json.dumps({"requests": [*kept[-(KEEP - 1) :], body]}), encoding="utf-8")
            os.replace(tmp, run / REQUEST_FILE)
        except OSError:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise
    return request_id


@contextlib.contextmanager
def _locked(run: Path) -> Iterator[None]:
    """Writers of the request file one at a time (an ``flock``; where there is none, last writer wins)."""
    try:
        import fcntl
    except ImportError:  # (not POSIX)
        yield
        return
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(run / LOCK_FILE, flags, 0o644)  # (read-only: another user's writer can lock it too)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_requests(path: Path) -> list[dict[str, Any]]:
    """The requests in the file at ``path``, oldest first: ``[]`` when it is absent or holds none (never raises,
    never blocks); an entry that is no request is left out."""
    body = _read(path)
    entries = body.get("requests") if isinstance(body, dict) and "requests" in body else [body]
    if not isinstance(entries, list):
        return []
    return [entry for entry in entries if _is_request(entry)]


def read_request(path: Path) -> dict[str, Any] | None:
    """The newest request at ``path``, or None when there is none (see :func:`read_requests`)."""
    found = read_requests(path)
    return found[-1] if found else None


def _read(path: Path) -> Any:
    """The JSON document at ``path``, or None when it is absent or unreadable.

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
    return body


def _is_request(body: Any) -> bool:
    """A request as :func:`write_request` writes it: an id, ``steps`` ``"next"`` or ``[A, B]`` (ints, 0 <= A <=
    B), ``group`` a string or null and ``rank`` an int >= 0 or null (a bool is none). Anything else (a hand-written
    ``[5, 2]``, a rank ``"1"``) names no steps or no process: left out, never half taken."""
    if not isinstance(body, dict) or not isinstance(body.get("id"), str):
        return False
    group, rank = body.get("group"), body.get("rank")
    if not (group is None or isinstance(group, str)) or not (rank is None or (rank.__class__ is int and rank >= 0)):
        return False
    steps = body.get("steps")
    return steps == "next" or (
        isinstance(steps, list)
        and len(steps) == 2
        and all(s.__class__ is int and s >= 0 for s in steps)
        and steps[0] <= steps[1]
    )


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
    if hi < step and request.get("or_later") is True:
        late = f"{reason} (step {hi} had begun here: step {step}, the first not)"
        return Want(request["id"], step, step, late, backend), ""
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
    pid = os.getpid()
    path = folder / f"request-{safe_part(request_id, 'request')}-{safe_part(group, 'worker')}-{rank}-{pid}.json"
    tmp = path.with_name(f".{path.name}.tmp")
    body = {"id": request_id, "group": group, "rank": rank, "pid": pid, "files": files, "errors": errors}
    tmp.write_text(json.dumps({**body, "refused": refused or []}), encoding="utf-8")
    os.replace(tmp, path)


def answers(run: Path, request_id: str) -> list[dict[str, Any]]:
    """Every process's answer to ``request_id`` so far. Read like the request file (a regular file only, at most
    :data:`ANSWER_MAX` bytes): anything else named like an answer (a FIFO, a link to a device, a huge or deeply
    nested document) is no answer, never a wait or a traceback."""
    out = []
    for path in sorted((run / PROFILES).glob(f"request-{safe_part(request_id, 'request')}-*.json")):
        try:
            body = json.loads(read_capped(path, ANSWER_MAX).decode("utf-8"))
        except (OSError, ValueError, RecursionError):  # (UnicodeDecodeError and JSON's errors are ValueErrors)
            continue
        if isinstance(body, dict) and body.get("id") == request_id:
            out.append(body)
    return out
