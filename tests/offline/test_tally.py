"""Pass 4 a column at a time (offline/read/tally.py) gives the part the span-at-a-time pass gave, whatever the spans."""

from __future__ import annotations

import random
from array import array
from typing import Any

import pytest

from lens_rl.buckets import exclusive_time, kind_of
from lens_rl.offline.read import reduce, tally
from lens_rl.offline.read.columns import Columns
from lens_rl.offline.read.linked import Tree
from lens_rl.offline.read.parts import COMPUTE_BUCKETS, PhasePart, ProcessPart
from lens_rl.offline.read.phase_steps import PhaseSteps
from lens_rl.offline.read.reduce import (
    _BUCKET_INDEX,
    _finish,
    _gaps,
    _umbrella,
    claim_overlaps,
    merge_indexed,
    part_from_columns,
)
from lens_rl.offline.read.steps import StepPart
from lens_rl.offline.read.tree import JOB, UMBRELLA, id_key
from lens_rl.offline.read.tree import THIRD_PARTY as THIRD_ROLE
from lens_rl.store import INT64_END, Process

# The span-at-a-time pass 4 as it was before the tally (the reference the tally must equal, row for row).


def _reference(
    part: ProcessPart,
    tree: Tree,
    kids_of: dict[int, list[tuple[int, int]]],
    own_kids: dict[int, list[tuple[int, int]]],
    step_rows: bool,
    superseded: frozenset[Any] = frozenset(),
) -> None:
    """Pass 4 (see the module docstring): one loop over every span, the hot path of every read, so its
    per-span work stays inline. A span of a ``superseded`` step is only a re-run interval; a third party's
    span is no phase (its time is its nearest bucketed ancestor's, counted there once)."""
    names, starts, ends, buckets, steps = tree.names, tree.starts, tree.ends, tree.buckets, tree.steps
    outer, role, top, has_child = tree.outer, tree.role, tree.top, tree.has_child
    orphan, tokens = tree.orphan, tree.tokens
    bucket_ns, part_steps, phases = part.bucket_ns, part.steps, part.phases
    compute: dict[str, Any] = {}  # phase -> [steps, ns] arrays (or a dict), made a Series at the end
    per_step: dict[Any, dict[int, list[Any]]] = {}  # (phase, bucket) -> int step -> its cells
    top_level = array("q")  # rows of top-level bucketed spans (indexes: no tuple per interval)
    rerun = array("q")  # rows of spans of superseded steps
    in_umbrella: dict[int, list[int]] = {}  # umbrella -> its outermost bucketed spans (where its gaps are)
    generation: dict[Any, bool] = {}  # name -> a generation phase's (whose tokens a remote request may give)
    waiting: set[int] = set()  # its untokened generation phases' rows (a call out of the file under one relays)
    ids = tree.ids
    lo = hi = None
    for i in range(tree.n):
        name = names[i]
        start, end = starts[i], ends[i]
        kind = role[i]
        if kind == JOB:
            part.jobs.append((start, end))
            continue
        # a third party's span: no phase, no bucket of its own, and not the process's lifetime (a file of
        # them alone, a vLLM engine's, is no resource of its own: its time is the calling phase's)
        if kind != THIRD_ROLE:
            lo = start if lo is None or start < lo else lo
            hi = end if hi is None or end > hi else hi
        step = steps[i]
        if superseded and step in superseded:  # a run a later attempt did again: wasted, nothing else
            rerun.append(i)
            part.rerun_steps.add(step)
            continue
        if kind == THIRD_ROLE:
            continue
        duration = end - start
        bucket = buckets[i]
        excl = 0
        if bucket is not None:
            kids = kids_of.get(i)
            if not kids:
                excl = duration
            elif len(kids) == 1:
                a, b = kids[0]
                excl = max(duration - max(min(b, end) - max(a, start), 0), 0)
            else:
                excl = exclusive_time(start, end, kids)
            bucket_ns[bucket] += excl
            if outer[i] == -1:
                top_level.append(i)
        elif outer[i] == -1:  # an unbucketed phase outside every bucketed one: what its phases leave it
            kids = own_kids.get(i)
            excl = exclusive_time(start, end, kids) if kids else duration
        phase = phases.get((name, bucket))
        if phase is None:
            phase = phases[(name, bucket)] = PhasePart()
        phase.count += 1
        phase.total_ns += duration
        phase.excl_ns += excl
        phase.durations.append(duration)
        if i in tokens:
            _tokens(part, phase, tree, i, bucket, duration)
        else:
            gen = generation.get(name)
            if gen is None:
                gen = generation[name] = kind_of(name) == "generation"
            if gen and ids is not None:
                part.untokened[id_key(ids[i])] = (name, bucket, duration, step)
                waiting.add(i)
        if step is None:
            continue
        if type(step) is int and -INT64_END <= step < INT64_END:  # (its phase's numbers in its step)
            cell = per_step.setdefault((name, bucket), {}).setdefault(step, [0, 0, 0, 0, 0, 0.0, 0.0, 0.0, []])
            cell[0], cell[1], cell[2] = cell[0] + 1, cell[1] + duration, cell[2] + excl
            cell[8].append(duration)
            if bucket is None and not has_child[i] and kind != UMBRELLA:
                cell[4] += duration
            if i in tokens:  # (its tokens, time and FLOPs in its step)
                flops = tree.flops.get(i) if tree.flops else None
                cell[3] += duration
                cell[5] += tokens[i]
                if flops is not None:
                    cell[6] += tokens[i] * flops
                    cell[7] += tokens[i]
        if bucket is None and not has_child[i] and kind != UMBRELLA:  # an unbucketed leaf in a step
            phase.leaf_ns += duration
        if bucket is not None and bucket in COMPUTE_BUCKETS:
            by_step: Any = compute.get(name)
            if by_step is None:
                by_step = compute[name] = [array("q"), array("q")]
            if type(by_step) is list and type(step) is int and -INT64_END <= step < INT64_END:
                by_step[0].append(step)  # (16 bytes a span; summed per step at the end)
                by_step[1].append(excl)
            else:  # a step that is not an int: this phase's steps stay a dict
                _add_odd_step(compute, name, step, excl)
        if not step_rows:
            continue
        sp = part_steps.get(step)
        if sp is None:
            sp = part_steps[step] = StepPart(lo=start, hi=end)
        else:
            if start < sp.lo:  # type: ignore[operator]
                sp.lo = start
            if end > sp.hi:  # type: ignore[operator]
                sp.hi = end
        if orphan[i]:  # its parent never ended (a killed process): the step it belongs to never did either
            sp.incomplete = True
        if bucket is None:
            if kind == UMBRELLA:
                _umbrella(part, tree, sp, i, in_umbrella)
            continue
        sp.ns[_BUCKET_INDEX[bucket]] += excl
        t = top[i]
        if t != -1 and role[t] == UMBRELLA and (outer[i] == -1 or top[outer[i]] != t):
            in_umbrella.setdefault(t, []).append(i)
        if outer[i] == -1 or steps[outer[i]] != step:  # nested ones lie inside it: union unchanged
            if sp.bucketed is None:
                sp.bucketed = []
            sp.bucketed.append(i)
    _finish(part, tree, compute, top_level)
    for i in range(len(role)) if waiting else ():  # a call out of the file under an untokened phase: a relay
        if role[i] == THIRD_ROLE and not has_child[i]:
            p, hops = tree.parents[i], 0
            while p != -1 and role[p] == THIRD_ROLE and hops < tally._HOPS:
                p, hops = tree.parents[p], hops + 1
            if p in waiting:
                part.relays[id_key(ids[i])] = id_key(ids[p])
    part.phase_steps = {key: _table(cells) for key, cells in per_step.items()}
    if part.key.driver:  # the driver's view is wall-clock: concurrent spans of it counted once
        claim_overlaps(part, tree, kids_of, superseded)
    if in_umbrella:
        _gaps(part, tree, in_umbrella)
    if rerun:
        part.rerun = merge_indexed(rerun, starts, ends)
    if lo is not None and hi is not None:
        part.lifetime = (lo, hi)


