"""TRL and transformers, real (``.ci/trl.sh`` builds their venv): a GRPO job and a plain ``Trainer`` on the CPU
with a tiny model built in the job, woven with no lens_rl code (``lens-rl run``) or with
``lens_rl.instrument("trl")``. lens_rl's step and phase seconds agree with the job's own clock and TRL's
profiling figures within 1 ms + 1 %; goodput has the steps, every phase bucketed; losses are unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import clean_env
from tests.frameworks.standins import assert_agree

pytest.importorskip("trl")
pytestmark = pytest.mark.slow

JOB = Path(__file__).with_name("trl_job.py")
ROOT = Path(__file__).resolve().parents[2]


#: Quiet neighbours for two clocks a few microseconds apart: no live metrics or heartbeat threads, one torch
#: thread (on a loaded 2-core machine a thread that must wait for the GIL or a core waits milliseconds).
QUIET = {"LENS_RL_OTEL_METRICS_ENABLED": "false", "LENS_RL_OTEL_HEARTBEAT_INTERVAL_MS": "0", "OMP_NUM_THREADS": "1"}


def _job(tmp_path: Path, *args: str, run: bool = False, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    out = tmp_path / f"job-{len(list(tmp_path.glob('job-*.json')))}.json"
    command = [sys.executable, str(JOB), str(out), *args]
    if run:
        command = [sys.executable, "-m", "lens_rl", "run", "--trace-dir", str(tmp_path / "t"), "--run-id", "r", "--"]
        command += [sys.executable, str(JOB), str(out), *args]
    env = clean_env({**QUIET, **(extra_env or {})})
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(out.read_text())
    result["stderr"] = done.stderr
    return result


def _spans(store: Path) -> list[dict[str, Any]]:
    rows = []
    for path in store.glob("spans-*.jsonl"):
        rows += [row for row in map(json.loads, path.read_text().splitlines()) if "n" in row]
    return sorted(rows, key=lambda row: row["b"])


def _seconds(row: dict[str, Any]) -> float:
    return (row["e"] - row["b"]) / 1e9


def _goodput(store: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "lens_rl", "goodput", str(store), "--json"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _check_steps_and_goodput(figures: dict[str, Any], store: Path, steps: int) -> list[dict[str, Any]]:
    """Each step umbrella's seconds = the job's callback clock; goodput has the steps, every phase bucketed."""
    rows = _spans(store)
    umbrellas = {row["a"]["rl.step"]: row for row in rows if row["n"] == "step"}
    assert sorted(umbrellas) == list(range(1, steps + 1))
    assert_agree([(f"step {n}", _seconds(row), figures["steps"][str(n)]) for n, row in umbrellas.items()])
    optimizer = ((r["a"].get("rl.step"), r) for r in rows if r["n"] == "optimizer_step")
    assert_agree([(f"optimizer {n}", _seconds(row), figures["optimizer"][str(n)]) for n, row in optimizer])
    report = _goodput(store)
    assert [s["step"] for s in report["steps"]] == list(range(1, steps + 1))
    assert not any(s["incomplete"] for s in report["steps"])
    assert report["unbucketed_phases"] == []
    unbucketed = [p["phase"] for p in report["phases"] if p["bucket"] is None and p["phase"] not in ("step", "rl.job")]
    assert unbucketed == []
    return rows


def _check_profiling(figures: dict[str, Any], rows: list[dict[str, Any]]) -> set[str]:
    """Every block TRL profiled is a phase of the same seconds (in order, per block name); the phase names."""
    by_block: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        block = row["a"].get("rl.trl_block")
        if block is not None:
            by_block.setdefault(block, []).append(row)
    theirs: dict[str, list[float]] = {}
    for name, seconds in figures["profiling"]:
        theirs.setdefault(name, []).append(seconds)
    assert set(theirs) == set(by_block)
    for name, durations in theirs.items():
        ours = [_seconds(row) for row in by_block[name]]
        assert len(ours) == len(durations)
        assert_agree([(f"{name} {i}", a, b) for i, (a, b) in enumerate(zip(ours, durations, strict=True))])
    return {row["n"] for row in rows}


def _check_grpo(figures: dict[str, Any], store: Path) -> None:
    rows = _check_steps_and_goodput(figures, store, 3)
    names = _check_profiling(figures, rows)
    assert {"transformers.generate", "compute_loss", "training", "logprob", "reward", "optimizer_step"} <= names
    assert {"backward", "_prepare_inputs", "_calculate_rewards", "data_loading", "logging"} <= names
    rewards = [row for row in rows if row["n"] == "reward"]
    assert rewards and all(row["a"]["rl.reward_fn"] == "letters_reward" for row in rewards)
    training = [row for row in rows if row["n"] == "training"]
    loss_ids = {row["s"] for row in rows if row["n"] == "compute_loss"}
    assert training and all(row["p"] in loss_ids for row in training)  # the forward inside compute_loss
    prepare_ids = {row["s"] for row in rows if row["n"] == "_prepare_inputs"}
    logprobs = [row for row in rows if row["n"] == "logprob"]  # the old and the reference policy's
    assert len(logprobs) == 4 and all(row["p"] in prepare_ids for row in logprobs)


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """The unmodified GRPO job under `lens-rl run`, run once for the tests that read it: its figures, its store."""
    tmp_path = tmp_path_factory.mktemp("grpo-run")
    return _job(tmp_path, run=True), tmp_path / "t" / "r"


def test_grpo_under_lens_rl_run_with_no_lens_rl_code(grpo_run: tuple[dict[str, Any], Path]) -> None:
    """An unmodified GRPO job under `lens-rl run`: steps, TRL's blocks and the optimizer step agree with the
    job's own figures; goodput has the three steps and no unbucketed phase; the store is named at the end."""
    figures, store = grpo_run
    _check_grpo(figures, store)
    assert f"lens-rl goodput {store}" in figures["stderr"]


