"""Stand-in for ``nemo_rl.algorithms.grpo``: a loop shaped like ``grpo_train`` (its timer labels, nested as
there; ``maybe_gpu_profile_step`` bound by name, as grpo.py imports it), each phase a short sleep."""

from __future__ import annotations

import time
from typing import Any

from nemo_rl.utils.nsys import maybe_gpu_profile_step
from nemo_rl.utils.timer import Timer

#: labels timed one after another, then the seconds each sleeps
BEFORE_GENERATION = (("data_processing", 0.004),)
AFTER_GENERATION = (
    ("reward_calculation", 0.006),
    ("advantage_calculation", 0.003),
    ("logprob_inference_prep", 0.003),
    ("policy_and_reference_logprobs", 0.012),
    ("training_prep", 0.003),
)


def _in_turn(timer: Timer, phases: tuple[tuple[str, float], ...]) -> None:
    for label, seconds in phases:
        with timer.time(label):
            time.sleep(seconds)


def grpo_train(policy: Any, max_num_steps: int, profile: bool = True) -> list[dict[str, float]]:
    """Run ``max_num_steps`` steps; the timer's own per-step sums (NeMo-RL's logged ``timing/train/*``)."""
    timer = Timer()
    logged = []
    for total_steps in range(max_num_steps):
        if profile:
            maybe_gpu_profile_step(policy, total_steps + 1)
        with timer.time("total_step_time"):
            _in_turn(timer, BEFORE_GENERATION)
            with timer.time("prepare_for_generation/total"):
                time.sleep(0.004)
                with timer.time("prepare_for_generation/transfer_and_update_weights"):
                    time.sleep(0.006)
            with timer.time("generation"):
                time.sleep(0.020)
                with timer.time("timing/rollout/total"), timer.time("timing/rollout/run_rollouts"):
                    time.sleep(0.010)
            _in_turn(timer, AFTER_GENERATION)
            timer.start("policy_training")  # start/stop, as the policy's train() does
            time.sleep(0.012)
            with timer.time("policy_training/submit_training_futures"):
                time.sleep(0.008)
            timer.stop("policy_training")
            _in_turn(timer, (("checkpointing", 0.005),))
        logged.append(timer.get_timing_metrics(reduction_op="sum"))
        timer.reset()
    return logged
