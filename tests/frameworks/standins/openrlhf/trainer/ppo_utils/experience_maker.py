"""Stand-in for ``openrlhf.trainer.ppo_utils.experience_maker``: ``RemoteExperienceMaker.make_experience_batch``."""

from __future__ import annotations

import time
from typing import Any


class RemoteExperienceMaker:
    def make_experience_batch(self, rollout_samples: list[Any]) -> list[Any]:
        time.sleep(0.012)
        return list(rollout_samples)
