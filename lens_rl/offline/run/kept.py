"""Whole answers kept for an unchanged store, in the refresh cache's folder: the goodput report and the HTML
page. A second look at a store nothing was appended to returns what the first one built (an answer depends on
nothing but the files, their identities and sizes, the options and lens_rl's version:
:func:`store_fingerprint`). A kept answer is used as it is, unchecked, so it is sealed with a secret of the
user's: one that anybody else wrote, planted or copied reads as none.

Example::

    page = kept_page(cache_folder(run_dir), paths, options, build=lambda: render(paths))
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from stat import S_ISREG
from typing import Any

from lens_rl._version import __version__
from lens_rl.offline.rollup.goodput import SCHEMA
from lens_rl.offline.run.disk import FORMAT, json_bytes, read_bytes, read_kept, write_atomic
from lens_rl.store import loads

_log = logging.getLogger("lens_rl")

__all__ = [
    "forget_made_key",
    "key_absent",
    "kept_page",
    "load_page",
    "load_report",
    "save_page",
    "save_report",
    "seal_line",
    "sealed",
    "store_fingerprint",
    "unsealed",
]

# The seal: HMAC-SHA256 under the user's key; a hash of the bytes costs ~10 ms for a 1 M-span store's report.

_KEY: bytes | None = None


def _key_paths() -> list[Path]:
    """The user's key file, then its folders (deepest first)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lens_rl"
    return [base / "answers.key", base, base.parent]


