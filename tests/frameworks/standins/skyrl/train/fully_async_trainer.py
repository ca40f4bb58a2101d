"""Stand-in for ``skyrl.train.fully_async_trainer`` (SkyRL 0.3.0, NovaSky-AI/SkyRL a956457): the names and
signatures lens_rl weaves (``GeneratedOutputGroup``, ``FullyAsyncRayPPOTrainer.convert_generation_group_mini_batch_
to_training_input(cur_generation_group_mini_batch, dropped_groups=None)``, ``global_step``,
``max_staleness_steps``) and the loop shape around them: generator tasks stamp each group with the
``global_step`` they were scheduled at into a bounded buffer; each ``step`` takes a mini-batch, converts it on a
worker thread (where SkyRL computes ``staleness = global_step - global_step_when_scheduled``), trains
(``run_training``) and syncs weights. What SkyRL's own objects said each step is kept in ``self.consumed``."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils import Timer


@dataclass
class GeneratedOutputGroup:
    generator_output: dict[str, Any]
    uid: str
    global_step_when_scheduled: int
    group_completion_time_s: float | None = None
    prompts: list[Any] | None = None


class FullyAsyncRayPPOTrainer(RayPPOTrainer):
    def __init__(self, steps: int, mini_batch_size: int = 2, max_staleness_steps: int = 2) -> None:
        super().__init__(steps)
        self.mini_batch_size = mini_batch_size
        self.max_staleness_steps = max_staleness_steps
        self.consumed: list[dict[str, Any]] = []
        self._made = 0

    async def train(self) -> None:
        self.global_step = 1
        buffer: asyncio.Queue[GeneratedOutputGroup] = asyncio.Queue(
            maxsize=self.mini_batch_size * (self.max_staleness_steps + 1)
        )
        generators = [asyncio.create_task(self._run_generate_for_a_group_loop(buffer)) for _ in range(2)]
        await asyncio.sleep(0.03)  # a backlog builds up before the first step: the first batches are older
        while self.global_step <= self.total_training_steps:
            with Timer("step", self.all_timings):
                with Timer("wait_for_generation_buffer", self.all_timings):
                    groups = [await buffer.get() for _ in range(self.mini_batch_size)]
                with Timer("convert_to_training_input", self.all_timings):
                    batch = await asyncio.to_thread(self.convert_generation_group_mini_batch_to_training_input, groups)
                with Timer("run_training", self.all_timings):
                    time.sleep(0.01 + 0.001 * len(batch["response_ids"]))
                with Timer("sync_weights", self.all_timings):
                    time.sleep(0.004)
            self.all_timings = {}
            self.global_step += 1
        for task in generators:
            task.cancel()
        await asyncio.gather(*generators, return_exceptions=True)

    async def _run_generate_for_a_group_loop(self, buffer: asyncio.Queue) -> None:
        while True:
            global_step_at_start = self.global_step
            await asyncio.sleep(0.004)
            self._made += 1
            responses = [[5] * (2 + (self._made + n) % 5) for n in range(2)]  # two samples a group
            group = GeneratedOutputGroup({"response_ids": responses}, f"uid-{self._made}", global_step_at_start)
            await buffer.put(group)

    def convert_generation_group_mini_batch_to_training_input(
        self, cur_generation_group_mini_batch: list[GeneratedOutputGroup], dropped_groups: Any = None
    ) -> dict[str, Any]:
        stalenesses = [self.global_step - g.global_step_when_scheduled for g in cur_generation_group_mini_batch]
        tokens = [sum(map(len, g.generator_output["response_ids"])) for g in cur_generation_group_mini_batch]
        self.consumed.append({"step": self.global_step, "stalenesses": stalenesses, "tokens": tokens})
        return {
            "response_ids": [r for g in cur_generation_group_mini_batch for r in g.generator_output["response_ids"]]
        }
