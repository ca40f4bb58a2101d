"""Driver and worker lifecycle: env projection, identity, idempotence, races, exit and fork."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import lens_rl
from lens_rl._runtime import RUNTIME
from lens_rl.identity import decode_attributes
from tests.conftest import run_in_threads, run_python
from tests.stores import read_spans


def _master(tmp_path: Path, **telemetry: object) -> dict:
    return {
        "telemetry": {"enabled": True, "trace_dir": str(tmp_path / "traces"), **telemetry},
        "policy": {
            "model_name": "Qwen/Qwen2.5-1.5B",
            "precision": "bfloat16",
            "api_key": "sk-SECRET",
            "dtensor_cfg": {"tensor_parallel_size": 2},
        },
        "cluster": {"num_nodes": 1, "gpus_per_node": 8},
        "wandb": {"token": "SECRET2"},
    }


def test_disabled_driver_returns_none_and_projects_nothing() -> None:
    """With no telemetry block the driver gets None and no LENS_RL env is written."""
    assert lens_rl.init_telemetry_driver({"policy": {}}, "grpo") is None
    assert lens_rl.get_telemetry_handle() is None
    assert not [k for k in os.environ if k.startswith("LENS_RL_")]


def test_driver_projects_config_identity_and_traceparent(tmp_path: Path) -> None:
    """The driver writes the resolved config, run id, stage, identity and TRACEPARENT into env."""
    handle = lens_rl.init_telemetry_driver(_master(tmp_path, sample_rate=0.5), "sft")
    assert handle is not None and handle.is_exporting
    assert os.environ["LENS_RL_OTEL_ENABLED"] == "true"
    assert os.environ["LENS_RL_OTEL_SAMPLE_RATE"] == "0.5"
    assert os.environ["LENS_RL_OTEL_CAMPAIGN_STAGE"] == "SFT"
    run_id = os.environ["LENS_RL_OTEL_RUN_ID"]
    attrs = decode_attributes(os.environ["LENS_RL_OTEL_RESOURCE_ATTRIBUTES"])
    assert attrs["rl.run_id"] == run_id and attrs["rl.algorithm"] == "sft"
    assert attrs["rl.model.name"] == "Qwen/Qwen2.5-1.5B" and attrs["rl.precision"] == "bfloat16"
    assert attrs["rl.parallel.tensor"] == 2 and attrs["rl.cluster.gpus_per_node"] == 8
    assert "SECRET" not in os.environ["LENS_RL_OTEL_RESOURCE_ATTRIBUTES"]
    assert os.environ["TRACEPARENT"].startswith("00-")
    res = dict(handle.resource.attributes)
    assert (res["nv.dl.rank"], res["nv.dl.world_size"], res["rl.worker_group"]) == (0, 1, "driver")
    assert res["nv.dl.campaign.stage"] == "SFT" and res["process.pid"] == os.getpid()
    assert not any("SECRET" in str(v) for v in res.values())


def test_raw_env_wins_over_yaml_in_projection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An env var set before the driver starts survives the projection (setdefault)."""
    monkeypatch.setenv("LENS_RL_OTEL_SERVICE_NAME", "mine")
    monkeypatch.setenv("LENS_RL_OTEL_RUN_ID", "run-7")
    monkeypatch.setenv("LENS_RL_OTEL_CAMPAIGN_STAGE", "EVAL")
    handle = lens_rl.init_telemetry_driver(_master(tmp_path, service_name="yaml"), "grpo")
    assert os.environ["LENS_RL_OTEL_SERVICE_NAME"] == "mine"
    assert handle.resource.attributes["service.name"] == "mine"
    assert handle.resource.attributes["rl.run_id"] == "run-7"
    assert handle.resource.attributes["nv.dl.campaign.stage"] == "EVAL"


def test_driver_raises_on_bad_config_and_stays_off(tmp_path: Path) -> None:
    """A bad driver config is a ValueError naming the field; nothing starts."""
    with pytest.raises(ValueError, match="telemetry.exporter"):
        lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "exporter": "zipkin"}}, "grpo")
    assert lens_rl.get_telemetry_handle() is None


def test_driver_init_is_idempotent(tmp_path: Path) -> None:
    """A second init returns the same handle and keeps the same trace."""
    first = lens_rl.init_telemetry_driver(_master(tmp_path), "grpo")
    traceparent = os.environ["TRACEPARENT"]
    assert lens_rl.init_telemetry_driver(_master(tmp_path), "grpo") is first
    assert os.environ["TRACEPARENT"] == traceparent


