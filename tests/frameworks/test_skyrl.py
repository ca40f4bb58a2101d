"""SkyRL's ``Timer`` woven, on stand-ins at its module paths (``tests/frameworks/standins/skyrl``,
``skyrl_train``): an async trainer-shaped loop's timers become phases under the ``step`` umbrella, numbered by
the trainer's ``global_step``, agreeing with the seconds the timer adds to ``all_timings``."""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Iterator
from typing import Any

import pytest

import lens_rl
from lens_rl.buckets import default_bucket
from lens_rl.frameworks import instrument, uninstrument
from lens_rl.testing import recording
from tests.frameworks.standins import agree, assert_agree, standin


@pytest.fixture
def sky() -> Iterator[None]:
    with standin("skyrl", "skyrl", "skyrl_train"):
        yield


def _seconds(span: Any) -> float:
    return (span.end_time - span.start_time) / 1e9


def test_an_async_trainer_loop_is_steps_of_phases_agreeing_with_all_timings(sky: None) -> None:
    """Woven before the import: Timer("step") is the umbrella numbered by global_step; every Timer block (with
    and async with) is a phase under it, nested as in the loop, bucketed, within 1 ms + 1 % of SkyRL's own."""
    assert instrument("skyrl") == ["skyrl"]
    trainer_mod = importlib.import_module("skyrl.train.trainer")
    trainer = trainer_mod.RayPPOTrainer(steps=3)
    with recording() as rec:
        asyncio.run(trainer.train())
        live = lens_rl.step_goodput()
    umbrellas = rec.find_all("step")
    assert [s.attributes["rl.step"] for s in umbrellas] == [1, 2, 3]
    by_id = {s.context.span_id: s for s in rec.spans}
    pairs = []
    for logged, umbrella in zip(trainer.logged, umbrellas, strict=True):
        pairs.append((f"{logged['step']} step", _seconds(umbrella), logged["timing/step"]))
        inside = [s for s in rec.spans if s.attributes.get("rl.step") == logged["step"] and s is not umbrella]
        assert {s.name for s in inside} == {k.removeprefix("timing/") for k in logged if k.startswith("timing/")} - {
            "step"
        }
        for span in inside:
            pairs.append((f"{logged['step']} {span.name}", _seconds(span), logged[f"timing/{span.name}"]))
            assert span.attributes["rl.bucket"] == str(default_bucket(span.name))
    assert_agree(pairs)
    generate = rec.find("generate")
    assert by_id[generate.parent.span_id].name == "step"  # the async with block is in its step
    penalty = rec.find("apply_reward_kl_penalty")
    assert by_id[penalty.parent.span_id].name == "fwd_logprobs_values_reward"
    assert rec.find("init_weight_sync_state").attributes.get("rl.step") is None  # before the first step
    assert live["step"] == 3 and agree(live["wall_s"], trainer.logged[-1]["timing/step"])


def test_the_earlier_skyrl_train_package_is_woven_too(sky: None) -> None:
    """skyrl_train.utils.utils.Timer (sync and async) is woven beside skyrl's; a step with no trainer around it
    is counted per process from 1."""
    instrument("skyrl")
    timer = importlib.import_module("skyrl_train.utils.utils").Timer

    async def loop() -> None:
        for _ in range(2):
            with timer("step"):
                async with timer("generate"):
                    await asyncio.sleep(0.001)

    with recording() as rec:
        asyncio.run(loop())
    assert [s.attributes["rl.step"] for s in rec.find_all("step")] == [1, 2]
    assert len(rec.find_all("generate")) == 2


def test_an_earlier_skyrl_train_outside_the_tested_range_is_left_unwoven(sky: None, caplog: Any) -> None:
    """skyrl_train is a distribution of its own (``skyrl-train``): its version is checked too, here a 0.1.0
    (outside >=0.3,<0.4): one warning naming it, its Timer left as it is."""
    train = importlib.import_module("skyrl_train")
    timer = importlib.import_module("skyrl_train.utils.utils").Timer
    enter = timer.__enter__
    train.__version__ = "0.1.0"  # (the stand-in is no installed distribution: its __version__ is read)
    with caplog.at_level("WARNING", logger="lens_rl"):
        instrument("skyrl")
    assert timer.__enter__ is enter
    warned = [r.getMessage() for r in caplog.records if "outside the tested range" in r.getMessage()]
    assert len(warned) == 1 and "skyrl-train 0.1.0" in warned[0]


def test_a_failing_block_ends_its_phase_with_the_error_and_the_error_passes_through(sky: None) -> None:
    """An exception inside a Timer block reaches the caller unchanged; the phase ends, marked as an error."""
    instrument("skyrl")
    timer = importlib.import_module("skyrl.train.utils.utils").Timer
    boom = RuntimeError("theirs")
    with recording() as rec, pytest.raises(RuntimeError) as caught:
        with timer("sync_weights"):
            raise boom
    assert caught.value is boom
    assert rec.find("sync_weights").status.status_code.name == "ERROR"


class _AttrDict(dict[str, Any]):
    """A job's config object as many jobs write one: a missing attribute raises KeyError."""

    __getattr__ = dict.__getitem__


class _Loop(_AttrDict):
    """A job's own loop whose ``self`` is such an object, running SkyRL's step timer."""

    def run_step(self, timer: Any, timings: dict[str, float]) -> None:
        with timer("step", timings), timer("generate", timings):
            pass


