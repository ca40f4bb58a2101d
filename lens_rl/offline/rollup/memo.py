"""The critical path's per-step results kept between looks at a growing run (:class:`Memo`): a step that
ended before every span read since the earlier look comes out as it did then, so its record is reused and
the step not walked again. The refresh cache keeps them on disk (:mod:`lens_rl.offline.run.memo_file`).

Example::

    memo = Memo(records, keys, fresh_from=earliest_new_start)
    rollup = critical_path(processes, step_rows, memo)
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Memo", "disk_key", "flat_numbers", "from_disk", "memo_key"]


def flat_numbers(flat: Any) -> Sequence[int]:
    """A record's [stretch key, ns, ...] as numbers: a packed one (int64s, little-endian: what :meth:`Memo.keep`
    makes, so a kept step's ns are one buffer to decode, not an int each) unpacked, a list as it is (ValueError:
    a packed one not of whole pairs)."""
    if not isinstance(flat, (bytes, bytearray, memoryview)):
        return flat  # type: ignore[no-any-return]
    if len(flat) % 16:
        raise ValueError("a record's stretches that do not add up")
    out = array("q")
    out.frombytes(flat)
    if sys.byteorder == "big":  # pragma: no cover - a big-endian host
        out.byteswap()
    return out


def _packed(flat: list[int]) -> Any:
    """[stretch key, ns, ...] packed as :func:`flat_numbers` reads it (as it is where a value is past int64)."""
    try:
        out = array("q", flat)
    except OverflowError:
        return flat
    if sys.byteorder == "big":  # pragma: no cover - a big-endian host
        out.byteswap()
    return out.tobytes()


def memo_key(record: Sequence[Any]) -> tuple[str, Any]:
    """A :class:`Memo` record's key: its driver and its step, an int as it is, any other value as its repr (no
    repr made per step of a run's 100 k; an int's repr, its digits, is no other type's repr: no two steps of
    different types share a key)."""
    step = record[1]
    return record[0], step if type(step) is int else repr(step)


def disk_key(key: tuple[str, Any]) -> tuple[str, str]:
    """A :func:`memo_key` as the memo's file keeps it: the step's repr (an int's is its digits)."""
    return key[0], key[1] if type(key[1]) is str else repr(key[1])


def from_disk(key: Sequence[str]) -> tuple[str, Any]:
    """A key as the memo's file keeps it (:func:`disk_key`) as a :func:`memo_key`: an int's digits its int."""
    driver, step = key
    digits = step[1:] if step[:1] == "-" else step
    return driver, int(step) if digits.isdigit() and digits.isascii() else step


class Memo:
    """The per-step results of an earlier look at a growing run, and this look's (the refresh cache keeps
    them as JSON). A step's walk reads nothing outside its umbrella's interval, so a step that ended before
    the earliest span read since the earlier look (``fresh_from``; None: nothing was read since) comes out
    as it did then, and is not walked again.

    ``kept``: its :func:`memo_key` -> its record; ``made``: this look's records, each [driver, step, end ns,
    wall s, [stretch key, ns, ...], the step's row], a stretch key an index into ``keys`` ([group, rank,
    phase, bucket]: the earlier look's, then this look's new ones, so a kept record is kept as it is).
    ``records``: a list of records, or a mapping of each one's :func:`memo_key` to it.
    ``walked``: the records of ``made`` this look walked (not kept from the earlier look); ``source``: where
    the earlier look's records came from, for whoever keeps them (the refresh cache's business); ``sums``:
    per stretch key, the ns of every record given and how many have it (None: not known), so the kept
    records' sum is that less the few not kept, not a pass over a run's 100 k steps (:meth:`state_sums`
    gives this look's, to keep beside its records)."""

    def __init__(
        self,
        records: Sequence[Sequence[Any]] | Mapping[tuple[str, str], Sequence[Any]] = (),
        keys: Sequence[Sequence[Any]] = (),
        fresh_from: int | None = None,
        source: Any = None,
        sums: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        self.kept = dict(records) if isinstance(records, Mapping) else {memo_key(r): r for r in records}
        self.fresh_from = fresh_from
        self.made: list[Sequence[Any]] = []
        self.walked: list[Sequence[Any]] = []
        self.keys: list[tuple[Any, ...]] = [tuple(k) for k in keys]
        self.earlier_keys = len(self.keys)
        self._slots = {key: slot for slot, key in enumerate(self.keys)}
        self.source = source
        self.sums = None if sums is None else {int(slot): [int(ns), int(n)] for slot, (ns, n) in sums.items()}
        self._reused: dict[int, list[int]] | None = None

    def keep(
        self, driver: str, step: Any, end: int | None, wall_s: Any, by_key: Mapping[Any, int], row: dict[str, Any]
    ) -> None:
        """This look's record of one step: its walk's ns per stretch key and its row."""
        flat: list[Any] = []
        slots = self._slots
        for key, ns in by_key.items():
            slot = slots.get(key)
            if slot is None:
                slot = slots[key] = len(self.keys)
                self.keys.append(key)
            flat += (slot, ns)
        record = [driver, step, end, wall_s, _packed(flat), row]
        self.made.append(record)
        self.walked.append(record)

    def add_totals(self, slots: Mapping[int, int], totals: dict[tuple[str, str, Any], int]) -> None:
        """Kept records' critical ns summed per stretch key (``slots``), added into ``totals`` per (group,
        phase, bucket)."""
        keys = self.keys
        for slot, ns in slots.items():
            group, _rank, name, bucket = keys[slot]
            totals[(group, name, bucket)] += ns

    def reused_ns(self) -> dict[int, int] | None:
        """Per stretch key, the ns of the records reused so far (None: the sums were not known): the sums
        less the kept records not reused (call once every step is gathered)."""
        if self.sums is None:
            return None
        out = {slot: list(each) for slot, each in self.sums.items()}
        for _key, record in self._not_reused():
            _add_flat(out, record[4], -1)
        self._reused = out
        return {slot: ns for slot, (ns, n) in out.items() if n > 0}

    def state_sums(self) -> dict[int, list[int]]:
        """Per stretch key, the ns of this look's records (``made``) and how many have it."""
        if self._reused is None:
            out: dict[int, list[int]] = {}
            for record in self.made:
                _add_flat(out, record[4], 1)
            return out
        out = {slot: list(each) for slot, each in self._reused.items() if each[1] > 0}
        for record in self.walked:
            _add_flat(out, record[4], 1)
        return out

    def dropped(self) -> list[tuple[str, str]]:
        """The keys of the earlier look's records this look neither kept nor walked again (no longer true), as
        the memo's file keeps them (:func:`disk_key`)."""
        return [disk_key(key) for key, _record in self._not_reused()]

    def _not_reused(self) -> list[tuple[tuple[str, Any], Sequence[Any]]]:
        """The earlier look's records (with their keys) that this look has not reused."""
        made = {id(r) for r in self.made}
        return [(key, record) for key, record in self.kept.items() if id(record) not in made]

    def reused(self, driver: str, step: Any, end: int | None, wall_s: Any) -> Sequence[Any] | None:
        """The earlier look's record of this step if it still holds (then kept for this look too), else None."""
        record = self.kept.get((driver, step if type(step) is int else repr(step)))
        if record is None or end is None or record[2] != end or record[3] != wall_s:
            return None
        if self.fresh_from is not None and end >= self.fresh_from:
            return None
        self.made.append(record)
        return record


def _add_flat(sums: dict[int, list[int]], flat: Any, sign: int) -> None:
    """A record's [stretch key, ns, ...] added into (``sign`` -1: taken from) per-key [ns, count] sums."""
    flat = flat_numbers(flat)
    for k in range(0, len(flat), 2):
        each = sums.get(flat[k])
        if each is None:
            each = sums[flat[k]] = [0, 0]
        each[0] += sign * flat[k + 1]
        each[1] += sign