def test_fifty_threads_racing_get_one_handle(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """50 threads calling init_telemetry_worker at once all get the same handle."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    monkeypatch.setenv("LENS_RL_OTEL_EXPORTER", "none")
    monkeypatch.setenv("RANK", "3")
    barrier = threading.Barrier(50)
    results: list[object] = []

    def race() -> None:
        barrier.wait()
        results.append(lens_rl.init_telemetry_worker())

    run_in_threads(race, 50)
    assert len(results) == 50 and results[0] is not None
    assert all(r is results[0] for r in results)


def test_worker_reads_rank_group_and_job_identity_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's resource carries its rank, world size, group and the driver's identity."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "true")
    monkeypatch.setenv("LENS_RL_OTEL_EXPORTER", "none")
    monkeypatch.setenv(
        "LENS_RL_OTEL_RESOURCE_ATTRIBUTES", "rl.run_id=r9,rl.model.name=Qwen%2FQ,nv.dl.campaign.stage=RL"
    )
    monkeypatch.setenv("LENS_RL_WORKER_GROUP", "lm_policy")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    handle = lens_rl.init_telemetry_worker()
    res = dict(handle.resource.attributes)
    assert (res["nv.dl.rank"], res["nv.dl.world_size"], res["rl.worker_group"]) == (1, 4, "lm_policy")
    assert (res["rl.run_id"], res["rl.model.name"]) == ("r9", "Qwen/Q")


def test_a_worker_started_from_its_environment_alone_names_the_run_it_writes(tmp_path: Path) -> None:
    """A process enabled by its environment only (no driver, no run id given) writes into a run folder whose
    name its resource carries as ``rl.run_id``, so ``goodput --json`` lists that run."""
    code = "import lens_rl\nwith lens_rl.traced_phase('generation', step=0): pass\nlens_rl.shutdown_telemetry()"
    run_python(code, env={"LENS_RL_OTEL_ENABLED": "1", "LENS_RL_OTEL_TRACE_DIR": str(tmp_path), "RANK": "0"})
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    (span,) = [s for s in read_spans(folder) if s["name"] == "generation"]
    assert span["resource"]["rl.run_id"] == folder.name


def test_explicit_worker_args_win_over_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Explicit rank/group/resource attributes beat the environment, which beats detection."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    monkeypatch.setenv("LENS_RL_OTEL_EXPORTER", "none")
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "host.name=from-env,team=rl")
    handle = lens_rl.init_telemetry_worker(
        rank=2, world_size=8, worker_group="vllm_policy", resource_attributes={"team": "explicit"}
    )
    res = dict(handle.resource.attributes)
    assert (res["nv.dl.rank"], res["nv.dl.world_size"], res["rl.worker_group"]) == (2, 8, "vllm_policy")
    assert res["team"] == "explicit" and res["host.name"] == "from-env"


def test_worker_with_bad_env_warns_once_and_runs_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bad env value gives one warning, telemetry off, and no exception."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    monkeypatch.setenv("LENS_RL_OTEL_SAMPLE_RATE", "2.5")
    assert lens_rl.init_telemetry_worker() is None
    assert lens_rl.init_telemetry_worker() is None
    warnings = [r for r in caplog.records if "sample_rate" in r.getMessage()]
    assert len(warnings) == 1
    with lens_rl.traced_phase("generation") as span:  # still harmless
        span.set_attribute("x", 1)


def test_worker_without_rank_warns_once(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """No rank anywhere: one warning naming how to pass it; rank 0 reported."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    monkeypatch.setenv("LENS_RL_OTEL_EXPORTER", "none")
    handle = lens_rl.init_telemetry_worker()
    assert handle.resource.attributes["nv.dl.rank"] == 0
    assert sum("no rank" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"rank": -1, "world_size": 2}, "rank=-1 is below 0"),
    ({"rank": 2, "world_size": 2}, "rank=2 is not below world_size=2"),
    ({"rank": 0, "world_size": 0}, "world_size=0 is below 1"),
    ({"rank": 1.5, "world_size": 4}, "rank=1.5 is not an integer"),
    ({"rank": "one", "world_size": 4}, "rank='one' is not an integer"),
])  # fmt: skip
def test_odd_ranks_and_world_sizes_are_named_in_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, kwargs: dict, says: str
) -> None:
    """A rank below 0 or not below the world size, a world size below 1, a rank that is no integer: one
    warning naming the value (not "no rank passed"); telemetry stays on."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    monkeypatch.setenv("LENS_RL_OTEL_EXPORTER", "none")
    handle = lens_rl.init_telemetry_worker(**kwargs)
    messages = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert handle is not None and sum(says in m for m in messages) == 1, messages
    assert not any("no rank" in m for m in messages)


def test_worker_disabled_env_returns_none() -> None:
    """Without LENS_RL_OTEL_ENABLED a worker gets None and phases stay free."""
    assert lens_rl.init_telemetry_worker(rank=0) is None
    assert RUNTIME.on is False


def test_env_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    """telemetry_enabled_in_env / vllm_native_tracing_requested honour the master switch."""
    assert lens_rl.telemetry_enabled_in_env() is False
    monkeypatch.setenv("LENS_RL_OTEL_VLLM_NATIVE_TRACING", "1")
    assert lens_rl.vllm_native_tracing_requested() is False
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "yes")
    assert lens_rl.telemetry_enabled_in_env() is True
    assert lens_rl.vllm_native_tracing_requested() is True
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert lens_rl.telemetry_enabled_in_env() is False


def test_shutdown_is_idempotent_and_ends_the_job_span(tmp_path: Path) -> None:
    """shutdown returns True twice, and the job root span is exported with the job's duration."""
    lens_rl.init_telemetry_driver(_master(tmp_path), "grpo")
    time.sleep(0.05)
    assert lens_rl.shutdown_telemetry(2000) is True
    assert lens_rl.shutdown_telemetry(2000) is True
    assert lens_rl.get_telemetry_handle() is None
    lines = read_spans(tmp_path / "traces")
    job = [x for x in lines if x["name"] == "rl.job"]
    assert len(job) == 1 and job[0]["parent_span_id"] is None
    assert job[0]["end_ns"] - job[0]["start_ns"] >= 50_000_000


