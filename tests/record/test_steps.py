"""Dashboard-shaped live figures: step_goodput() and step_metrics(), logged to a real offline W&B run and written
to a real TensorBoard event file, read back through public APIs only (what the logging call was handed; TensorBoard's
EventAccumulator once the writer is closed), never a third party's private files."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest

import lens_rl
from lens_rl import traced_phase
from lens_rl.testing import recording
from tests.stores import rollup_recorded


def _three_steps(write: Any) -> list[dict[str, Any]]:
    """Three steps (generation, weight sync, a stretch no bucket covers); ``write(step, metrics)`` after each."""
    lives = []
    for step in range(3):
        with traced_phase("step", step=step):
            with traced_phase("generation"):
                time.sleep(0.02)
            with traced_phase("weight_sync"):
                time.sleep(0.01)
            time.sleep(0.01)  # unattributed
        lives.append(lens_rl.step_goodput())
        write(step, lens_rl.step_metrics())
    return lives


def test_step_goodput_has_every_bucket_and_the_unattributed_time() -> None:
    """All four buckets (zeros included), unattributed seconds and goodput = productive / wall; the flat form
    holds floats only, under the prefix."""
    assert lens_rl.step_goodput() is None and lens_rl.step_metrics() == {}
    with recording(worker_group="driver"):
        lives = _three_steps(lambda step, metrics: None)
        flat = lens_rl.step_metrics(prefix="gp.")
    live = lives[-1]
    assert set(live) == {"step", "attempt", "seconds", "unattributed_s", "wall_s", "goodput", "pipeline"}
    assert set(live["seconds"]) == {"productive", "overhead", "idle", "wasted"} and live["seconds"]["idle"] == 0.0
    assert live["step"] == 2 and live["attempt"] == 0
    assert live["unattributed_s"] >= 0.01
    covered = live["seconds"]["productive"] + live["seconds"]["overhead"]
    assert live["unattributed_s"] == pytest.approx(live["wall_s"] - covered, abs=1e-4)
    assert live["goodput"] == pytest.approx(live["seconds"]["productive"] / live["wall_s"])
    assert all(key.startswith("gp.") and type(value) is float for key, value in flat.items())
    assert flat["gp.goodput"] == live["goodput"] and flat["gp.wasted_s"] == 0.0 and flat["gp.step"] == 2.0


def test_step_metrics_log_to_wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run.log(step_metrics(), step=...) in a real offline W&B run: W&B takes every step's figures, and what it
    was handed is one point per step, every key (no gaps), floats, equal to step_goodput(). (Read back from
    what the logging call received: W&B's public API reads an offline run only after a sync, and its local
    files are private and written in the background.)"""
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = wandb.init(project="lens-rl-test", dir=str(tmp_path), mode="offline")
    handed: list[tuple[int, dict[str, Any]]] = []

    def log(step: int, metrics: dict[str, Any]) -> None:
        handed.append((step, dict(metrics)))
        run.log(metrics, step=step)

    try:
        with recording(worker_group="driver"):
            lives = _three_steps(log)
    finally:
        run.finish()
    assert [step for step, _ in handed] == [0, 1, 2]
    for (_, row), live in zip(handed, lives, strict=True):
        assert all(key.startswith("goodput/") and type(value) is float for key, value in row.items())
        assert row["goodput/goodput"] == pytest.approx(live["goodput"])
        assert row["goodput/unattributed_s"] == pytest.approx(live["unattributed_s"])
        assert {f"goodput/{b}_s" for b in ("productive", "overhead", "idle", "wasted")} <= set(row)  # no gaps


