"""The refresh cache on disk (:mod:`lens_rl.offline.run.cache` reads through it): where a run's cache lives, one
entry per span file (written atomically, read back with an unpickler that builds nothing but these classes),
the critical path's per-step results (plain values) and whole reports kept per store (JSON).

Example::

    folder = cache_folder("lens_traces/run42")
    entry, why = load_entry(Path(folder) / "spans-driver-0-1.jsonl.cache", options_key((True, {}, True)), identity)
"""

from __future__ import annotations

import hashlib
import hmac
import io
import math
import os
import pickle
import pickletools
import tempfile
from array import array
from collections.abc import Mapping, Sequence
from pathlib import Path
from stat import S_ISREG
from typing import Any

from lens_rl._version import __version__
from lens_rl.offline.read.parts import ProcessPart
from lens_rl.offline.rollup.critical import Memo
from lens_rl.offline.rollup.goodput import SCHEMA
from lens_rl.store import CacheRead, Process, ReadStats, loads, open_file

__all__ = [
    "CACHE_DIR",
    "FORMAT",
    "Entry",
    "cache_folder",
    "grown_bytes",
    "json_bytes",
    "load_entry",
    "load_memo",
    "load_report",
    "options_key",
    "save_entry",
    "save_memo",
    "save_sizes",
    "save_report",
    "sealed",
    "store_fingerprint",
    "unsealed",
]

CACHE_DIR = ".lens_rl-cache"
FORMAT = "lens_rl.cache/6"
_MAGIC = FORMAT.encode() + b"\n"


def cache_folder(run_dir: str | os.PathLike[str]) -> str:
    """Where a run's cache lives: ``<run>/.lens_rl-cache/``, else (a read-only run folder) a folder of the
    user's cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``) named after the run folder's path."""
    run = Path(run_dir).resolve()
    inside = run / CACHE_DIR
    try:
        inside.mkdir(exist_ok=True)
        if os.access(inside, os.W_OK):
            return str(inside)
    except OSError:
        pass
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = base / "lens_rl" / hashlib.sha1(str(run).encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder)


class Entry:
    """What the cache keeps of one file (see the module docstring)."""

    __slots__ = (
        "options",
        "identity",
        "end",
        "size",
        "mtime_ns",
        "ctime_ns",
        "tail",
        "heads",
        "head_at_end",
        "settled",
        "held",
        "ids",
        "stats",
        "token",
    )

    def __init__(self, options: str, identity: tuple[Any, ...]) -> None:
        self.options = options
        self.identity = identity
        self.end = 0
        self.size = 0
        self.mtime_ns = 0
        self.ctime_ns = 0
        self.tail = b""
        self.heads: list[dict[str, Any]] = []  # the header dicts spans are under, by index
        self.head_at_end: int | None = None
        self.settled: dict[Process, ProcessPart] = {}
        self.held = array("q")  # (offset, size, head index) of each held line, flat
        self.ids: Any = array("Q")  # the settled spans' ids, sorted (a list if one is not 16 hex digits)
        self.stats = ReadStats()
        #: new at every save: what a look's per-step results were made from (:class:`~.Memo`)
        self.token: str | None = None

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, k) for k in self.__slots__)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for key, value in zip(self.__slots__, state, strict=True):
            setattr(self, key, value)


_ALLOWED = {
    ("lens_rl.offline.run.cache_files", "Entry"),
    ("lens_rl.offline.read.parts", "ProcessPart"),
    ("lens_rl.offline.read.parts", "PhasePart"),
    ("lens_rl.offline.read.parts", "Series"),
    ("lens_rl.offline.read.parts", "StepPart"),
    ("lens_rl.offline.read.parts", "RequestsPart"),
    ("lens_rl.offline.read.critical", "CritPart"),
    ("lens_rl.store.format", "Process"),
    ("lens_rl.store.reader", "ReadStats"),
    ("array", "array"),
    ("array", "_array_reconstructor"),
    ("copyreg", "_reconstructor"),
    ("copyreg", "__newobj__"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "object"),
}