def test_process_that_forgets_shutdown_exports_at_exit(tmp_path: Path) -> None:
    """atexit shuts down (bounded): a script that never calls shutdown still writes its spans."""
    out = run_python(
        f"""
        import lens_rl
        lens_rl.init_telemetry_driver({{"telemetry": {{"enabled": True, "trace_dir": {str(tmp_path)!r}}}}}, "grpo")
        with lens_rl.traced_phase("generation"):
            pass
        """
    )
    assert out.returncode == 0, out.stderr
    names = [r["name"] for r in read_spans(tmp_path)]
    assert sorted(names) == ["generation", "rl.job"]


@pytest.mark.slow
def test_exit_is_prompt_against_a_hung_collector() -> None:
    """A process that forgets shutdown and has a hung collector still exits within the 3 s bound."""
    out = run_python(
        """
        import time, lens_rl
        from lens_rl.testing import hung_endpoint
        url, sock = hung_endpoint()
        lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "exporter": "otlp", "endpoint": url,
                                       "export_timeout_ms": 30000}}, "grpo")
        for i in range(2000):
            with lens_rl.traced_phase("generation"):
                pass
        print("BODY_DONE", time.time(), flush=True)
        """
    )
    exit_s = time.time() - float(out.stdout.split("BODY_DONE")[1])
    assert out.returncode == 0, out.stderr
    assert exit_s < 3.0 + 2.5, exit_s  # the 3 s bound plus interpreter teardown on a busy machine


def test_explicit_worker_init_replaces_a_lazy_handle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A phase that ran first made a lazy handle; an explicit init that says more replaces it."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    monkeypatch.setenv("LENS_RL_OTEL_EXPORTER", "none")
    with lens_rl.traced_phase("early"):
        pass
    lazy = lens_rl.get_telemetry_handle()
    assert lazy.role == "lazy" and lazy.resource.attributes["rl.worker_group"] == "worker"
    assert lens_rl.init_telemetry_worker() is lazy  # says nothing new: kept
    handle = lens_rl.init_telemetry_worker(resource_attributes={"team": "rl"})
    assert handle is not lazy and handle.resource.attributes["team"] == "rl"
    assert lens_rl.init_telemetry_worker(rank=3) is handle  # explicit handles are kept


