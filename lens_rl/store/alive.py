"""Whether the process that wrote a heartbeat is gone, where the reader can tell for sure.

A heartbeat carries its writer's mark (``proc``: the host's boot id, the inode of its pid namespace and the
process's start time in clock ticks since boot, from ``/proc``). A reader on the same boot of the same host,
in the same pid namespace, can look the pid up: no such process, a zombie, or another process under that pid
(another start time) means the writer is gone (killed by ``Pool.terminate()``, SIGKILL, the OOM killer) however
fresh its last heartbeat. Anywhere else (another host or container, no ``/proc``, a heartbeat without its
mark) nothing is known and :func:`process_gone` says False: the heartbeat's age decides, as before.

Example::

    beat["proc"] = process_mark()                 # the writer, once
    process_gone(beat.get("proc"), beat["pid"])   # the reader: True only when surely gone
"""

from __future__ import annotations

import functools
import os
from typing import Any

__all__ = ["process_gone", "process_mark"]


@functools.cache
def _boot_and_namespace() -> tuple[str, int] | None:
    """This host's boot id and this process's pid namespace (its inode), or None where ``/proc`` has none (read
    once: a reader of 2,000 heartbeats asks for each)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read(64).strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except (OSError, UnicodeDecodeError):
        return None
    return (boot, namespace) if boot else None


def _stat(pid: int) -> tuple[str, int] | None:
    """A process's state letter and start time (clock ticks since boot) from ``/proc/<pid>/stat``, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read(4096).decode("ascii", "replace")
        fields = text[text.rindex(")") + 2 :].split()
        return fields[0], int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def process_mark() -> dict[str, Any] | None:
    """This process's mark for its heartbeats (``boot``, ``pidns``, ``start``), or None off Linux."""
    where = _boot_and_namespace()
    own = _stat(os.getpid())
    if where is None or own is None:
        return None
    return {"boot": where[0], "pidns": where[1], "start": own[1]}


def process_gone(mark: Any, pid: Any) -> bool:
    """Whether the process of ``pid`` that wrote ``mark`` (:func:`process_mark`) is surely gone: the mark is
    this boot's and this pid namespace's, and the pid names no process, a zombie, or one started at another
    time. False whenever it cannot be told (a mark of another shape too)."""
    if type(mark) is not dict or type(pid) is not int or not 0 < pid < 2**31:
        return False
    where = _boot_and_namespace()
    if where is None or mark.get("boot") != where[0] or mark.get("pidns") != where[1]:
        return False
    start = mark.get("start")
    if type(start) is not int:
        return False
    try:
        os.kill(pid, 0)  # (not a signal: only whether the pid names a process, whoever's it is)
    except ProcessLookupError:
        return True
    except OSError:
        pass  # (another user's process: it exists)
    stat = _stat(pid)
    if stat is None:  # (exists, but its /proc entry is hidden from us: alive as far as we can tell)
        return False
    state, started = stat
    return state in ("Z", "X", "x") or started != start
