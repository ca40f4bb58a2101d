"""The config field ``instrument``: validated on the driver, applied by every init, and Ray's setup hook."""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import lens_rl
from lens_rl.config import TelemetryConfig
from lens_rl.frameworks import _registry, apply_configured
from lens_rl.integrations.ray import SETUP_HOOK, telemetry_runtime_env, worker_process_setup
from tests.conftest import clean_env


def test_the_field_takes_a_list_or_a_comma_separated_string_and_all() -> None:
    """`instrument` is a list or 'a, b'; `all` is every framework; it travels to workers as one string."""
    assert TelemetryConfig.from_master_config({"telemetry": {"instrument": ["verl", "trl"]}}).instrument == (
        "trl",
        "verl",
    )
    config = TelemetryConfig.from_env({"LENS_RL_OTEL_INSTRUMENT": " TRL , nemo-rl"})
    assert config.instrument == ("trl", "nemo_rl")
    assert config.to_env()["LENS_RL_OTEL_INSTRUMENT"] == "trl,nemo_rl"
    assert len(TelemetryConfig.from_env({"LENS_RL_OTEL_INSTRUMENT": "all"}).instrument) == 6
    assert "LENS_RL_OTEL_INSTRUMENT" not in TelemetryConfig().to_env()


def test_an_unknown_framework_is_a_valueerror_with_a_did_you_mean_on_the_driver() -> None:
    """The driver refuses `instrument: [verll]`, naming the field, the value, the suggestion and what is allowed."""
    with pytest.raises(ValueError, match=r"instrument.*'verll'.*did you mean 'verl'.*openrlhf, all"):
        lens_rl.init_telemetry_driver({"telemetry": {"enabled": True, "instrument": ["verll"]}})
    with pytest.raises(ValueError, match="expected a list"):
        TelemetryConfig.from_master_config({"telemetry": {"instrument": 3}})


def test_config_names_and_the_registrys_agree() -> None:
    """Every name the config accepts is a framework the registry knows, and the other way round."""
    from lens_rl.config import FRAMEWORKS

    assert sorted(FRAMEWORKS) == sorted(_registry.SUPPORTED)


def test_a_worker_init_weaves_what_its_environment_names(standin: Any, tmp_path: Path) -> None:
    """A worker whose environment says instrument=<framework> has it woven once its telemetry starts."""
    fw = standin()
    os.environ.update(
        {"LENS_RL_OTEL_ENABLED": "true", "LENS_RL_OTEL_TRACE_DIR": str(tmp_path), "LENS_RL_OTEL_INSTRUMENT": "trl"}
    )
    handle = lens_rl.init_telemetry_worker(rank=0, world_size=1)
    assert handle is not None and handle.config.instrument == ("trl",)
    assert _registry.framework("trl") is not None and _registry.framework("trl").state.active  # type: ignore[union-attr]
    assert apply_configured(fw.name) == [fw.name]  # the same path, for a stand-in (registered, so accepted)
    lens_rl.uninstrument()


def test_a_bad_name_in_a_workers_environment_is_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    """apply_configured (what every init and the setup hooks call) never raises: one warning, nothing woven."""
    with caplog.at_level(logging.WARNING, logger="lens_rl"):
        assert apply_configured("trll") == []
    assert any("did you mean 'trl'" in r.getMessage() for r in caplog.records)


def _user_hook() -> None:
    os.environ["USER_SETUP_HOOK_RAN"] = "yes"


def test_the_ray_setup_hook_chains_the_jobs_own(standin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With instrument set, telemetry_runtime_env adds lens_rl's setup hook; a hook the job set (a callable or
    an import path) still runs after it; applying twice chains once; without instrument nothing is added."""
    fw = standin()
    assert "worker_process_setup_hook" not in telemetry_runtime_env({})
    monkeypatch.setenv("LENS_RL_OTEL_INSTRUMENT", fw.name)
    assert telemetry_runtime_env({})["worker_process_setup_hook"] == SETUP_HOOK
    for previous in (_user_hook, f"{__name__}._user_hook"):
        monkeypatch.delenv("USER_SETUP_HOOK_RAN", raising=False)
        _registry.uninstrument(fw.name)
        env = telemetry_runtime_env({"worker_process_setup_hook": previous})
        assert telemetry_runtime_env(env)["worker_process_setup_hook"] is env["worker_process_setup_hook"]
        env["worker_process_setup_hook"]()
        assert os.environ["USER_SETUP_HOOK_RAN"] == "yes" and fw.state.active
    _registry.uninstrument(fw.name)
    worker_process_setup()
    assert fw.state.active
    importlib.import_module(fw.name)


@pytest.mark.slow
def test_ray_workers_are_woven_before_their_actor_class_loads(tmp_path: Path) -> None:
    """On a real local Ray cluster, an actor started with telemetry_runtime_env finds its frameworks woven in
    its constructor, and the job's own setup hook ran too."""
    pytest.importorskip("ray")
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys
            import ray
            from lens_rl.integrations.ray import telemetry_runtime_env

            def job_hook():
                os.environ["JOB_HOOK_RAN"] = "yes"

            @ray.remote
            class Probe:
                def __init__(self):
                    from lens_rl.frameworks import _registry
                    fw = _registry._LOADED.get("trl")
                    self.seen = (os.environ.get("JOB_HOOK_RAN"), bool(fw and fw.state.active))

                def get(self):
                    return self.seen

            os.environ["LENS_RL_OTEL_INSTRUMENT"] = "trl"
            ray.init(num_cpus=1, include_dashboard=False,
                     runtime_env=telemetry_runtime_env({"worker_process_setup_hook": job_hook}))
            print(ray.get(Probe.remote().get.remote()))
            ray.shutdown()
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(script)], env=clean_env(), capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "('yes', True)"
