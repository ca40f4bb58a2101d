"""Real veRL (0.9.1): its own ``marked_timer`` / ``simple_timer`` in a loop shaped like its trainer's ``fit``
(``examples/verl_loop.py``), woven by lens_rl; lens_rl's seconds against veRL's ``timing_raw``. Skipped where
veRL is not installed (``.ci/verl.sh`` builds a venv that has it)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from lens_rl.buckets import default_bucket
from lens_rl.store import iter_rows, span_files
from lens_rl.store.reader import time_ns
from tests.conftest import clean_env, lens
from tests.frameworks.standins import assert_agree

pytest.importorskip("verl.utils.profiler")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "verl_loop.py"
STEPS = 5


def _job(argv: list[str], tmp_path: Path) -> None:
    """Run one job in ``tmp_path`` (a clean telemetry environment); it must exit 0."""
    done = subprocess.run(argv, env=clean_env(), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]


def _run(cmd: list[str], tmp_path: Path) -> dict[str, Any]:
    """Run one woven job; veRL's own timing of it, lens-rl goodput --json of its store, and its spans."""
    own_path, trace_dir = tmp_path / "own.json", tmp_path / "traces"
    _job([*cmd, "--steps", str(STEPS), "--own", str(own_path), "--trace-dir", str(trace_dir)], tmp_path)
    report = lens("goodput", str(trace_dir), "--json")
    assert report.returncode == 0, report.stderr[-4000:]
    spans = [row for path in span_files(trace_dir) for _, row in iter_rows(path) if row.n is not None]
    return {"own": json.loads(own_path.read_text()), "report": json.loads(report.stdout), "spans": spans}


def _check(job: dict[str, Any]) -> None:
    own, report, spans = job["own"], job["report"], job["spans"]
    rows = {row["step"]: row for row in report["steps"]}
    umbrellas = {row.a["rl.step"]: row for row in spans if row.n == "step"}
    assert sorted(rows) == sorted(umbrellas) == [s["step"] for s in own] == list(range(1, STEPS + 1))
    assert not any(row["incomplete"] for row in rows.values())
    # every timed block: its span against veRL's own figure for it (each name runs once a step; the profile
    # timers run outside the step, one a step, in order)
    outside = {name: iter(sorted((r for r in spans if r.n == name), key=lambda r: time_ns(r.b))) for name in PROFILE}
    pairs = []
    for step in own:
        for name, theirs in step["timing_raw"].items():
            span = next(outside[name]) if name in PROFILE else _span_of(spans, step["step"], name)
            pairs.append((f"{step['step']} {name}", (time_ns(span.e) - time_ns(span.b)) / 1e9, theirs))
    assert_agree(pairs)
    # the report's figures are the spans' (per step wall, per phase seconds), to the microsecond
    for step in own:
        span = umbrellas[step["step"]]
        assert rows[step["step"]]["wall_s"] == pytest.approx((time_ns(span.e) - time_ns(span.b)) / 1e9, abs=2e-6)
    # (lens_rl's own spans aside: the job's root, and under lens-rl run the launch before the loop's init)
    in_report: dict[str, float] = defaultdict(float)
    for row in report["phases"]:
        if row["phase"] != "launch":
            in_report[row["phase"]] += row["total_s"]
    in_spans: dict[str, float] = defaultdict(float)
    for row in spans:
        if row.n not in ("rl.job", "launch"):
            in_spans[row.n] += (time_ns(row.e) - time_ns(row.b)) / 1e9
    assert set(in_report) == set(in_spans) == {name for step in own for name in step["timing_raw"]}
    for name, seconds in in_report.items():
        assert seconds == pytest.approx(in_spans[name], abs=1e-5), name
    # bucketed by the default table, no unbucketed warning from veRL's names, each step's goodput its productive
    # seconds over its wall
    assert report["unbucketed_phases"] == []
    buckets = {row["phase"]: row["bucket"] for row in report["phases"]}
    assert buckets["gen"] == "productive" and buckets["update_weights"] == "overhead"
    for row in report["steps"]:  # (the JSON's seconds are rounded)
        assert row["seconds"]["productive"] > 0
        assert row["goodput"] == pytest.approx(row["seconds"]["productive"] / row["wall_s"], abs=1e-4)
    # each phase of a step is a child of that step's umbrella, carrying its number
    by_id = {row.s: row for row in spans}
    gen = [row for row in spans if row.n == "gen"]
    assert len(gen) == STEPS and all(by_id[row.p].n == "step" for row in gen)
    assert sorted(row.a["rl.step"] for row in gen) == list(range(1, STEPS + 1))


PROFILE = ("start_profile", "stop_profile")


def _span_of(spans: list[Any], step: int, name: str) -> Any:
    (span,) = [row for row in spans if row.n == name and row.a.get("rl.step") == step]
    return span


@pytest.mark.slow
def test_instrument_verl_agrees_with_verls_own_timing_raw(tmp_path: Path) -> None:
    """lens_rl.instrument("verl") in a fit-shaped loop of veRL's own timers: every step's wall and every timed
    block's seconds agree with veRL's timing_raw within 1 ms + 1 %, and lens-rl goodput reports those spans;
    steps numbered by global_steps; all bucketed."""
    _check(_run([sys.executable, str(EXAMPLE)], tmp_path))


