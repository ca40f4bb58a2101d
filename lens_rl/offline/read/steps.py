"""A part's per-step tables: :class:`Series` (step -> ns, two arrays) for the compute time stragglers are judged
on, :class:`StepPart` (one process's share of one step) for the job view's step rows.

Example::

    series = Series(array("q", [1, 2]), array("q", [10, 20]))
    assert dict(Series.merged(series, Series(array("q", [3]), array("q", [30]))).items())[3] == 30
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping
from typing import Any

from lens_rl.offline.read.intervals import merge_packed, saturated

__all__ = ["Series", "StepPart"]


class Series(Mapping[Any, int]):
    """step -> ns for integer steps, as two arrays (16 bytes a step instead of ~100 in a dict).

    A read-only mapping; ``steps`` are sorted, so two ranks with the same steps have equal ``steps``
    arrays and can be compared index by index (``ns`` is the matching array).
    """

    __slots__ = ("steps", "ns", "_index")

    def __init__(self, steps: array, ns: array) -> None:
        self.steps = steps
        self.ns = ns
        self._index: dict[Any, int] | None = None

    @staticmethod
    def of(by_step: Mapping[Any, int]) -> Mapping[Any, int]:
        """A Series when every step is an int (a dict otherwise, unchanged)."""
        if isinstance(by_step, Series) or not all(type(k) is int for k in by_step):
            return by_step
        keys = sorted(by_step)
        return Series(array("q", keys), array("q", (by_step[k] for k in keys)))

    @staticmethod
    def merged(a: Mapping[Any, int], b: Mapping[Any, int]) -> Mapping[Any, int]:
        """``a`` and ``b`` summed step by step (saturated to int64), as a new mapping (:meth:`of`'s kind): two Series where ``b``'s
        steps all follow ``a``'s (a file's next lines) end to end, without a dict."""
        if type(a) is Series and type(b) is Series and (not a.steps or not b.steps or b.steps[0] > a.steps[-1]):
            return Series(a.steps + b.steps, a.ns + b.ns)
        mine = dict(a)
        for step, value in b.items():
            mine[step] = saturated(mine.get(step, 0) + value)
        return Series.of(mine)

    def _lookup(self) -> dict[Any, int]:
        if self._index is None:
            self._index = {step: i for i, step in enumerate(self.steps)}
        return self._index

    def __getitem__(self, step: Any) -> int:
        return self.ns[self._lookup()[step]]

    def __contains__(self, step: object) -> bool:
        return step in self._lookup()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def items(self) -> Any:
        return zip(self.steps, self.ns, strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Series):
            return self.steps == other.steps and self.ns == other.ns
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    def __hash__(self) -> int:  # pragma: no cover - mutable-looking; never hashed
        raise TypeError("Series is unhashable")

    def __getstate__(self) -> tuple[Any, ...]:
        return self.steps, self.ns  # (not its index: made again where it is looked up)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.steps, self.ns = state
        self._index = None


class StepPart:
    """One process's share of one step, compact (a run has processes x steps of these).

    ``ns`` is a list of the buckets' exclusive ns in :data:`BUCKETS` order; interval lists stay None until used.
    """

    __slots__ = ("ns", "umbrellas", "lo", "hi", "bucketed", "incomplete", "error")

    def __init__(self, lo: int | None = None, hi: int | None = None) -> None:
        self.ns = [0, 0, 0, 0]
        self.umbrellas: Any = None  # umbrella spans' intervals: a list while built, then packed
        self.lo = lo
        self.hi = hi
        self.bucketed: Any = None  # bucketed spans' merged intervals: a list while built, then packed
        #: its umbrella never ended (a span of it lost its parent) or was cut short by a shutdown
        self.incomplete = False
        #: how its umbrella ended when it ended in error (the step failed): {"type", "message"}, else None
        self.error: dict[str, str] | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StepPart) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def merge(self, other: StepPart) -> None:
        for i in range(4):
            self.ns[i] += other.ns[i]
        if other.umbrellas:
            self.umbrellas = (self.umbrellas or array("q")) + other.umbrellas
        self.lo = other.lo if self.lo is None else (self.lo if other.lo is None else min(self.lo, other.lo))
        self.hi = other.hi if self.hi is None else (self.hi if other.hi is None else max(self.hi, other.hi))
        if other.bucketed:
            self.bucketed = merge_packed(self.bucketed or array("q"), other.bucketed)
        self.incomplete = self.incomplete or other.incomplete
        self.error = self.error or other.error
