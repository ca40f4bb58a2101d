"""Identity: the resource attributes of every process, the driver's computed once."""

from __future__ import annotations


def test_algorithm_is_inferred_from_the_master_config() -> None:
    """A master config with a grpo: block reports rl.algorithm grpo when none is passed."""
    from lens_rl.identity import job_identity

    assert job_identity({"grpo": {"num_generations": 8}}, None, "r")["rl.algorithm"] == "grpo"
    assert job_identity({"sft": {}}, None, "r")["nv.dl.campaign.stage"] == "SFT"
    assert job_identity({}, "ppo", "r")["rl.algorithm"] == "ppo"


def test_the_drivers_identity_is_computed_once_and_keeps_its_types() -> None:
    """for_driver gives the driver's resource (a float stays a float: no trip through the environment) and
    the workers' environment, writing nothing; a variable the user set wins, as a projection to setdefault."""
    import os

    from lens_rl.config import RESOURCE_ATTRIBUTES_ENV, TelemetryConfig
    from lens_rl.identity import decode_attributes, for_driver

    config = TelemetryConfig(enabled=True, run_id="r1")
    master = {"policy": {"model_name": "m", "dtensor_cfg": {"tensor_parallel_size": 2}}, "grpo": {}}
    before = dict(os.environ)
    driver = for_driver(master, None, config, {RESOURCE_ATTRIBUTES_ENV: "rl.team=rl%20infra"})
    assert dict(os.environ) == before
    res = driver.resource
    assert (res["rl.algorithm"], res["rl.model.name"], res["rl.parallel.tensor"], res["rl.team"]) == (
        "grpo",
        "m",
        2,
        "rl infra",
    )
    assert (res["nv.dl.rank"], res["nv.dl.world_size"], res["rl.worker_group"], res["rl.run_id"]) == (
        0,
        1,
        "driver",
        "r1",
    )
    carried = decode_attributes(driver.projection[RESOURCE_ATTRIBUTES_ENV])
    assert carried["rl.parallel.tensor"] == 2 and "nv.dl.rank" not in carried  # the job's, not the driver's own
    assert driver.projection["LENS_RL_OTEL_RUN_ID"] == "r1" and driver.overwrite == {RESOURCE_ATTRIBUTES_ENV}


def test_the_attempt_is_the_users_else_one_past_the_stores_else_the_schedulers_else_0(tmp_path) -> None:
    """The SPEC's order: LENS_RL_OTEL_ATTEMPT as set; else one more than the highest driver attempt already in
    trace_dir/<run_id>/ (a driver file's later headers too: the same pid restarted); else SLURM_RESTART_COUNT
    or TORCHELASTIC_RESTART_COUNT; else 0. With no file store the store is not looked at."""
    import json

    import pytest

    from lens_rl.config import TelemetryConfig
    from lens_rl.identity import resolve_attempt
    from tests.stores import header, write_process

    config = TelemetryConfig(enabled=True, run_id="r", trace_dir=str(tmp_path))
    assert resolve_attempt(config, {})[0] == 0
    assert resolve_attempt(config, {"SLURM_RESTART_COUNT": "2"})[0] == 2
    assert resolve_attempt(config, {"TORCHELASTIC_RESTART_COUNT": "3"})[0] == 3
    assert resolve_attempt(config, {"SLURM_RESTART_COUNT": "x", "TORCHELASTIC_RESTART_COUNT": "1"})[0] == 1
    path = write_process(tmp_path / "r", "driver", 0, 9, [], **{"rl.attempt": 0})
    with path.open("a") as handle:
        handle.write(json.dumps(header("driver", 0, 9, **{"rl.attempt": 4})) + "\n")
    write_process(tmp_path / "r", "lm_policy", 0, 10, [], **{"rl.attempt": 9})  # a worker's says nothing
    attempt, last_write = resolve_attempt(config, {"SLURM_RESTART_COUNT": "2"})
    assert attempt == 5 and last_write is not None
    assert resolve_attempt(config, {"LENS_RL_OTEL_ATTEMPT": " 7 "})[0] == 7
    otlp = TelemetryConfig(enabled=True, run_id="r", trace_dir=str(tmp_path), exporter="otlp")
    assert resolve_attempt(otlp, {})[0] == 0
    for bad in ("-1", "one", "1.5", str(2**31)):
        with pytest.raises(ValueError, match=f"LENS_RL_OTEL_ATTEMPT={bad!r} is not valid: expected an integer in"):
            resolve_attempt(config, {"LENS_RL_OTEL_ATTEMPT": bad})


