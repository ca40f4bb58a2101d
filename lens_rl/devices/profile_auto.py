"""``steps: auto``: a step far slower than its recent neighbours triggers a capture of the next step on its
culprit.

Each process that owns step umbrellas, in ``auto`` mode, appends one line a step to
``<run>/profiles/.steps-<group>-<rank>-<pid>.jsonl``: ``{"step", "wall_s", "compute_s", "profiled"}``
(``compute_s``: the step's productive exclusive seconds, what :func:`lens_rl.step_goodput` reports: the time a
rank did not spend waiting). After the warm-up, a step whose wall is more than 5 MADs over the median of the
last 20 (the MAD at least 2 % of the median, the excess at least 50 ms: a steady loop's jitter is no spike;
a step a window was open in is left out) is flagged. The process that decides (rank 0 of
its group, or the driver) then, on a thread of its own, reads every rank's line for that step (waiting a few
seconds for late ones) and names the culprit: the rank with the longest compute, i.e. the rank that waited
least in a phase ended by a collective (every rank's wall is the slowest one's there). When the culprit is
the decider itself (the only rank of its group), it plans step N+1 there and then, no file involved (so does
its thread when the culprit turns out to be itself);
otherwise it writes a request (:mod:`lens_rl.devices.profile_requests`) naming that rank and step N+1 (or,
where that rank has begun N+1 already, the first step it has not, said in the reason), with the reason
``auto: step N took X.Xx the median``.

Example::

    auto = AutoTrigger(run, "trainer", 0, decides=True)
    auto.step_done(step=41, wall_s=9.3, compute_s=9.1)      # a spike: the culprit is asked, off this thread
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lens_rl._errors import internal_error
from lens_rl.devices.profile_requests import PROFILES, write_request
from lens_rl.store.files import open_file
from lens_rl.store.format import safe_part

__all__ = ["AutoTrigger", "spike"]

#: The steps the median looks back on; the MADs over it a spike needs; the steps skipped first (warm-up).
WINDOW = 20
MADS = 5.0
WARMUP = 2
MIN_HISTORY = 5
#: The MAD is taken as at least this share of the median, and a spike is at least this many seconds over it
#: (a millisecond loop's scheduling jitter is no spike).
MAD_FLOOR = 0.02
MIN_EXCESS_S = 0.05
#: How long the decider waits for every rank's line of a flagged step.
GATHER_S = 5.0


def spike(history: list[float], wall_s: float) -> float | None:
    """``wall_s`` over the median of ``history`` (the ratio) when it is a spike, else None."""
    if len(history) < MIN_HISTORY:
        return None
    median = statistics.median(history)
    mad = max(statistics.median(abs(x - median) for x in history), MAD_FLOOR * median)
    if median <= 0 or wall_s <= median + max(MADS * mad, MIN_EXCESS_S):
        return None
    return wall_s / median


class AutoTrigger:
    """One process's side of ``steps: auto``."""

    def __init__(
        self, run: Path, group: str, rank: int, decides: bool, local: Callable[[int, str], None] | None = None
    ) -> None:
        self.run = run
        self.local = local  # (plans a capture of step N on this process itself: no request file)
        self.group = group
        self.rank = rank
        self.decides = decides
        self.history: deque[float] = deque(maxlen=WINDOW)
        self.seen = 0
        self.path = run / PROFILES / f".steps-{safe_part(group, 'worker')}-{rank}-{os.getpid()}.jsonl"

    def step_done(self, step: Any, wall_s: float, compute_s: float, profiled: bool = False) -> None:
        """A step umbrella of this process ended (``profiled``: a window was open in it: no spike of its own,
        and the decider does not flag the step). Never raises."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            line = {"step": step, "wall_s": wall_s, "compute_s": compute_s, "profiled": profiled}
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(json.dumps(line) + "\n")
            self.seen += 1
            if profiled:
                return
            ratio = spike(list(self.history), wall_s) if self.seen > WARMUP else None
            self.history.append(wall_s)
            if ratio is not None and self.decides:
                reason = f"auto: step {step} took {ratio:.1f}x the median"
                if self.local is not None and self._alone():
                    self._tell(step, reason, self.rank)  # (the only rank: the culprit, its very next step)
                    return
                threading.Thread(
                    target=self._ask, args=(step, reason), name="lens_rl-profile-auto", daemon=True
                ).start()
        except Exception as exc:
            internal_error(exc, "profile-auto")

    def _alone(self) -> bool:
        """Is this process the only one of its group writing step lines (one listing, no file read)?"""
        return list((self.run / PROFILES).glob(f".steps-{safe_part(self.group, 'worker')}-*-*.jsonl")) == [self.path]

    def _ask(self, step: Any, reason: str) -> None:
        try:
            self._tell(step, reason, culprit_of(self.run, self.group, step))
        except Exception as exc:
            internal_error(exc, "profile-auto")

    def _tell(self, step: Any, reason: str, culprit: int | None) -> None:
        """Ask ``culprit`` for the step after ``step``: this process itself directly, another by a request naming
        that step (or, if it has begun it, the first it has not)."""
        if culprit is None or not isinstance(step, int):
            return
        if culprit == self.rank and self.local is not None:
            self.local(step + 1, reason)
            return
        write_request(
            self.run, steps=(step + 1, step + 1), group=self.group, rank=culprit, reason=reason, or_later=True
        )


def culprit_of(run: Path, group: str, step: Any, wait_s: float = GATHER_S) -> int | None:
    """The rank of ``group`` with the longest compute at ``step``, from every rank's step lines (waiting up to
    ``wait_s`` for a rank whose line is late: as many ranks as have lines of the step before); None when a rank
    profiled that step (the window's own cost is no spike to chase)."""
    deadline = time.monotonic() + wait_s
    while True:
        compute, ranks, profiled = _lines(run, group, step)
        if compute and len(compute) >= len(ranks) or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if not compute or profiled:
        return None
    return _culprit(compute)


def _culprit(compute: dict[int, float]) -> int:
    return max(sorted(compute), key=lambda rank: compute[rank])


def _lines(run: Path, group: str, step: Any) -> tuple[dict[int, float], set[int], bool]:
    """``{rank: compute_s}`` at ``step``, every rank with a line at all, and whether a rank profiled it."""
    compute: dict[int, float] = {}
    ranks: set[int] = set()
    profiled = False
    for path in (run / PROFILES).glob(f".steps-{safe_part(group, 'worker')}-*-*.jsonl"):
        try:
            rank = int(path.name.rsplit("-", 2)[1])
            with open_file(path) as handle:  # (a regular file only: a FIFO named like one never blocks)
                text = handle.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            continue
        ranks.add(rank)
        for line in text.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("step") == step:
                compute[rank] = float(row.get("compute_s", 0.0))
                profiled = profiled or bool(row.get("profiled"))
    return compute, ranks, profiled