def _table(cells: dict[int, list[Any]]) -> PhaseSteps:
    """A phase's cells per step as its :class:`PhaseSteps` (durations ascending within a step)."""
    rows = sorted(cells.items())
    columns = [array(code, (cell[n] for _, cell in rows)) for n, code in enumerate("qqqqqddd")]
    durations = array("q", (d for _, cell in rows for d in sorted(cell[8])))
    return PhaseSteps(array("q", (k for k, _ in rows)), *columns, durations)


def _add_odd_step(compute: dict[str, Any], name: Any, step: Any, excl: int) -> None:
    """A compute span's exclusive ns for a step that is no int64: its phase's steps become (or stay) a dict."""
    by_step = compute[name]
    if type(by_step) is list:
        by_step = compute[name] = _step_dict(by_step)
    by_step[step] = by_step.get(step, 0) + excl


def _tokens(part: ProcessPart, phase: PhasePart, tree: Tree, i: int, bucket: Any, duration: int) -> None:
    """A span's ``rl.num_tokens``: its phase's tokens, time and FLOPs (where ``rl.flops_per_token`` says),
    and its step's tokens (a step umbrella's own count, else its generation phases')."""
    count = tree.tokens[i]
    phase.tokens += count
    phase.token_ns += duration
    flops = tree.flops.get(i) if tree.flops else None
    if flops is not None:
        phase.flops += count * flops
        phase.flops_tokens += count
    step = tree.steps[i]
    if step is None:
        return
    if bucket is None and tree.own_steps[i] is not None:
        part.step_tokens[("own", step)] = part.step_tokens.get(("own", step), 0) + count
    elif kind_of(tree.names[i]) == "generation":
        part.step_tokens[("gen", step)] = part.step_tokens.get(("gen", step), 0) + count


