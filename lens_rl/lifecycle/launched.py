"""A process ``lens-rl run`` started: the driver's role, claimed by the process that runs the training loop,
and the job root's ids, fixed by ``lens-rl run`` before any process starts.

``lens-rl run`` names a claim file (``LENS_RL_RUN_DRIVER_CLAIM``, in a scratch folder of its own, outside the
store) and the job root's trace context (``LENS_RL_RUN_ROOT``, a W3C ``traceparent``; the same value is the
job's ``TRACEPARENT``, so every process of the job, started before the driver or after it, parents its
phases under the root). The first process to open a step (a step umbrella, a framework's woven step, a
``traced_phase`` with ``step=``) or to call ``init_telemetry_driver`` creates the claim file exclusively and
is the driver: it opens ``rl.job`` with exactly those ids. Every other process is a worker. A process that
opens no step (``python -c 'import torch'``, ``pip``, ``ray job submit``, a launcher) claims nothing.

The claim file holds the driver's pid and attempt. A driver that died leaves it (a launch script's retry loop,
``until python train.py; do :; done``, or a second loop after the first): the next process of the job to open
a step takes a dead driver's claim over (``<claim>.1``, ``<claim>.2``, ... created exclusively: one taker) and
is the driver of the next attempt (``LENS_RL_OTEL_ATTEMPT`` + 1, a new root span in the job's trace, no launch
span: the time since the dead driver's last span is the restart's), so the crashed run's steps that it runs
again count as wasted.

Example::

    if launched.under_run() and launched.claim():
        ...                                     # this process is the job's driver
"""

from __future__ import annotations

import os
import secrets
import socket

__all__ = ["CLAIM_ENV", "PARENT_ENV", "ROOT_ENV", "STARTED_MARK", "claim", "mark", "root_ids", "took_over", "under_run"]

#: A path the driver creates exclusively (set by ``lens-rl run`` for every process of the job).
CLAIM_ENV = "LENS_RL_RUN_DRIVER_CLAIM"
#: The job root's ``traceparent``: the driver's ``rl.job`` gets its trace and span id.
ROOT_ENV = "LENS_RL_RUN_ROOT"
#: The ``TRACEPARENT`` the job had before ``lens-rl run`` (a CI system's trace): ``rl.job``'s parent.
PARENT_ENV = "LENS_RL_RUN_PARENT"
#: The mark of a process of the job that started lens_rl (its ``sitecustomize``, or ``import lens_rl``).
STARTED_MARK = "lens_rl-started"
#: Takeovers tried at most (a crash loop's drivers, one claim file each).
_MAX_TAKEOVERS = 10_000

#: The pid that won the claim (a forked child of the driver is not the driver), and whether it took a dead
#: driver's claim over.
_won: list[int] = []
_over: list[bool] = [False]


def under_run() -> bool:
    """True in a process ``lens-rl run`` started (its environment names a claim file)."""
    return bool(os.environ.get(CLAIM_ENV))


def claim() -> bool:
    """True when this process is the job's driver: it holds the claim, or creates the claim file now (the
    first to ask, atomically), or takes the claim of a driver that died over (then this process's attempt
    and root span are the next attempt's, in ``os.environ``). False outside ``lens-rl run`` and while the
    driver lives."""
    from lens_rl.config import ATTEMPT_ENV

    pid = os.getpid()
    if pid in _won:
        return True
    base = os.environ.get(CLAIM_ENV, "")
    if not base:
        return False
    attempt = _int(os.environ.get(ATTEMPT_ENV, "")) or 0
    for index in range(_MAX_TAKEOVERS):
        path = base if index == 0 else f"{base}.{index}"
        if _create(path, f"{pid} {attempt} {_WHERE}\n"):
            if index:
                _take_over(attempt)
            _won[:] = [pid]
            _over[0] = bool(index)
            return True
        holder = _holder(path)
        # (a driver that lives, writes its claim now, or runs where this process cannot see it die: a worker)
        if holder is None or holder[2] != _WHERE or _alive(holder[0]):
            return False
        attempt = holder[1] + 1
    return False


def mark(name: str) -> bool:
    """Leave the mark ``name`` beside the job's claim (once for the whole job): True for the process that
    left it, False when it was there (or outside ``lens-rl run``)."""
    base = os.environ.get(CLAIM_ENV, "")
    if not base:
        return False
    try:
        os.close(os.open(os.path.join(os.path.dirname(base), name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError:  # there already, or another node's path
        return False
    return True


def took_over() -> bool:
    """True in a driver that took a dead driver's claim over (its attempt has no launch span of its own)."""
    return bool(_won) and _won[0] == os.getpid() and _over[0]


def _create(path: str, text: str) -> bool:
    """Create ``path`` holding ``text``, atomically (a reader never sees it half written); False when it is
    there already, or cannot be (another node's path)."""
    temp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        fd = os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError:
        return False
    try:
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        os.link(temp, path)
        return True
    except FileExistsError:  # taken
        return False
    except OSError:  # no hard links here: created in place (a reader meeting it half written reads no holder)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except OSError:
            return False
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        return True
    finally:
        try:
            os.unlink(temp)
        except OSError:
            pass


def _where() -> str:
    """Where this process's pids mean something: its host and pid namespace (a claim folder shared across hosts
    or containers holds pids this process cannot judge alive or dead)."""
    try:
        space = os.readlink("/proc/self/ns/pid")
    except OSError:
        space = ""
    return f"{socket.gethostname()}/{space}".replace(" ", "_")


_WHERE = _where()


def _holder(path: str) -> tuple[int, int, str] | None:
    """The pid, attempt and where (:func:`_where`) a claim file holds; None when it cannot be read."""
    try:
        with open(path, encoding="ascii") as file:
            parts = file.read().split()
    except (OSError, ValueError):
        return None
    pid = _int(parts[0]) if parts else None
    if pid is None or pid <= 0:
        return None
    # (a claim of an older lens_rl: pid alone, or pid and attempt: judged here)
    return pid, (_int(parts[1]) if len(parts) > 1 else None) or 0, parts[2] if len(parts) > 2 else _WHERE


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, dead but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as file:
            return file.read().rpartition(")")[2].split()[:1] != ["Z"]
    except OSError:
        return True


def _int(text: str | None) -> int | None:
    try:
        value = int(str(text).strip())
    except ValueError:
        return None
    return value if value >= 0 else None


def _take_over(attempt: int) -> None:
    """This process is the next attempt's driver: its attempt, and a new root span in the job's trace (the
    dead driver's ``rl.job`` keeps its own)."""
    from lens_rl.config import ATTEMPT_ENV

    os.environ[ATTEMPT_ENV] = str(attempt)
    parts = os.environ.get(ROOT_ENV, "").strip().split("-")
    if len(parts) == 4 and len(parts[1]) == 32:
        root = f"00-{parts[1]}-{secrets.randbits(64) or 1:016x}-01"
        os.environ[ROOT_ENV] = os.environ["TRACEPARENT"] = root


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
