"""``steps: auto``: a step far slower than its recent neighbours triggers a capture of the next step on its
culprit.

In ``auto`` mode every process appends one short line a step to
``<run>/profiles/.steps-<group>-<rank>-<pid>.jsonl``: ``{"step", "compute_s", "group"[, "wall_s" | "cpu_s"][,
"profiled"]}``. ``compute_s`` is the step's exclusive seconds in compute on that process
(:data:`lens_rl.buckets.COMPUTE_BUCKETS`, the straggler rule's: every bucket but ``idle``), the time it did not
spend waiting (a collective's wait marked as an ``idle`` phase, ``wait`` / ``barrier``, is not compute). A
process that owns step umbrellas writes it as each umbrella ends (from what :func:`lens_rl.step_goodput`
reports, with the step's ``wall_s``); a worker, whose phases carry the step, at its
first phase of the next step, from the engine's per-step tally of its phases (no line for a step it has not
left), with ``cpu_s``, the CPU seconds the process used over the step: a wait left inside a productive phase
(a collective not marked idle) blocks, so a line's compute is its ``compute_s`` at most its ``cpu_s`` (a
spinning wait, as CUDA's default, reads as compute: then only a marked wait tells). ``profiled``: a window was
open in the step.

A process that owns umbrellas and decides (the driver, or rank 0 of its group) flags a step whose wall is more
than 5 MADs over the median of the last 20 after the warm-up (the MAD at least 2 % of the median, the excess
at least 50 ms: a steady loop's jitter is no spike; a step a window was open in is left out). It then, on a
thread of its own, reads every process's line for that step, across every worker group (waiting a few seconds
for late ones: a worker writes its line only as it begins its next step; one that died is not waited for
longer), and names the culprit: the (group, rank) with the longest compute, i.e. the rank that waited least in
a phase ended by a collective. When the culprit is the decider itself (the only process writing lines), it
plans step N+1 there and then, no file involved (so does its thread when the culprit turns out to be itself);
otherwise it writes a request (:mod:`lens_rl.devices.profile_requests`) naming that group and rank and step N+1
(or, where that rank has begun N+1 already, the first step it has not, said in the reason), with the reason
``auto: step N took X.Xx the median``.

Example::

    auto = AutoTrigger(run, "driver", 0, decides=True)
    auto.step_done(step=41, wall_s=9.3, compute_s=0.1)      # a spike: the culprit is asked, off this thread
    AutoTrigger(run, "trainer", 1, decides=False).worker_step(41, compute_s=9.0)   # a worker's line
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
        self.made = False  # (the profiles folder made once)
        self.path = run / PROFILES / f".steps-{safe_part(group, 'worker')}-{rank}-{os.getpid()}.jsonl"

    def step_done(self, step: Any, wall_s: float, compute_s: float, profiled: bool = False) -> None:
        """A step umbrella of this process ended (``profiled``: a window was open in it: no spike of its own,
        and the decider does not flag the step). Never raises."""
        try:
            self._line({"step": step, "wall_s": wall_s, "compute_s": compute_s, "profiled": profiled})
            self.seen += 1
            if profiled:
                return
            ratio = spike(list(self.history), wall_s) if self.seen > WARMUP else None
            self.history.append(wall_s)
            if ratio is not None and self.decides:
                reason = f"auto: step {step} took {ratio:.1f}x the median"
                if self.local is not None and self._alone():
                    self._tell(
                        step, reason, (self.group, self.rank)
                    )  # (the only rank: the culprit, its very next step)
                    return
                threading.Thread(
                    target=self._ask, args=(step, reason), name="lens_rl-profile-auto", daemon=True
                ).start()
        except Exception as exc:
            internal_error(exc, "profile-auto")

    def worker_step(self, step: Any, compute_s: float, cpu_s: float | None = None, profiled: bool = False) -> None:
        """A worker (no step umbrella) left ``step``, with ``compute_s`` exclusive seconds of compute in it and
        ``cpu_s`` CPU seconds used over it: its line for the decider. Never raises."""
        try:
            line: dict[str, Any] = {"step": step, "compute_s": round(compute_s, 6)}
            if cpu_s is not None:
                line["cpu_s"] = round(cpu_s, 6)
            if profiled:
                line["profiled"] = True
            self._line(line)
        except Exception as exc:
            internal_error(exc, "profile-auto")

    def _line(self, line: dict[str, Any]) -> None:
        if not self.made:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.made = True
        line["group"] = self.group
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")

    def _alone(self) -> bool:
        """Is this process the only one writing step lines (one listing, no file read)?"""
        return list((self.run / PROFILES).glob(".steps-*.jsonl")) == [self.path]

    def _ask(self, step: Any, reason: str) -> None:
        try:
            self._tell(step, reason, culprit_of(self.run, step))
        except Exception as exc:
            internal_error(exc, "profile-auto")

    def _tell(self, step: Any, reason: str, culprit: tuple[str, int] | None) -> None:
        """Ask ``culprit`` (group, rank) for the step after ``step``: this process itself directly, another by a
        request naming that step (or, if it has begun it, the first it has not)."""
        if culprit is None or not isinstance(step, int):
            return
        if culprit == (self.group, self.rank) and self.local is not None:
            self.local(step + 1, reason)
            return
        group, rank = culprit
        write_request(
            self.run, steps=(step + 1, step + 1), group=_exactly(group), rank=rank, reason=reason, or_later=True
        )


def culprit_of(run: Path, step: Any, wait_s: float = GATHER_S) -> tuple[str, int] | None:
    """The (group, rank) with the longest compute at ``step``, from every process's step lines, across every
    worker group (waiting up to ``wait_s`` for a rank whose line is late: as many ranks as have lines at all);
    None when a rank profiled that step (the window's own cost is no spike to chase)."""
    deadline = time.monotonic() + wait_s
    while True:
        compute, ranks, profiled = _lines(run, step)
        if compute and len(compute) >= len(ranks) or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if not compute or profiled:
        return None
    return _culprit(compute)


def _culprit(compute: dict[tuple[str, int], float]) -> tuple[str, int]:
    """The longest compute; of equals, the first (group, rank)."""
    return max(sorted(compute), key=lambda who: compute[who])


def _exactly(group: str) -> str:
    """``group`` as a pattern matching that name only (a request's group is a glob)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in group)


def _lines(run: Path, step: Any) -> tuple[dict[tuple[str, int], float], set[tuple[str, int]], bool]:
    """``{(group, rank): compute_s}`` at ``step``, every (group, rank) with a line at all, and whether a rank
    profiled it (the ranks of one group and rank that ran as several processes: the longest)."""
    compute: dict[tuple[str, int], float] = {}
    ranks: set[tuple[str, int]] = set()
    profiled = False
    for path in (run / PROFILES).glob(".steps-*-*-*.jsonl"):
        try:
            named_group, rank_text, _pid = path.name[len(".steps-") : -len(".jsonl")].rsplit("-", 2)
            rank = int(rank_text)
            with open_file(path) as handle:  # (a regular file only: a FIFO named like one never blocks)
                text = handle.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            continue
        group = named_group
        for line in text.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if not isinstance(row, dict):
                continue
            if isinstance(row.get("group"), str):
                group = row["group"]
            if row.get("step") == step:
                who = (group, rank)
                compute[who] = max(compute.get(who, 0.0), _compute(row))
                profiled = profiled or bool(row.get("profiled"))
        ranks.add((group, rank))
    return compute, ranks, profiled


def _compute(row: dict[str, Any]) -> float:
    """A line's compute: its exclusive seconds of compute, at most the CPU seconds the process used in the step
    where the line says (a wait in a collective left inside a productive phase blocks, using no CPU)."""
    compute = _seconds(row.get("compute_s"))
    cpu = row.get("cpu_s")
    return compute if cpu is None else min(compute, _seconds(cpu))


def _seconds(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0
