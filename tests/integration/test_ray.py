"""Ray, real: a local cluster, an actor class from __main__, two ranks, one trace at a real receiver."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lens_rl.integrations.ray import actor_options, telemetry_runtime_env, worker_env
from lens_rl.testing import OTLPReceiver
from tests.conftest import clean_env
from tests.stores import read_spans

pytest.importorskip("ray")
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ray_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run the job once for the module (one cluster): its result and the spans received."""
    out = tmp_path_factory.mktemp("ray") / "result.json"
    with OTLPReceiver() as rx:
        proc = subprocess.run(
            [sys.executable, str(ROOT / "tests/integration/ray_job.py"), rx.endpoint, str(out)],
            env=clean_env({"PYTHONPATH": str(ROOT)}),
            capture_output=True,
            text=True,
            timeout=240,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        rx.wait_for_spans(10, timeout_s=10)
        return json.loads(out.read_text()), list(rx.spans)


def test_actors_export_with_rank_group_and_job_identity(ray_job: tuple[dict, list]) -> None:
    """Each actor's spans carry its rank, world size, group, the model and the run id."""
    result, spans = ray_job
    assert result["ranks"] == [0, 1] and result["flushed"] == [True, True]
    inits = [s for s in spans if s["name"] == "policy.init"]
    assert sorted(s["resource"]["nv.dl.rank"] for s in inits) == [0, 1]
    for span in inits:
        res = span["resource"]
        assert res["nv.dl.world_size"] == 2 and res["rl.worker_group"] == "lm_policy"
        assert res["rl.model.name"] == "tiny-gpt" and res["rl.algorithm"] == "grpo"
        assert res["process.pid"] in result["pids"] and span["attributes"]["rl.bucket"] == "overhead"  # start-up
    driver = next(s for s in spans if s["name"] == "step")["resource"]
    assert driver["rl.worker_group"] == "driver" and driver["rl.run_id"] == inits[0]["resource"]["rl.run_id"]


def test_one_trace_and_the_carrier_parents_actor_spans(ray_job: tuple[dict, list]) -> None:
    """Every span is in the job's trace; the carrier makes the driver's step the actors' parent."""
    result, spans = ray_job
    job = next(s for s in spans if s["name"] == "rl.job")
    assert {s["trace_id"] for s in spans} == {job["trace_id"]}
    step = next(s for s in spans if s["name"] == "step")
    trains = [s for s in spans if s["name"] == "policy_training"]
    assert len(trains) == 2 and all(s["parent_span_id"] == step["span_id"] for s in trains)
    assert all(s["attributes"]["rl.step"] == 1 and s["attributes"]["rl.bucket"] == "productive" for s in trains)
    inits = [s for s in spans if s["name"] == "policy.init"]
    assert all(s["parent_span_id"] == job["span_id"] for s in inits)  # via TRACEPARENT


def test_accepts_context_gets_the_callers_context_implicitly(ray_job: tuple[dict, list]) -> None:
    """Through traced_actor, a marked method's span is a child of the caller's step; plain calls still work."""
    result, spans = ray_job
    assert result["logprob"] == [0, 3] and result["plain_call"] == 0
    step = next(s for s in spans if s["name"] == "step")
    logprobs = [s for s in spans if s["name"] == "logprob"]
    assert sum(s["parent_span_id"] == step["span_id"] for s in logprobs) == 3  # two, and the validation call


def test_runtime_env_helpers_merge_without_mutating(monkeypatch: pytest.MonkeyPatch) -> None:
    """runtime_env helpers merge telemetry env with setdefault semantics and copy their input."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "true")
    monkeypatch.setenv("TRACEPARENT", "00-" + "1" * 32 + "-" + "2" * 16 + "-01")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer secret")
    given = {"env_vars": {"LENS_RL_OTEL_ENABLED": "false", "MINE": "1"}, "pip": ["x"]}
    merged = telemetry_runtime_env(given)
    assert given == {"env_vars": {"LENS_RL_OTEL_ENABLED": "false", "MINE": "1"}, "pip": ["x"]}
    assert merged["env_vars"]["LENS_RL_OTEL_ENABLED"] == "false" and merged["env_vars"]["MINE"] == "1"
    assert merged["env_vars"]["TRACEPARENT"].startswith("00-1111") and merged["pip"] == ["x"]
    assert "OTEL_EXPORTER_OTLP_HEADERS" not in merged["env_vars"]
    opts = actor_options("vllm_policy", 1, 4, given)
    assert {k: opts["runtime_env"]["env_vars"][k] for k in ("LENS_RL_WORKER_GROUP", "RANK", "WORLD_SIZE")} == {
        "LENS_RL_WORKER_GROUP": "vllm_policy",
        "RANK": "1",
        "WORLD_SIZE": "4",
    }
    with pytest.raises(ValueError, match="rank must be in"):
        worker_env("g", 4, 4)


@pytest.mark.parametrize("mode", ["shutdown", "exit"])
def test_the_ordinary_end_of_a_ray_job_loses_no_worker_span(tmp_path: Path, mode: str) -> None:
    """ray.shutdown() (or just exiting) after the last step: every span that ended on a worker is in the store."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests/integration/ray_shutdown_job.py"), str(tmp_path), mode],
        env=clean_env({"PYTHONPATH": str(ROOT)}),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    if mode == "shutdown":
        assert "TELEMETRY_OK True" in proc.stdout
    names: dict[str, list[str]] = {}
    for path in tmp_path.rglob("spans-*.jsonl"):
        group = path.name.split("-")[1]
        names.setdefault(group, []).extend(r["name"] for r in read_spans(path))
    assert sorted(names.get("lm_policy", [])) == ["policy.init"] + ["policy_training"] * 3
    assert names.get("vllm_policy", []).count("generation") == 3
    assert names["driver"].count("step") == 3


def test_the_callers_bucket_and_step_travel_to_the_worker(ray_job: tuple[dict, list]) -> None:
    """A worker phase called inside the driver's with_bucket("overhead") is overhead there; outside it keeps
    its default; both record the driver's step, carried in W3C baggage."""
    _, spans = ray_job
    logprobs = {
        s["attributes"].get("rl.scale"): s
        for s in spans
        if s["name"] == "logprob" and s["resource"]["rl.worker_group"] == "lm_policy"
    }
    assert logprobs[5]["attributes"]["rl.bucket"] == "overhead" and logprobs[5]["attributes"]["rl.step"] == 1
    assert logprobs[3]["attributes"]["rl.bucket"] == "productive" and logprobs[3]["attributes"]["rl.step"] == 1
    init = next(s for s in spans if s["name"] == "policy.init")
    assert init["attributes"]["rl.bucket"] == "overhead" and "rl.step" not in init["attributes"]
