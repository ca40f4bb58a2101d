"""What a look keeps of its GPU join for the next one: each process's spans that can no longer change, summed.

A span's figures depend only on its interval and its devices' samples. Samples are only appended (a sampler
writes them in time order), and a sample's period reaches at most to the midpoint with its next neighbour, so
a device's timeline before its last segment's start is final. A process's spans are a list that grows at its
end; the longest prefix of it whose intervals all end before every one of its devices' last segment start is
*settled*: its per-(phase, bucket) sums (spans' devices' mean, summed in span order as ``np.bincount`` does)
and memory peaks are kept, and the next look joins only the spans after it, adding them onto the kept sums
in the same order (``np.add.at``): the same floating-point sums as a cold join, bit for bit.

What may be kept is checked before use: the same devices answering the process in the same order, the same
first spans (a digest of their starts and ends), the same measures counted; a kept device its first samples
unchanged (the same count's last time and reading, later samples only after it). Anything else: a cold join.

Example::

    prefix = settle(key, prior, starts, ends, index, keys, sums, mem, uuids, counts, limit)
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
import numpy as np

__all__ = ["Digest", "DeviceMark", "SpanPrefix", "base_of", "digest", "phase_sums", "settle"]

_MEASURES = 7


class SpanPrefix(msgspec.Struct, frozen=True):
    """A process's settled spans: how many, a digest of their intervals, what answered them, their sums."""

    key: str
    devices: list[str]
    n: int
    digest: str
    counts: list[float]
    phases: list[tuple[str, str]]
    sums: bytes  # (phases, 7) little-endian float64, the per-(phase, bucket) sums of the settled spans
    peaks: bytes  # (phases,) little-endian float64, their memory peaks (-inf: none)


class DeviceMark(msgspec.Struct, frozen=True):
    """A device's samples as the last look saw them: how many, the last one's time and reading (raw <f4)."""

    uuid: str
    n: int
    t_last: int
    last: bytes
    unavailable: bool


class Digest:
    """Digests of the first rows of some int64 columns, each on from the last one asked (a look checks a kept
    prefix's, then makes a longer one's: the rows before are hashed once; SHA-256, 2x BLAKE2b's speed where
    the CPU has SHA instructions: 70 MB of keys a 1 M-span refresh)."""

    def __init__(self, *columns: Any) -> None:
        self.columns: list[Any] = [np.ascontiguousarray(c, "<i8") for c in columns]
        self._start()

    def _start(self) -> None:
        self.hashes = [hashlib.sha256() for _ in self.columns]
        self.n = 0

    def upto(self, n: int) -> str:
        """The digest of the first ``n`` rows."""
        if n < self.n:
            self._start()
        for h, column in zip(self.hashes, self.columns, strict=True):
            h.update(column[self.n : n])
        self.n = n
        return hashlib.sha256(b"".join(h.copy().digest() for h in self.hashes)).hexdigest()[:32]


def digest(starts: Any, ends: Any, n: int) -> str:
    """A digest of the first ``n`` intervals."""
    return Digest(starts, ends).upto(n)


def base_of(
    prior: SpanPrefix | None, uuids: list[str], starts: Any, ends: Any, keys: list[Any], hashed: Digest | None = None
) -> int:
    """How many of the process's first spans ``prior`` covers here (0: none usable; ``hashed``: the spans'
    :class:`Digest`, to go on from in :func:`settle`)."""
    if prior is None or prior.devices != uuids or prior.n > len(starts) or prior.n <= 0:
        return 0
    if len(prior.sums) != 8 * _MEASURES * len(prior.phases) or len(prior.peaks) != 8 * len(prior.phases):
        return 0
    table = {(str(name), str(bucket)) for name, bucket in keys}
    if any(tuple(p) not in table for p in prior.phases):
        return 0
    return prior.n if (hashed or Digest(starts, ends)).upto(prior.n) == prior.digest else 0


def _kept_arrays(prior: SpanPrefix, keys: list[Any]) -> tuple[Any, Any]:
    n = len(keys)
    at = {(str(name), str(bucket)): i for i, (name, bucket) in enumerate(keys)}
    per = np.zeros((n, _MEASURES))
    peaks = np.full(n, -np.inf)
    rows = np.frombuffer(prior.sums, "<f8").reshape(len(prior.phases), _MEASURES)
    highs = np.frombuffer(prior.peaks, "<f8")
    for j, (name, bucket) in enumerate(prior.phases):
        per[at[(name, bucket)]] = rows[j]
        peaks[at[(name, bucket)]] = highs[j]
    return per, peaks


def phase_sums(prior: SpanPrefix | None, base: int, keys: list[Any], index: Any, sums: Any, mem: Any) -> Any:
    """Each (phase, bucket)'s sums and memory peak over all the process's spans: ``prior``'s first ``base``
    ones' then the joined ones' (``sums`` / ``mem``: the spans from ``base`` on) added in span order."""
    n = len(keys)
    tail = index[base:]
    if prior is None or base == 0:
        per = np.column_stack([np.bincount(tail, sums[:, m], minlength=n) for m in range(_MEASURES)])
        peaks = np.full(n, -np.inf)
    else:
        per, peaks = _kept_arrays(prior, keys)
        for m in range(_MEASURES):
            column = np.ascontiguousarray(per[:, m])
            np.add.at(column, tail, sums[:, m])  # (one at a time, in order: bincount's sums, continued)
            per[:, m] = column
    np.maximum.at(peaks, tail, np.nan_to_num(mem, nan=-np.inf))
    return per, peaks


def settle(
    key: str,
    prior: SpanPrefix | None,
    base: int,
    starts: Any,
    ends: Any,
    keys: list[Any],
    index: Any,
    sums: Any,
    mem: Any,
    uuids: list[str],
    counts: Any,
    limit: int,
    hashed: Digest | None = None,
) -> SpanPrefix | None:
    """The process's prefix to keep: its spans settled before ``limit`` (ns: its devices' earliest last
    segment start), from ``base`` (``prior``'s) on (``sums`` / ``mem`` the spans' from ``base`` on)."""
    late = np.maximum(starts[base:], ends[base:]) >= limit
    settled = base + (int(np.argmax(late)) if late.any() else late.size)
    if settled <= 0:
        return None
    upto = settled - base
    per, peaks = phase_sums(prior, base, keys, index[:settled], sums[:upto], mem[:upto])
    return SpanPrefix(
        key,
        list(uuids),
        settled,
        (hashed or Digest(starts, ends)).upto(settled),
        [float(c) for c in counts],
        [(str(name), str(bucket)) for name, bucket in keys],
        np.ascontiguousarray(per, "<f8").tobytes(),
        np.ascontiguousarray(peaks, "<f8").tobytes(),
    )