def test_grpo_with_lens_rl_instrument(tmp_path: Path) -> None:
    """The same job calling lens_rl.instrument('trl') after its driver init: the same agreement."""
    env = {"LENS_RL_OTEL_ENABLED": "true", "LENS_RL_OTEL_TRACE_DIR": str(tmp_path / "t"), "LENS_RL_OTEL_RUN_ID": "r"}
    figures = _job(tmp_path, "--instrument", "on", extra_env=env)
    _check_grpo(figures, tmp_path / "t" / "r")


def test_plain_transformers_trainer(tmp_path: Path) -> None:
    """A plain transformers Trainer under `lens-rl run`: each step and its optimizer step agree with the job's
    callback clock; the loss and backward are phases inside the step."""
    figures = _job(tmp_path, "--plain-trainer", run=True)
    rows = _check_steps_and_goodput(figures, tmp_path / "t" / "r", 3)
    steps = {row["s"] for row in rows if row["n"] == "step"}
    for name in ("compute_loss", "backward", "optimizer_step"):
        inside = [row for row in rows if row["n"] == name]
        assert len(inside) == 3 and all(row["p"] in steps for row in inside), name


def test_losses_are_unchanged_by_weaving(tmp_path: Path, grpo_run: tuple[dict[str, Any], Path]) -> None:
    """Woven with telemetry off, and traced under `lens-rl run`, the job's losses equal an unwoven run's."""
    bare = _job(tmp_path)["losses"]
    woven_off = _job(tmp_path, "--instrument", "off")["losses"]
    traced = grpo_run[0]["losses"]
    assert len(bare) == 3 and woven_off == bare and traced == bare


def _traced(tmp_path: Path, *args: str) -> dict[str, Any]:
    env = {"LENS_RL_OTEL_ENABLED": "true", "LENS_RL_OTEL_TRACE_DIR": str(tmp_path / "t"), "LENS_RL_OTEL_RUN_ID": "r"}
    return _job(tmp_path, "--instrument", "on", *args, extra_env=env)


def test_uninstrument_trl_restores_every_function_and_records_nothing_after(tmp_path: Path) -> None:
    """uninstrument('trl') after a training puts back every attribute instrument('trl') wove, transformers' and
    accelerate's included, as the very objects they were; a second training after it records no span."""
    figures = _traced(tmp_path, "--trainings", "2", "--uninstrument-between")
    assert figures["unrestored"] == []
    second = figures["trainings"][1]["start_ns"]
    rows = _spans(tmp_path / "t" / "r")
    assert [row["a"]["rl.step"] for row in rows if row["n"] == "step"] == [1, 2, 3]
    assert [row["n"] for row in rows if row["b"] >= second and row["n"] != "rl.job"] == []


def test_two_trainings_in_one_process_are_two_step_series(tmp_path: Path) -> None:
    """Two GRPO trainings in one woven process, both counting steps from 1: the first's steps are 1-3 and agree
    with its callback clock within 1 ms + 1 % (umbrellas and goodput's step rows), the second's are 4-6 (TRL's
    own number in rl.framework_step), agreeing with its own clock, never merged into the first's; one warning."""
    figures = _traced(tmp_path, "--trainings", "2")
    store = tmp_path / "t" / "r"
    umbrellas = {row["a"]["rl.step"]: row for row in _spans(store) if row["n"] == "step"}
    assert sorted(umbrellas) == [1, 2, 3, 4, 5, 6]
    walls = {s["step"]: s["wall_s"] for s in _goodput(store)["steps"] if not s["incomplete"]}
    assert sorted(walls) == [1, 2, 3, 4, 5, 6]
    pairs = []
    for training, offset in zip(figures["trainings"], (0, 3), strict=True):
        for number, theirs in training["steps"].items():
            step = int(number) + offset
            pairs.append((f"step {step}", _seconds(umbrellas[step]), theirs))
            assert walls[step] == pytest.approx(_seconds(umbrellas[step]), abs=1e-3), step
            assert umbrellas[step]["a"].get("rl.framework_step", step) == int(number)
    assert_agree(pairs)
    assert figures["stderr"].count("numbers its 'step' steps from 1 again") == 1
