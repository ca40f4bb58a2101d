"""Stand-in for ``skyrl.train.trainer``: ``RayPPOTrainer.train`` shaped like SkyRL's (an async loop, its
``Timer`` names inside ``step``, ``global_step`` from 1), each phase a short sleep; an ``async with`` block for
the async path."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from skyrl.train.utils import Timer


class RayPPOTrainer:
    def __init__(self, steps: int) -> None:
        self.total_training_steps = steps
        self.all_timings: dict[str, float] = {}
        self.global_step = 0
        self.logged: list[dict[str, Any]] = []

    async def train(self) -> None:
        with Timer("init_weight_sync_state"):
            time.sleep(0.002)
        self.global_step += 1
        while self.global_step <= self.total_training_steps:
            with Timer("step", self.all_timings):
                async with Timer("generate", self.all_timings):
                    await asyncio.sleep(0.025)
                with Timer("postprocess_generator_output", self.all_timings):
                    time.sleep(0.002)
                with Timer("convert_to_training_input", self.all_timings):
                    time.sleep(0.003)
                with Timer("fwd_logprobs_values_reward", self.all_timings):
                    time.sleep(0.012)
                    with Timer("apply_reward_kl_penalty", self.all_timings):
                        time.sleep(0.002)
                with Timer("compute_advantages_and_returns", self.all_timings):
                    time.sleep(0.003)
                with Timer("train_critic_and_policy", self.all_timings):
                    self.train_critic_and_policy()
                with Timer("sync_weights", self.all_timings):
                    time.sleep(0.004)
            self.logged.append({"step": self.global_step, **{f"timing/{k}": v for k, v in self.all_timings.items()}})
            self.all_timings = {}
            self.global_step += 1

    def train_critic_and_policy(self) -> None:
        with Timer("critic_train", self.all_timings):
            time.sleep(0.006)
        with Timer("policy_train", self.all_timings):
            time.sleep(0.010)
