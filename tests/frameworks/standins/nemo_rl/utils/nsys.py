"""Stand-in for ``nemo_rl.utils.nsys``: the step hook the GRPO loop calls before each step."""

from __future__ import annotations

from typing import Any

PROFILED: list[int] = []


def maybe_gpu_profile_step(policy: Any, step: int) -> None:
    PROFILED.append(step)
