"""Dashboard-shaped live figures: step_goodput() and step_metrics(), written to a real offline W&B run and a real
TensorBoard event file and read back."""

from __future__ import annotations

import glob
import math
import struct
import time
from pathlib import Path
from typing import Any

import pytest

import lens_rl
from lens_rl import traced_phase
from lens_rl.testing import recording


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
    assert set(live) == {"step", "attempt", "seconds", "unattributed_s", "wall_s", "goodput"}
    assert set(live["seconds"]) == {"productive", "overhead", "idle", "wasted"} and live["seconds"]["idle"] == 0.0
    assert live["step"] == 2 and live["attempt"] == 0
    assert live["unattributed_s"] >= 0.01
    covered = live["seconds"]["productive"] + live["seconds"]["overhead"]
    assert live["unattributed_s"] == pytest.approx(live["wall_s"] - covered, abs=1e-4)
    assert live["goodput"] == pytest.approx(live["seconds"]["productive"] / live["wall_s"])
    assert all(key.startswith("gp.") and type(value) is float for key, value in flat.items())
    assert flat["gp.goodput"] == live["goodput"] and flat["gp.wasted_s"] == 0.0 and flat["gp.step"] == 2.0


def _wandb_history(run_dir: Path) -> list[dict[str, Any]]:
    """The history rows of an offline W&B run, read from its transaction log (LevelDB-style records of
    W&B's protobuf ``Record``)."""
    from wandb.proto import wandb_internal_pb2

    data = Path(glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))[0]).read_bytes()
    block, pos, pending, rows = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (2, 3):  # first or middle fragment
            pending = chunk if kind == 2 else pending + chunk
            continue
        record = wandb_internal_pb2.Record()
        record.ParseFromString(chunk if kind == 1 else pending + chunk)
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): item.value_json for item in record.history.item})
    return rows


@pytest.mark.slow
def test_step_metrics_log_to_wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """wandb.log(step_metrics()) in a real offline run: every key arrives, one point per step each."""
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = wandb.init(project="lens-rl-test", dir=str(tmp_path), mode="offline")
    try:
        with recording(worker_group="driver"):
            lives = _three_steps(lambda step, metrics: run.log(metrics, step=step))
    finally:
        run.finish()
    # W&B's service writes the log after finish() returns: read until the three steps are there (or 60 s)
    deadline = time.monotonic() + 60
    while True:
        rows = [r for r in _wandb_history(tmp_path) if "goodput/goodput" in r]
        if len(rows) >= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert [int(r["_step"]) for r in rows] == [0, 1, 2]
    for row, live in zip(rows, lives, strict=True):
        assert float(row["goodput/goodput"]) == pytest.approx(live["goodput"])
        assert float(row["goodput/unattributed_s"]) == pytest.approx(live["unattributed_s"])
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