class _Unpickler(pickle.Unpickler):
    """Builds nothing but the cache's own classes (a planted file cannot run code)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not a cache class")
        return super().find_class(module, name)


class _PlainUnpickler(pickle.Unpickler):
    """Builds plain values only (lists, dicts, strings, numbers, None): no class at all."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name}: the critical path's cache file holds plain values only")


# What follows each opcode: a fixed number of bytes (>= 0), or how its length is given (pickletools' codes:
# -1 up to a newline, -2/-3/-4/-5 a length of 1, 4 (signed), 4 or 8 bytes before the data); -9: an opcode
# a cache file never holds and a reader never needs (unknown, the extension registry, persistent ids,
# out-of-band buffers); -8: one whose argument is checked (a memo index, a frame's length).
_ARG_SIZE = [-9] * 256
for _op in pickletools.opcodes:
    _ARG_SIZE[ord(_op.code.encode("latin-1"))] = _op.arg.n if _op.arg is not None else 0
for _refused in b"\x82\x83\x84PQ\x97\x98":
    _ARG_SIZE[_refused] = -9
_PUT_WIDTH = {ord("q"): 1, ord("r"): 4, ord("\x95"): 8}  # BINPUT, LONG_BINPUT: a memo index; FRAME: a length
for _checked in _PUT_WIDTH:
    _ARG_SIZE[_checked] = -8
_TWO_LINES = {ord("c"), ord("i")}  # GLOBAL and INST: module and name, a line each
_TEXT_PUT = ord("p")
_FRAME = ord("\x95")
_COUNT_WIDTH = {-2: 1, -3: 4, -4: 4, -5: 8}


def checked_pickle(data: bytes) -> bytes:
    """``data`` if unpickling it allocates no more than a small multiple of its size; else
    :class:`pickle.UnpicklingError`. Every length an opcode gives must fit in the bytes left (an unpickler
    allocates a counted string or frame before reading it), every memo index lie within the data's size (the
    memo grows to the largest index), and no opcode of the extension registry, persistent ids or out-of-band
    buffers may appear. What builds objects by an argument is stopped by the unpicklers' class lists."""
    end, i, sizes = len(data), 0, _ARG_SIZE
    while i < end:
        op = data[i]
        n = sizes[op]
        i += 1
        if n >= 0:
            i += n
            continue
        if n == -8:
            width = _PUT_WIDTH[op]
            value = int.from_bytes(data[i : i + width], "little")
            i += width
            if value > end - (i if op == _FRAME else 0):
                raise pickle.UnpicklingError("a memo index or frame past the data")
        elif n == -1:
            for _ in range(2 if op in _TWO_LINES else 1):
                newline = data.find(b"\n", i)
                if newline == -1:
                    raise pickle.UnpicklingError("a text argument with no end")
                if op == _TEXT_PUT and not (data[i:newline].isdigit() and int(data[i:newline]) <= end):
                    raise pickle.UnpicklingError("a memo index past the data")
                i = newline + 1
        elif n == -9:
            raise pickle.UnpicklingError(f"opcode {op:#x} is not read from a cache file")
        else:
            width = _COUNT_WIDTH[n]
            length = int.from_bytes(data[i : i + width], "little", signed=n == -3)
            i += width
            if not 0 <= length <= end - i:
                raise pickle.UnpicklingError("a length past the data")
            i += length
    if i > end:
        raise pickle.UnpicklingError("truncated")
    return data


def _unpickled(unpickler: type[pickle.Unpickler], data: bytes) -> Any:
    """``data`` unpickled by ``unpickler`` from memory, once :func:`checked_pickle` passed it."""
    return unpickler(io.BytesIO(checked_pickle(data))).load()


def options_key(options: tuple[bool, Mapping[int, frozenset[Any]], bool]) -> str:
    driver_in_run, superseded, critical = options
    later = sorted((attempt, sorted(map(repr, steps))) for attempt, steps in superseded.items())
    return repr((__version__, FORMAT, bool(driver_in_run), later, bool(critical)))


def _read(path: Path) -> bytes:
    """A cache file's bytes, read as a store file is (a regular file only: a FIFO or device planted under a
    cache file's name is not opened); ``FileNotFoundError`` when there is none."""
    if not os.path.lexists(path):
        raise FileNotFoundError(path)
    with open_file(path) as handle:
        return handle.read()


