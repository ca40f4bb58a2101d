"""NeMo-RL's ``Timer`` woven, on stand-ins at its module paths (``tests/frameworks/standins/nemo_rl``): a
GRPO-shaped loop's labels become phases under the ``total_step_time`` umbrella, numbered as the loop numbers
its steps, agreeing with the timer's own figures."""

from __future__ import annotations

import importlib
import logging
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

import lens_rl
from lens_rl._runtime import RUNTIME
from lens_rl.buckets import default_bucket
from lens_rl.frameworks import instrument, uninstrument
from lens_rl.testing import recording
from tests.frameworks.standins import agree, assert_agree, standin


@pytest.fixture
def nemo() -> Iterator[None]:
    with standin("nemo_rl", "nemo_rl"):
        yield


def _seconds(span: Any) -> float:
    return (span.end_time - span.start_time) / 1e9


def _per_step(rec: Any) -> dict[int, dict[str, float]]:
    """Each step's phases' seconds, by the name NeMo-RL logs (the umbrella's own under total_step_time)."""
    umbrellas = {s.context.span_id: s.attributes["rl.step"] for s in rec.find_all("total_step_time")}
    by_id = {s.context.span_id: s for s in rec.spans}
    steps: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for span in rec.spans:
        node = span
        while node is not None and node.context.span_id not in umbrellas:
            node = by_id.get(node.parent.span_id) if node.parent is not None else None
        if node is not None:
            steps[umbrellas[node.context.span_id]][span.name] += _seconds(span)
    return steps


def test_a_grpo_loop_is_steps_of_phases_agreeing_with_the_timers_own_figures(nemo: None) -> None:
    """Woven before the import: total_step_time is the umbrella numbered by maybe_gpu_profile_step's step, every
    label a phase under it (timing/ dropped), bucketed by the table, each within 1 ms + 1 % of the Timer's own."""
    assert instrument("nemo_rl") == ["nemo_rl"]
    grpo = importlib.import_module("nemo_rl.algorithms.grpo")
    with recording() as rec:
        logged = grpo.grpo_train(policy=object(), max_num_steps=3)
        live = lens_rl.step_goodput()
    steps = _per_step(rec)
    assert sorted(steps) == [1, 2, 3]
    pairs = []
    for number, theirs in enumerate(logged, start=1):
        mine = steps[number]
        assert set(mine) == {name.removeprefix("timing/") for name in theirs}
        pairs += [(f"{number} {label}", mine[label.removeprefix("timing/")], s) for label, s in theirs.items()]
    assert_agree(pairs)
    for span in rec.spans:
        if span.name != "total_step_time":
            assert span.attributes["rl.bucket"] == str(default_bucket(span.name)), span.name
    nested = rec.find("prepare_for_generation/transfer_and_update_weights")
    assert rec.spans[[s.context.span_id for s in rec.spans].index(nested.parent.span_id)].name == (
        "prepare_for_generation/total"
    )
    assert live["step"] == 3 and agree(live["wall_s"], logged[-1]["total_step_time"])


def test_woven_after_the_import_the_algorithms_bound_names_are_seen(nemo: None) -> None:
    """Imported first, woven after: the Timer class and grpo's own binding of maybe_gpu_profile_step are
    patched; uninstrument puts both back as they were."""
    grpo = importlib.import_module("nemo_rl.algorithms.grpo")
    timer_mod = importlib.import_module("nemo_rl.utils.timer")
    originals = (grpo.maybe_gpu_profile_step, dict(vars(timer_mod.Timer)))
    instrument("nemo_rl")
    with recording() as rec:
        grpo.grpo_train(policy=object(), max_num_steps=2)
    assert [s.attributes["rl.step"] for s in rec.find_all("total_step_time")] == [1, 2]
    uninstrument("nemo_rl")
    assert grpo.maybe_gpu_profile_step is originals[0] and dict(vars(timer_mod.Timer)) == originals[1]


