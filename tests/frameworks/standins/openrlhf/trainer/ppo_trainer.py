"""Stand-in for ``openrlhf.trainer.ppo_trainer``: ``BasePPOTrainer`` with OpenRLHF's method names and signatures,
timing its calls inline into ``timing/*`` as OpenRLHF's does, and ``PPOTrainer.fit`` (a plain class here; a Ray
actor in OpenRLHF) looping generation then ``train_step``."""

from __future__ import annotations

import time
from typing import Any

from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator


class BasePPOTrainer:
    def __init__(self, batches: int, save_steps: int = 2, checkpoint_step: int = 0) -> None:
        self.samples_generator = SamplesGenerator(batches)
        self.experience_maker = RemoteExperienceMaker()
        self.vllm_engines: list[Any] | None = [object()]
        self.save_steps = save_steps
        self.checkpoint_step = checkpoint_step  # the global_step of the checkpoint a run resumes from
        self.logged: list[dict[str, Any]] = []

    def train_step(self, rollout_samples: list[Any], global_step: int) -> tuple[dict[str, Any], int]:
        t0 = time.time()
        experiences = self.experience_maker.make_experience_batch(rollout_samples)
        make_experience_time = time.time() - t0
        t0 = time.time()
        status = self.ppo_train(global_step)
        ppo_train_time = time.time() - t0
        t0 = time.time()
        if self.vllm_engines is not None:
            self.broadcast_to_vllm()
        broadcast_time = time.time() - t0
        status["timing/make_experience"] = make_experience_time
        status["timing/ppo_train"] = ppo_train_time
        status["timing/broadcast"] = broadcast_time
        status["experiences"] = len(experiences)
        return status, global_step + 1

    def ppo_train(self, global_steps: int) -> dict[str, Any]:
        time.sleep(0.025)
        return {"policy_loss": 0.1}

    def broadcast_to_vllm(self) -> None:
        time.sleep(0.006)

    def save_logs_and_checkpoints(self, global_step: int, logs_dict: Any = None, client_states: Any = None) -> None:
        if global_step % self.save_steps == 0:
            time.sleep(0.008)

    def init_checkpoint_states(self) -> dict[str, Any]:
        states = {"episode": 0, "global_step": self.checkpoint_step, "total_consumed_prompts": 0}
        return {**states, "data_loader_state_dict": {}}


class PPOTrainer(BasePPOTrainer):
    def fit(self, global_step: int = 0) -> None:
        states = self.init_checkpoint_states()
        if states["global_step"] > 0:
            global_step = states["global_step"]
        while True:
            t_gen_start = time.time()
            rollout_samples, _, _, is_exhausted = self.samples_generator.generate_samples()
            generation_time = time.time() - t_gen_start
            if not rollout_samples:
                if is_exhausted:
                    break
                continue
            status, global_step = self.train_step(rollout_samples, global_step)
            status["timing/generation"] = generation_time
            status["timing/step_total"] = sum(v for k, v in status.items() if k.startswith("timing/"))
            self.logged.append({"global_step": global_step, **status})
            self.save_logs_and_checkpoints(global_step, status)