def load_entry(path: Path, options: str, identity: tuple[Any, ...]) -> tuple[Entry | None, str | None]:
    """The cache entry at ``path`` if it is this lens_rl's and this file's; else None and why (None: none)."""
    try:
        data = _read(path)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    if not data.startswith(_MAGIC):
        return None, "of another lens_rl version" if data.startswith(b"lens_rl.cache/") else "not a lens_rl cache"
    try:
        entry = _unpickled(_Unpickler, data[len(_MAGIC) :])
    except Exception as exc:  # a corrupt or foreign file: never trusted
        return None, f"corrupt ({type(exc).__name__})"
    if not isinstance(entry, Entry):
        return None, "not a cache entry"
    if entry.options != options:
        return None, None if entry.options.startswith(repr((__version__,))[:-1]) else "of another lens_rl version"
    if entry.identity != identity:
        return None, None  # another file under that name: read cold, quietly
    return entry, None


def save_entry(path: Path, entry: Entry) -> None:
    """Write ``entry`` to ``path`` (atomically; a cache that cannot be written is no error: the next read is cold)."""
    _write_atomic(path, _MAGIC + pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL))


def _write_atomic(path: Path, data: bytes) -> None:
    """``data`` into ``path`` through a temporary file beside it (a reader sees the old file or the new one);
    nothing where the folder cannot be written."""
    try:
        fd, temporary = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except OSError:
        Path(temporary).unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------- reports
#
# A whole answer kept for an unchanged store (the report, the HTML page) is used as it is, unchecked: so it is
# sealed with a secret of the user's (HMAC-SHA256), and one that anybody else wrote, planted or copied, reads
# as none (read cold, and kept again). Cost: a hash of the bytes (~10 ms for a 1 M-span store's report).

_KEY: bytes | None = None


def _user_key() -> bytes | None:
    """The user's secret for sealing kept answers: 32 random bytes made once in the user's cache directory
    (``$XDG_CACHE_HOME`` or ``~/.cache``, ``lens_rl/answers.key``, mode 600, the user's own); None where it
    cannot be made or read, or is not private (nothing is kept then)."""
    global _KEY
    if _KEY is None:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lens_rl"
        path = base / "answers.key"
        try:
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
                key = _read(path)
                _KEY = key if len(key) == 32 else None
        except OSError:
            return None
    return _KEY


def sealed(data: bytes) -> bytes | None:
    """``data`` behind its seal (a line of the HMAC's hex digest), or None without a key."""
    key = _user_key()
    return None if key is None else hmac.new(key, data, "sha256").hexdigest().encode() + b"\n" + data


def unsealed(kept: bytes) -> bytes | None:
    """The data of a sealed answer whose seal is this user's, else None."""
    key = _user_key()
    seal, _, data = kept.partition(b"\n")
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


def load_report(folder: str, fingerprint: str) -> dict[str, Any] | None:
    """The report kept for this very store, if this user's lens_rl kept it (its signature checks), or None."""
    try:
        data = unsealed(_read(Path(folder) / f"report-{fingerprint}.json"))
        report = None if data is None else loads(data)
    except (OSError, ValueError, RecursionError):
        return None
    return report if type(report) is dict and report.get("schema") == SCHEMA else None


def save_report(folder: str, fingerprint: str, report: Mapping[str, Any]) -> None:
    """Keep ``report`` for its store (one per folder: an older one is replaced). A report is plain JSON
    already (str keys, lists, finite numbers: the suite checks it), so the one kept reads back as this one."""
    data = sealed(json_bytes(report))
    if data is None:
        return
    target = Path(folder) / f"report-{fingerprint}.json"
    try:
        for old in Path(folder).glob("report-*.json"):
            if old != target:
                old.unlink(missing_ok=True)
    except OSError:
        pass
    _write_atomic(target, data)


_SIZES = "sizes.json"