def test_a_loop_that_bound_the_profile_hook_before_weaving_gets_its_steps(nemo: None) -> None:
    """A user's loop imports maybe_gpu_profile_step at its top, then telemetry weaves NeMo-RL: its binding is
    woven too (total_step_time numbered by the loop's own steps, not counted from 0); uninstrument puts it
    back."""
    import sys
    import types

    nsys = importlib.import_module("nemo_rl.utils.nsys")
    timer_mod = importlib.import_module("nemo_rl.utils.timer")
    loop = types.ModuleType("users_loop")
    loop.maybe_gpu_profile_step = nsys.maybe_gpu_profile_step  # (from nemo_rl.utils.nsys import ...)
    original = loop.maybe_gpu_profile_step
    sys.modules["users_loop"] = loop
    try:
        instrument("nemo_rl")
        assert loop.maybe_gpu_profile_step is not original
        timer = timer_mod.Timer()
        with recording() as rec:
            for step in (10, 11):
                loop.maybe_gpu_profile_step(object(), step)
                with timer.time("total_step_time"):
                    with timer.time("generation"):
                        time.sleep(0.001)
        assert [s.attributes["rl.step"] for s in rec.find_all("total_step_time")] == [10, 11]
        uninstrument("nemo_rl")
        assert loop.maybe_gpu_profile_step is original
    finally:
        del sys.modules["users_loop"]


def test_without_the_profile_hook_steps_are_counted_from_zero(nemo: None) -> None:
    """A loop that never calls maybe_gpu_profile_step: its steps are a per-process count from 0."""
    instrument("nemo_rl")
    grpo = importlib.import_module("nemo_rl.algorithms.grpo")
    with recording() as rec:
        grpo.grpo_train(policy=object(), max_num_steps=2, profile=False)
    assert [s.attributes["rl.step"] for s in rec.find_all("total_step_time")] == [0, 1]


def test_record_is_a_back_dated_phase_and_thread_safe_timers_are_woven(nemo: None) -> None:
    """A collector thread's ThreadSafeTimer: record(label, elapsed) is a phase ending now that lasted elapsed,
    bucketed by its idle/ or wasted/ prefix; its time() blocks are phases of that thread."""
    instrument("nemo_rl")
    timer_mod = importlib.import_module("nemo_rl.utils.timer")
    timer = timer_mod.ThreadSafeTimer({"worker": "collector"})

    def collect() -> None:
        with timer.time("idle/refit_event_wait"):
            time.sleep(0.01)
        timer.record("wasted/failed_trajectory", 0.25)

    with recording() as rec:
        before = time.time_ns()
        thread = threading.Thread(target=collect)
        thread.start()
        thread.join()
    failed = rec.find("wasted/failed_trajectory")
    assert failed.attributes["rl.bucket"] == "wasted" and agree(_seconds(failed), 0.25)
    assert failed.start_time < before and failed.end_time >= before
    wait = rec.find("idle/refit_event_wait")
    assert wait.attributes["rl.bucket"] == "idle" and agree(_seconds(wait), timer._timers["idle/refit_event_wait"][0])


def test_reset_closes_what_nemo_rl_dropped(nemo: None) -> None:
    """A label still running at reset() is dropped by NeMo-RL; its phase ends there instead of staying open."""
    instrument("nemo_rl")
    timer = importlib.import_module("nemo_rl.utils.timer").Timer()
    with recording() as rec:
        timer.start("load_data")
        timer.reset()
        timer.start("load_data")
        timer.stop("load_data")
    assert rec.names() == ["load_data", "load_data"]


