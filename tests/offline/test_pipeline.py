"""The async pipeline from hand-built stores with known intervals: pools, busy, overlap, bubble, weight-sync pause,
staleness and the verdict, exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lens_rl.offline.run.analyze import analyze
from lens_rl.store import span_files
from tests.stores import at_ns, span, write_process


def _store(
    run: Path,
    steps: list[tuple[float, float]],
    rollout: list[tuple[float, float]],
    trainer: list[tuple[float, float]],
    syncs: list[tuple[float, float]] = (),  # type: ignore[assignment]
    consumed: list[dict[str, Any]] = (),  # type: ignore[assignment]
    **resource: Any,
) -> dict[str, Any]:
    """A driver with these step umbrellas (and weight syncs), a rollout process generating and a trainer
    process training at these times (seconds); ``consumed``: attributes of extra training spans (step 0)."""
    driver = [span("step", lo, hi, f"s{n}", step=n) for n, (lo, hi) in enumerate(steps)]
    driver += [span("weight_sync", a, b, f"w{n}", bucket="overhead") for n, (a, b) in enumerate(syncs)]
    write_process(run, "driver", 0, 1, driver, **resource)
    write_process(
        run,
        "rollout",
        0,
        2,
        [span("generation", a, b, f"g{n}", bucket="productive") for n, (a, b) in enumerate(rollout)],
    )
    train = [span("policy_training", a, b, f"t{n}", bucket="productive") for n, (a, b) in enumerate(trainer)]
    train += [
        span("policy_training", 0.0, 0.001, f"c{n}", bucket="productive", step=0, **attrs)
        for n, attrs in enumerate(consumed)
    ]
    write_process(run, "trainer", 0, 3, train)
    report = analyze(span_files(run), jobs=1, warmup_steps=0)
    assert report["pipeline"] is not None
    return report["pipeline"]


def _pool(pipe: dict[str, Any], role: str) -> dict[str, Any]:
    return next(p for p in pipe["pools"] if p["pool"] == role)


def test_a_rollout_pool_paused_twice_within_one_version_counts_both_pauses(tmp_path: Path) -> None:
    """Generation 0-3, 4-6, 7-10 over a 10 s wall: busy 0.8 (both pauses idle), not one window per version."""
    pipe = _store(tmp_path, [(0, 10)], [(0, 3), (4, 6), (7, 10)], [(0, 10)])
    assert _pool(pipe, "rollout")["busy"] == 0.8 and _pool(pipe, "rollout")["idle"] == pytest.approx(0.2)
    assert _pool(pipe, "trainer")["busy"] == 1.0 and pipe["imbalance"] == pytest.approx(0.2)
    assert pipe["overlap"] == 0.8 and pipe["bubble"] == 0.0


def test_a_fully_overlapped_pipeline_overlap_is_the_shorter_pools_busy(tmp_path: Path) -> None:
    """Rollout busy 2-9, trainer 1-10: overlap = rollout's busy (0.7), bubble 0.1, balanced within 10 points? no:
    trainer idle 0.1, rollout idle 0.3: trainer-bound (rollout waits by 20 points)."""
    pipe = _store(tmp_path, [(0, 10)], [(2, 9)], [(1, 10)])
    assert pipe["overlap"] == pytest.approx(_pool(pipe, "rollout")["busy"]) == pytest.approx(0.7)
    assert pipe["bubble"] == pytest.approx(0.1)
    assert pipe["verdict"]["verdict"] == "trainer-bound"


def test_a_sync_job_has_no_overlap_and_names_the_pool_the_other_waits_on(tmp_path: Path) -> None:
    """Generation 0-7 then training 7-10 in each of two steps: overlap 0; the trainer idles 70 %, rollout 30 %:
    rollout-bound, with the figures that decided it and what to move."""
    pipe = _store(tmp_path, [(0, 10), (10, 20)], [(0, 7), (10, 17)], [(7, 10), (17, 20)])
    assert pipe["overlap"] == 0.0 and pipe["bubble"] == 0.0 and pipe["steps"] == 2
    verdict = pipe["verdict"]
    assert verdict["verdict"] == "rollout-bound" and "trainer pool to rollout" in verdict["move"]
    assert verdict["figures"]["trainer_idle"] == pytest.approx(0.7)
    assert verdict["figures"]["rollout_idle"] == pytest.approx(0.3)
    assert [w["verdict"] for w in verdict["windows"]] == ["rollout-bound"]
    assert [s["busy"]["rollout"] for s in pipe["per_step"]] == [0.7, 0.7]


def test_a_weight_sync_that_pauses_nobody_costs_nothing(tmp_path: Path) -> None:
    """A 1 s sync while the rollout pool generates throughout: total 1 s, pause 0."""
    pipe = _store(tmp_path, [(0, 10)], [(0, 10)], [(0, 9)], syncs=[(4, 5)])
    sync = pipe["weight_sync"]
    assert sync["total_s"] == 1.0 and sync["pause_s"] == 0.0 and sync["count"] == 1


def test_a_sync_nested_in_another_counts_once(tmp_path: Path) -> None:
    """A trainer's transfer_and_update_weights 3-7 with an update_weights 3.5-4.5 inside it (and an identical
    update_weights 3-7 on the driver), in each of 3 steps: 3 syncs, not 9; total 12 s, pause 6 s as before."""
    write_process(tmp_path, "driver", 0, 1, [span("step", 10 * k, 10 * k + 10, f"s{k}", step=k) for k in range(3)])
    gen, train, outer = [], [], []
    for k in range(3):
        b = 10 * k
        gen += [span("generation", b + lo, b + hi, f"g{k}-{lo}", bucket="productive") for lo, hi in ((0, 4), (6, 10))]
        train += [
            span("policy_training", b, b + 10, f"t{k}", bucket="productive"),
            span("prepare_for_generation/transfer_and_update_weights", b + 3, b + 7, f"w{k}", bucket="overhead"),
            span("update_weights", b + 3.5, b + 4.5, f"u{k}", bucket="overhead", parent=f"w{k}"),
        ]
        outer.append(span("update_weights", b + 3, b + 7, f"d{k}", bucket="overhead"))
    write_process(tmp_path, "rollout", 0, 2, gen)
    write_process(tmp_path, "trainer", 0, 3, train)
    write_process(tmp_path, "other", 0, 4, outer)
    sync = analyze(span_files(tmp_path), jobs=1, warmup_steps=0)["pipeline"]["weight_sync"]
    assert sync == {"count": 3, "total_s": 12.0, "pause_s": 6.0, "pause_share": 0.2}


def test_a_sync_bound_job(tmp_path: Path) -> None:
    """Syncs 3-5 and 8-10 during which nothing is generated: pause 4 s = 40 % of the wall: sync-bound first,
    whatever the idles say."""
    pipe = _store(tmp_path, [(0, 10)], [(0, 3), (5, 8)], [(0, 10)], syncs=[(3, 5), (8, 10)])
    assert pipe["weight_sync"]["pause_s"] == 4.0 and pipe["weight_sync"]["pause_share"] == 0.4
    assert pipe["verdict"]["verdict"] == "sync-bound" and pipe["per_step"][0]["pause_s"] == 4.0


def test_staleness_from_known_versions_and_tokens(tmp_path: Path) -> None:
    """Policy version 5 consuming versions [5, 4, 3, 1] with tokens [10, 20, 30, 40]: staleness 0,1,2,4 weighted
    mean (0*10+1*20+2*30+4*40)/100 = 2.4, p90 4, max 4; beyond a bound of 2: 1 trajectory of 4 (25 %: a share of
    trajectories, not of tokens)."""
    attrs = {"rl.policy_version": 5, "rl.trajectory_versions": [5, 4, 3, 1], "rl.trajectory_tokens": [10, 20, 30, 40]}
    pipe = _store(tmp_path, [(0, 10)], [(0, 10)], [(0, 10)], consumed=[attrs], **{"rl.max_staleness": 2})
    assert pipe["staleness"] == {
        "mean": 2.4,
        "p90": 4,
        "max": 4,
        "beyond": 0.25,
        "bound": 2,
        "trajectories": 4,
        "tokens": 100.0,
    }
    assert pipe["per_step"][0]["staleness_mean"] == 2.4 and pipe["per_step"][0]["staleness_beyond"] == 0.25


def test_rl_pool_wins_over_the_phases(tmp_path: Path) -> None:
    """A group whose phases say rollout but whose resource says rl.pool=trainer is a trainer pool."""
    run = tmp_path
    write_process(run, "driver", 0, 1, [span("step", 0, 10, "s0", step=0)])
    write_process(run, "gen", 0, 2, [span("generation", 0, 5, "g", bucket="productive")], **{"rl.pool": "trainer"})
    report = analyze(span_files(run), jobs=1, warmup_steps=0)
    assert [p["pool"] for p in report["pipeline"]["pools"]] == ["trainer", "other"]


def test_a_restarted_rank_is_one_rank_busy_with_the_union_of_its_processes(tmp_path: Path) -> None:
    """A rollout actor restarted mid-run (same group and rank, a new pid) that generated every step, first as
    pid 2 then as pid 5: one rank, busy 1.0, balanced against a trainer busy throughout (not two ranks at 0.5
    each, trainer-bound), through the refresh cache too."""
    import json

    from lens_rl.offline.run.cache import cache_folder

    write_process(tmp_path, "driver", 0, 1, [span("step", 10 * k, 10 * k + 10, f"s{k}", step=k) for k in range(10)])
    for pid, steps in ((2, range(5)), (5, range(5, 10))):
        gen = [span("generation", 10 * k, 10 * k + 10, f"g{pid}-{k}", bucket="productive", step=k) for k in steps]
        write_process(tmp_path, "rollout", 0, pid, gen)
    train = [span("policy_training", 10 * k, 10 * k + 10, f"t{k}", bucket="productive", step=k) for k in range(10)]
    write_process(tmp_path, "trainer", 0, 3, train)
    cold = analyze(span_files(tmp_path), jobs=1, warmup_steps=0)
    pipe = cold["pipeline"]
    rollout = _pool(pipe, "rollout")
    assert rollout["busy"] == 1.0 and [(r["rank"], r["pid"], r["busy"]) for r in rollout["ranks"]] == [(0, 5, 1.0)]
    assert pipe["verdict"]["verdict"] == "balanced" and [s["busy"]["rollout"] for s in pipe["per_step"]] == [1.0] * 10
    for _ in range(2):
        warm = analyze(span_files(tmp_path), jobs=1, warmup_steps=0, cache=cache_folder(tmp_path))
        assert json.dumps(warm["pipeline"], sort_keys=True) == json.dumps(pipe, sort_keys=True)


def test_the_table_card_and_refresh_cache_show_the_pipeline(tmp_path: Path) -> None:
    """The table's pipeline section and the report's card name the verdict and what to move; a look through the
    refresh cache gives the same pipeline as a cold read."""
    import json

    from lens_rl.offline.run.cache import cache_folder
    from lens_rl.offline.show.report.pipeline import pipeline_card
    from lens_rl.offline.show.table import format_table

    _store(tmp_path, [(0, 10), (10, 20)], [(0, 7), (10, 17)], [(7, 10), (17, 20)], syncs=[(7, 8)])
    paths = span_files(tmp_path)
    cold = analyze(paths, jobs=1, warmup_steps=0)
    table = format_table(cold)
    assert "pipeline (async RL" in table and "verdict: rollout-bound" in table and "move: move GPUs" in table
    assert 'id="headline-pipeline"' in pipeline_card(cold) and "rollout-bound" in pipeline_card(cold)
    for _ in range(2):
        warm = analyze(paths, jobs=1, warmup_steps=0, cache=cache_folder(tmp_path))
        assert json.dumps(warm["pipeline"], sort_keys=True) == json.dumps(cold["pipeline"], sort_keys=True)


def test_the_walls_coverage_is_the_steady_windows_summed_where_they_are_the_wall_and_read_apart_else() -> None:
    """How much of the steady wall busy time covers is the same read from each step's windows (steps apart, the
    common run) as read over the merged wall: steps apart, steps that touch, and a step of two windows."""
    import numpy as np

    from lens_rl.offline.read.intervals import coverage, merge_intervals, pack
    from lens_rl.offline.rollup.pipe_memo import Windows as _Windows

    busy = pack([(0, 5), (7, 12), (14, 40), (45, 46), (50, 90)])
    layouts: list[dict[Any, list[tuple[int, int]]]] = [
        {1: [(0, 10)], 2: [(12, 20)], 3: [(30, 60)], 4: [(61, 95)]},  # apart
        {1: [(0, 10)], 2: [(10, 20)], 3: [(20, 60)], 4: [(60, 95)]},  # touching: merged into one wall
        {1: [(0, 10)], 2: [(12, 15), (17, 20)], 3: [(18, 60)], 4: [(70, 70)]},  # overlapping, of no length
    ]
    rows, steady = [{"step": step, "incomplete": False} for step in (1, 2, 3, 4)], [2, 3, 4]
    for windows in layouts:
        wall = merge_intervals(w for step in steady for w in windows[step])
        wl, wh = np.array([a for a, _ in wall], np.int64), np.array([b for _, b in wall], np.int64)
        each = _Windows(rows, windows, steady, wall)
        assert each.of_wall(busy, wl, wh) == int(coverage(busy, wl, wh).sum())
    assert _Windows(rows, layouts[0], steady, [w for s in steady for w in layouts[0][s]]).steady is not None


def test_each_step_has_its_own_imbalance_and_verdict_through_the_refresh_cache_as_cold(tmp_path: Path) -> None:
    """Four steps of 10 s (1 s apart) whose pools wait differently: generation for 7 s then training for 3 (the
    trainer idles 70 %, rollout 30 %: rollout-bound, imbalance 0.4), generation for 7 s beside training
    throughout (trainer-bound, 0.3), both throughout (balanced, 0), a 2 s sync with no generation (pause 20 %:
    sync-bound, imbalance 0.2); the job's own verdict balanced. A look through the refresh cache, of the whole
    store and of it grown after its first two steps (their windows kept by the pipeline memo), gives the same
    rows as a cold read. The report's per-step figure draws each step's imbalance, its verdict on hover."""
    import json

    from lens_rl.offline.run.cache import cache_folder

    run = tmp_path / "run"
    pipe = _store(
        run,
        [(0, 10), (11, 21), (22, 32), (33, 43)],
        [(0, 7), (11, 18), (22, 32), (33, 36), (38, 43)],
        [(7, 10), (11, 21), (22, 32), (33, 43)],
        syncs=[(36, 38)],
    )
    assert [s["verdict"] for s in pipe["per_step"]] == ["rollout-bound", "trainer-bound", "balanced", "sync-bound"]
    assert [s["imbalance"] for s in pipe["per_step"]] == pytest.approx([0.4, 0.3, 0.0, 0.2])
    assert pipe["verdict"]["verdict"] == "balanced"  # (the job: trainer idle 17.5 %, rollout 20 %, pause 5 %)
    go = pytest.importorskip("plotly.graph_objects")
    from lens_rl.offline.show.report.pipeline import pipeline_figure

    report: Any = {"pipeline": pipe}
    drawn = next(t for t in pipeline_figure(go, report)[1].data if t.name == "imbalance")  # type: ignore[index]
    assert list(drawn.y) == [s["imbalance"] for s in pipe["per_step"]]
    assert list(drawn.text) == [s["verdict"] for s in pipe["per_step"]]
    for _ in range(2):
        warm = analyze(span_files(run), jobs=1, warmup_steps=0, cache=cache_folder(run))
        assert json.dumps(warm["pipeline"], sort_keys=True) == json.dumps(pipe, sort_keys=True)
    # the store seen while the job ran (every file cut after its spans of the first two steps), then grown
    grown = tmp_path / "grown"
    grown.mkdir()
    later = {}
    for path in sorted(run.glob("spans-*.jsonl")):
        lines = path.read_bytes().splitlines(keepends=True)
        cut = 1 + sum(1 for line in lines[1:] if json.loads(line)["b"] < at_ns(22 * 10**9))
        (grown / path.name).write_bytes(b"".join(lines[:cut]))
        later[path.name] = b"".join(lines[cut:])
    first = analyze(span_files(grown), jobs=1, warmup_steps=0, cache=cache_folder(grown))["pipeline"]
    assert [s["verdict"] for s in first["per_step"]] == ["rollout-bound", "trainer-bound"]
    for name, rest in later.items():
        with (grown / name).open("ab") as handle:
            handle.write(rest)
    warm = analyze(span_files(grown), jobs=1, warmup_steps=0, cache=cache_folder(grown))["pipeline"]
    cold = analyze(span_files(grown), jobs=1, warmup_steps=0)["pipeline"]
    assert json.dumps(warm, sort_keys=True) == json.dumps(cold, sort_keys=True) == json.dumps(pipe, sort_keys=True)


def test_a_selection_of_warm_up_steps_only_covers_those_steps_not_the_whole_run(tmp_path: Path) -> None:
    """``lens-rl goodput --steps 0-0`` (step 0 is the warm-up) reads the pipeline over step 0's wall, as every
    figure covers the selected steps; never over the whole run (0-40 s, the unselected steps' pools and sync)."""
    _store(
        tmp_path,
        [(0, 10), (10, 20), (20, 30), (30, 40)],
        [(0, 10), (10, 13), (20, 30), (30, 33)],
        [(0, 10), (10, 20), (20, 23), (30, 40)],
        syncs=[(12, 16)],
    )
    pipe = analyze(span_files(tmp_path), jobs=1, warmup_steps=1, steps=(0, 0))["pipeline"]
    assert pipe is not None
    assert pipe["wall_s"] == 10.0 and [s["step"] for s in pipe["per_step"]] == [0]
    assert _pool(pipe, "rollout")["busy"] == 1.0 and _pool(pipe, "trainer")["busy"] == 1.0
    assert pipe["weight_sync"]["pause_s"] in (0.0, None) and pipe["verdict"]["verdict"] == "balanced"
    from lens_rl.offline.show.pipeline import format_pipeline

    report = analyze(span_files(tmp_path), jobs=1, warmup_steps=1, steps=(0, 0))
    assert "over the warm-up steps' wall (no steady-state step): 10.00s, 1 steps" in format_pipeline(report)[1]


def test_a_selection_of_warm_up_steps_only_reads_the_staleness_of_those_steps(tmp_path: Path) -> None:
    """``--steps 0-0`` with step 0 the warm-up: the job's staleness is what step 0 consumed (0 versions behind),
    not with step 2's (9 behind) added, as the per-step rows and every other figure cover the selection."""
    write_process(tmp_path, "driver", 0, 1, [span("step", 10 * n, 10 * n + 10, f"s{n}", step=n) for n in range(4)])
    write_process(tmp_path, "rollout", 0, 2, [span("generation", 0, 40, "g", bucket="productive")])
    said = {0: 0, 2: 9}  # step -> the policy version its training phase trains on trajectories of version 0
    train = [
        span(
            "policy_training",
            10 * n,
            10 * n + 5,
            f"t{n}",
            bucket="productive",
            step=n,
            **({"rl.trajectory_versions": [0], "rl.policy_version": said[n]} if n in said else {}),
        )
        for n in range(4)
    ]
    write_process(tmp_path, "trainer", 0, 3, train)
    pipe = analyze(span_files(tmp_path), jobs=1, warmup_steps=1, steps=(0, 0))["pipeline"]
    assert pipe is not None and [s["step"] for s in pipe["per_step"]] == [0]
    assert pipe["staleness"] is not None and pipe["staleness"]["max"] == 0 and pipe["staleness"]["trajectories"] == 1
    everything = analyze(span_files(tmp_path), jobs=1, warmup_steps=0)["pipeline"]
    assert everything is not None and everything["staleness"]["max"] == 9  # (step 2's is read when selected)