def test_a_caller_whose_attribute_lookup_raises_has_no_step_counter(sky: None, caplog: Any) -> None:
    """The step timer run from a method of an object whose attribute lookup raises KeyError (looking for the
    trainer's global_step, then for the fully async trainer's mark): the job runs as unwoven, the step counted
    per process where the caller has none and numbered by the one it has; one warning per attribute read."""
    timer = importlib.import_module("skyrl.train.utils.utils").Timer
    instrument("skyrl")
    timings: dict[str, float] = {}
    with caplog.at_level(logging.WARNING, logger="lens_rl"), recording() as rec:
        for _ in range(2):
            _Loop(steps=1).run_step(timer, timings)
            _Loop(global_step=7).run_step(timer, timings)
    assert set(timings) == {"step", "generate"}
    assert [s.attributes["rl.step"] for s in rec.find_all("step")][:2] == [1, 7]
    said = [r.getMessage() for r in caplog.records if "calling _Loop raised KeyError" in r.getMessage()]
    assert len(said) == 2 and "'global_step'" in said[0] and "'max_staleness_steps'" in said[1]


def test_off_and_after_uninstrument_the_timer_is_skyrls_own(sky: None) -> None:
    """Telemetry off, the woven Timer still adds its seconds; uninstrument puts SkyRL's methods back."""
    module = importlib.import_module("skyrl.train.utils.utils")
    originals = dict(vars(module.Timer))
    instrument("skyrl")
    timings: dict[str, float] = {}
    with module.Timer("generate", timings):
        pass
    assert list(timings) == ["generate"]
    uninstrument("skyrl")
    assert dict(vars(module.Timer)) == originals


def test_every_timer_name_skyrl_uses_is_bucketed() -> None:
    """The Timer names of SkyRL 0.3.0's trainers have a default bucket, the step umbrella none."""
    names = [
        "generate", "postprocess_generator_output", "convert_to_training_input", "fwd_logprobs_values_reward",
        "apply_reward_kl_penalty", "compute_advantages_and_returns", "train_critic_and_policy", "critic_train",
        "policy_train", "sync_weights", "sync_weights_to_inference_engines", "init_weight_sync_state",
        "load_checkpoints", "save_checkpoints", "save_checkpoint", "save_hf_model", "update_ref_with_policy",
        "eval", "dump_data_batch", "dump_eval_results", "log_train_results", "log_eval_results",
        "cleanup_old_checkpoints", "data_loading", "forward_backward", "optim_step", "run_training",
        "wait_for_generation_buffer",
    ]  # fmt: skip
    assert [name for name in names if default_bucket(name) is None] == []
    assert default_bucket("step") is None


def test_the_fully_async_trainers_staleness_is_skyrls_own(sky: None) -> None:
    """SkyRL's fully async trainer (generator tasks stamping groups with global_step, a worker thread converting
    each mini-batch): every step's staleness in the pipeline rollup and the last step's step_metrics() are the
    token-weighted global_step - global_step_when_scheduled of the groups SkyRL itself converted, with
    max_staleness_steps as the bound; the process's weight version is the last step's global_step."""
    from lens_rl._runtime import RUNTIME
    from tests.stores import rollup_recorded

    instrument("skyrl")
    trainer = importlib.import_module("skyrl.train.fully_async_trainer").FullyAsyncRayPPOTrainer(steps=4)
    with recording() as rec:
        asyncio.run(trainer.train())
        flat = lens_rl.step_metrics()
        version = RUNTIME.weight_version
        offline = rollup_recorded(rec.spans, warmup_steps=0)
    assert [c["step"] for c in trainer.consumed] == [1, 2, 3, 4] and version == 4
    assert max(s for c in trainer.consumed for s in c["stalenesses"]) >= 1  # (the backlog ages)
    per_step = {row["step"]: row for row in offline["pipeline"]["per_step"]}
    for said in trainer.consumed:
        tokens = sum(said["tokens"])
        mean = round(sum(s * t for s, t in zip(said["stalenesses"], said["tokens"], strict=True)) / tokens, 6)
        beyond = round(sum(t for s, t in zip(said["stalenesses"], said["tokens"], strict=True) if s > 2) / tokens, 6)
        row = per_step[said["step"]]
        assert (row["staleness_mean"], row["staleness_max"], row["staleness_beyond"]) == (
            mean,
            max(said["stalenesses"]),
            beyond,
        )
    assert flat["goodput/pipeline/staleness_mean"] == per_step[4]["staleness_mean"]
    assert offline["pipeline"]["staleness"]["bound"] == 2
    (run,) = [s for s in rec.find_all("run_training") if s.attributes["rl.step"] == 1]
    assert run.attributes["rl.policy_version"] == 1 and run.attributes["rl.max_staleness"] == 2


def test_a_fully_async_trainer_of_another_shape_leaves_the_timers_woven(sky: None, caplog: Any) -> None:
    """A FullyAsyncRayPPOTrainer without the conversion method read: one warning names it, the timers stay woven."""
    module = importlib.import_module("skyrl.train.fully_async_trainer")
    name = "convert_generation_group_mini_batch_to_training_input"
    method = vars(module.FullyAsyncRayPPOTrainer)[name]
    delattr(module.FullyAsyncRayPPOTrainer, name)
    try:
        assert instrument("skyrl") == ["skyrl"]
        assert "convert_generation_group_mini_batch_to_training_input is not as read" in caplog.text
        timer = importlib.import_module("skyrl.train.utils.utils").Timer
        with recording() as rec, timer("sync_weights"):
            pass
        assert rec.find("sync_weights") is not None
    finally:
        setattr(module.FullyAsyncRayPPOTrainer, name, method)