@pytest.mark.slow
def test_lens_rl_run_weaves_an_unmodified_verl_loop(tmp_path: Path) -> None:
    """`lens-rl run --instrument verl -- python loop --plain` (no lens_rl code in the job): the same agreement."""
    if importlib.util.find_spec("lens_rl.frameworks.run") is None:
        pytest.skip("lens-rl run is not in this checkout yet")
    cmd = [sys.executable, "-m", "lens_rl", "run", "--trace-dir", str(tmp_path / "traces"), "--instrument", "verl"]
    _check(_run([*cmd, "--", sys.executable, str(EXAMPLE), "--plain"], tmp_path))


def test_every_timer_name_of_verl_0_9_1_is_bucketed() -> None:
    """The names veRL 0.9.1's trainers pass to marked_timer / simple_timer have a default bucket (the step
    umbrella none): a veRL job shows no unbucketed phase of its own."""
    names = {
        "gen", "generate_sequences", "generate_async", "reward", "old_log_prob", "ref", "values", "adv",
        "update_critic", "update_actor", "update_weights", "tool_calls", "compute_score", "testing",
        "save_checkpoint", "start_profile", "stop_profile", "dump_rollout_generations", "sync_rollout_weights",
        "switch_to_rollout", "switch_to_trainer", "switch_wait", "wait_for_enough_samples",
        "rollouter/validate_time", "param_sync",
    }  # fmt: skip
    assert [name for name in sorted(names) if default_bucket(name) is None] == []
    assert default_bucket("step") is None


def test_the_woven_timer_is_verls_own_when_off_and_after_uninstrument() -> None:
    """While telemetry is off a woven veRL timer still fills timing_raw; uninstrument puts veRL's _timer back."""
    from verl.utils.profiler import marked_timer, performance

    from lens_rl.frameworks import instrument, uninstrument

    original = performance._timer
    assert instrument("verl") == ["verl"]
    try:
        assert performance._timer is not original
        timing_raw: dict[str, float] = {}
        with marked_timer("gen", timing_raw):
            pass
        assert set(timing_raw) == {"gen"}
    finally:
        uninstrument("verl")
    assert performance._timer is original


ASYNC_JOB = Path(__file__).with_name("verl_async_job.py")