def test_a_timer_at_the_address_of_a_dropped_one_closes_its_own_phase(nemo: None) -> None:
    """A Timer dropped with a label still running (an early return) and a new Timer at the same address: the
    new one's stop closes its own phase (NeMo-RL's seconds), the dropped one's stays open until the end, never
    stopped; a timer object that takes no weak reference (``__slots__``) is timed all the same."""
    timer_mod = importlib.import_module("nemo_rl.utils.timer")
    instrument("nemo_rl")

    class Slotted:  # (NeMo-RL's methods called on an object with slots and no __weakref__)
        __slots__ = ("_timers", "_start_times", "_context")

    with recording() as rec:
        dropped = timer_mod.Timer()
        dropped.start("generation")
        address = id(dropped)
        del dropped
        time.sleep(0.2)
        kept = []  # (timers made until one lands at the dropped one's address)
        while (timer := timer_mod.Timer()) is not None and id(timer) != address and len(kept) < 1000:
            kept.append(timer)
        assert id(timer) == address
        timer.start("generation")
        time.sleep(0.02)
        theirs = timer.stop("generation")
        slotted = Slotted()
        slotted._timers, slotted._start_times, slotted._context = {}, {}, {}
        timer_mod.Timer.start(slotted, "reward")
        slotted_theirs = timer_mod.Timer.stop(slotted, "reward")
    first, second = sorted(rec.find_all("generation"), key=lambda s: s.start_time)
    assert agree(_seconds(second), theirs) and not second.attributes.get("rl.ended_by_shutdown")
    assert first.attributes.get("rl.ended_by_shutdown") is True
    assert agree(_seconds(rec.find("reward")), slotted_theirs)


def test_reset_while_other_threads_start_labels_never_raises(nemo: None) -> None:
    """reset() on one ThreadSafeTimer while threads start and stop labels on theirs, the interpreter switching
    threads as often as it can: no error reaches the caller of reset, and nothing stays open."""
    timer_mod = importlib.import_module("nemo_rl.utils.timer")
    instrument("nemo_rl")
    done = threading.Event()
    errors: list[BaseException] = []

    def collect(i: int) -> None:
        timer = timer_mod.ThreadSafeTimer()
        while not done.is_set():
            for j in range(100):
                timer.start(f"generation/{i}/{j}")
            for j in range(100):
                timer.stop(f"generation/{i}/{j}")

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with recording():
            threads = [threading.Thread(target=collect, args=(i,)) for i in range(3)]
            for thread in threads:
                thread.start()
            mine = timer_mod.ThreadSafeTimer()
            deadline = time.monotonic() + 3
            try:
                while time.monotonic() < deadline:
                    mine.reset()
            except Exception as exc:
                errors.append(exc)
            done.set()
            for thread in threads:
                thread.join()
            assert RUNTIME.open_phases == {}
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


def test_a_record_of_no_sane_duration_is_nemo_rls_alone(nemo: None, caplog: Any) -> None:
    """record(label, elapsed) with elapsed infinite, NaN, negative or beyond a week: NeMo-RL keeps it as
    ever, lens_rl writes no phase for it and says so once per process; a sane record is still a phase."""
    timer = importlib.import_module("nemo_rl.utils.timer").Timer()
    instrument("nemo_rl")
    hostile = [float("inf"), float("nan"), 1e300, 1e12, -1.0]
    with caplog.at_level(logging.DEBUG, logger="lens_rl"), recording() as rec:
        for value in hostile:
            timer.record("timeout_wait", value)
        timer.record("timeout_wait", 0.5)
    assert len(timer._timers["timeout_wait"]) == len(hostile) + 1
    (phase,) = rec.find_all("timeout_wait")
    assert agree(_seconds(phase), 0.5)
    assert len([r for r in caplog.records if "Timer.record" in r.getMessage()]) == 1


def test_time_is_a_decorator_too(nemo: None) -> None:
    """@timer.time(label) decorates a function as NeMo-RL's own contextlib block does: each call a phase of
    its own, made current inside, with telemetry on and on the first woven call before telemetry is resolved."""
    timer = importlib.import_module("nemo_rl.utils.timer").Timer()
    instrument("nemo_rl")

    @timer.time("first")  # (the first woven call of the process: telemetry not resolved yet)
    def first() -> int:
        return 1

    assert first() == 1
    with recording() as rec:

        @timer.time("generation")
        def generate(n: int) -> int:
            with lens_rl.traced_phase("inner"):
                return n * 2

        assert generate(2) == 4 and generate(3) == 6 and first() == 1
    phases = rec.find_all("generation")
    assert len(phases) == 2 and len(timer._timers["generation"]) == 2
    assert {s.parent.span_id for s in rec.find_all("inner")} == {s.context.span_id for s in phases}
    assert len(rec.find_all("first")) == 1


