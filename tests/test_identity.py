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
