"""A command's refresh cache: its folder for the run, and what a rejected input leaves behind there, or in the
user's cache directory (nothing)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["command_cache"]


@contextlib.contextmanager
def command_cache(args: argparse.Namespace, run_dir: Path) -> Iterator[str | None]:
    """The refresh cache's folder for this run (None with --no-cache, or where none can be made). A command
    that rejects its input leaves no cache behind: what it wrote there is removed (the folder too, when it
    made it), and the key for sealing kept answers, when this command made it."""
    if getattr(args, "no_cache", False):
        yield None
        return
    from lens_rl.offline import cache_folder
    from lens_rl.offline.run.cache import CACHE_DIR

    made = not os.path.exists(run_dir / CACHE_DIR)  # (never raises: a folder it may not enter reads as none)
    try:
        folder = cache_folder(run_dir)
    except OSError as exc:
        print(f"lens-rl: no refresh cache ({exc}); reading cold", file=sys.stderr)
        yield None
        return
    from lens_rl.offline.run.kept import forget_made_key, key_absent

    before, absent = _entries(folder), key_absent()
    try:
        yield folder
    except BaseException:
        _forget(folder, before, made and Path(folder) == (run_dir / CACHE_DIR).resolve())
        forget_made_key(absent)  # (made by this process or by its parallel readers)
        raise


def _entries(folder: str) -> dict[str, tuple[int, int]]:
    """Each file of a folder with its inode and modification time."""
    out = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                out[entry.name] = (info.st_ino, info.st_mtime_ns)
    return out


def _forget(folder: str, before: dict[str, tuple[int, int]], whole: bool) -> None:
    """Remove what was written to a cache folder since ``before`` (and the folder, if ``whole`` and empty)."""
    for name, state in _entries(folder).items():
        if before.get(name) != state:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))
    if whole:
        with contextlib.suppress(OSError):
            os.rmdir(folder)