def grown_bytes(folder: str, paths: Sequence[str | os.PathLike[str]]) -> float:
    """Bytes the files hold beyond what the last look through this cache saw (a file it did not see: all of
    its bytes; no record of a last look: infinity)."""
    try:
        seen = loads(_read(Path(folder) / _SIZES))
        if type(seen) is not dict:
            return math.inf
        return sum(max(os.stat(p).st_size - int(seen.get(str(p), 0)), 0) for p in paths)
    except (OSError, ValueError, TypeError, RecursionError):
        return math.inf


def save_sizes(folder: str, paths: Sequence[str | os.PathLike[str]]) -> None:
    """What this look saw of each file, for :func:`grown_bytes`."""
    try:
        sizes = {str(p): os.stat(p).st_size for p in paths}
    except OSError:
        return
    _write_atomic(Path(folder) / _SIZES, json_bytes(sizes))


_MEMO = "critical-memo.pickle"


def load_memo(folder: str, reads: Sequence[CacheRead]) -> tuple[Memo, str | None]:
    """The critical path's per-step results an earlier look kept (:class:`~.Memo`),
    if every file it was made from is as that look left it (``reads``: this look's
    :attr:`~lens_rl.store.ReadStats.cache_reads`); else an empty one. Plain values pickled after their
    checksum, read by an unpickler that builds no class (nothing in it is trusted to run: 4x faster to read
    than the same as JSON, 0.03 s against 0.12 s at 1 M spans); a memo changed since it was written is not used.
    Also why a memo there was not used, where that is worth a line (None: used, none, or out of date)."""
    try:
        data = _read(Path(folder) / _MEMO)
    except OSError:
        return Memo(), None
    try:
        checksum, _, body = data.partition(b"\n")
        if checksum != hashlib.sha1(body).hexdigest().encode():
            return Memo(), "corrupt (its checksum does not match)"
        try:
            kept = _unpickled(_PlainUnpickler, body)
        except Exception as exc:  # a corrupt or planted file: never trusted
            return Memo(), f"corrupt ({type(exc).__name__})"
        if kept["key"] != _memo_key():
            return Memo(), "of another lens_rl version"
        tokens, records, keys = dict(kept["tokens"]), list(kept["records"]), list(kept["keys"])
        if not _memo_ok(records, keys):
            return Memo(), "not of the shape it is read by"
        before = {name: token for name, token, _after, _fresh in reads}
        if any(before.get(name) != token for name, token in tokens.items()) or any(
            token is not None and name not in tokens for name, token in before.items()
        ):
            return Memo(), None  # a file gone, rewritten, or read by another look since
        fresh = [start for *_, start in reads if start is not None]
        return Memo(records, keys, min(fresh) if fresh else None), None
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        return Memo(), f"corrupt ({type(exc).__name__})"


def _memo_ok(records: list[Any], keys: list[Any]) -> bool:
    """Whether a memo's records and keys have the shape :class:`~lens_rl.offline.rollup.critical.Memo` reads (its
    checksum says it is as written; this says it was written by this reader's rules)."""
    if not all(type(key) is list and len(key) == 4 for key in keys):
        return False
    return all(
        type(r) is list and len(r) == 6 and type(r[4]) is list and len(r[4]) % 2 == 0 and type(r[5]) is dict
        for r in records
    )


def save_memo(folder: str, reads: Sequence[CacheRead], memo: Memo) -> None:
    """Keep this look's per-step results with the tokens of the cache entries it was made from."""
    tokens = {name: after for name, _before, after, _fresh in reads if after is not None}
    kept = {"key": _memo_key(), "tokens": tokens, "keys": [list(key) for key in memo.keys], "records": memo.made}
    body = pickle.dumps(kept, protocol=pickle.HIGHEST_PROTOCOL)
    _write_atomic(Path(folder) / _MEMO, hashlib.sha1(body).hexdigest().encode() + b"\n" + body)


def _memo_key() -> str:
    return repr((__version__, FORMAT))


def json_bytes(value: Any) -> bytes:
    """``value`` as compact JSON (orjson when the analysis extra is there); what it cannot say, as text."""
    try:
        import orjson
    except ImportError:
        import json

        return json.dumps(value, default=str, separators=(",", ":")).encode()
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # an integer past 64 bits (a store written before identities were range-checked)
        import json

        return json.dumps(value, default=str, separators=(",", ":")).encode()