def test_a_resumed_driver_is_the_next_attempt_and_hands_it_to_workers(tmp_path: Path) -> None:
    """The second driver of a run id finds the first's file and is attempt 1: on its resource, on rl.job, in
    LENS_RL_OTEL_ATTEMPT and the identity it hands to workers, in step_goodput() and step_metrics()."""
    master = _master(tmp_path, run_id="resume")
    lens_rl.init_telemetry_driver(master, "grpo")
    with lens_rl.traced_phase("step", step=0):
        pass
    assert lens_rl.step_goodput()["attempt"] == 0
    lens_rl.shutdown_telemetry(2000)
    handle = lens_rl.init_telemetry_driver(master, "grpo")
    assert handle.resource.attributes["rl.attempt"] == 1
    assert os.environ["LENS_RL_OTEL_ATTEMPT"] == "1"
    assert decode_attributes(os.environ["LENS_RL_OTEL_RESOURCE_ATTRIBUTES"])["rl.attempt"] == 1
    with lens_rl.traced_phase("step", step=0):
        pass
    assert lens_rl.step_goodput()["attempt"] == 1 and lens_rl.step_metrics()["goodput/attempt"] == 1.0
    lens_rl.shutdown_telemetry(2000)
    jobs = [s for s in read_spans(tmp_path / "traces") if s["name"] == "rl.job"]
    assert sorted(s["attributes"]["rl.attempt"] for s in jobs) == [0, 1]


def test_a_bad_attempt_or_launch_time_is_refused_on_the_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver validates eagerly: a bad LENS_RL_OTEL_ATTEMPT or LENS_RL_OTEL_LAUNCH_TIME raises, naming it."""
    monkeypatch.setenv("LENS_RL_OTEL_ATTEMPT", "first")
    with pytest.raises(ValueError, match="LENS_RL_OTEL_ATTEMPT='first'"):
        lens_rl.init_telemetry_driver(_master(tmp_path), "grpo")
    monkeypatch.delenv("LENS_RL_OTEL_ATTEMPT")
    monkeypatch.setenv("LENS_RL_OTEL_LAUNCH_TIME", "yesterday")
    with pytest.raises(ValueError, match="LENS_RL_OTEL_LAUNCH_TIME='yesterday'"):
        lens_rl.init_telemetry_driver(_master(tmp_path), "grpo")
    monkeypatch.setenv("LENS_RL_OTEL_LAUNCH_TIME", "1e300")
    with pytest.raises(ValueError, match="LENS_RL_OTEL_LAUNCH_TIME='1e300' is not valid"):
        lens_rl.init_telemetry_driver(_master(tmp_path), "grpo")
    assert lens_rl.get_telemetry_handle() is None


def test_a_worker_with_a_bad_attempt_warns_once_and_runs_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """On a worker a bad LENS_RL_OTEL_ATTEMPT is one warning naming it, and telemetry off."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    monkeypatch.setenv("LENS_RL_OTEL_ATTEMPT", "-2")
    assert lens_rl.init_telemetry_worker() is None
    assert [r for r in caplog.records if "LENS_RL_OTEL_ATTEMPT='-2'" in r.getMessage()]