def test_the_launch_time_is_taken_when_it_is_this_attempts() -> None:
    """LENS_RL_OTEL_LAUNCH_TIME, else SLURM_JOB_START_TIME, when earlier than now by under 7 days and not
    before the run's last write (an earlier attempt's time left in the environment); a bad launcher value
    is an error naming it, a bad Slurm one is passed over."""
    import pytest

    from lens_rl.identity import launch_time_ns

    now = 1_800_000_000 * 10**9
    assert launch_time_ns({"LENS_RL_OTEL_LAUNCH_TIME": "1799999990.5"}, now) == (
        1_799_999_990_500_000_000,
        "LENS_RL_OTEL_LAUNCH_TIME",
    )
    assert launch_time_ns({"SLURM_JOB_START_TIME": "1799999000"}, now) == (
        1_799_999_000 * 10**9,
        "SLURM_JOB_START_TIME",
    )
    assert launch_time_ns({"LENS_RL_OTEL_LAUNCH_TIME": "1799999990"}, now, after_ns=now - 5 * 10**9) is None
    assert launch_time_ns({"LENS_RL_OTEL_LAUNCH_TIME": str(1_800_000_000 - 8 * 86400)}, now) is None
    assert launch_time_ns({"LENS_RL_OTEL_LAUNCH_TIME": "1800000100"}, now) is None  # in the future
    assert launch_time_ns({"SLURM_JOB_START_TIME": "Unknown"}, now) is None
    assert launch_time_ns({"LENS_RL_OTEL_LAUNCH_TIME": "nan"}, now) is None
    with pytest.raises(ValueError, match="LENS_RL_OTEL_LAUNCH_TIME='soon' is not valid: expected epoch seconds"):
        launch_time_ns({"LENS_RL_OTEL_LAUNCH_TIME": "soon"}, now)
    assert launch_time_ns({"SLURM_JOB_START_TIME": "1e300"}, now) is None
    assert launch_time_ns({"SLURM_JOB_START_TIME": "-1e300"}, now) is None
    for absurd in ("1e300", "-1e300", "1e10"):
        with pytest.raises(ValueError, match=f"LENS_RL_OTEL_LAUNCH_TIME='{absurd}' is not valid: expected epoch"):
            launch_time_ns({"LENS_RL_OTEL_LAUNCH_TIME": absurd}, now)


def test_a_worker_takes_its_attempt_from_the_driver_else_the_scheduler() -> None:
    """A worker's rl.attempt: LENS_RL_OTEL_ATTEMPT (what the driver hands on), else the scheduler's restart
    count, else the identity the driver encoded, else 0; a bad value raises for the worker's boundary."""
    import pytest

    from lens_rl.identity import worker_attributes

    def attempt(env: dict[str, str]) -> int:
        return worker_attributes(service_name="s", rank=0, world_size=1, worker_group="g", environ=env)[0]["rl.attempt"]

    assert attempt({}) == 0
    assert attempt({"LENS_RL_OTEL_ATTEMPT": "2", "SLURM_RESTART_COUNT": "5"}) == 2
    assert attempt({"TORCHELASTIC_RESTART_COUNT": "4"}) == 4
    assert attempt({"LENS_RL_OTEL_RESOURCE_ATTRIBUTES": "rl.attempt=3"}) == 3
    with pytest.raises(ValueError, match="LENS_RL_OTEL_ATTEMPT"):
        attempt({"LENS_RL_OTEL_ATTEMPT": "x"})


def test_every_process_says_its_gpus(monkeypatch) -> None:
    """rl.num_gpus: explicit wins; else the devices CUDA_VISIBLE_DEVICES lists (empty or -1: none), with their
    ids; else a Ray worker's GPU ids (Ray as the job imported it; lens_rl never imports it); else 0."""
    import sys
    import types

    from lens_rl.identity import gpus, worker_attributes

    assert gpus({"CUDA_VISIBLE_DEVICES": "0,1"}) == (2, "0,1")
    assert gpus({"CUDA_VISIBLE_DEVICES": ""}) == (0, None) and gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == (0, None)
    assert gpus({"CUDA_VISIBLE_DEVICES": "GPU-3f2a,GPU-77b1"}) == (2, "GPU-3f2a,GPU-77b1")
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    assert gpus({}) == (0, None)
    ray = types.SimpleNamespace(is_initialized=lambda: True, get_gpu_ids=lambda: [3])
    monkeypatch.setitem(sys.modules, "ray", ray)
    assert gpus({}) == (1, "3")

    def resource(env: dict, explicit: dict | None = None) -> dict:
        return worker_attributes(
            service_name="s", rank=0, world_size=1, worker_group="g", explicit=explicit, environ=env
        )[0]

    assert resource({"CUDA_VISIBLE_DEVICES": "4,5,6"})["rl.num_gpus"] == 3
    assert resource({"CUDA_VISIBLE_DEVICES": "4"}, {"rl.num_gpus": 8})["rl.num_gpus"] == 8
    assert resource({"CUDA_VISIBLE_DEVICES": "4", "OTEL_RESOURCE_ATTRIBUTES": "rl.num_gpus=2"})["rl.num_gpus"] == 2
