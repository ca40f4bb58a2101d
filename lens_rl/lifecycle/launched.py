"""A process ``lens-rl run`` started: the driver's role, claimed by the process that runs the training loop,
and the job root's ids, fixed by ``lens-rl run`` before any process starts.

``lens-rl run`` names a claim file (``LENS_RL_RUN_DRIVER_CLAIM``, in a scratch folder of its own, outside the
store) and the job root's trace context (``LENS_RL_RUN_ROOT``, a W3C ``traceparent``; the same value is the
job's ``TRACEPARENT``, so every process of the job, started before the driver or after it, parents its
phases under the root). The first process to open a step (a step umbrella, a framework's woven step, a
``traced_phase`` with ``step=``) or to call ``init_telemetry_driver`` creates the claim file exclusively and
is the driver: it opens ``rl.job`` with exactly those ids. Every other process is a worker. A process that
opens no step (``python -c 'import torch'``, ``pip``, ``ray job submit``, a launcher) claims nothing.

Example::

    if launched.under_run() and launched.claim():
        ...                                     # this process is the job's driver
"""

from __future__ import annotations

import os

__all__ = ["CLAIM_ENV", "PARENT_ENV", "ROOT_ENV", "claim", "root_ids", "under_run"]

#: A path the driver creates exclusively (set by ``lens-rl run`` for every process of the job).
CLAIM_ENV = "LENS_RL_RUN_DRIVER_CLAIM"
#: The job root's ``traceparent``: the driver's ``rl.job`` gets its trace and span id.
ROOT_ENV = "LENS_RL_RUN_ROOT"
#: The ``TRACEPARENT`` the job had before ``lens-rl run`` (a CI system's trace): ``rl.job``'s parent.
PARENT_ENV = "LENS_RL_RUN_PARENT"

#: The pid that won the claim (a forked child of the driver is not the driver).
_won: list[int] = []


def under_run() -> bool:
    """True in a process ``lens-rl run`` started (its environment names a claim file)."""
    return bool(os.environ.get(CLAIM_ENV))


def claim() -> bool:
    """True when this process is the job's driver: it holds the claim, or creates the claim file now (the
    first to ask, atomically). False outside ``lens-rl run`` and in every process after the first."""
    pid = os.getpid()
    if pid in _won:
        return True
    path = os.environ.get(CLAIM_ENV, "")
    if not path:
        return False
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError:  # taken, or another node's path: a worker
        return False
    try:
        os.write(fd, f"{pid}\n".encode())
    finally:
        os.close(fd)
    _won[:] = [pid]
    return True


def root_ids() -> tuple[int, int, str | None] | None:
    """The job root's (trace id, span id, the parent ``traceparent`` or None) for the driver that holds the
    claim; None elsewhere, or when ``LENS_RL_RUN_ROOT`` is no valid ``traceparent``."""
    if os.getpid() not in _won:
        return None
    parts = os.environ.get(ROOT_ENV, "").strip().split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id = int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, os.environ.get(PARENT_ENV) or None