def _step_dict(pairs_: list[array]) -> dict[Any, int]:
    """``[steps, ns]`` arrays as the step -> summed ns dict, in the order they came."""
    out: dict[Any, int] = {}
    for step, value in zip(pairs_[0], pairs_[1], strict=True):
        out[step] = out.get(step, 0) + value
    return out


_NAMES = ["generation", "policy_training", "reward", "step", "rl.job", "llm_request", "gen/generate"]
_STEPS: list[Any] = [None, 0, 1, 2, 3, "warmup", 2.5, True, 2**63]


def _columns(rng: random.Random, n: int) -> Columns:
    """Random spans of one process: trees of any shape, parents written before or after, entries, orphans,
    third parties' spans, tokens (ints and floats), FLOPs, steps of every kind, shutdowns."""
    cols = Columns()
    ids = rng.sample(range(1, 10 * n + 2), n)
    t0 = 1_700_000_000_000_000_000
    for k in range(n):
        parent = rng.choice([None, None, f"{rng.choice(ids):016x}", f"{rng.choice(ids):016x}", f"{10**9 + k:016x}"])
        start = t0 + rng.randrange(0, 10_000)
        attrs: dict[str, Any] = {}
        if rng.random() < 0.8:
            attrs["rl.bucket"] = rng.choice([None, "productive", "overhead", "idle", "wasted", "other"])
        if rng.random() < 0.6:
            attrs["rl.step"] = rng.choice(_STEPS)
        if rng.random() < 0.4:
            attrs["rl.num_tokens"] = rng.choice([3, 7, 0.1, 0.7, 12.5])
        if rng.random() < 0.1:
            attrs["rl.flops_per_token"] = 2.0e9
        if rng.random() < 0.05:
            attrs["rl.ended_by_shutdown"] = True
        if rng.random() < 0.05:
            attrs["gen_ai.usage.output_tokens"] = 5
        cols.add(
            rng.choice(_NAMES),
            f"{ids[k]:016x}",
            parent,
            start,
            start + rng.randrange(0, 3_000),
            attrs or None,
            rng.random() < 0.15,
            rng.choice([None, None, None, "vllm"]),
        )
    cols.set_root(f"{rng.choice(ids):016x}")
    return cols


@pytest.mark.parametrize("seed", range(6))
def test_the_tally_gives_the_part_the_span_at_a_time_pass_gave(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Buckets, phases (counts, totals, exclusive ns, durations in order, leaves, tokens, FLOPs), compute
    series, steps, umbrellas and gaps, untokened generation phases, re-runs and the lifetime are the same
    as the span-at-a-time pass's, for drivers and workers, with and without step rows and re-run steps."""
    rng = random.Random(seed)
    for trial in range(40):
        n = rng.randrange(1, 300)
        state = rng.getstate()
        key = Process("driver" if trial % 2 else "lm", 0, 1, driver=bool(trial % 2))
        options = {
            "step_rows": rng.random() < 0.7,
            "superseded": frozenset(rng.sample(_STEPS[1:5], rng.randrange(0, 3))),
        }
        rng.setstate(state)
        tallied = part_from_columns(key, _columns(rng, n), **options)
        rng.setstate(state)
        with monkeypatch.context() as patch:
            patch.setattr(reduce, "accumulate", _reference)
            reference = part_from_columns(key, _columns(rng, n), **options)
        assert tallied == reference, (seed, trial)
        for table in ("phases", "compute", "steps", "untokened", "step_tokens", "bucket_ns"):  # (and their order)
            assert list(getattr(tallied, table)) == list(getattr(reference, table)), (seed, trial, table)