def _expected(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Token-weighted staleness (policy - version) of what veRL's batches said, worked out here from scratch."""
    pairs = [(s["policy"] - v, t) for s in steps for v, t in zip(s["versions"], s["tokens"], strict=True)]
    tokens = sum(t for _, t in pairs)
    return {"mean": round(sum(a * t for a, t in pairs) / tokens, 6), "max": max(a for a, _ in pairs), "n": len(pairs)}


@pytest.mark.slow
def test_lens_rl_run_weaves_verls_fully_async_versions_and_staleness(tmp_path: Path) -> None:
    """`lens-rl run --instrument verl` of an unmodified job over veRL's own fully async objects (the rollout
    client's generate, assemble_batch_from_rollout_samples, SeparateRayPPOTrainer._fit_update_actor): `lens-rl
    goodput --json`'s pipeline has, per step and for the job, the token-weighted staleness of the batches'
    trajectory_param_versions and global_token_num against the trainer's current_param_version; each
    generation phase carries the weight version of the response before it; every param_sync is a weight sync."""
    own_path, trace_dir = tmp_path / "own.json", tmp_path / "traces"
    cmd = [sys.executable, "-m", "lens_rl", "run", "--trace-dir", str(trace_dir), "--instrument", "verl", "--"]
    _job([*cmd, sys.executable, str(ASYNC_JOB), str(own_path)], tmp_path)
    own = json.loads(own_path.read_text())
    report = lens("goodput", str(trace_dir), "--json", "--warmup-steps", "0")
    assert report.returncode == 0, report.stderr[-4000:]
    pipe = json.loads(report.stdout)["pipeline"]
    per_step = {row["step"]: row for row in pipe["per_step"]}
    assert sorted(per_step) == [s["step"] for s in own["steps"]]
    for step in own["steps"]:
        want = _expected([step])
        assert (per_step[step["step"]]["staleness_mean"], per_step[step["step"]]["staleness_max"]) == (
            want["mean"],
            want["max"],
        ), step
    job = _expected(own["steps"])
    assert job["max"] >= 1  # (the job is async: some batches train on older samples)
    assert (pipe["staleness"]["mean"], pipe["staleness"]["max"], pipe["staleness"]["trajectories"]) == (
        job["mean"],
        job["max"],
        job["n"],
    )
    assert pipe["staleness"]["tokens"] == sum(sum(s["tokens"]) for s in own["steps"])
    assert pipe["weight_sync"]["count"] == len(own["steps"])
    spans = [row for path in span_files(trace_dir) for _, row in iter_rows(path) if row.n is not None]
    generated = sorted((row for row in spans if row.n == "generate_sequences"), key=lambda row: time_ns(row.b))
    assert [row.a.get("rl.weight_version") for row in generated] == [None, *own["response_versions"][:-1]]
    trained = sorted((row for row in spans if row.n == "update_actor"), key=lambda row: time_ns(row.b))
    assert [row.a.get("rl.policy_version") for row in trained] == [s["policy"] for s in own["steps"]]
    assert json.loads(report.stdout)["unbucketed_phases"] == []


def test_the_async_weaves_are_verls_own_when_off_and_after_uninstrument() -> None:
    """Woven, veRL's generate stays a coroutine function (its callers await it as veRL's); uninstrument("verl")
    puts veRL's own _fit_update_actor and generate back."""
    import inspect

    from verl.experimental.separation.ray_trainer import SeparateRayPPOTrainer
    from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient, LLMServerClient

    from lens_rl.frameworks import instrument, uninstrument

    originals = (
        vars(SeparateRayPPOTrainer)["_fit_update_actor"],
        vars(LLMServerClient)["generate"],
        vars(FullyAsyncLLMServerClient)["generate"],
    )
    assert instrument("verl") == ["verl"]
    try:
        assert vars(SeparateRayPPOTrainer)["_fit_update_actor"] is not originals[0]
        assert inspect.iscoroutinefunction(LLMServerClient.generate)
        assert inspect.iscoroutinefunction(FullyAsyncLLMServerClient.generate)
    finally:
        uninstrument("verl")
    assert (
        vars(SeparateRayPPOTrainer)["_fit_update_actor"],
        vars(LLMServerClient)["generate"],
        vars(FullyAsyncLLMServerClient)["generate"],
    ) == originals


def test_ray_still_pickles_verls_fully_async_actors_with_nothing_of_lens_rl() -> None:
    """Woven, veRL's @ray.remote FullyAsyncTrainer and FullyAsyncRollouter pickle as Ray ships them (by value),
    holding nothing of lens_rl: their woven base class is named, not copied."""
    from ray import cloudpickle
    from verl.experimental.fully_async_policy import fully_async_rollouter, fully_async_trainer

    from lens_rl.frameworks import instrument, uninstrument

    assert instrument("verl") == ["verl"]
    try:
        for actor in (fully_async_trainer.FullyAsyncTrainer, fully_async_rollouter.FullyAsyncRollouter):
            assert b"lens_rl" not in cloudpickle.dumps(actor.__ray_metadata__.modified_class)
    finally:
        uninstrument("verl")


@pytest.mark.slow
def test_lens_rl_run_weaves_a_verl_loop_whose_launch_script_replaced_pythonpath(tmp_path: Path) -> None:
    """A launch script that sets PYTHONPATH (dropping lens-rl run's bootstrap), then a veRL loop of no lens_rl
    code but an `import lens_rl`: woven from that import on, the loop the driver, the same agreement."""
    loop = "import lens_rl, runpy, sys; del sys.argv[0]; runpy.run_path(sys.argv[0], run_name='__main__')"
    script = f'export PYTHONPATH="{ROOT}"; exec {sys.executable} -c "{loop}" {EXAMPLE} --plain "$@"'
    cmd = [sys.executable, "-m", "lens_rl", "run", "--trace-dir", str(tmp_path / "traces"), "--instrument", "verl"]
    job = _run([*cmd, "--", "sh", "-c", script, "sh"], tmp_path)
    _check(job)
    assert job["report"]["job"]["view"] == "driver"


#: A fit-shaped loop of veRL's own timers whose third step's update_actor raises (no lens_rl code).
CRASHING_FIT = """
import time
from verl.utils.profiler import marked_timer

for step in range(1, 5):
    timing_raw = {}
    with marked_timer("step", timing_raw):
        with marked_timer("gen", timing_raw):
            time.sleep(0.03)
        with marked_timer("update_actor", timing_raw):
            time.sleep(0.02)
            if step == 3:
                raise RuntimeError("CUDA out of memory in update_actor")
"""


@pytest.mark.slow
def test_a_verl_step_whose_update_actor_raised_is_failed_not_complete(tmp_path: Path) -> None:
    """`lens-rl run` of a veRL loop whose update_actor raises in step 3: step 3 reads incomplete with veRL's
    error (as TRL's crashed step does), out of the steady state, which is step 2's."""
    (tmp_path / "fit.py").write_text(CRASHING_FIT)
    store = tmp_path / "traces" / "r"
    cmd = [sys.executable, "-m", "lens_rl", "run", "--trace-dir", str(tmp_path / "traces"), "--run-id", "r", "--"]
    done = subprocess.run(
        [*cmd, sys.executable, "fit.py"], env=clean_env(), capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 1, done.stderr[-4000:]
    out = lens("goodput", str(store), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    steps = {row["step"]: row for row in report["steps"]}
    assert sorted(steps) == [1, 2, 3] and [s for s, row in steps.items() if row["incomplete"]] == [3]
    assert steps[3]["error"]["message"] == "CUDA out of memory in update_actor"
    assert report["steady_state_goodput"] == pytest.approx(steps[2]["goodput"])
