"""The HTML report kept for an unchanged store, in the refresh cache's folder: a second ``lens-rl report``
of a store nothing was appended to returns the page the first one built (the page depends on nothing but
the files, their identities and sizes, the options and lens_rl's version: :func:`store_fingerprint`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lens_rl.offline.run.cache_files import _read, _write_atomic, sealed, store_fingerprint, unsealed

__all__ = ["kept_page", "load_page", "save_page"]

_PREFIX, _SUFFIX = "page-", ".html"


def load_page(folder: str, fingerprint: str) -> str | None:
    """The page kept for this very store by this user's lens_rl (its seal checks), or None (none kept,
    unreadable, another's, or not UTF-8)."""
    try:
        data = unsealed(_read(Path(folder) / f"{_PREFIX}{fingerprint}{_SUFFIX}"))
        return None if data is None else data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def save_page(folder: str, fingerprint: str, page: str) -> None:
    """Keep ``page`` for its store (one per folder: an older one is removed; nothing where the folder cannot
    be written)."""
    data = sealed(page.encode("utf-8"))
    if data is None:
        return
    target = Path(folder) / f"{_PREFIX}{fingerprint}{_SUFFIX}"
    try:
        for old in Path(folder).glob(f"{_PREFIX}*{_SUFFIX}"):
            if old != target:
                old.unlink(missing_ok=True)
    except OSError:
        pass
    _write_atomic(target, data)


def kept_page(cache: str | None, paths: Sequence[Path], options: Any, build: Callable[[], str]) -> str:
    """The page kept for these files and ``options`` in the cache folder ``cache``, else ``build()``'s
    (kept for the next look); ``cache`` None: built every time, nothing kept."""
    if cache is None:
        return build()
    fingerprint = store_fingerprint(paths, ("report", options))
    page = load_page(cache, fingerprint)
    if page is None:
        page = build()
        save_page(cache, fingerprint, page)
    return page
