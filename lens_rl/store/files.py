"""How every reading command opens the store's files: regular files only, never blocking, in bounded memory.

Stores are written by jobs nobody here wrote, on shared filesystems, by crashed processes: an entry named
like a store file may be a directory, a FIFO (opening it would block), a device (``/dev/zero`` never ends),
a dangling link, a link loop or another user's file. :func:`open_file` opens regular files only (checked
before the open, and again on the open file) and says in a few words why not otherwise; :func:`listed`
keeps what can be read and names each entry it leaves out in one note; lines are read with a cap
(:data:`LINE_MAX`), so a file with no newline costs bounded memory.

Example::

    notes = []
    for path in listed("lens_traces/run42", "spans-*.jsonl", notes):
        with open_file(path) as handle:
            first, size = first_line(handle)
"""

from __future__ import annotations

import errno
import os
import stat as _stat
from functools import partial
from pathlib import Path
from typing import IO

__all__ = [
    "LINE_MAX",
    "UnreadableError",
    "count_lines",
    "first_line",
    "listed",
    "open_file",
    "read_capped",
    "rest_of_line",
    "unreadable",
    "why_not",
]

#: The longest line a reader takes (its newline included): a longer one is skipped, read in bounded memory.
LINE_MAX = 1 << 24


class UnreadableError(OSError):
    """A store entry that is not read: not a regular file, or one that cannot be opened (the message says
    which, in a few words: ``a FIFO``, ``a symbolic link loop``, ``not readable (permission denied)``)."""


def _kind(mode: int) -> str:
    """What a file that is not a regular one is, in a few words."""
    if _stat.S_ISDIR(mode):
        return "a directory"
    if _stat.S_ISFIFO(mode):
        return "a FIFO"
    if _stat.S_ISCHR(mode) or _stat.S_ISBLK(mode):
        return "a device"
    if _stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def why_not(path: str | os.PathLike[str], exc: OSError) -> str:
    """Why ``path`` could not be opened or looked at (``exc``), in a few words."""
    if exc.errno == errno.ELOOP:
        return "a symbolic link loop"
    if exc.errno == errno.ENOENT and os.path.islink(path):
        return "a dangling symbolic link"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "not readable (permission denied)"
    return f"not readable ({exc.strerror or exc})"


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


def open_file(path: str | os.PathLike[str], buffering: int = -1) -> IO[bytes]:
    """A store file opened for reading (binary, buffered): a regular file only. Anything else raises
    :class:`UnreadableError` without being opened (a FIFO would block, a device could act on the open); the open
    itself never blocks. The one way every reading command opens a store file."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise UnreadableError(why_not(path, exc)) from None
    if not _stat.S_ISREG(mode):
        raise UnreadableError(_kind(mode))
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise UnreadableError(why_not(path, exc)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not _stat.S_ISREG(mode):  # (replaced between the two looks)
            raise UnreadableError(_kind(mode))
        return os.fdopen(fd, "rb", buffering)
    except BaseException:
        os.close(fd)
        raise


def unreadable(path: str | os.PathLike[str]) -> str | None:
    """Why a store entry cannot be read (a few words), or None when it opens as a regular file."""
    try:
        open_file(path).close()
    except OSError as exc:
        return str(exc) if isinstance(exc, UnreadableError) else why_not(path, exc)
    return None


def listed(
    folder: str | os.PathLike[str], pattern: str, notes: list[str] | None = None, *, recursive: bool = False
) -> list[Path]:
    """The entries of ``folder`` matching ``pattern`` (at any depth with ``recursive``) that can be read, in a
    stable order; each one that cannot (see :func:`open_file`) is left out and named in one line of
    ``notes``."""
    root = Path(folder)
    try:
        found = sorted(root.rglob(pattern) if recursive else root.glob(pattern))
    except OSError:
        return []
    kept: list[Path] = []
    for path in found:
        why = unreadable(path)
        if why is None:
            kept.append(path)
        elif notes is not None:
            notes.append(f"{path.name}: {why}; skipped")
    return kept


def read_capped(path: str | os.PathLike[str], limit: int = LINE_MAX) -> bytes:
    """A whole (small) store file, such as a heartbeat: :class:`UnreadableError` when it is not a regular file or
    holds more than ``limit`` bytes (so a file of any size costs at most ``limit`` bytes)."""
    with open_file(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise UnreadableError(f"larger than {limit} bytes")
    return data


def rest_of_line(handle: IO[bytes]) -> int:
    """Skip what is left of an overlong line (up to and with its newline), in bounded memory; its bytes."""
    skipped = 0
    while True:
        chunk = handle.readline(1 << 20)
        skipped += len(chunk)
        if not chunk or chunk[-1:] == b"\n":
            return skipped


def first_line(handle: IO[bytes]) -> tuple[bytes, int]:
    """A file's first line (empty when longer than :data:`LINE_MAX`) and its size in bytes."""
    first = handle.readline(LINE_MAX)
    if len(first) == LINE_MAX and first[-1:] != b"\n":
        return b"", len(first) + rest_of_line(handle)
    return first, len(first)


def count_lines(handle: IO[bytes]) -> int:
    """The lines left in a file, counted in bounded memory."""
    count, last = 0, b"\n"
    for chunk in iter(partial(handle.read, 1 << 20), b""):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (last != b"\n")
