"""Decorated functions, methods and classes survive pickle, cloudpickle and Ray's copy of it."""

from __future__ import annotations

import pickle
from pathlib import Path

import cloudpickle
import pytest

from tests import pickle_targets
from tests.conftest import run_python
from tests.stores import read_spans

DEFINE_IN_MAIN = """
import lens_rl
from lens_rl import traced_phase, traced_worker_init, with_bucket

@traced_phase("generation", bucket="productive", step=5)
def generate(x, *, y=1):
    return x + y

@traced_worker_init("policy.init", worker_group="lm_policy")
class Policy:
    def __init__(self, rank=0):
        self.rank = rank
    @traced_phase("policy_training")
    def train(self, n):
        return n * 2
    @traced_phase("reward")
    async def reward(self):
        return 7
"""


def test_importable_objects_pickle_by_reference() -> None:
    """Standard pickle round-trips module-level decorated objects to the same objects."""
    for obj in (pickle_targets.generate, pickle_targets.Policy, pickle_targets.validate):
        assert pickle.loads(pickle.dumps(obj)) is obj
    policy = pickle.loads(pickle.dumps(pickle_targets.Policy(3)))
    assert policy.rank == 3 and policy.train(2) == 4
    assert pickle.loads(pickle.dumps(pickle_targets.Policy(1).train))(4) == 8
    assert cloudpickle.loads(cloudpickle.dumps(pickle_targets.generate)) is pickle_targets.generate


@pytest.mark.parametrize("pickler", ["cloudpickle", "ray.cloudpickle"])
def test_main_defined_objects_ship_by_value_and_trace_after_the_trip(pickler: str, tmp_path: Path) -> None:
    """Objects defined in __main__, pickled by value while telemetry is off, trace in a process where it is on."""
    if pickler == "ray.cloudpickle":
        pytest.importorskip("ray")
    blob = tmp_path / "blob.pkl"
    made = run_python(
        DEFINE_IN_MAIN
        + f"""
import {pickler} as cp
data = cp.dumps((generate, Policy, Policy(1).train))
open({str(blob)!r}, "wb").write(data)
"""
    )
    assert made.returncode == 0, made.stderr
    traces = tmp_path / "traces"
    used = run_python(
        f"""
        import asyncio, pickle, lens_rl
        generate, Policy, bound_train = pickle.load(open({str(blob)!r}, "rb"))
        p = Policy(rank=1)  # the worker's constructor starts telemetry, as in a Ray actor
        assert generate(1) == 2 and generate(1, y=3) == 4
        assert p.train(3) == 6 and bound_train(2) == 4 and asyncio.run(p.reward()) == 7
        import inspect
        assert inspect.iscoroutinefunction(Policy.reward)
        assert lens_rl.shutdown_telemetry(3000)
        """,
        env={"LENS_RL_OTEL_ENABLED": "1", "LENS_RL_OTEL_TRACE_DIR": str(traces), "RANK": "1"},
    )
    assert used.returncode == 0, used.stderr
    records = read_spans(traces)
    names = sorted(r["name"] for r in records)
    assert names == sorted(["generation", "generation", "policy.init", "policy_training", "policy_training", "reward"])
    gen = next(r for r in records if r["name"] == "generation")
    assert gen["attributes"] == {"rl.step": 5, "rl.bucket": "productive"}
    assert gen["resource"]["rl.worker_group"] == "lm_policy"


def test_pickled_while_on_stays_live_where_off(tmp_path: Path) -> None:
    """The on/off flag is not frozen into the pickle: loaded where telemetry is off, nothing traces."""
    blob = tmp_path / "blob.pkl"
    made = run_python(
        DEFINE_IN_MAIN
        + f"""
import cloudpickle
with lens_rl.traced_phase("warm"):  # resolves the env: on
    pass
assert lens_rl.get_telemetry_handle() is not None
open({str(blob)!r}, "wb").write(cloudpickle.dumps((generate, Policy)))
lens_rl.shutdown_telemetry(1000)
""",
        env={"LENS_RL_OTEL_ENABLED": "1", "LENS_RL_OTEL_EXPORTER": "none", "RANK": "0"},
    )
    assert made.returncode == 0, made.stderr
    used = run_python(
        f"""
        import pickle, sys, lens_rl
        generate, Policy = pickle.load(open({str(blob)!r}, "rb"))
        assert generate(1) == 2 and Policy().train(2) == 4
        assert lens_rl.get_telemetry_handle() is None
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk")))
        """
    )
    assert used.returncode == 0, used.stderr
    assert used.stdout.strip() == "[]"