def test_the_launch_span_covers_queueing_and_start_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With LENS_RL_OTEL_LAUNCH_TIME 3 s ago, rl.job starts there and a launch span (overhead, kept whatever
    the sample rate) runs from it to the init; without one, there is no launch span."""
    launched = time.time() - 3
    monkeypatch.setenv("LENS_RL_OTEL_LAUNCH_TIME", repr(launched))
    lens_rl.init_telemetry_driver(_master(tmp_path, sample_rate=0.0, run_id="l"), "grpo")
    lens_rl.shutdown_telemetry(2000)
    spans = {s["name"]: s for s in read_spans(tmp_path / "traces")}
    launch, job = spans["launch"], spans["rl.job"]
    assert launch["attributes"]["rl.bucket"] == "overhead"
    assert launch["attributes"]["rl.launch.source"] == "LENS_RL_OTEL_LAUNCH_TIME"
    assert launch["start_ns"] == job["start_ns"] == int(launched * 1e9)
    assert launch["parent_span_id"] == job["span_id"] and 2.9e9 < launch["end_ns"] - launch["start_ns"] < 30e9
    monkeypatch.delenv("LENS_RL_OTEL_LAUNCH_TIME")
    lens_rl.init_telemetry_driver(_master(tmp_path, run_id="nolaunch"), "grpo")
    lens_rl.shutdown_telemetry(2000)
    assert not [s for s in read_spans(tmp_path / "traces" / "nolaunch") if s["name"] == "launch"]


def test_an_uncaught_exception_is_recorded_on_the_job_and_the_previous_hook_still_runs(tmp_path: Path) -> None:
    """The chained sys.excepthook records the exception on rl.job (status ERROR, an exception event) and calls
    the hook that was there; a shutdown called while an exception propagates records it too; a clean
    shutdown records none."""
    import sys

    seen = []
    previous = sys.excepthook
    sys.excepthook = lambda *info: seen.append(info[1])
    try:
        lens_rl.init_telemetry_driver(_master(tmp_path, run_id="hook"), "grpo")
        error = ValueError("bad batch")
        sys.excepthook(ValueError, error, None)
        assert seen == [error]
        lens_rl.shutdown_telemetry(2000)
        lens_rl.init_telemetry_driver(_master(tmp_path, run_id="finally"), "grpo")
        try:
            try:
                raise KeyError("lost rank")
            finally:
                lens_rl.shutdown_telemetry(2000)
        except KeyError:
            pass
        lens_rl.init_telemetry_driver(_master(tmp_path, run_id="clean"), "grpo")
        lens_rl.shutdown_telemetry(2000)
    finally:
        sys.excepthook = previous
    for run, status, kind in (
        ("hook", "ERROR", "ValueError"),
        ("finally", "ERROR", "KeyError"),
        ("clean", "UNSET", None),
    ):
        (job,) = [s for s in read_spans(tmp_path / "traces" / run) if s["name"] == "rl.job"]
        assert job["status"] == status, run
        events = [e["attributes"].get("exception.type") for e in job["events"] if e["name"] == "exception"]
        assert events == ([kind] if kind else []), run


def test_a_lazy_worker_then_initialised_explicitly_keeps_its_run_id(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A worker with no driver (no run id in its env) starts lazily on its first phase, then calls
    init_telemetry_worker with its rank: one run id, so all its spans land in one run folder."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    monkeypatch.setenv("LENS_RL_OTEL_TRACE_DIR", str(tmp_path))
    with lens_rl.traced_phase("early"):
        pass
    lazy = lens_rl.get_telemetry_handle()
    assert lazy.role == "lazy"
    handle = lens_rl.init_telemetry_worker(rank=1, world_size=2, worker_group="lm_policy")
    assert handle is not lazy and handle.config.run_id == lazy.config.run_id
    with lens_rl.traced_phase("later"):
        pass
    assert lens_rl.shutdown_telemetry(5000)
    folders = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert [p.name for p in folders] == [lazy.config.run_id]
    assert {s["name"] for s in read_spans(folders[0])} >= {"early", "later"}


@pytest.mark.parametrize(("name", "value"), [
    ("LENS_RL_OTEL_ATTEMPT", "99999999999999999999999"),
    ("LENS_RL_OTEL_ATTEMPT", str(2**31)),
    ("RANK", "99999999999999999999999"),
    ("WORLD_SIZE", str(2**63)),
    ("LENS_RL_OTEL_RESOURCE_ATTRIBUTES", "rl.attempt=1,rl.num_gpus=99999999999999999999999"),
])  # fmt: skip
def test_an_absurd_number_in_the_environment_is_one_warning_and_telemetry_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path, name: str, value: str
) -> None:
    """An integer from the environment that no header reader could hold (past 2^31) is range-checked like a
    config value: one warning naming it, telemetry off in that worker, and no store file with it written."""
    monkeypatch.setenv("LENS_RL_OTEL_ENABLED", "1")
    monkeypatch.setenv("LENS_RL_OTEL_TRACE_DIR", str(tmp_path / "traces"))
    monkeypatch.setenv(name, value)
    assert lens_rl.init_telemetry_worker() is None
    assert lens_rl.init_telemetry_worker() is None
    with lens_rl.traced_phase("generation"):
        pass
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert sum("out of range" in m or "2^31" in m for m in warnings) == 1, warnings
    assert lens_rl.get_telemetry_handle() is None and RUNTIME.on is False
    assert not (tmp_path / "traces").exists() or not any((tmp_path / "traces").rglob("*.jsonl"))


def test_the_driver_refuses_an_absurd_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the driver an LENS_RL_OTEL_ATTEMPT past 2^31 raises ValueError naming it (validated eagerly)."""
    monkeypatch.setenv("LENS_RL_OTEL_ATTEMPT", "99999999999999999999999")
    with pytest.raises(ValueError, match="LENS_RL_OTEL_ATTEMPT='99999999999999999999999'"):
        lens_rl.init_telemetry_driver(_master(tmp_path), "grpo")
    assert lens_rl.get_telemetry_handle() is None
