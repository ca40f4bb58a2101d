"""Stand-in for ``nemo_rl.algorithms.async_utils`` (its ``replay_buffer`` only; the real package also exports
``AsyncTrajectoryCollector``, which lens_rl does not weave)."""

from nemo_rl.algorithms.async_utils.replay_buffer import ReplayBuffer

__all__ = ["ReplayBuffer"]