def _user_key(make: bool = True) -> bytes | None:
    """The user's secret for sealing kept answers: 32 random bytes made once in the user's cache directory
    (``$XDG_CACHE_HOME`` or ``~/.cache``, ``lens_rl/answers.key``, mode 600, the user's own); None where it
    cannot be made or read, or is not private (nothing is kept then). ``make=False`` (reading a kept answer):
    a key not made yet is none, and nothing is written (a look that keeps nothing, a command that rejects
    its input, writes nothing anywhere)."""
    global _KEY
    if _KEY is None:
        path, base, _ = _key_paths()
        try:
            if make:
                base.mkdir(parents=True, exist_ok=True)
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                except FileExistsError:
                    pass
                else:
                    with os.fdopen(fd, "wb") as handle:
                        handle.write(os.urandom(32))
            info = os.lstat(path)
            if S_ISREG(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077:
                key = read_bytes(path)
                _KEY = key if len(key) == 32 else None
        except OSError:
            return None
    return _KEY


def key_absent() -> list[Path]:
    """What of the user's key and its folders does not exist yet (deepest first): what a command that goes on
    to reject its input must leave absent (:func:`forget_made_key`)."""
    return [path for path in _key_paths() if not os.path.lexists(path)]


def forget_made_key(absent: list[Path]) -> None:
    """Remove the key and its folders that were ``absent`` (:func:`key_absent`) before a command that rejected
    its input, whichever of its processes made them: it leaves nothing behind, in the user's cache directory
    either."""
    global _KEY
    if not absent:
        return
    _KEY = None
    with contextlib.suppress(OSError):
        if absent[0].name == "answers.key":
            absent[0].unlink()
        for folder in absent:
            if folder.name != "answers.key":
                folder.rmdir()


#: the seal's length: SHA-256's hex digest
_SEAL = 64


def sealed(data: bytes) -> bytes | None:
    """``data`` behind its seal (a line of the HMAC's hex digest), or None without a key."""
    seal = seal_line(data)
    return None if seal is None else seal + data


def seal_line(data: bytes) -> bytes | None:
    """The seal :func:`sealed` puts before ``data`` (to write before it, with no copy of it), or None."""
    key = _user_key()
    return None if key is None else hmac.new(key, data, "sha256").hexdigest().encode() + b"\n"


def unsealed(kept: bytes | memoryview) -> memoryview | None:
    """The data of a sealed answer whose seal is this user's (a view into ``kept``: no copy of a run's
    megabytes), else None (no key is made to check it)."""
    key = _user_key(make=False)
    view = memoryview(kept)
    at = bytes(view[: _SEAL + 1]).find(b"\n")
    seal, data = (view[:at], view[at + 1 :]) if at >= 0 else (view, view[len(view) :])
    if key is None or not hmac.compare_digest(seal, hmac.new(key, data, "sha256").hexdigest().encode()):
        return None
    return data


def store_fingerprint(paths: Sequence[str | os.PathLike[str]], options: Any) -> str:
    """What a whole report depends on: every file's identity, size and mtime, the report's options and
    lens_rl's version (a file that changed in any way changes it)."""
    parts = [repr((__version__, FORMAT, options))]
    for path in sorted(map(str, paths)):
        try:
            stat = os.stat(path)
        except OSError:
            parts.append(f"{path}\0gone")
            continue
        parts.append(f"{path}\0{stat.st_dev}\0{stat.st_ino}\0{stat.st_size}\0{stat.st_mtime_ns}\0{stat.st_ctime_ns}")
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()


def _kept_bytes(path: Path) -> tuple[memoryview | None, str | None]:
    """A sealed answer's data, this user's (its seal checks), else None and why where that is worth a line
    (None: none kept for this store)."""
    kept, why = read_kept(path)
    if kept is None:
        return None, None if why is None else f"{path.name}: {why}"
    data = unsealed(kept)
    return (data, None) if data is not None else (None, f"{path.name}: not sealed by this user's lens_rl")


def load_report(folder: str, fingerprint: str) -> tuple[dict[str, Any] | None, str | None]:
    """The report kept for this very store, if this user's lens_rl kept it (its signature checks), or None
    and why where one was kept but is not used (damaged, another's: a line on stderr)."""
    data, why = _kept_bytes(Path(folder) / f"report-{fingerprint}.json")
    try:
        report = None if data is None else loads(data)
    except (ValueError, RecursionError):
        return None, f"report-{fingerprint}.json: corrupt"
    if data is None or (type(report) is dict and report.get("schema") == SCHEMA):
        return report, why
    return None, f"report-{fingerprint}.json: not a report of this lens_rl"


def save_report(folder: str, fingerprint: str, report: Mapping[str, Any]) -> None:
    """Keep ``report`` for its store (one per folder: an older one is replaced). A report is plain JSON
    already (str keys, lists, finite numbers: the suite checks it), so the one kept reads back as this one."""
    _keep_sealed(folder, "report-", fingerprint, ".json", json_bytes(report))


def _keep_sealed(folder: str, prefix: str, fingerprint: str, suffix: str, data: bytes) -> None:
    """``data`` sealed as ``<prefix><fingerprint><suffix>`` in ``folder``, the one answer of its kind there
    (an older one is removed); nothing without the user's key or where the folder cannot be written."""
    sealed_data = sealed(data)
    if sealed_data is None:
        return
    target = Path(folder) / f"{prefix}{fingerprint}{suffix}"
    try:
        for old in Path(folder).glob(f"{prefix}*{suffix}"):
            if old != target:
                old.unlink(missing_ok=True)
    except OSError:
        pass
    write_atomic(target, sealed_data)


_PREFIX, _SUFFIX = "page-", ".html"


def load_page(folder: str, fingerprint: str) -> tuple[str | None, str | None]:
    """The page kept for this very store by this user's lens_rl (its seal checks), or None and why where one
    was kept but is not used (unreadable, another's, not UTF-8)."""
    data, why = _kept_bytes(Path(folder) / f"{_PREFIX}{fingerprint}{_SUFFIX}")
    try:
        return (None, why) if data is None else (str(data, "utf-8"), None)
    except UnicodeDecodeError:
        return None, f"{_PREFIX}{fingerprint}{_SUFFIX}: not UTF-8"


def save_page(folder: str, fingerprint: str, page: str) -> None:
    """Keep ``page`` for its store (one per folder: an older one is removed; nothing where the folder cannot
    be written)."""
    _keep_sealed(folder, _PREFIX, fingerprint, _SUFFIX, page.encode("utf-8"))


def kept_page(cache: str | None, paths: Sequence[Path], options: Any, build: Callable[[], str]) -> str:
    """The page kept for these files and ``options`` in the cache folder ``cache``, else ``build()``'s
    (kept for the next look); ``cache`` None: built every time, nothing kept."""
    if cache is None:
        return build()
    fingerprint = store_fingerprint(paths, ("report", options))
    page, why = load_page(cache, fingerprint)
    if why is not None:
        _log.warning("lens-rl: 1 cache file(s) not used (%s): read cold", why)
    if page is None:
        page = build()
        save_page(cache, fingerprint, page)
    return page