def test_step_metrics_write_a_tensorboard_event_file(tmp_path: Path) -> None:
    """add_scalar for each flat key in a real TensorBoard event file, read back by TensorBoard's own reader."""
    tensorboardx = pytest.importorskip("tensorboardX")
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    writer = tensorboardx.SummaryWriter(logdir=str(tmp_path))

    def write(step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            writer.add_scalar(key, value, step)

    with recording(worker_group="driver"):
        lives = _three_steps(write)
    writer.close()
    acc = event_accumulator.EventAccumulator(str(tmp_path))
    acc.Reload()
    assert {"goodput/goodput", "goodput/productive_s", "goodput/idle_s", "goodput/unattributed_s"} <= set(
        acc.Tags()["scalars"]
    )
    points = acc.Scalars("goodput/goodput")
    assert [p.step for p in points] == [0, 1, 2]
    assert all(math.isclose(p.value, live["goodput"], rel_tol=1e-5) for p, live in zip(points, lives, strict=True))


def test_the_live_figures_carry_the_attempt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A worker of attempt 3 (handed LENS_RL_OTEL_ATTEMPT by its driver): step_goodput()["attempt"] and
    step_metrics()["goodput/attempt"] say 3, so a dashboard tells a resumed curve from a new one."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    monkeypatch.setenv("LENS_RL_OTEL_TRACE_DIR", str(tmp_path))
    monkeypatch.setenv("LENS_RL_OTEL_ATTEMPT", "3")
    lens_rl.init_telemetry_worker(rank=0, world_size=1, worker_group="lm_policy")
    with traced_phase("step", step=9):
        with traced_phase("policy_training"):
            pass
    assert lens_rl.step_goodput()["attempt"] == 3
    assert lens_rl.step_metrics()["goodput/attempt"] == 3.0
    lens_rl.shutdown_telemetry(2000)


def test_a_generation_thread_beside_the_trainer_counts_once_live() -> None:
    """A generation thread started with the step's context beside the trainer (0.2 s inside 0.3 s): the step's
    productive seconds, its goodput and the bucket-seconds metric never exceed the wall, and equal the rollup's."""
    import threading

    with recording(worker_group="driver") as rec:
        with traced_phase("step", step=0):
            carrier = lens_rl.inject_context()

            def generate() -> None:
                with lens_rl.attach_context(carrier), traced_phase("generation"):
                    time.sleep(0.2)

            thread = threading.Thread(target=generate)
            with traced_phase("policy_training"):
                thread.start()
                time.sleep(0.3)
                thread.join()
        live = lens_rl.step_goodput()
        flat = lens_rl.step_metrics()
        metric = sum(
            p.value for p in rec.metrics()["rl.goodput.bucket_seconds"] if p.attributes["rl.bucket"] == "productive"
        )
        offline = rollup_recorded(rec.spans)
    assert live["goodput"] <= 1.0 and flat["goodput/goodput"] <= 1.0
    assert live["seconds"]["productive"] <= live["wall_s"] and metric <= live["wall_s"] + 1e-6
    assert metric == pytest.approx(live["seconds"]["productive"], abs=1e-6)
    assert live["seconds"]["productive"] == pytest.approx(offline["steps"][-1]["seconds"]["productive"], abs=1e-5)
    assert offline["goodput"] <= 1.0
    pipe = live["pipeline"]  # the step's pipeline within the process: generation inside training
    assert pipe["overlap"] == pytest.approx(pipe["busy_rollout"]) and 0.5 < pipe["busy_rollout"] < pipe["busy_trainer"]
    assert pipe["bubble"] < 0.1 and flat["goodput/pipeline/overlap"] == pipe["overlap"]


def test_a_step_that_runs_no_pool_phase_here_gives_no_live_pipeline_figures_but_sync() -> None:
    """A driver whose step only waits on its workers (its rollout and train phases idle, a weight sync of its
    own) gives ``sync_s`` and no busy, overlap, bubble or pause: it cannot see its pools, and a bubble of 1 would
    tell a dashboard its GPUs did nothing."""
    with recording(worker_group="driver"):
        with traced_phase("step", step=0):
            with traced_phase("rollout", bucket="idle"):
                time.sleep(0.01)
            with traced_phase("weight_sync"):
                time.sleep(0.01)
        pipe = lens_rl.step_goodput()["pipeline"]
        flat = lens_rl.step_metrics()
    assert set(pipe) == {"sync_s"} and pipe["sync_s"] > 0
    assert "goodput/pipeline/bubble" not in flat and flat["goodput/pipeline/sync_s"] == pipe["sync_s"]


def test_a_steps_backward_and_optimizer_step_are_the_trainers_busy_time_live() -> None:
    """A step of generation then compute_loss, backward and optimizer_step (transformers' and TRL's woven names):
    the live pipeline counts the three as the trainer's busy time, as the offline pools do."""
    with recording(worker_group="trainer"):
        with traced_phase("step", step=0):
            for name in ("generation", "compute_loss", "backward", "optimizer_step"):
                with traced_phase(name, bucket="productive"):
                    time.sleep(0.05)
        pipe = lens_rl.step_goodput()["pipeline"]
    assert pipe["busy_trainer"] > 0.4 and 0 < pipe["busy_rollout"] < pipe["busy_trainer"], pipe  # (3 parts of 4: 0.75)


def test_set_weight_version_is_carried_on_generation_phases_only() -> None:
    """After set_weight_version(3), generation-family phases carry rl.weight_version 3 and training phases do
    not; None forgets it; a value that is no int is refused, naming it."""
    with recording(worker_group="rollout") as rec:
        with traced_phase("generation"):
            pass
        lens_rl.set_weight_version(3)
        with traced_phase("generation"), traced_phase("policy_training"):
            pass
        with traced_phase("generate_sequences"):
            pass
        lens_rl.set_weight_version(None)
        with traced_phase("generation"):
            pass
    versions = [(s.name, dict(s.attributes).get("rl.weight_version")) for s in rec.spans]
    assert versions == [
        ("generation", None),
        ("policy_training", None),
        ("generation", 3),
        ("generate_sequences", 3),
        ("generation", None),
    ]
    with pytest.raises(ValueError, match="version must be an int"):
        lens_rl.set_weight_version(True)  # type: ignore[arg-type]


def test_step_metrics_carry_the_steps_staleness_as_the_rollup_computes_it() -> None:
    """A step whose training phase consumed versions [5, 4, 3, 1] with tokens [10, 20, 30, 40] under policy
    version 5 and a bound of 2: step_metrics() has the token-weighted mean 2.4, p90 4, max 4 and 25 % of the
    trajectories beyond the bound, the same figures the offline rollup gives that step; a step that consumed nothing has none of these
    keys; with no policy version a phase trains its step's (step 7 consuming [6, 6]: staleness 1)."""
    said = {"trajectory_versions": [5, 4, 3, 1], "trajectory_tokens": [10, 20, 30, 40]}
    with recording(worker_group="driver") as rec:
        with traced_phase("step", step=3), traced_phase("policy_training", policy_version=5, max_staleness=2, **said):
            pass
        flat = lens_rl.step_metrics()
        with traced_phase("step", step=4), traced_phase("policy_training"):
            pass
        plain = lens_rl.step_metrics()
        with traced_phase("step", step=7), traced_phase("policy_training", trajectory_versions=[6, 6]):
            pass
        defaulted = lens_rl.step_metrics()
        offline = rollup_recorded(rec.spans, warmup_steps=0)
    assert {k: v for k, v in flat.items() if "staleness" in k} == {
        "goodput/pipeline/staleness_mean": 2.4,
        "goodput/pipeline/staleness_p90": 4.0,
        "goodput/pipeline/staleness_max": 4.0,
        "goodput/pipeline/staleness_beyond": 0.25,
    }
    row = next(r for r in offline["pipeline"]["per_step"] if r["step"] == 3)
    for key in ("mean", "p90", "max", "beyond"):
        assert flat[f"goodput/pipeline/staleness_{key}"] == row[f"staleness_{key}"]
    assert not [k for k in plain if "staleness" in k]
    assert defaulted["goodput/pipeline/staleness_mean"] == 1.0 and "goodput/pipeline/staleness_beyond" not in defaulted


def test_a_job_bound_set_in_otel_resource_attributes_is_a_number_live_and_offline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OTEL_RESOURCE_ATTRIBUTES=rl.max_staleness=2 (how a driver says the job's bound) is read as the int 2: a
    step whose trajectories lag 3 and 0 has half of them beyond it, in step_metrics() and the offline pipeline."""
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "rl.max_staleness=2")
    with recording(worker_group="driver") as rec:
        with traced_phase("step", step=3), traced_phase("policy_training", trajectory_versions=[0, 3]):
            pass
        live = lens_rl.step_metrics()
        offline = rollup_recorded(rec.spans, warmup_steps=0)
    assert rec.handle.resource.attributes["rl.max_staleness"] == 2
    assert live["goodput/pipeline/staleness_beyond"] == 0.5
    assert offline["pipeline"]["staleness"]["beyond"] == 0.5 and offline["pipeline"]["staleness"]["bound"] == 2


def _step(step: int, *phases: tuple[str, str, float]) -> tuple[dict, dict]:
    """One step umbrella of ``phases`` (name, bucket, seconds) one after another: its live pipeline figures and
    its ``step_metrics()``."""
    with traced_phase("step", step=step):
        for name, bucket, seconds in phases:
            with traced_phase(name, bucket=bucket):
                time.sleep(seconds)
    return lens_rl.step_goodput()["pipeline"], lens_rl.step_metrics()


def test_a_steps_imbalance_and_verdict_live_by_the_offline_rule() -> None:
    """A step generating 0.3 s then training 0.05 s: the trainer idles far more than rollout, imbalance =
    busy(rollout) - busy(trainer), rollout-bound; a step generating 0.1 s, syncing weights 0.1 s (nothing
    generated beside it) and training 0.1 s: the pause is about a third of the wall, sync-bound whatever the idles
    say. step_metrics() has the imbalance and the verdict as four 0/1 floats, exactly one 1; a process that runs
    no pool's phase has neither (it cannot see its pools)."""
    from lens_rl.buckets import VERDICTS, verdict_name
    from lens_rl.offline.rollup import verdict as offline

    assert offline.verdict_name is verdict_name  # (one rule: the rollup's per job, window and step is this one)
    with recording(worker_group="driver"):
        slow_rollout, slow_flat = _step(0, ("generation", "productive", 0.3), ("policy_training", "productive", 0.05))
        syncing, sync_flat = _step(
            1,
            ("generation", "productive", 0.1),
            ("weight_sync", "overhead", 0.1),
            ("policy_training", "productive", 0.1),
        )
        with traced_phase("step", step=2), traced_phase("rollout", bucket="idle"):
            pass
        nothing = lens_rl.step_metrics()
    pipe = slow_rollout
    assert pipe["imbalance"] == pytest.approx(pipe["busy_rollout"] - pipe["busy_trainer"]) and pipe["imbalance"] > 0.3
    assert pipe["verdict"] == "rollout-bound" == verdict_name(1 - pipe["busy_trainer"], 1 - pipe["busy_rollout"], 0.0)
    assert slow_flat["goodput/pipeline/imbalance"] == pipe["imbalance"]
    assert {k: v for k, v in slow_flat.items() if "/verdict/" in k} == {
        f"goodput/pipeline/verdict/{name}": float(name == "rollout-bound") for name in VERDICTS
    }
    assert syncing["pause_s"] > 0.05 and syncing["verdict"] == "sync-bound"
    assert sync_flat["goodput/pipeline/verdict/sync-bound"] == 1.0 and sync_flat["goodput/pipeline/imbalance"] >= 0
    assert sum(v for k, v in sync_flat.items() if "/verdict/" in k) == 1.0
    assert all(isinstance(v, float) for v in (*slow_flat.values(), *sync_flat.values()))
    assert not [k for k in nothing if "verdict" in k or "imbalance" in k]
