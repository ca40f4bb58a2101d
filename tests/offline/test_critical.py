"""The critical path on hand-written stores whose answers are known: parallel workers, an async overlap,
nested and cross-process chains, a worker span whose parent was never written; the same whatever the
parallelism; a critical path that sums to each step's wall."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.run.analyze import analyze
from lens_rl.offline.show.table import format_table
from lens_rl.store import span_files
from tests.stores import span, span_id, write_process


def _driver(run: Path, spans: list[dict[str, Any]]) -> None:
    write_process(run, "driver", 0, 1, [span("rl.job", 0, 100, "job"), *spans], root="job", role="driver")


def _phases(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["worker_group"], r["phase"]): r for r in report["critical_path"]["phases"]}


def test_two_parallel_workers_then_a_driver_phase(tmp_path: Path) -> None:
    """Workers of 1 s and 3 s in parallel under the driver's training phase, then a 0.5 s driver phase: the
    path is the 3 s worker, then the driver phase (and the driver's own bits around them); its top stretch
    is that worker; the seconds add up to the step's wall."""
    run = tmp_path / "r"
    _driver(
        run,
        [
            span("step", 0, 4, "s", parent="job", step=0),
            span("policy_training", 0, 3.2, "t", parent="s", bucket="productive"),
            span("advantage", 3.2, 3.7, "a", parent="s", bucket="productive"),
        ],
    )
    write_process(
        run, "lm_policy", 0, 2, [span("train", 0.1, 1.1, "w0", parent="t", remote=True, bucket="productive", step=0)]
    )
    write_process(
        run, "lm_policy", 1, 3, [span("train", 0.1, 3.1, "w1", parent="t", remote=True, bucket="productive", step=0)]
    )
    report = analyze(span_files(run), jobs=1)
    phases = _phases(report)
    assert phases[("lm_policy", "train")]["critical_s"] == pytest.approx(3.0)
    assert phases[("lm_policy", "train")]["critical_share"] == pytest.approx(0.75)
    assert phases[("lm_policy", "train")]["exposed_share"] == pytest.approx(3.0 / 4.0)  # rank 0 overlapped
    assert phases[("driver", "advantage")]["critical_s"] == pytest.approx(0.5)
    assert phases[("driver", "policy_training")]["critical_s"] == pytest.approx(0.2)  # before and after the call
    assert phases[("driver", "step")]["critical_s"] == pytest.approx(0.3)  # the loop's own time at the end
    (step,) = report["critical_path"]["steps"]
    assert step["top"] == {"worker_group": "lm_policy", "rank": 1, "phase": "train", "seconds": 3.0}
    assert step["critical_s"] == pytest.approx(4.0) and step["by_group"] == {"driver": 1.0, "lm_policy": 3.0}
    table = format_table(report)
    assert "lm_policy train" in table and "the longest stretch of 1 of 1 steps: lm_policy rank 1 train" in table


def test_async_generation_is_exposed_only_for_the_drivers_wait(tmp_path: Path) -> None:
    """Generation runs for 1.6 s, overlapping the previous step's training, and ends as the driver's 0.4 s
    wait for it ends: it is on the path for those 0.4 s only (the child clipped to its parent), so its
    exposed share is the wait over its exclusive time, 0.25; the training chain covers the rest."""
    run = tmp_path / "r"
    _driver(
        run,
        [
            span("step", 10, 12, "s", parent="job", step=1),
            span("exposed_generation", 10, 10.4, "wait", parent="s", bucket="idle"),
            span("policy_training", 10.4, 12, "t", parent="s", bucket="productive"),
        ],
    )
    write_process(
        run,
        "vllm_policy",
        0,
        2,
        [span("generation", 8.8, 10.4, "g", parent="wait", remote=True, bucket="productive", step=1)],
    )
    write_process(
        run, "lm_policy", 0, 3, [span("train", 10.45, 11.95, "w", parent="t", remote=True, bucket="productive", step=1)]
    )
    phases = _phases(analyze(span_files(run), jobs=1))
    generation = phases[("vllm_policy", "generation")]
    assert generation["critical_s"] == pytest.approx(0.4) and generation["exposed_share"] == pytest.approx(0.25)
    assert ("driver", "exposed_generation") not in phases  # its whole time was spent waiting on generation
    assert phases[("lm_policy", "train")]["critical_s"] == pytest.approx(1.5)
    assert phases[("driver", "policy_training")]["critical_s"] == pytest.approx(0.1)


def test_a_chain_across_three_processes_and_nested_phases(tmp_path: Path) -> None:
    """driver step -> generation worker's phase -> its local child -> the rollout server's reward span: the
    walk follows the chain across processes (the server's 0.6 s are attributed to it, the worker's own
    time around the call to its phases), and a local nested phase on the driver is walked too."""
    run = tmp_path / "r"
    _driver(
        run,
        [
            span("step", 0, 3, "s", parent="job", step=0),
            span("generation", 0, 2, "g", parent="s", bucket="productive"),
            span("validation", 2, 3, "v", parent="s", bucket="overhead"),
            span("logprob", 2.2, 2.9, "lp", parent="v", bucket="productive"),
        ],
    )
    write_process(
        run,
        "vllm_policy",
        0,
        2,
        [
            span("generate", 0.1, 1.9, "wg", parent="g", remote=True, bucket="productive", step=0),
            span("score", 1.0, 1.8, "sc", parent="wg", bucket="productive"),
        ],
    )
    write_process(
        run,
        "rollout_server",
        0,
        3,
        [span("reward", 1.1, 1.7, "rw", parent="sc", remote=True, bucket="productive", step=0)],
    )
    report = analyze(span_files(run), jobs=1)
    phases = _phases(report)
    assert phases[("rollout_server", "reward")]["critical_s"] == pytest.approx(0.6)
    assert phases[("vllm_policy", "score")]["critical_s"] == pytest.approx(0.2)  # 1.0-1.1 and 1.7-1.8
    assert phases[("vllm_policy", "generate")]["critical_s"] == pytest.approx(1.0)  # 0.1-1.0 and 1.8-1.9
    assert phases[("driver", "logprob")]["critical_s"] == pytest.approx(0.7)
    assert phases[("driver", "validation")]["critical_s"] == pytest.approx(0.3)
    (step,) = report["critical_path"]["steps"]
    assert step["critical_s"] == pytest.approx(3.0)
    assert step["top"]["worker_group"] == "vllm_policy" and step["top"]["phase"] == "generate"


def test_a_worker_span_whose_parent_was_never_written_joins_no_step(tmp_path: Path) -> None:
    """A worker span hanging from a parent no file holds (a killed process's) is on no step's path; the
    step's path is its own (the driver phase), whole."""
    run = tmp_path / "r"
    _driver(
        run,
        [span("step", 0, 2, "s", parent="job", step=0), span("generation", 0, 2, "g", parent="s", bucket="productive")],
    )
    write_process(
        run,
        "vllm_policy",
        0,
        2,
        [span("generate", 0, 1.5, "x", parent="lost", remote=True, bucket="productive", step=0)],
    )
    report = analyze(span_files(run), jobs=1)
    phases = _phases(report)
    assert ("vllm_policy", "generate") not in phases
    assert phases[("driver", "generation")]["critical_s"] == pytest.approx(2.0)


def test_the_critical_path_is_the_same_whatever_the_parallelism_and_uses_final_runs(tmp_path: Path) -> None:
    """--jobs 2 gives the same critical path as one process; a step re-run by a later attempt is walked on
    its final run only; without a driver there is no critical path."""
    run = tmp_path / "r"
    spans = []
    for step in range(6):
        t = step * 2.0
        spans += [
            span("step", t, t + 2, f"s{step}", parent="job", step=step),
            span("policy_training", t, t + 1.5, f"t{step}", parent=f"s{step}", bucket="productive"),
        ]
    _driver(run, spans)
    for rank in range(3):
        write_process(
            run,
            "lm_policy",
            rank,
            10 + rank,
            [
                span(
                    "train",
                    s * 2.0,
                    s * 2.0 + 0.5 + 0.3 * rank,
                    f"w{rank}-{s}",
                    parent=f"t{s}",
                    remote=True,
                    bucket="productive",
                    step=s,
                )
                for s in range(6)
            ],
        )
    paths = span_files(run)
    one, two = analyze(paths, jobs=1), analyze(paths, jobs=2)
    assert json.dumps(one["critical_path"], sort_keys=True) == json.dumps(two["critical_path"], sort_keys=True)
    assert all(s["top"]["rank"] in (2,) or s["top"]["worker_group"] == "driver" for s in one["critical_path"]["steps"])
    assert _phases(one)[("lm_policy", "train")]["critical_s"] == pytest.approx(6 * 1.1)
    workers_only = tmp_path / "w"
    write_process(workers_only, "lm_policy", 0, 2, [span("train", 0, 1, "x", bucket="productive", step=0)])
    assert analyze(span_files(workers_only), jobs=1)["critical_path"] == {"phases": [], "steps": []}


def test_the_walks_kept_until_the_rollup_are_compact_numbers(tmp_path: Path) -> None:
    """What the critical path keeps of each process until every file is read is int arrays (span ids as 8
    bytes, no Python object per span or entry), well under 72 bytes a span on the benchmark's GRPO shape."""
    from array import array

    from lens_rl.offline.read.critical import CritPart
    from lens_rl.offline.run.analyze import analyze_parts
    from tests.stores import synthesized_store

    parts, _ = analyze_parts(span_files(synthesized_store(tmp_path, 20_000, 9) / "run"), jobs=1)
    crits = [part.crit for part in parts if part.crit is not None]
    fields = [k for k in CritPart.__slots__ if k not in ("attrs", "steps")]
    assert all(isinstance(getattr(c, k), array) for c in crits for k in fields)
    kept = sum(getattr(c, k).itemsize * len(getattr(c, k)) for c in crits for k in fields)
    assert 0 < kept / sum(part.spans for part in parts) < 72


def test_a_zero_length_worker_span_is_walked_once(tmp_path: Path) -> None:
    """A remote child that starts where it ends (a clock's tick, a clamped span) is taken once and the walk
    goes on to the next: the step's critical path sums to its wall, no endless walk."""
    run = tmp_path / "r"
    _driver(
        run,
        [
            span("step", 0, 10, "s0", parent="job", step=0),
            span("policy_training", 1, 9, "t0", parent="s0", bucket="productive"),
        ],
    )
    write_process(
        run,
        "lm_policy",
        0,
        10,
        [
            span("train", 5, 5, "w0", parent="t0", remote=True, bucket="productive", step=0),
            span("train", 2, 4, "w1", parent="t0", remote=True, bucket="productive", step=0),
        ],
    )
    (step,) = analyze(span_files(run), jobs=1)["critical_path"]["steps"]
    assert step["critical_s"] == pytest.approx(10.0)
    assert step["by_phase"] == {"driver policy_training": 6.0, "driver step": 2.0, "lm_policy train": 2.0}


def _reference(spans: dict[str, tuple[str, dict[str, Any]]], umbrellas: list[str]) -> dict[Any, dict[str, float]]:
    """The SPEC's rule, walked naively over every span of the job at once (local and remote children alike):
    per step, critical seconds by "<group> <phase>"."""
    children: dict[str, list[str]] = {}
    for sid, (_group, row) in spans.items():
        if "p" in row:
            children.setdefault(row["p"], []).append(sid)
    out: dict[Any, dict[str, float]] = {}

    def walk(sid: str, low: int, high: int, acc: dict[str, float]) -> None:
        group, row = spans[sid]
        label, t = f"{group} {row['n']}", high
        for c in sorted(children.get(sid, []), key=lambda c: spans[c][1]["e"], reverse=True):
            end = spans[c][1]["e"]
            if end > t:
                continue
            if end <= low:
                break
            acc[label] = acc.get(label, 0.0) + (t - end) / 1e9
            bound = max(spans[c][1]["b"], low)
            walk(c, bound, end, acc)
            t = bound
            if t <= low:
                break
        if t > low:
            acc[label] = acc.get(label, 0.0) + (t - low) / 1e9

    for sid in umbrellas:
        row = spans[sid][1]
        walk(sid, row["b"], row["e"], out.setdefault(row["a"]["rl.step"], {}))
    return out


#: the shapes a worker's entry takes: its spans as (name, start, end, parent), start and end fractions of the
#: entry's interval ("w": the entry)
_SHAPES: tuple[tuple[tuple[str, float, float, str], ...], ...] = (
    (),  # a leaf
    (("fwd", 0.2, 0.7, "w"),),  # one child inside it
    (("fwd", 0.5, 1.2, "w"),),  # one still running at its end
    (("fwd", -0.3, -0.1, "w"),),  # one done before it began
    (("fwd", -0.1, 0.5, "w"),),  # one begun before it (another clock), done inside it
    (("fwd", 0.1, 0.4, "w"), ("bwd", 0.3, 0.9, "w")),  # two children
    (("fwd", 0.1, 0.9, "w"), ("gemm", 0.2, 0.5, "fwd")),  # a child with its own child
    (("fwd", 0.1, 0.3, "w"), ("bwd", 0.4, 0.8, "w"), ("gemm", 0.5, 0.6, "fwd")),
)


def _random_job(run: Path, seed: int) -> tuple[dict[str, tuple[str, dict[str, Any]]], list[str]]:
    """A job of random shape: driver steps of phases (some with a nested local phase), workers answering
    calls with every shape an entry takes (:data:`_SHAPES`; an entry may outlive the driver's phase), and a
    rollout server called from a worker's inner span. Remote calls hang only from spans with no
    local child (where the SPEC's rule and the walk's split into local and remote agree exactly)."""
    import random

    rng = random.Random(seed)
    files: dict[tuple[str, int], list[dict[str, Any]]] = {("driver", 0): [span("rl.job", 0, 1000, "job")]}
    umbrellas, n = [], 0

    def add(where: tuple[str, int], row: dict[str, Any]) -> None:
        files.setdefault(where, []).append(row)

    def label() -> str:
        nonlocal n
        n += 1
        return f"x{seed}-{n}"

    for step in range(6):
        t0 = step * 20 + rng.uniform(0, 1)
        s = label()
        add(("driver", 0), span("step", t0, t0 + 15 + rng.uniform(0, 1), s, parent="job", step=step))
        umbrellas.append(s)
        t = t0 + rng.uniform(0, 0.5)
        for phase in ("generation", "logprob", "policy_training"):
            p, d = label(), rng.uniform(2, 4)
            add(("driver", 0), span(phase, t, t + d, p, parent=s, bucket="productive"))
            if rng.random() < 0.3:  # a nested local phase: no remote call hangs from this one
                add(("driver", 0), span("inner", t + 0.1 * d, t + 0.6 * d, label(), parent=p, bucket="overhead"))
            else:
                for rank in range(3):
                    if rng.random() < 0.15:
                        continue
                    b, e = t + rng.uniform(-0.5, 0.5 * d), t + rng.uniform(0.5 * d, 1.2 * d)
                    w, shape = label(), rng.randrange(len(_SHAPES))
                    add(
                        ("lm_policy", rank),
                        span("train", b, e, w, parent=p, remote=True, bucket="productive", step=step),
                    )
                    made = {"w": w}
                    for name, lo, hi, parent in _SHAPES[shape]:  # (fractions of the entry's interval)
                        made[name] = label()
                        add(
                            ("lm_policy", rank),
                            span(name, b + lo * (e - b), b + hi * (e - b), made[name], parent=made[parent]),
                        )
                    if shape == 1 and rng.random() < 0.5:  # a rollout server called from the inner span
                        c = b + rng.uniform(0.25, 0.4) * (e - b)
                        add(
                            ("rollout", 0),
                            span("reward", c, c + 0.2 * (e - b), label(), parent=made["fwd"], remote=True),
                        )
            t += d + rng.uniform(0.1, 0.5)
    spans = {}
    for pid, ((group, rank), rows) in enumerate(sorted(files.items()), start=1):
        extra = {"root": "job", "role": "driver"} if group == "driver" else {}
        write_process(run, group, rank, pid, rows, **extra)
        spans.update((row["s"], (group, row)) for row in rows)
    return spans, [span_id(u) for u in umbrellas]


@pytest.mark.parametrize("seed", range(8))
def test_every_entry_shape_walks_as_the_rule_says(tmp_path: Path, seed: int) -> None:
    """On random jobs with every shape a worker's entry takes, each step's critical seconds per phase are
    what the SPEC's rule gives walked naively over the whole job, whatever the parallelism."""
    spans, umbrellas = _random_job(tmp_path / "r", seed)
    expected = _reference(spans, umbrellas)
    for jobs in (1, 2):
        steps = analyze(span_files(tmp_path / "r"), jobs=jobs)["critical_path"]["steps"]
        assert [s["step"] for s in steps] == sorted(expected)
        for row in steps:
            got = {k: v for k, v in row["by_phase"].items() if v}
            assert got == pytest.approx({k: v for k, v in expected[row["step"]].items() if v}, abs=2e-6)


def test_a_refresh_indexes_exactly_the_entries_that_ended_after_its_bound() -> None:
    """A look that walks only new steps indexes the entries that ended after the earliest of them: every one
    of them (a late one among early ones too, as clocks and async calls give), and none before; each
    parent's entries latest end first, ties in the order read, whatever form the span ids take."""
    import random
    from array import array
    from types import SimpleNamespace

    from lens_rl.offline.read.critical import CritPart
    from lens_rl.offline.rollup.critical import _Index

    rng = random.Random(3)
    ends = [i * 10 + rng.randrange(-50, 50) for i in range(5000)]  # nearly in order, as a process writes them
    ends[100] = 49_000  # one that ended late, among early ones
    ends[200] = ends[201] = ends[202]  # ties
    parents = [rng.randrange(1, 40) for _ in ends]
    parents[200] = parents[201] = parents[202]
    for ids in (array("Q", parents), [f"id-{p}" for p in parents]):  # lens_rl's hex ids; ids of another form
        half = len(ends) // 2
        parts = []
        for lo, hi in ((0, half), (half, len(ends))):
            crit = CritPart()
            crit.e_end, crit.e_parent = array("q", ends[lo:hi]), ids[lo:hi]
            parts.append(SimpleNamespace(crit=crit))
        refs = [(0, e) for e in range(half)] + [(1, e) for e in range(len(ends) - half)]
        for after in (-(2**63), -100, 0, 12_345, ends[300], 30_000, 49_990, 60_000):
            index = _Index(parts, after)
            got = {}
            for parent, g in index.group.items():
                lo, hi = index.first[g], index.first[g + 1]
                got[parent] = [(r >> 32, r & 0xFFFFFFFF) for r in index.refs[lo:hi]]
                assert list(index.ends[lo:hi]) == [ends[half * q + e] for q, e in got[parent]]
            want = {}
            for i, (q, e) in enumerate(refs):
                if ends[i] > after:
                    want.setdefault(ids[i], []).append((q, e))
            for taken in want.values():
                taken.sort(key=lambda r: -ends[half * r[0] + r[1]])  # (stable: ties in the order read)
            assert got == want
