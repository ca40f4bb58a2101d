"""The refresh cache's files on disk: read as a store file is (a regular file only), written atomically or
appended to in one write, and plain values as compact JSON; a cache that cannot be written is no error (the
next look reads cold).

Example::

    write_atomic(Path(folder) / "sizes.json", json_bytes({"a.jsonl": 120}))
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from lens_rl._version import __version__
from lens_rl.store import open_file

__all__ = ["CACHE_DIR", "FORMAT", "append_to", "cache_key", "json_bytes", "read_bytes", "read_kept", "write_atomic"]

CACHE_DIR = ".lens_rl-cache"
#: the cache's format: a file of another (an older or newer lens_rl's) is read as none
FORMAT = "lens_rl.cache/16"  # (10: typed records, lens_rl.offline.run.records; 11: their file state one StateRec;
# 12: a capture window, rl.profile, read as no time of its own and walked through by the critical path;
# 13: each part's phases per step, what --steps A-B cuts phases and ranks to; 14: a kept report's pipeline steps
# carry their imbalance and verdict; 15: each part's third-party calls that relay a request's tokens to their phase;
# 16: a step's bucket time inside its umbrella where a phase of the step outlives it)


def cache_key() -> str:
    """What a cache file of this lens_rl says it is (another version's or format's is read as none)."""
    return repr((__version__, FORMAT))


def read_bytes(path: Path) -> bytes:
    """A cache file's bytes, read as a store file is (a regular file only: a FIFO or device planted under a
    cache file's name is not opened); ``FileNotFoundError`` when there is none."""
    if not os.path.lexists(path):
        raise FileNotFoundError(path)
    with open_file(path) as handle:
        return handle.read()


def read_kept(path: Path) -> tuple[bytes | None, str | None]:
    """:func:`read_bytes`, or None and why a cache file was not read (None: there is none, nothing to say)."""
    try:
        return read_bytes(path), None
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"


def write_atomic(path: Path, data: bytes | tuple[bytes, ...]) -> None:
    """``data`` (or its pieces, one after another: no copy to join them) into ``path`` through a temporary
    file beside it (a reader sees the old file or the new one); nothing where the folder cannot be written."""
    try:
        fd, temporary = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            for piece in (data,) if isinstance(data, bytes) else data:
                handle.write(piece)
        os.replace(temporary, path)
    except OSError:
        Path(temporary).unlink(missing_ok=True)


def append_to(path: Path, data: bytes) -> bool:
    """``data`` at the end of the regular file ``path`` in one ``O_APPEND`` write (two looks appending at once
    do not interleave); False where it cannot be (none there, not a regular file, a failed or short write)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.write(fd, data) == len(data)
    except OSError:
        return False
    finally:
        os.close(fd)


def json_bytes(value: Any) -> bytes:
    """``value`` as compact JSON (orjson); what it cannot say, as text."""
    import orjson

    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # an integer past 64 bits (a store written before identities were range-checked)
        import json

        return json.dumps(value, default=str, separators=(",", ":")).encode()
