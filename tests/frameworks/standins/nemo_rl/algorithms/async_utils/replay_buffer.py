"""Stand-in for ``nemo_rl.algorithms.async_utils.replay_buffer`` (NeMo-RL main of 2026-08-22, 7ea279a): a
``ReplayBufferImpl`` with the real names and signatures (``add(trajectory, weight_version,
target_weight_version)``, ``sample(num_prompt_groups, current_weight_version, max_age_steps)`` returning
``{"trajectories", "avg_trajectory_age"}`` or None to stall, ``trajectory_versions``, ``target_weight_versions``,
``_lock``, ``_remove_indices``) and what its ``sample`` does as read: old groups evicted, groups within the age
window whose target is the current version taken first in, their mean age computed, removed. ``ReplayBuffer``
is that class under ``@ray.remote``, as there. Written here, not copied."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import ray


class ReplayBufferImpl:
    def __init__(self, max_size: int, drop_incomplete_targets_on_restore: bool = False) -> None:
        self.max_size = max_size
        self.trajectories: list[dict[str, Any]] = []
        self.trajectory_versions: list[int] = []
        self.target_weight_versions: list[int] = []
        self._lock = threading.Lock()

    def add(self, trajectory: dict[str, Any], weight_version: int, target_weight_version: int) -> str:
        with self._lock:
            if len(self.trajectories) >= self.max_size:
                return "full"
            self.trajectories.append(trajectory)
            self.trajectory_versions.append(weight_version)
            self.target_weight_versions.append(target_weight_version)
            return "success"

    def _remove_indices(self, indices: Iterable[int]) -> None:
        for idx in sorted(indices, reverse=True):
            del self.trajectory_versions[idx], self.target_weight_versions[idx], self.trajectories[idx]

    def sample(self, num_prompt_groups: int, current_weight_version: int, max_age_steps: int) -> dict | None:
        with self._lock:
            oldest = max(0, current_weight_version - max_age_steps)
            self._remove_indices([i for i, v in enumerate(self.trajectory_versions) if v < oldest])
            intended = [
                i
                for i, v in enumerate(self.trajectory_versions)
                if oldest <= v <= current_weight_version and self.target_weight_versions[i] == current_weight_version
            ]
            if len(intended) < num_prompt_groups:
                return None  # the trainer stalls until the rest is generated
            chosen = intended[:num_prompt_groups]
            versions = [self.trajectory_versions[i] for i in chosen]
            taken = [self.trajectories[i] for i in chosen]
            self._remove_indices(chosen)
            return {"trajectories": taken, "avg_trajectory_age": current_weight_version - sum(versions) / len(versions)}

    def size(self) -> int:
        with self._lock:
            return len(self.trajectories)


@ray.remote
class ReplayBuffer(ReplayBufferImpl):
    pass
