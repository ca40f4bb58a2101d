"""Stand-in for ``openrlhf.trainer.ppo_utils.samples_generator``: ``SamplesGenerator.generate_samples``."""

from __future__ import annotations

import time
from typing import Any


class SamplesGenerator:
    def __init__(self, batches: int, seconds: float = 0.02) -> None:
        self.left = batches
        self.seconds = seconds

    def generate_samples(self, **generate_kwargs: Any) -> tuple[list[Any], float | None, int, bool]:
        """(rollout samples, filter pass rate, prompts consumed, exhausted), as OpenRLHF returns them."""
        time.sleep(self.seconds)
        if self.left == 0:
            return [], None, 0, True
        self.left -= 1
        return [object()], 1.0, 1, False