def test_a_reset_from_another_thread_leaves_no_closed_phase_current(nemo: None) -> None:
    """A thread inside ``with ts.time("collect")`` while another resets the ThreadSafeTimer (NeMo-RL then
    raises in that block's stop, as it does unwoven): the block's phase ends with it, on its own thread, that
    error on it; the thread's next phase is not its child, and no internal error is logged."""
    timer = importlib.import_module("nemo_rl.utils.timer").ThreadSafeTimer()
    instrument("nemo_rl")
    entered, reset = threading.Event(), threading.Event()
    raised: list[BaseException] = []

    def collect() -> None:
        try:
            with timer.time("collect"):
                entered.set()
                reset.wait(timeout=60)
        except ValueError as exc:  # NeMo-RL's own: the label is not running
            raised.append(exc)
        with lens_rl.traced_phase("after"):
            pass

    with recording() as rec:
        thread = threading.Thread(target=collect)
        thread.start()
        entered.wait(timeout=60)
        timer.reset()
        reset.set()
        thread.join()
    assert len(raised) == 1
    collect_span, after = rec.find("collect"), rec.find("after")
    assert after.parent is None or after.parent.span_id != collect_span.context.span_id
    assert collect_span.end_time <= after.start_time and not collect_span.status.is_ok


def test_nemo_lens_on_makes_lens_rl_stand_down(nemo: None, monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    """NEMO_RL_OTEL_ENABLED=1 (NeMo-RL's own OpenTelemetry layer): one line says lens_rl stands down, no phase
    is recorded, NeMo-RL's timers work as ever."""
    monkeypatch.setenv("NEMO_RL_OTEL_ENABLED", "1")
    instrument("nemo_rl")
    grpo = importlib.import_module("nemo_rl.algorithms.grpo")
    with caplog.at_level(logging.WARNING, logger="lens_rl"), recording() as rec:
        logged = grpo.grpo_train(policy=object(), max_num_steps=2)
    assert rec.names() == [] and len(logged) == 2 and logged[0]["generation"] > 0
    assert len([r for r in caplog.records if "stands down" in r.getMessage()]) == 1


def test_off_the_woven_timer_is_nemo_rls_own(nemo: None) -> None:
    """Telemetry off: the woven timer measures and raises exactly as NeMo-RL's (a label started twice)."""
    instrument("nemo_rl")
    timer = importlib.import_module("nemo_rl.utils.timer").Timer()
    with timer.time("generation"):
        pass
    with pytest.raises(ValueError, match="already running"):
        timer.start("x")
        timer.start("x")
    assert list(timer.get_timing_metrics()) == ["generation"]


def test_every_label_nemo_rl_times_is_bucketed() -> None:
    """The labels NeMo-RL's main times (with their timing/ prefix dropped) have a default bucket, the umbrella
    none: a NeMo-RL job shows no unbucketed phase of its own."""
    labels = [
        "data_processing", "prepare_for_generation/total", "prepare_for_generation/transfer_and_update_weights",
        "generation", "rollout/total", "rollout/run_rollouts", "rollout/aggregate_metrics", "reward_calculation",
        "advantage_calculation", "logprob_inference_prep", "policy_and_reference_logprobs", "training_prep",
        "policy_training", "policy_training/submit_training_futures", "policy_training/sharding_data",
        "checkpointing", "exposed_generation", "dynamic_sampling", "weight_sync", "recompute_kv_scales",
        "total_validation_time", "value_training", "value_inference", "get_logprobs", "get_logprobs/shard_data",
        "train", "use_reference_model", "init/total", "idle/buffer_full_backoff", "wasted/failed_trajectory",
        "_run_rollouts_total", "offload_before_refit", "offload_after_refit", "load_data", "save_checkpoint",
    ]  # fmt: skip
    assert [label for label in labels if default_bucket(label) is None] == []
    assert default_bucket("total_step_time") is None


def _async_grpo(steps: int, lead: int = 2) -> list[dict[str, Any]]:
    """An async_grpo_train-shaped driver over the buffer's own sample (no Ray: the same ReplayBufferImpl code):
    weight_version == step, the profile step step + 1, groups generated `lead` versions ahead of their target;
    what NeMo-RL's sample returned each step."""
    buffer = importlib.import_module("nemo_rl.algorithms.async_utils.replay_buffer").ReplayBufferImpl(max_size=64)
    profile = importlib.import_module("nemo_rl.utils.nsys").maybe_gpu_profile_step
    timer = importlib.import_module("nemo_rl.utils.timer").Timer()

    def generate(version: int, target: int) -> None:  # the collector's add: two prompt groups, 2 x 10 tokens each
        for _ in range(2):
            buffer.add({"batch": {"input_lengths": [10, 10]}, "rollout_metrics": {}}, version, target)

    for target in range(lead + 1):
        generate(0, target)
    weight_version = step = 0
    returned = []
    while step < steps:
        profile(None, step + 1)
        with timer.time("total_step_time"):
            with timer.time("exposed_generation"):
                result = buffer.sample(num_prompt_groups=2, current_weight_version=weight_version, max_age_steps=lead)
            returned.append({"version": weight_version, "age": result["avg_trajectory_age"]})
            with timer.time("policy_training"):
                time.sleep(0.005)
            with timer.time("weight_sync"):
                weight_version += 1
                generate(weight_version, weight_version + lead)
        step += 1
    return returned


def test_async_grpos_replay_buffer_gives_each_step_its_staleness(nemo: None) -> None:
    """Woven ReplayBufferImpl.sample: each driver step's staleness in the pipeline rollup is NeMo-RL's own
    avg_trajectory_age of the groups it sampled (equal tokens each), its max current_weight_version minus the
    oldest, the bound max_age_steps; recorded as replay_buffer_sample of that step (overhead), with the version
    histogram traced_phase records."""
    from tests.stores import rollup_recorded

    instrument("nemo_rl")
    with recording() as rec:
        returned = _async_grpo(4)
        offline = rollup_recorded(rec.spans, warmup_steps=0)
    per_step = {row["step"]: row for row in offline["pipeline"]["per_step"]}
    assert [r["age"] for r in returned] == [0.0, 1.0, 2.0, 2.0]  # (the first groups were all made at version 0)
    for said in returned:
        row = per_step[said["version"] + 1]
        assert row["staleness_mean"] == round(said["age"], 6) and row["staleness_max"] == said["age"]
        assert row["staleness_beyond"] == 0.0
    samples = rec.find_all("replay_buffer_sample")
    assert [s.attributes["rl.step"] for s in samples] == [1, 2, 3, 4]
    assert {s.attributes["rl.bucket"] for s in samples} == {"overhead"}
    first = samples[0].attributes  # its two groups of 20 tokens, both of version 0: the histogram's one version
    assert [list(first[f"rl.trajectory_{k}"]) for k in ("versions", "counts", "tokens")] == [[0], [2], [40]]
    assert offline["pipeline"]["staleness"]["bound"] == 2 and offline["pipeline"]["weight_sync"]["count"] == 4


def test_ray_still_pickles_the_buffer_actor_with_nothing_of_lens_rl(nemo: None) -> None:
    """After weaving, the @ray.remote ReplayBuffer pickles as Ray ships it, naming ReplayBufferImpl (woven in its
    own module) and holding nothing of lens_rl; uninstrument puts NeMo-RL's sample back."""
    from ray import cloudpickle

    module = importlib.import_module("nemo_rl.algorithms.async_utils.replay_buffer")
    original = vars(module.ReplayBufferImpl)["sample"]
    instrument("nemo_rl")
    assert vars(module.ReplayBufferImpl)["sample"] is not original
    shipped = cloudpickle.dumps(module.ReplayBuffer.__ray_metadata__.modified_class)
    assert b"lens_rl" not in shipped and b"ReplayBufferImpl" in shipped
    uninstrument("nemo_rl")
    assert vars(module.ReplayBufferImpl)["sample"] is original
